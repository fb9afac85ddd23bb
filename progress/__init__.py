"""Learner progress that lasts: the store (SQLAlchemy; SQLite by default, PostgreSQL for a class) and teacher reports.

Public API (no Streamlit here; the sign-in UI is ui/signin.py and the teacher view pages/teacher.py):
- progress dicts: `empty_progress`, `normalize_progress`, `merge_progress`, `validate_name` (learner / class names);
- stores: `open_store(url)` -> `ProgressStore` or, when the database cannot be used, `NullStore` (same `Store`
  protocol), `ProgressStoreError`, `database_url()` (KVLAB_DATABASE_URL or the default SQLite file);
- reports: `class_report(records, lesson_ids)`, `report_csv(rows)`, `REPORT_COLUMNS`.
"""

from progress.report import REPORT_COLUMNS, class_report, report_csv
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
    "report_csv",
    "validate_name",
]
