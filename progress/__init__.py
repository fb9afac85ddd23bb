"""Learner progress that lasts: the store (SQLAlchemy; SQLite by default, PostgreSQL for a class) and teacher reports.

Public API (no Streamlit here; the sign-in UI is ui/signin.py and the teacher view pages/teacher.py):
- progress dicts: `empty_progress`, `normalize_progress`, `merge_progress`, `validate_name` (learner / class names);
- stores: `open_store(url)` -> `ProgressStore` or, when the database cannot be used, `NullStore` (same `Store`
  protocol), `ProgressStoreError`, `database_url()` (KVLAB_DATABASE_URL or the default SQLite file);
- reports: `class_report(records, lesson_ids)`, `report_csv(rows)`, `REPORT_COLUMNS`; `prediction_rows(records)`
  (each learner's predict-then-observe answers), `PREDICTION_COLUMNS`.
"""

from progress.report import PREDICTION_COLUMNS, REPORT_COLUMNS, class_report, prediction_rows, report_csv
from progress.store import (
    NullStore,
    ProgressStore,
    ProgressStoreError,
    Store,
    database_url,
    empty_progress,
    merge_progress,
    normalize_progress,
    open_store,
    validate_name,
)

__all__ = [
    "PREDICTION_COLUMNS",
    "REPORT_COLUMNS",
    "NullStore",
    "ProgressStore",
    "ProgressStoreError",
    "Store",
    "class_report",
    "database_url",
    "empty_progress",
    "merge_progress",
    "normalize_progress",
    "open_store",
    "prediction_rows",
    "report_csv",
    "validate_name",
]
