"""The progress database's schema, versioned: Alembic revisions in progress/migrations/, the revision stored in
the database's ``alembic_version`` table (no Streamlit here).

- :func:`upgrade` brings a database to this version's schema (``head``) and returns the revision now stored:
  a new database gets every table, one made by the last release before migrations (its tables, no
  ``alembic_version``) keeps every row and is stamped, an older revision runs the revisions after it.
- :func:`prepare` is what a server runs before it starts (``kvlab serve``): :func:`ensure` on a URL.
- :func:`current` reads the stored revision (None: none stored, a new database or one from before migrations).
- :func:`ensure` is what a store does when it opens: a new database is created at head; an older schema is
  upgraded only when the operator said so (``KVLAB_DB_AUTO_UPGRADE``, :func:`auto_upgrade`), else refused
  with a message saying to run ``kvlab db upgrade``; a revision this version does not know (a newer kvlab
  upgraded it) is always refused.

Replicas may start at once: the check and the upgrade run in one transaction that holds a lock (PostgreSQL:
a transaction-level advisory lock; SQLite: ``BEGIN IMMEDIATE``, the writer lock), so one of them upgrades
and the others find the schema at head. Errors are :class:`SchemaError`, whose message names the database
as :func:`progress.database.describe` does (never the URL, which may hold a password) and what to do.

A new revision is a new file in progress/migrations/versions/ with ``down_revision`` the previous head
(``0001_baseline.py`` shows the shape); tests/progress/test_migrate.py checks that head matches the tables the
code defines.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from kvlab.settings import switch
from progress.database import describe, is_sqlite_file, make_engine

AUTO_UPGRADE_ENV = "KVLAB_DB_AUTO_UPGRADE"  # "1": a store that opens an older schema upgrades it
UPGRADE_COMMAND = "kvlab db upgrade"
SCRIPTS = Path(__file__).with_name("migrations")
KVLAB_TABLE_PREFIX = "kvlab_"  # every table of the schema; a database without one is new
PG_LOCK_KEY = 0x6B766C6162  # "kvlab": the advisory lock migrations hold on PostgreSQL


class SchemaError(RuntimeError):
    """The database's schema cannot be used or upgraded; the message says why and what to do."""


def auto_upgrade(env: Mapping[str, str] | None = None) -> bool:
    """``KVLAB_DB_AUTO_UPGRADE`` (unset: False); ValueError naming the setting for a value that is no yes/no
    (parsed as the server checks it at start: kvlab.settings.switch)."""
    return switch(os.environ if env is None else env, AUTO_UPGRADE_ENV, False)


def scripts() -> ScriptDirectory:
    """The revisions this version ships."""
    return ScriptDirectory.from_config(_config())


def head() -> str:
    """The revision this version's code expects."""
    revision = scripts().get_current_head()
    assert revision is not None, "progress/migrations/versions/ holds no revision"
    return revision


def stored_revision(conn: sa.Connection) -> str | None:
    """The revision in ``alembic_version`` on ``conn`` (None: no such table or no row)."""
    return MigrationContext.configure(conn).get_current_revision()


def has_tables(conn: sa.Connection) -> bool:
    """Whether the database holds any table of the schema (it was made by some kvlab)."""
    return any(name.startswith(KVLAB_TABLE_PREFIX) for name in sa.inspect(conn).get_table_names())


def is_known(revision: str) -> bool:
    """Whether ``revision`` is one of this version's revisions."""
    return any(script.revision == revision for script in scripts().walk_revisions())


def state_text(revision: str | None, tables: bool) -> str:
    """A revision as an operator reads it."""
    if revision is not None:
        return f"schema revision {revision}"
    return "the schema of kvlab 0.1 (from before migrations)" if tables else "no schema (a new database)"


def current(url: str) -> str | None:
    """The revision stored in the database at ``url`` (None: none, a new database or one from before
    migrations); SchemaError if the database cannot be read. A SQLite file that does not exist is not made."""
    if is_sqlite_file(url) and not Path(sa.make_url(url).database or "").exists():
        return None
    with _engine(url) as engine:
        try:
            with engine.connect() as conn:
                return stored_revision(conn)
        except SQLAlchemyError as exc:
            raise SchemaError(_failure(exc, describe(url), "read")) from exc


def upgrade(url: str) -> str:
    """Bring the database at ``url`` to :func:`head` (nothing to do when it is there) and return the revision
    now stored; SchemaError when it holds a revision this version does not know, or cannot be reached."""
    return prepare(url, upgrade_older=True)


def prepare(url: str, upgrade_older: bool) -> str:
    """What a server checks before it starts: :func:`ensure` on the database at ``url`` (a new one created at
    head; an older schema upgraded only when ``upgrade_older``, e.g. ``auto_upgrade()``); the revision now
    stored, or SchemaError saying what to do."""
    with _engine(url) as engine:
        try:
            return ensure(engine, upgrade_older, where=describe(url))
        except SQLAlchemyError as exc:
            raise SchemaError(_failure(exc, describe(url))) from exc


def ensure(engine: sa.Engine, upgrade_older: bool, where: str | None = None) -> str:
    """The schema at head on ``engine``, or SchemaError: a new database is created at head; an older schema is
    upgraded when ``upgrade_older``, else refused with what to run. Returns the revision now stored; a
    database error is the caller's to explain (SQLAlchemyError)."""
    where = where or describe(engine.url)
    target = head()
    with engine.connect() as conn:  # the usual case, without taking the lock
        if stored_revision(conn) == target:
            return target
    with engine.connect() as conn:
        _lock(conn)
        revision, tables = stored_revision(conn), has_tables(conn)
        if revision != target:
            if revision is not None and not is_known(revision):
                raise SchemaError(
                    f"{where} has schema revision {revision}, which this kvlab does not know (its newest is "
                    f"{target}): a newer kvlab upgraded it. Run that version, or restore a backup made before "
                    "the upgrade"
                )
            if (revision is not None or tables) and not upgrade_older:
                raise SchemaError(
                    f"{where} has {state_text(revision, tables)}; this kvlab needs schema revision {target}. "
                    f"Back it up (kvlab db backup FILE), then run `{UPGRADE_COMMAND}`, or set "
                    f"{AUTO_UPGRADE_ENV}=1 to upgrade when the app starts"
                )
            config = _config()
            config.attributes["connection"] = conn
            command.upgrade(config, target)
        conn.commit()
    return target


def _config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(SCRIPTS))
    return config


def _lock(conn: sa.Connection) -> None:
    """Begin the migration's transaction holding the database's migration lock (released at its end)."""
    backend = conn.dialect.name
    if backend == "sqlite":
        conn.exec_driver_sql("BEGIN IMMEDIATE")  # the writer lock: a second upgrader waits, then sees head
    elif backend == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": PG_LOCK_KEY})


@contextmanager
def _engine(url: str) -> Iterator[sa.Engine]:
    """An engine of its own for one call, disposed after it; SchemaError for a URL that cannot be used (the
    message never quotes the URL: it may hold a password)."""
    try:
        engine = make_engine(url)
    except (ArgumentError, ValueError) as exc:
        raise SchemaError(
            f"the database URL is not a valid SQLAlchemy URL ({type(exc).__name__}); fix KVLAB_DATABASE_URL, e.g. "
            "postgresql+psycopg://USER:PASSWORD@HOST:5432/DB or sqlite:////path/to/progress.sqlite3"
        ) from None
    except ImportError as exc:
        raise SchemaError(f"the database driver is not installed ({exc}); pip install it") from exc
    try:
        yield engine
    finally:
        engine.dispose()


def _failure(exc: SQLAlchemyError, where: str, verb: str = "migrate") -> str:
    detail = str(getattr(exc, "orig", None) or exc).splitlines()[0]
    return f"cannot {verb} {where}: {detail}; check KVLAB_DATABASE_URL and that the database is running"
