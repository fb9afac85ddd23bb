"""The learner's own progress table (the sidebar's "My progress"): one row per lesson, from their progress dict.

A row says whether the learner opened the lesson, their score on its check and the verdict of their last
checked prediction. The progress dict's shape is ui/progress.py's contract; parts an older save lacks (no
predictions yet) read as empty. No Streamlit here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from lessons import content, quizzes

NOT_YET = "—"  # no check on the lesson, or no checked prediction


def prediction_verdict(entry: object) -> str:
    """A saved prediction (`PredictionResult.record()`) in one word: "close", "off", or NOT_YET for none."""
    if not isinstance(entry, Mapping):
        return NOT_YET
    return "close" if entry.get("close") else "off"


def progress_rows(progress: Mapping[str, Any], lesson_ids: Iterable[str]) -> list[dict[str, str | bool]]:
    """One row per lesson, in the order given: its title, visited or not, check score, prediction verdict."""
    quiz = progress.get("quiz") or {}
    predicted = progress.get("predict") or {}
    visited = progress.get("visited") or []
    rows: list[dict[str, str | bool]] = []
    for page_id in lesson_ids:
        correct, total = quizzes.score(quiz, page_id)
        rows.append(
            {
                "lesson": content.load(page_id).title,
                "visited": page_id in visited,
                "check": f"{correct}/{total}" if total else NOT_YET,
                "prediction": prediction_verdict(predicted.get(page_id)),
            }
        )
    return rows
