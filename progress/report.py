"""Teacher reports over saved progress: per-learner completion, the class's totals, predictions, a CSV export.

The teacher view (pages/teacher.py) only lays these out: `class_report` gives one row per learner,
`class_summary` the class's headline numbers from those rows, `prediction_rows` each learner's predictions,
`report_csv` and `report_file_name` the download. No Streamlit here.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

REPORT_COLUMNS = (
    "learner",
    "lessons_visited",
    "lessons_total",
    "completion_pct",
    "quiz_answered",
    "quiz_correct",
    "diagnoses",
    "diagnoses_resolved",
    "predictions",
    "predictions_close",
    "updated_at",
)
PREDICTION_COLUMNS = ("learner", "page", "prediction", "answer", "off_by_pct", "close")


def _is_resolved(result: object) -> bool:
    """A diagnosis result counts as resolved when its grade says so (or it carries resolved=True)."""
    if not isinstance(result, Mapping):
        return False
    return result.get("resolved") is True or str(result.get("grade", "")).lower() == "resolved"


def completion_row(learner: str, progress: Mapping[str, Any], lesson_ids: Sequence[str], updated_at: Any = None):
    """One report row: lessons visited out of ``lesson_ids``, quiz and diagnosis counts."""
    if not lesson_ids:
        raise ValueError("lesson_ids is empty; pass the page ids the app records as visited")
    visited = set(progress.get("visited", [])) & set(lesson_ids)
    quiz = progress.get("quiz", {}) or {}
    diagnosis = progress.get("diagnosis", {}) or {}
    predict = [p for p in (progress.get("predict", {}) or {}).values() if isinstance(p, Mapping)]
    return {
        "learner": learner,
        "lessons_visited": len(visited),
        "lessons_total": len(lesson_ids),
        "completion_pct": round(100.0 * len(visited) / len(lesson_ids), 1),
        "quiz_answered": len(quiz),
        "quiz_correct": sum(1 for a in quiz.values() if isinstance(a, Mapping) and a.get("correct") is True),
        "diagnoses": len(diagnosis),
        "diagnoses_resolved": sum(1 for r in diagnosis.values() if _is_resolved(r)),
        "predictions": len(predict),
        "predictions_close": sum(1 for p in predict if p.get("close") is True),
        "updated_at": updated_at.isoformat(timespec="seconds") if hasattr(updated_at, "isoformat") else updated_at,
    }


def class_report(records: Iterable[Mapping[str, Any]], lesson_ids: Sequence[str]) -> list[dict[str, Any]]:
    """Rows for every record returned by ``store.class_records(code)``."""
    return [completion_row(r["learner"], r["progress"], lesson_ids, r.get("updated_at")) for r in records]


@dataclass(frozen=True)
class ClassSummary:
    """A class's headline numbers over its report rows: learners, who visited every lesson, mean completion."""

    learners: int  # learners who signed in with the class code
    visited_every_lesson: int  # learners who opened every one of the lesson pages
    lessons_total: int  # the lesson pages completion counts
    mean_completion_pct: float | None  # the learners' mean share of lesson pages visited, 0..100; None: nobody


def class_summary(rows: Sequence[Mapping[str, Any]], lesson_ids: Sequence[str]) -> ClassSummary:
    """The headline of ``class_report(records, lesson_ids)``'s rows.

    Mean completion is computed from the visit counts (100 x visited / lessons, averaged over learners), not from
    the rows' rounded ``completion_pct``, so it does not carry their rounding.
    """
    if not lesson_ids:
        raise ValueError("lesson_ids is empty; pass the page ids the app records as visited")
    total = len(lesson_ids)
    for r in rows:
        if r["lessons_total"] != total:
            raise ValueError(
                f"the row of {r['learner']!r} counts {r['lessons_total']} lessons but lesson_ids has {total}; "
                "build the rows with class_report(records, lesson_ids) from the same lesson_ids"
            )
    visited = [r["lessons_visited"] for r in rows]
    mean = 100.0 * sum(visited) / (len(rows) * total) if rows else None
    return ClassSummary(len(rows), sum(1 for v in visited if v == total), total, mean)


def report_file_name(class_code: str) -> str:
    """The CSV download's file name for a class code: spaces become underscores, letters case-folded."""
    return f"kvlab-{class_code.replace(' ', '_').casefold()}-progress.csv"


def prediction_rows(records: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every learner's saved predictions, one row per (learner, page): the value, the answer, how far off."""
    rows = []
    for r in records:
        for page, entry in sorted((r["progress"].get("predict", {}) or {}).items()):
            if not isinstance(entry, Mapping):
                continue
            value, answer = entry.get("value"), entry.get("answer")
            numeric = all(isinstance(x, int | float) and not isinstance(x, bool) for x in (value, answer))
            off = round(100.0 * (value - answer) / answer, 1) if numeric and answer else None
            row = {"learner": r["learner"], "page": page, "prediction": value, "answer": answer}
            rows.append({**row, "off_by_pct": off, "close": entry.get("close") is True})
    return rows


def _cell(value: Any) -> Any:
    """Neutralise spreadsheet formulas: text starting with = + - @ gets a leading quote (OWASP CSV injection)."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return "" if value is None else value


def report_csv(rows: Iterable[Mapping[str, Any]]) -> str:
    """The report as CSV text with a header row."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=REPORT_COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _cell(row.get(k)) for k in REPORT_COLUMNS})
    return buf.getvalue()
