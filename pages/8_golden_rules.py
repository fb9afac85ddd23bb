"""Lesson 8 — golden rules: the course's closing rules as a quiz with immediate, explained feedback."""

import streamlit as st

from lessons import quizzes
from ui.downloads import show_table
from ui.progress import clear_quiz, ensure_progress
from ui.prose import page_header, prose
from ui.quiz import lesson_check

PAGE = "golden_rules"


def _start_over() -> None:
    """Clear this page's answers so the learner can retake the quiz."""
    clear_quiz([q.id for q in quizzes.for_page(PAGE)])


page_header(PAGE)
prose(PAGE, "The rules")
prose(PAGE, "Quiz")

correct, total = lesson_check(PAGE, title="Golden rules quiz")
answered = [q for q in quizzes.for_page(PAGE) if st.session_state.get(f"quiz_{q.id}") is not None]
st.metric("Score", f"{correct} / {total}", help="Answers you have given on this page that are right.")
if len(answered) == total:
    st.markdown(
        "**All rules reviewed.** "
        + (
            "Perfect score — you are ready to run a server."
            if correct == total
            else "Read the explanations above for the ones you missed, then start over."
        )
    )
else:
    st.caption(f"{len(answered)} of {total} answered.")
st.button("Start over", key="golden_reset", on_click=_start_over)

with st.expander("My answers (table)", expanded=False):
    show_table(
        quizzes.answer_rows(ensure_progress()["quiz"], PAGE), "golden-rules-answers", "golden_answers", "answers"
    )
st.subheader("Further reading")
prose(PAGE, "Further reading")
