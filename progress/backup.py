"""Backups of the progress database: one file holding every learner, answer and live round (no Streamlit here).

- SQLite: the file is a SQLite database, copied page by page with SQLite's online backup API
  (``sqlite3.Connection.backup``), so learners may keep saving while it runs; the copy is consistent.
- PostgreSQL: the file is ``pg_dump --format=custom`` of the kvlab tables (``kvlab_*`` and ``alembic_version``),
  restored with ``pg_restore --clean --if-exists --single-transaction`` (all or nothing). The tools come with
  Debian's ``postgresql-client`` package (a dependency of the ``postgresql`` server package that
  scripts/install_postgres.sh installs); the password goes to them in ``PGPASSWORD``, never on a command line.

A restore refuses a database that already holds data (any row in a kvlab table) unless ``force=True`` (``kvlab db
restore --force``), which replaces all of it; it refuses a file that is not a kvlab backup of that kind of
database, and a backup whose schema revision this version does not know (made by a newer kvlab). A restored
database keeps the backup's revision: an older one needs ``kvlab db upgrade`` (progress/migrate.py) before the
app uses it. Errors are :class:`BackupError`, naming the database as progress.database.describe does (never
its URL, which may hold a password) and what to do. A backup is written beside its target first and moved
into place when complete, so a failed one never leaves a half-written file under the name asked for.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import subprocess
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from progress.database import SQLITE_BUSY_TIMEOUT_S, describe, make_engine
from progress.migrate import KVLAB_TABLE_PREFIX, is_known, state_text

SQLITE_MAGIC = b"SQLite format 3\x00"
PG_DUMP_MAGIC = b"PGDMP"
VERSION_TABLE = "alembic_version"
TOOL_TIMEOUT_S = 3600.0  # a class's database dumps in seconds; an hour means something is stuck
PG_TOOLS_HINT = "install Debian's postgresql-client package (apt-get install postgresql-client), or put it on PATH"


class BackupError(RuntimeError):
    """A backup or restore that cannot be done; the message says why and what to do."""


def backup(url: str, path: str | os.PathLike[str]) -> None:
    """Write a backup of the progress database at ``url`` to ``path`` (replaced if it exists)."""
    target = Path(path)
    if target.is_dir():
        raise BackupError(f"{target} is a folder; name the backup file, e.g. {target / 'kvlab-backup.db'}")
    if not target.parent.is_dir():
        raise BackupError(f"the folder {target.parent} does not exist; create it or name another backup file")
    backend = _backend(url)
    _revision, tables, _rows = _inspect(url)
    if not tables:
        raise BackupError(f"{describe(url)} holds no kvlab table: nothing to back up; is KVLAB_DATABASE_URL right?")
    partial = target.with_name(target.name + ".partial")
    try:
        if backend == "sqlite":
            _sqlite_backup(_sqlite_path(url), partial)
        else:
            _pg_dump(url, partial)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def restore(url: str, path: str | os.PathLike[str], force: bool = False) -> None:
    """Replace the progress database at ``url`` with the backup in ``path``; BackupError when the database
    holds data and ``force`` is False, or the file is no kvlab backup of that kind, or of an unknown revision."""
    source = Path(path)
    if not source.is_file():
        raise BackupError(f"no backup file at {source}; give the path of a file `kvlab db backup` wrote")
    backend = _backend(url)
    kind = _file_kind(source)
    if kind != backend:
        made = {"sqlite": "a SQLite backup", "postgresql": "a PostgreSQL dump"}.get(kind, "not a kvlab backup")
        raise BackupError(
            f"{source} is {made}, and {describe(url)} is a {backend} database: restore a {backend} backup "
            f"(made by `kvlab db backup` from a {backend} database) into it"
        )
    if backend == "sqlite":
        revision, tables = _sqlite_file_revision(source)
    else:
        revision, tables = _pg_dump_revision(source)
    if not tables:
        raise BackupError(f"{source} holds no kvlab table: it is not a kvlab backup")
    if revision is not None and not is_known(revision):
        raise BackupError(
            f"{source} has schema revision {revision}, which this kvlab does not know: a newer kvlab made it; "
            "restore it with that version"
        )
    _revision, _tables, rows = _inspect(url, must_exist=False)
    if rows and not force:
        raise BackupError(
            f"{describe(url)} already holds {rows} row(s) of learners' data; restore into an empty database, or "
            "replace everything in it with force (kvlab db restore --force FILE) after backing it up"
        )
    if backend == "sqlite":
        _sqlite_restore(source, _sqlite_path(url))
    else:
        _pg_restore(url, source, tables, revision is not None)
    restored, _t, _r = _inspect(url)
    if restored != revision:
        raise BackupError(f"the restore of {source} left {state_text(restored, True)}, not the backup's; try again")


# --- inspection ---------------------------------------------------------------------------------------------


def _backend(url: str) -> str:
    try:
        backend = sa.make_url(url).get_backend_name()
    except (ArgumentError, ValueError):
        raise BackupError("the database URL is not a valid SQLAlchemy URL; fix KVLAB_DATABASE_URL") from None
    if backend not in ("sqlite", "postgresql"):
        raise BackupError(f"backups are made of SQLite and PostgreSQL databases, not {backend}; back it up yourself")
    if backend == "sqlite" and not _sqlite_path(url):
        raise BackupError("an in-memory SQLite database cannot be backed up or restored; use a file")
    return backend


def _sqlite_path(url: str) -> str:
    return sa.make_url(url).database or ""


def _inspect(url: str, must_exist: bool = True) -> tuple[str | None, list[str], int]:
    """(stored revision, kvlab tables, rows in them) of the database at ``url``."""
    if _backend(url) == "sqlite" and not Path(_sqlite_path(url)).is_file():
        if must_exist:
            raise BackupError(f"{describe(url)} does not exist; check KVLAB_DATABASE_URL / KVLAB_DATA_DIR")
        return None, [], 0
    try:
        engine = make_engine(url)
    except ImportError as exc:
        raise BackupError(f"the database driver is not installed ({exc}); pip install it") from exc
    try:
        with engine.connect() as conn:
            names = sa.inspect(conn).get_table_names()
            tables = sorted(n for n in names if n.startswith(KVLAB_TABLE_PREFIX))
            revision = None
            if VERSION_TABLE in names:
                revision = conn.execute(sa.text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()
            rows = sum(conn.execute(sa.select(sa.func.count()).select_from(sa.table(t))).scalar_one() for t in tables)
    except SQLAlchemyError as exc:
        detail = str(getattr(exc, "orig", None) or exc).splitlines()[0]
        raise BackupError(f"cannot read {describe(url)}: {detail}; check that the database is running") from exc
    finally:
        engine.dispose()
    return revision, tables, rows


def _file_kind(path: Path) -> str:
    with path.open("rb") as f:
        head = f.read(len(SQLITE_MAGIC))
    if head.startswith(SQLITE_MAGIC):
        return "sqlite"
    if head.startswith(PG_DUMP_MAGIC):
        return "postgresql"
    return "unknown"


# --- SQLite -------------------------------------------------------------------------------------------------


def _sqlite_backup(database: str, partial: Path) -> None:
    partial.unlink(missing_ok=True)
    source = sqlite3.connect(database, timeout=SQLITE_BUSY_TIMEOUT_S)
    try:
        copy = sqlite3.connect(partial)
        try:
            source.backup(copy)
            copy.execute("PRAGMA journal_mode=DELETE")  # one self-contained file, no -wal beside it
        finally:
            copy.close()
    except sqlite3.Error as exc:
        raise BackupError(f"cannot back up the file {database}: {exc}") from exc
    finally:
        source.close()


def _sqlite_file_revision(path: Path) -> tuple[str | None, list[str]]:
    """(revision, kvlab tables) of a SQLite backup file, read without writing to it."""
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            revision = None
            if VERSION_TABLE in names:
                row = conn.execute(f"SELECT version_num FROM {VERSION_TABLE}").fetchone()
                revision = row[0] if row else None
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise BackupError(f"{path} is not a readable SQLite backup ({exc})") from exc
    return revision, sorted(n for n in names if n.startswith(KVLAB_TABLE_PREFIX))


def _sqlite_restore(source: Path, database: str) -> None:
    Path(database).parent.mkdir(parents=True, exist_ok=True)
    try:
        backup_conn = sqlite3.connect(f"{source.resolve().as_uri()}?mode=ro", uri=True)
        try:
            target = sqlite3.connect(database, timeout=SQLITE_BUSY_TIMEOUT_S)
            try:
                backup_conn.backup(target)  # every page of the target replaced, in one step
            finally:
                target.close()
        finally:
            backup_conn.close()
    except sqlite3.Error as exc:
        raise BackupError(f"cannot restore into the file {database}: {exc}; stop the app and try again") from exc


# --- PostgreSQL ---------------------------------------------------------------------------------------------


def pg_tool(name: str) -> str:
    """The path of ``pg_dump`` / ``pg_restore``: on PATH, else the newest under /usr/lib/postgresql/*/bin."""
    found = shutil.which(name)
    if found:
        return found
    versions = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), key=lambda p: _major(p.parts[-3]))
    if versions:
        return str(versions[-1])
    raise BackupError(f"{name} is not installed; {PG_TOOLS_HINT}")


def _major(text: str) -> int:
    return int(text) if text.isdigit() else -1


def _pg_env(url: str) -> dict[str, str]:
    """libpq's environment for ``url``: where and who, the password in PGPASSWORD (not on a command line); what
    the URL leaves out comes from libpq's own settings, as for the app's driver."""
    parsed = sa.make_url(url)
    env = dict(os.environ)
    settings = {
        "PGHOST": parsed.host,
        "PGPORT": parsed.port,
        "PGUSER": parsed.username,
        "PGPASSWORD": parsed.password,
        "PGDATABASE": parsed.database,
        "PGSSLMODE": parsed.query.get("sslmode"),
    }
    env.update({k: str(v) for k, v in settings.items() if v is not None})
    return env


def _run(args: list[str], url: str, what: str) -> str:
    try:
        done = subprocess.run(args, env=_pg_env(url), capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BackupError(f"{what} failed to run ({exc}); {PG_TOOLS_HINT}") from exc
    if done.returncode != 0:
        detail = " ".join(done.stderr.strip().splitlines()[-3:]) or f"exit status {done.returncode}"
        raise BackupError(f"{what} of {describe(url)} failed: {detail}")
    return done.stdout


def _pg_dump(url: str, partial: Path) -> None:
    tables = [f"--table={pattern}" for pattern in (KVLAB_TABLE_PREFIX + "*", VERSION_TABLE)]
    args = [pg_tool("pg_dump"), "--format=custom", "--no-owner", "--no-privileges", *tables, f"--file={partial}"]
    _run(args, url, "pg_dump")


def _pg_dump_revision(path: Path) -> tuple[str | None, list[str]]:
    """(revision, kvlab tables) of a custom-format dump: its table of contents and its alembic_version data."""
    listing = _run_local([pg_tool("pg_restore"), "--list", str(path)], path)
    tables = sorted(set(re.findall(r" TABLE \S+ (kvlab_\w+) ", listing)))
    revision = None
    if re.search(rf" TABLE \S+ {VERSION_TABLE} ", listing):
        data = _run_local(
            [pg_tool("pg_restore"), "--data-only", f"--table={VERSION_TABLE}", "--file=-", str(path)], path
        )
        block = re.search(rf"COPY \S*{VERSION_TABLE} \(version_num\) FROM stdin;\n(.*?)\\\.", data, re.S)
        rows = block.group(1).split() if block else []
        revision = rows[0] if rows else None
    return revision, tables


def _run_local(args: list[str], path: Path) -> str:
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BackupError(f"pg_restore failed to run ({exc}); {PG_TOOLS_HINT}") from exc
    if done.returncode != 0:
        detail = " ".join(done.stderr.strip().splitlines()[-2:])
        raise BackupError(f"{path} is not a readable PostgreSQL dump ({detail})")
    return done.stdout


def _pg_restore(url: str, source: Path, dumped: list[str], dumped_version: bool) -> None:
    args = [pg_tool("pg_restore"), "--clean", "--if-exists", "--single-transaction", "--exit-on-error"]
    args += ["--no-owner", "--no-privileges", f"--dbname={sa.make_url(url).database}", str(source)]
    _run(args, url, "pg_restore")
    # Tables the backup does not have (a backup from before some table, or before alembic_version) belong to
    # the replaced database: drop them, so the restored one is the backup's and nothing else.
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            names = sa.inspect(conn).get_table_names()
            extra = [t for t in names if t.startswith(KVLAB_TABLE_PREFIX) and t not in dumped]
            if VERSION_TABLE in names and not dumped_version:
                extra.append(VERSION_TABLE)
            for table in extra:
                conn.execute(sa.text(f'DROP TABLE "{table}"'))
    except SQLAlchemyError as exc:
        raise BackupError(f"cannot finish the restore into {describe(url)}: {exc}") from exc
    finally:
        engine.dispose()
