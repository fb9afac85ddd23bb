"""One way to open a progress database from its URL, and to name it without its password (no Streamlit).

The store (progress/store.py), the schema migrations (progress/migrate.py) and the backups (progress/backup.py)
all connect through :func:`make_engine`, so a SQLite file waits the same time for its lock and an unreachable
PostgreSQL server fails as fast everywhere. :func:`describe` is what messages say instead of the URL, which may
hold a password.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

# How long a write waits for SQLite's one writer lock. Each save holds it for milliseconds, but on a busy server
# a class's saves queue behind one another for seconds: 2 s dropped saves of 8 sessions at a load of 17. A file
# locked by another program still fails with a clear message, after this long.
SQLITE_BUSY_TIMEOUT_S = 15.0
PG_CONNECT_TIMEOUT_S = 5  # an unreachable PostgreSQL server fails fast, not in minutes


def make_engine(url: str | sa.URL, busy_timeout_s: float = SQLITE_BUSY_TIMEOUT_S) -> sa.Engine:
    """A SQLAlchemy engine for ``url`` (ArgumentError / ValueError for a malformed one, ImportError for a
    missing driver). A SQLite file uses write-ahead logging, so learners' reads never wait for a write, and
    waits ``busy_timeout_s`` for the writer lock."""
    parsed = sa.make_url(url)
    kwargs: dict[str, Any] = {}
    if parsed.get_backend_name() == "sqlite":
        kwargs["connect_args"] = {"timeout": busy_timeout_s}
    else:
        kwargs["pool_pre_ping"] = True  # replicas survive a database restart
    if parsed.get_backend_name() == "postgresql":
        kwargs["connect_args"] = {"connect_timeout": PG_CONNECT_TIMEOUT_S}
    engine = sa.create_engine(parsed, **kwargs)
    if is_sqlite_file(parsed):
        sa.event.listen(engine, "connect", _sqlite_wal)
    return engine


def is_sqlite_file(url: str | sa.URL) -> bool:
    """Whether ``url`` names a SQLite database in a file (not an in-memory one)."""
    parsed = sa.make_url(url)
    return parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:")


def describe(url: str | sa.URL) -> str:
    """Where the data lives, in words, without any password: "the file ...", "the postgresql database ..."."""
    try:
        parsed = sa.make_url(url)
    except (sa.exc.ArgumentError, ValueError):
        return "a database whose URL cannot be read"
    if parsed.get_backend_name() == "sqlite":
        return f"the file {parsed.database}" if parsed.database else "an in-memory SQLite database"
    return f"the {parsed.get_backend_name()} database {parsed.database!r} on {parsed.host or 'localhost'}"


def _sqlite_wal(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
    finally:
        cursor.close()
