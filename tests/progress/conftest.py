"""Progress-store fixtures: every ``store`` test runs on SQLite and on a real PostgreSQL server.

``store_url`` is parametrized over both backends; the PostgreSQL one is a database in the session's
throwaway cluster (tests/pg.py: ``postgres_url``), emptied (every table) before each test. ``new_db_url`` is a
database without even the schema (a new SQLite file, or a new database in that cluster), for the migration
and backup tests. Passphrase
hashing runs at a low Argon2id cost here (``cheap_hash``: 8 KiB, one pass), so sign-ins take microseconds, not
50 ms; the stored parameters say so, and the tests of the real cost set it back.
"""

from __future__ import annotations

import uuid

import pytest
import sqlalchemy as sa

from progress import auth
from progress.live import admit_table, answer_table, create_tables, gate_table, session_table
from progress.store import ProgressStore, auth_table, member_table, progress_table, throttle_table, tries_table
from tests.pg import postgres_url  # noqa: F401 - the session fixture, registered here

BACKENDS = ["sqlite", "postgresql"]


@pytest.fixture(autouse=True)
def cheap_hash(monkeypatch):
    """Argon2id at its least memory and time for new hashes (the module constants the docs name as the knob)."""
    monkeypatch.setattr(auth, "ARGON2_MEMORY_KIB", 8)
    monkeypatch.setattr(auth, "ARGON2_TIME_COST", 1)


@pytest.fixture(params=BACKENDS)
def store_url(request, tmp_path) -> str:
    """A URL of an empty progress database: a new SQLite file, or the PostgreSQL test database wiped."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'p.sqlite3'}"
    url = request.getfixturevalue("postgres_url")
    wipe = ProgressStore(url)
    create_tables(wipe.engine)  # the live rounds' tables too (progress/live.py)
    with wipe.engine.begin() as conn:
        tables = (progress_table, auth_table, throttle_table, tries_table, member_table)
        for table in (*tables, session_table, answer_table, gate_table, admit_table):
            conn.execute(table.delete())
    wipe.close()
    return url


@pytest.fixture
def store(store_url):
    s = ProgressStore(store_url)
    yield s
    s.close()


@pytest.fixture(params=BACKENDS)
def new_db(request, tmp_path):
    """A function that returns the URL of a new database with nothing in it, not even the schema: a new SQLite
    file, or a new database in the session's PostgreSQL cluster (dropped after the test)."""
    made: list[str] = []
    server = sa.make_url(request.getfixturevalue("postgres_url")) if request.param == "postgresql" else None
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT") if server is not None else None

    def make() -> str:
        name = f"kvlab_{uuid.uuid4().hex[:12]}"
        if admin is None:
            return f"sqlite:///{tmp_path / (name + '.sqlite3')}"
        with admin.connect() as conn:
            conn.execute(sa.text(f"CREATE DATABASE {name}"))
        made.append(name)
        return server.set(database=name).render_as_string(hide_password=False)

    yield make
    if admin is not None:
        with admin.connect() as conn:
            for name in made:
                conn.execute(sa.text(f"DROP DATABASE {name} WITH (FORCE)"))
        admin.dispose()


@pytest.fixture
def new_db_url(new_db) -> str:
    """The URL of one new database (``new_db``), on each backend."""
    return new_db()
