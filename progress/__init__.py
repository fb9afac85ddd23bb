"""Learner progress that lasts: the store (SQLAlchemy; SQLite by default, PostgreSQL for a class) and teacher reports.

Public API (no Streamlit here; the sign-in UI is ui/signin.py and the teacher view pages/teacher.py):
- progress dicts (progress/records.py): `empty_progress`, `normalize_progress`, `merge_progress` (per-item
  latest write, visits a union), `stamp_changes` / `stamp_missing` (write times of changed items),
  `visible_progress`;
- names (progress/names.py): `validate_name` (learner / class names: NFKC, one script, 1–40 characters),
  `name_key` (the compared form);
- stores: `open_store(url)` -> `ProgressStore` or, when the database cannot be used, `NullStore` (same `Store`
  protocol: load, merging save, class_records, sign_in, reset_passphrase, check_teacher_key), `SignIn`,
  `SignedOut` (a save after a passphrase reset), `SignInError` (a refused sign-in; `retry_after_s` when it
  must wait), `ProgressStoreError`, `database_url()`;
- live classroom rounds (progress/live.py): `LiveBoard` (open, show, reveal, close a round; learners' answers),
  `LiveRound`;
- identity rules: progress/auth.py (Argon2id at OWASP's parameters; the last release's scrypt hashes verified
  and re-hashed at the next sign-in; passphrase length, the wait after failures);
- the schema (progress/migrate.py, Alembic revisions in progress/migrations/versions/): `upgrade(url)` (the
  revision now stored), `current(url)`, `prepare(url, upgrade_older)` (a server's start-up check),
  `auto_upgrade()` (``KVLAB_DB_AUTO_UPGRADE``), `SchemaError`; a store opening a database creates a new one
  at head and refuses an older schema unless told to upgrade it;
- backups (progress/backup.py): `backup(url, path)`, `restore(url, path, force=False)`, `BackupError`;
- connections (progress/database.py): `make_engine(url)`, `describe(url)` (where, without the password);
- reports: `class_report(records, lesson_ids)`, `report_csv(rows)`, `REPORT_COLUMNS`; `prediction_rows(records)`
  (each learner's predict-then-observe answers), `PREDICTION_COLUMNS`.
"""

from progress.auth import SignInError
from progress.live import LiveBoard, LiveRound
from progress.names import name_key, validate_name
from progress.records import (
    empty_progress,
    merge_progress,
    normalize_progress,
    stamp_changes,
    stamp_missing,
    visible_progress,
)
from progress.report import PREDICTION_COLUMNS, REPORT_COLUMNS, class_report, prediction_rows, report_csv
from progress.store import (
    NullStore,
    ProgressStore,
    ProgressStoreError,
    SignedOut,
    SignIn,
    Store,
    database_url,
    open_store,
)

__all__ = [
    "PREDICTION_COLUMNS",
    "REPORT_COLUMNS",
    "LiveBoard",
    "LiveRound",
    "NullStore",
    "ProgressStore",
    "ProgressStoreError",
    "SignIn",
    "SignedOut",
    "SignInError",
    "Store",
    "class_report",
    "database_url",
    "empty_progress",
    "merge_progress",
    "name_key",
    "normalize_progress",
    "open_store",
    "prediction_rows",
    "report_csv",
    "stamp_changes",
    "stamp_missing",
    "validate_name",
    "visible_progress",
]
