"""The learner's progress in session state: the only code that writes it, each write saved by `ui.signin.persist`.

Contract (Streamlit runs each learner's session in its own thread; progress lives only in their session state):
    st.session_state["progress"] = {
        "visited": list[str],                                   # course page ids (ui/course.py), first-visit order
        "quiz": {question_id: {"answer": str, "correct": bool}},  # ids like "gqa.kv_formula"
        "diagnosis": {scenario_id: dict},                       # lessons.labs.diagnosis.record(...)
        "predict": {page_id: {"value": float, "answer": float, "close": bool}},  # lessons.predictions
        "written_at_us": {part: {id: int}},  # bookkeeping: when each quiz/diagnosis/predict id was last written
    }                                        # or cleared (µs since 1970); an id with a time but no entry is cleared
Readers use the first four keys only. The write times are kept by `ui.signin.persist` (it stamps what changed
since the last save) and let two sessions of one learner merge: every answer keeps its latest write, visits
are a union, and a cleared answer stays cleared unless answered again later (progress/store.py: merge_progress).
`ui.signin.sidebar_signin()` fills the dict from the store on sign-in and `persist` updates it in place with
what other sessions saved; `ensure_progress` repairs whatever it finds to this shape (the empty shape is
`progress.empty_progress()`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import streamlit as st

from progress import empty_progress
from ui import signin
from ui.inert import prose_md


def ensure_progress() -> dict:
    """The learner's progress dict, created (or repaired to the contract's shape) in session state."""
    progress = st.session_state.get(signin.PROGRESS_KEY)
    if not isinstance(progress, dict):
        progress = {}
    for part, empty in empty_progress().items():
        progress.setdefault(part, empty)
    st.session_state[signin.PROGRESS_KEY] = progress
    return progress


def _persist(progress: dict) -> None:
    try:
        signin.persist(progress)
    except Exception as exc:  # persistence is optional: the lesson must keep working without it
        st.warning(f"Progress could not be saved ({prose_md(exc)}); it is kept for this session only.")


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
    if signin.is_outdated_widget(f"quiz_{question_id}", answer):
        return  # the radio still shows the answer another session replaced in this run; it follows next run
    if progress["quiz"].get(question_id) != entry:
        progress["quiz"][question_id] = entry
        _persist(progress)


def clear_quiz(question_ids: Sequence[str]) -> None:
    """Forget answers to these questions (progress and radio state); call it from a widget callback.

    Saving records each as cleared at this time (a tombstone), so another session's older copy of the
    answer does not bring it back."""
    progress = ensure_progress()
    for qid in question_ids:
        progress["quiz"].pop(qid, None)
        st.session_state[f"quiz_{qid}"] = None
    _persist(progress)


def record_prediction(page_id: str, entry: Mapping[str, Any]) -> None:
    """Record the learner's latest checked prediction on one lesson (`PredictionResult.record()`)."""
    progress = ensure_progress()
    if progress["predict"].get(page_id) != dict(entry):
        progress["predict"][page_id] = dict(entry)
        _persist(progress)


def record_diagnosis(scenario_id: str, result: Mapping[str, Any]) -> None:
    """Record the learner's latest graded diagnosis of one incident scenario."""
    progress = ensure_progress()
    progress["diagnosis"][scenario_id] = dict(result)
    _persist(progress)
