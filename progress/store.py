"""Learner progress that lasts: lessons visited, quiz answers, predictions and diagnoses, per class and learner.

SQLite is the embedded default (a file under the user's data directory, created on first use); a shared
deployment points ``KVLAB_DATABASE_URL`` at PostgreSQL (any SQLAlchemy URL works). Everything goes through
SQLAlchemy Core with bound parameters, so learner names and class codes never become SQL text. Each
write is one transaction. A store that cannot be opened (corrupt file, locked file, bad URL, missing
driver) is replaced by :class:`NullStore`, which keeps the app working without persistence and carries a
message the app shows the learner. No Streamlit here: ``ui/signin.py`` is the UI.

Settings (environment variables):
  KVLAB_DATABASE_URL  SQLAlchemy URL, e.g. ``postgresql+psycopg://kvlab:secret@db/kvlab``.
  KVLAB_DATA_DIR      folder for the default SQLite file ``progress.sqlite3``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy.exc import ArgumentError, IntegrityError, SQLAlchemyError

NAME_MAX_LEN = 40
NAME_EXTRA_CHARS = " -_."
MAX_PROGRESS_BYTES = 64_000  # one learner's JSON; far above a full course, small enough to refuse abuse
SQLITE_FILENAME = "progress.sqlite3"
ID_PARTS = ("quiz", "diagnosis", "predict")  # progress parts keyed by question / scenario / page id
SQLITE_BUSY_TIMEOUT_S = 2.0  # a locked file fails fast with a clear message instead of hanging the page

_metadata = sa.MetaData()
progress_table = sa.Table(
    "kvlab_progress",
    _metadata,
    sa.Column("class_code", sa.String(NAME_MAX_LEN), primary_key=True),  # case-folded key
    sa.Column("learner_key", sa.String(NAME_MAX_LEN), primary_key=True),  # case-folded key
    sa.Column("learner", sa.String(NAME_MAX_LEN), nullable=False),  # as the learner typed it
    sa.Column("data", sa.Text, nullable=False),  # JSON of the progress dict
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)


class ProgressStoreError(RuntimeError):
    """The progress database failed; the message says why and what to do."""


def validate_name(value: object, what: str = "learner name") -> str:
    """Return ``value`` trimmed, or raise ValueError unless it is 1–40 letters, digits, space, - _ ."""
    if not isinstance(value, str):
        raise ValueError(f"{what} must be text, got {type(value).__name__}")
    text = " ".join(part for part in value.split(" ") if part)  # trim, collapse spaces; tabs/newlines refused below
    if not 1 <= len(text) <= NAME_MAX_LEN:
        raise ValueError(f"{what} must be 1–{NAME_MAX_LEN} characters, got {len(text)}; type a shorter one")
    bad = sorted({ch for ch in text if not (ch.isalnum() or ch in NAME_EXTRA_CHARS)})
    if bad:
        shown = " ".join(repr(ch) for ch in bad[:5])
        raise ValueError(f"{what} may use letters, digits, space, '-', '_' and '.' only; remove {shown}")
    return text


def empty_progress() -> dict[str, Any]:
    """A fresh progress dict: nothing visited, no answers (quiz, diagnosis, predict: keyed by id)."""
    return {"visited": [], "quiz": {}, "diagnosis": {}, "predict": {}}


def normalize_progress(progress: object) -> dict[str, Any]:
    """Check the progress dict shape and return a JSON-safe copy; raise ValueError naming the bad part."""
    if not isinstance(progress, Mapping):
        raise ValueError(f"progress must be a dict, got {type(progress).__name__}")
    visited = progress.get("visited", [])
    if not isinstance(visited, list | tuple) or not all(isinstance(v, str) for v in visited):
        raise ValueError("progress['visited'] must be a list of page ids (strings)")
    out = empty_progress()
    out["visited"] = list(dict.fromkeys(visited))  # unique, first-visit order
    for part in ID_PARTS:
        entries = progress.get(part, {})
        if not isinstance(entries, Mapping) or not all(isinstance(k, str) for k in entries):
            raise ValueError(f"progress[{part!r}] must be a dict keyed by id strings")
        out[part] = {k: v for k, v in entries.items()}
    try:
        text = json.dumps(out, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"progress must hold only JSON values (str, number, bool, list, dict): {exc}") from exc
    if len(text) > MAX_PROGRESS_BYTES:
        raise ValueError(f"progress is {len(text)} bytes; the limit is {MAX_PROGRESS_BYTES}")
    return json.loads(text)


def merge_progress(saved: Mapping[str, Any], current: Mapping[str, Any]) -> dict[str, Any]:
    """Union of two progress dicts; answers in ``current`` (this session) win over ``saved`` ones."""
    a, b = normalize_progress(saved), normalize_progress(current)
    return {
        "visited": list(dict.fromkeys(a["visited"] + b["visited"])),
        **{part: {**a[part], **b[part]} for part in ID_PARTS},
    }


class Store(Protocol):
    """What the UI needs from a progress store; ProgressStore and NullStore both provide it."""

    persistent: bool
    message: str

    def load(self, class_code: str, learner: str) -> dict[str, Any]: ...
    def save(self, class_code: str, learner: str, progress: Mapping[str, Any]) -> None: ...
    def class_records(self, class_code: str) -> list[dict[str, Any]]: ...


class NullStore:
    """No persistence: progress lives only in the browser session. ``message`` says why."""

    persistent = False

    def __init__(self, message: str = "Progress is not saved (no database).") -> None:
        self.message = message

    def load(self, class_code: str, learner: str) -> dict[str, Any]:
        """Validate the names and return an empty progress dict."""
        validate_name(class_code, "class code"), validate_name(learner)
        return empty_progress()

    def save(self, class_code: str, learner: str, progress: Mapping[str, Any]) -> None:
        """Validate and drop the progress."""
        validate_name(class_code, "class code"), validate_name(learner), normalize_progress(progress)

    def class_records(self, class_code: str) -> list[dict[str, Any]]:
        """No learners are known without a database."""
        validate_name(class_code, "class code")
        return []


class ProgressStore:
    """Progress rows in a SQL database through SQLAlchemy Core; one transaction per write."""

    persistent = True

    def __init__(self, url: str) -> None:
        """Connect to ``url`` and create the table on first use; raise ProgressStoreError if that fails."""
        self.url = url
        try:
            parsed = sa.make_url(url)
            kwargs: dict[str, Any] = {}
            if parsed.get_backend_name() == "sqlite":
                kwargs["connect_args"] = {"timeout": SQLITE_BUSY_TIMEOUT_S}
            else:
                kwargs["pool_pre_ping"] = True  # replicas survive a database restart
            if parsed.get_backend_name() == "postgresql":
                kwargs["connect_args"] = {"connect_timeout": 5}  # an unreachable server fails fast, not in minutes
            self.engine = sa.create_engine(parsed, **kwargs)
            if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
                sa.event.listen(self.engine, "connect", _sqlite_wal)
            _metadata.create_all(self.engine)  # CREATE TABLE IF NOT EXISTS; also proves the file is a DB
            with self.engine.connect() as conn:
                conn.execute(sa.select(sa.func.count()).select_from(progress_table)).scalar_one()
        except (ArgumentError, ValueError) as exc:
            raise ProgressStoreError(
                f"KVLAB_DATABASE_URL is not a valid database URL ({exc}); fix or unset it"
            ) from exc
        except ImportError as exc:
            raise ProgressStoreError(f"the database driver is not installed ({exc}); pip install it") from exc
        except SQLAlchemyError as exc:
            raise ProgressStoreError(_explain(exc, self.describe())) from exc
        self.message = f"Progress is saved in {self.describe()}."

    def describe(self) -> str:
        """Where the data lives, without any password."""
        parsed = sa.make_url(self.url)
        if parsed.get_backend_name() == "sqlite":
            return f"the file {parsed.database}" if parsed.database else "an in-memory SQLite database"
        return f"the {parsed.get_backend_name()} database {parsed.database!r} on {parsed.host or 'localhost'}"

    def load(self, class_code: str, learner: str) -> dict[str, Any]:
        """Saved progress of ``learner`` in ``class_code``, or an empty dict if they are new."""
        code, name = validate_name(class_code, "class code"), validate_name(learner)
        query = sa.select(progress_table.c.data).where(
            progress_table.c.class_code == code.casefold(), progress_table.c.learner_key == name.casefold()
        )
        try:
            with self.engine.connect() as conn:
                text = conn.execute(query).scalar_one_or_none()
        except SQLAlchemyError as exc:
            raise ProgressStoreError(_explain(exc, self.describe())) from exc
        if text is None:
            return empty_progress()
        try:
            return normalize_progress(json.loads(text))
        except ValueError:  # a hand-edited or foreign row: start over rather than crash the page
            return empty_progress()

    def save(self, class_code: str, learner: str, progress: Mapping[str, Any]) -> None:
        """Insert or replace the learner's progress in one transaction."""
        code, name = validate_name(class_code, "class code"), validate_name(learner)
        row = {
            "learner": name,
            "data": json.dumps(normalize_progress(progress), sort_keys=True),
            "updated_at": datetime.now(timezone.utc),
        }
        key = (progress_table.c.class_code == code.casefold()) & (progress_table.c.learner_key == name.casefold())
        insert = progress_table.insert().values(class_code=code.casefold(), learner_key=name.casefold(), **row)
        try:
            for _ in range(2):  # portable upsert; a concurrent first insert of the same learner retries once
                try:
                    with self.engine.begin() as conn:
                        if conn.execute(progress_table.update().where(key).values(**row)).rowcount == 0:
                            conn.execute(insert)
                    return
                except IntegrityError:
                    continue
            raise ProgressStoreError("could not save progress: the row kept changing; try again")
        except SQLAlchemyError as exc:
            raise ProgressStoreError(_explain(exc, self.describe())) from exc

    def class_records(self, class_code: str) -> list[dict[str, Any]]:
        """All learners of a class: ``{"learner", "progress", "updated_at"}`` sorted by name."""
        code = validate_name(class_code, "class code")
        query = (
            sa.select(progress_table.c.learner, progress_table.c.data, progress_table.c.updated_at)
            .where(progress_table.c.class_code == code.casefold())
            .order_by(progress_table.c.learner_key)
        )
        try:
            with self.engine.connect() as conn:
                rows = conn.execute(query).all()
        except SQLAlchemyError as exc:
            raise ProgressStoreError(_explain(exc, self.describe())) from exc
        records = []
        for learner, text, updated_at in rows:
            try:
                progress = normalize_progress(json.loads(text))
            except ValueError:
                progress = empty_progress()
            records.append({"learner": learner, "progress": progress, "updated_at": updated_at})
        return records

    def close(self) -> None:
        """Release pooled connections (tests and shutdown)."""
        self.engine.dispose()


def _sqlite_wal(dbapi_connection: Any, _record: Any) -> None:
    """Write-ahead logging: learners' reads never wait for another learner's write."""
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
    finally:
        cursor.close()


def _explain(exc: SQLAlchemyError, where: str) -> str:
    """A learner- and teacher-readable reason for a database failure."""
    detail = str(getattr(exc, "orig", None) or exc).splitlines()[0]
    low = detail.lower()
    if "locked" in low or "busy" in low:
        hint = "another program holds the database lock; close it or set KVLAB_DATA_DIR to another folder"
    elif "not a database" in low or "malformed" in low or "corrupt" in low:
        hint = "the file is damaged; move it aside (a new one is created) or set KVLAB_DATA_DIR"
    elif "unable to open" in low or "readonly" in low or "permission" in low:
        hint = "the folder is not writable; set KVLAB_DATA_DIR to a writable folder"
    else:
        hint = "check KVLAB_DATABASE_URL and that the database is running"
    return f"Progress database error in {where}: {detail} — {hint}."


def data_dir(env: Mapping[str, str] | None = None) -> Path:
    """Folder for the default SQLite file: KVLAB_DATA_DIR, else the user's data directory for 'kvlab'."""
    env = os.environ if env is None else env
    if env.get("KVLAB_DATA_DIR"):
        return Path(env["KVLAB_DATA_DIR"]).expanduser()
    try:
        from platformdirs import user_data_dir
    except ImportError:  # XDG base-directory spec fallback
        base = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
        return Path(base) / "kvlab"
    return Path(user_data_dir("kvlab", appauthor=False))


def database_url(env: Mapping[str, str] | None = None) -> str:
    """KVLAB_DATABASE_URL if set, else a SQLite file in :func:`data_dir` (the folder is created)."""
    env = os.environ if env is None else env
    if env.get("KVLAB_DATABASE_URL"):
        return env["KVLAB_DATABASE_URL"]
    folder = data_dir(env)
    folder.mkdir(parents=True, exist_ok=True)
    return sa.URL.create("sqlite", database=str(folder / SQLITE_FILENAME)).render_as_string()


def open_store(url: str | None = None) -> ProgressStore | NullStore:
    """A working store for ``url`` (default :func:`database_url`), or a NullStore explaining why not."""
    try:
        return ProgressStore(url if url is not None else database_url())
    except ProgressStoreError as exc:
        return NullStore(f"{exc} Progress is kept for this session only.")
    except OSError as exc:  # data folder cannot be created
        return NullStore(f"Cannot create the progress folder ({exc}); set KVLAB_DATA_DIR. Progress is not saved.")
