"""The end-of-lesson check: the page's questions as radios with explained feedback, then its prediction exercise."""

from __future__ import annotations

import streamlit as st

from lessons import quizzes
from ui.predict import prediction_exercise
from ui.progress import ensure_progress, record_quiz


def lesson_check(page_id: str, title: str = "Check your understanding") -> tuple[int, int]:
    """The page's 1–3 questions as radios with explained feedback, then its prediction exercise (lessons 1–7).

    Returns the quiz's (correct, total)."""
    questions = quizzes.for_page(page_id)
    if not questions:
        prediction_exercise(page_id)
        return 0, 0
    st.divider()
    st.subheader(title)
    progress = ensure_progress()
    for q in questions:
        index = quizzes.saved_choice(progress["quiz"], q.id)  # shown again after navigating or signing in
        choice = st.radio(q.prompt, q.options, index=index, key=f"quiz_{q.id}")
        if choice is None:
            continue
        result = quizzes.grade(q.id, choice)
        record_quiz(q.id, result.answer, result.correct)
        # The words "Correct" / "Not quite" and the icon carry the verdict, so colour is never the only signal.
        if result.correct:
            st.success(result.feedback, icon="✅")
        else:
            st.warning(result.feedback, icon="✖️")
    correct, total = quizzes.score(progress["quiz"], page_id)
    st.caption(f"Score on this page: {correct} / {total}")
    prediction_exercise(page_id)
    return correct, total
