"""Baseline: the schema of the last release before migrations (its ``SCHEMA_VERSION`` 3, never stored).

Tables: ``kvlab_progress`` (schema 1), ``kvlab_learner_auth`` and ``kvlab_auth_throttle`` (schema 2, the throttle
no longer read or written), ``kvlab_auth_tries`` and ``kvlab_class_member`` (schema 3), and the live rounds'
``kvlab_live_session``, ``kvlab_live_answer``, ``kvlab_live_gate`` and ``kvlab_live_admit``. That release made
them with ``create_all`` as each was needed, so a database from it may lack some of them (one from before
passphrases has ``kvlab_progress`` only; the live tables came with the first live round). This revision creates
each missing table and leaves every existing one, and its rows, as they are; a new database gets them all.
The definitions are frozen here, not imported: later revisions change the schema, never this file.

Revision ID: 0001
Revises: (none)
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

NAME = 40  # characters of a name or class code (progress/names.py: NAME_MAX_LEN at this revision)


def _tables() -> list[tuple[str, list[sa.Column]]]:
    """Each table of the baseline with its columns (fresh objects: a Column belongs to one table)."""

    def keys() -> list[sa.Column]:
        return [
            sa.Column("class_code", sa.String(NAME), primary_key=True),
            sa.Column("learner_key", sa.String(NAME), primary_key=True),
        ]

    return [
        (
            "kvlab_progress",
            [
                *keys(),
                sa.Column("learner", sa.String(NAME), nullable=False),
                sa.Column("data", sa.Text, nullable=False),
                sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
            ],
        ),
        (
            "kvlab_learner_auth",
            [
                *keys(),
                sa.Column("learner", sa.String(NAME), nullable=False),
                sa.Column("pass_hash", sa.String(256)),
                sa.Column("salt", sa.String(128)),
                sa.Column("params", sa.String(256)),
                sa.Column("version", sa.Integer, nullable=False),
                sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
            ],
        ),
        (
            "kvlab_auth_throttle",
            [
                sa.Column("scope", sa.String(16), primary_key=True),
                *keys(),
                sa.Column("failures", sa.Integer, nullable=False),
                sa.Column("locked_until", sa.Float),
                sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
            ],
        ),
        (
            "kvlab_auth_tries",
            [
                sa.Column("scope", sa.String(16), primary_key=True),
                sa.Column("subject", sa.String(2 * NAME + 1), primary_key=True),
                sa.Column("client", sa.String(40), primary_key=True),
                sa.Column("failures", sa.Integer, nullable=False),
                sa.Column("locked_until", sa.Float),
                sa.Column("last_try", sa.Float, nullable=False),
            ],
        ),
        ("kvlab_class_member", [*keys(), sa.Column("first_seen", sa.Float, nullable=False)]),
        (
            "kvlab_live_session",
            [
                sa.Column("class_code", sa.String(NAME), primary_key=True),
                sa.Column("display", sa.String(NAME), nullable=False),
                sa.Column("lesson", sa.String(40), nullable=False),
                sa.Column("round", sa.Integer, nullable=False),
                sa.Column("revealed", sa.Boolean, nullable=False),
                sa.Column("settings", sa.Text, nullable=False),
                sa.Column("opened_at", sa.Float, nullable=False),
                sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
            ],
        ),
        (
            "kvlab_live_answer",
            [
                *keys(),
                sa.Column("round", sa.Integer, nullable=False),
                sa.Column("value", sa.Float, nullable=False),
                sa.Column("answered_at", sa.Float, nullable=False),
            ],
        ),
        (
            "kvlab_live_gate",
            [
                sa.Column("class_code", sa.String(NAME), primary_key=True),
                sa.Column("started_at", sa.Float, nullable=False),
                sa.Column("closed", sa.Boolean, nullable=False),
            ],
        ),
        ("kvlab_live_admit", keys()),
    ]


def upgrade() -> None:
    existing = set(sa.inspect(op.get_bind()).get_table_names())
    for name, columns in _tables():
        if name not in existing:
            op.create_table(name, *columns)


def downgrade() -> None:
    raise NotImplementedError("the baseline is the oldest schema: restore a backup instead of downgrading")
