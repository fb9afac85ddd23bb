"""The predict-then-observe exercise at the end of lessons 1–7 (the logic and the numbers: lessons/predictions.py).

`prediction_teaser(page_id)` asks the question under the lesson's intro (ui/prose.py's `page_header` calls it),
before the page shows any number; `prediction_exercise(page_id)` (from ui/quiz.py's `lesson_check`) asks it
again with a numeric input keyed `predict_<page_id>` and a Check button; the feedback says how far off the
prediction was, with the worked arithmetic. A checked prediction is saved in the learner's progress
(`progress["predict"][page_id]`, ui/progress.py) and its feedback shows again while the input holds the saved
value (after navigating away and back, or signing in). A checked prediction also joins the learner's class's
live round when the teacher has one open on this lesson (ui/live.py). No page script needs to call either.
"""

from __future__ import annotations

import streamlit as st

from lessons import predictions
from lessons.predictions import PredictionResult
from ui.inert import prose_md
from ui.live import join_round
from ui.progress import ensure_progress, record_prediction


def input_key(page_id: str) -> str:
    """The session-state key of the page's prediction input."""
    return f"predict_{page_id}"


def prediction_teaser(page_id: str) -> None:
    """Under the lesson's intro: the question to predict before reading on (answered at the end of the page)."""
    if page_id in predictions.PAGES:
        prompt = predictions.for_page(page_id).prompt
        tail = "Note your guess; the box at the end of the page checks it."
        st.caption(f"**Predict before you read on:** {prompt} {tail}")


def prediction_exercise(page_id: str) -> PredictionResult | None:
    """Draw the page's exercise (nothing for pages without one); returns the shown result, if any."""
    if page_id not in predictions.PAGES:
        return None
    pred = predictions.for_page(page_id)
    key = input_key(page_id)
    saved = predictions.saved_value(ensure_progress()["predict"].get(page_id))
    if saved is not None and st.session_state.get(key) is None:
        st.session_state[key] = saved  # checked earlier: another visit of the page, or loaded by signing in
    st.subheader("Predict, then check")
    st.markdown(f"{pred.prompt} Type the number you predicted at the top of the page, then check it.")
    value = st.number_input(
        f"Your prediction ({pred.unit})", value=None, step=1.0, format="%g", key=key, placeholder="type a number"
    )
    if st.button("Check", key=f"{key}_check"):
        try:
            result = predictions.check(page_id, value)
        except ValueError as exc:
            st.error(prose_md(f"{str(exc)[:1].upper()}{str(exc)[1:]}."), icon="⚠️")
            return None
        record_prediction(page_id, result.record())
        joined = join_round(page_id, result.value)
        if joined is not None:
            st.caption(f"Your answer joined your class's live round {joined.round} ({joined.answers} answers so far).")
    elif saved is not None and value == saved:
        result = predictions.check(page_id, value)
    else:
        return None
    # "Close" / "Off" and the icon carry the verdict, so colour is never the only signal.
    if result.close:
        st.success(result.feedback, icon="✅")
    else:
        st.warning(result.feedback, icon="✖️")
    return result
