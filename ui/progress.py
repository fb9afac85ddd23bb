"""The learner's progress in session state and the shared sidebar (backend badge, sign-in, progress).

The progress dict's shape is documented in pages/_ui.py; pages/signin.py persists it. Pages import
these helpers through pages/_ui.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import streamlit as st

from kernels.backend import describe
from lessons import content, quizzes
from ui import signin
from ui.export import to_json

PROGRESS_KEY = "progress"
# Lesson pages counted for the sidebar's progress (welcome and playground are not lessons with a check).
LESSON_PAGES: tuple[str, ...] = ("bandwidth", "gqa", "packing", "fragmentation", "paged", "diagnosis", "golden_rules")


# --- cached shared resources -------------------------------------------------------------------------


@st.cache_resource(show_spinner=False)
def backend_info() -> dict:
    """kernels.backend.describe() computed once per process (read-only)."""
    return describe()


# --- progress ----------------------------------------------------------------------------------------


def ensure_progress() -> dict:
    """The learner's progress dict, created (or repaired to the contract's shape) in session state."""
    progress = st.session_state.get(PROGRESS_KEY)
    if not isinstance(progress, dict):
        progress = {}
    progress.setdefault("visited", [])
    progress.setdefault("quiz", {})
    progress.setdefault("diagnosis", {})
    st.session_state[PROGRESS_KEY] = progress
    return progress


def _persist(progress: dict) -> None:
    try:
        signin.persist(progress)
    except Exception as exc:  # persistence is optional: the lesson must keep working without it
        st.warning(f"Progress could not be saved ({exc}); it is kept for this session only.")


def mark_visited(page_id: str) -> None:
    """Record that the learner opened `page_id` (once)."""
    progress = ensure_progress()
    if page_id not in progress["visited"]:
        progress["visited"].append(page_id)
        _persist(progress)


def record_quiz(question_id: str, answer: str, correct: bool) -> None:
    """Record the learner's latest answer to one question."""
    progress = ensure_progress()
    entry = {"answer": answer, "correct": bool(correct)}
    if progress["quiz"].get(question_id) != entry:
        progress["quiz"][question_id] = entry
        _persist(progress)


def clear_quiz(question_ids: Sequence[str]) -> None:
    """Forget answers to these questions (progress and radio state); call it from a widget callback."""
    progress = ensure_progress()
    for qid in question_ids:
        progress["quiz"].pop(qid, None)
        st.session_state[f"quiz_{qid}"] = None
    _persist(progress)


def record_diagnosis(scenario_id: str, result: Mapping[str, Any]) -> None:
    """Record the learner's latest graded diagnosis of one incident scenario."""
    progress = ensure_progress()
    progress["diagnosis"][scenario_id] = dict(result)
    _persist(progress)


def progress_rows(progress: Mapping[str, Any] | None = None) -> list[dict]:
    """One row per lesson: visited flag and check score, for the sidebar table and its download."""
    progress = ensure_progress() if progress is None else progress
    rows = []
    for page_id in LESSON_PAGES:
        correct, total = quizzes.score(progress.get("quiz", {}), page_id)
        rows.append(
            {
                "lesson": content.load(page_id).title,
                "visited": page_id in progress.get("visited", []),
                "check": f"{correct}/{total}" if total else "—",
            }
        )
    return rows


# --- sidebar (called by app.py) ----------------------------------------------------------------------


def sidebar() -> Any:
    """Backend badge, device name and sign-in; returns a sidebar container for `sidebar_progress` to fill."""
    info = backend_info()
    with st.sidebar:
        st.markdown(f"**Engine backend:** `{info['label']}`")
        st.caption(f"Device: {info['device']} · torch {info['torch']} · {info['threads']} threads")
        try:
            signin.sidebar_signin()
        except Exception as exc:  # a broken store must not take the course down
            st.warning(f"Sign-in is unavailable ({exc}); progress is kept for this session only.")
        return st.container()


def sidebar_progress(slot: Any) -> None:
    """Lesson progress in the sidebar; called after the page ran so this visit and its answers count."""
    progress = ensure_progress()
    rows = progress_rows(progress)
    done = sum(1 for r in rows if r["visited"])
    with slot:
        st.progress(done / len(rows), text=f"Lessons visited: {done} / {len(rows)}")
        correct, total = quizzes.score(progress["quiz"])
        st.caption(f"Quiz answers correct: {correct} / {total}")
        with st.expander("My progress", expanded=False):
            st.dataframe(rows, hide_index=True, key="sidebar_progress_table")
            st.download_button(
                "Download progress (JSON)",
                to_json(progress),
                file_name="kvlab-progress.json",
                mime="application/json",
                key="sidebar_progress_json",
            )
