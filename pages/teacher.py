"""Teacher view: a class code in, its learners' completion (table + CSV export) and predictions out.

Reads the same progress store as the sidebar sign-in (ui/signin.py). When the server sets
KVLAB_TEACHER_KEY, the page asks for that key first, so learners who know the class code cannot list
their classmates.
"""

from __future__ import annotations

import hmac
import os

import streamlit as st

from progress import (
    PREDICTION_COLUMNS,
    REPORT_COLUMNS,
    ProgressStoreError,
    class_report,
    prediction_rows,
    report_csv,
    validate_name,
)
from ui.course import LESSON_IDS
from ui.page import through_the_router
from ui.signin import get_store

through_the_router()  # a bookmarked /teacher after a server start still gets the app's sidebar
st.title("Teacher view")
st.write(
    "Enter a class code to see who has signed in with it, how many lessons each learner has opened, "
    "their check answers, their predictions and their diagnosis grades. Learners sign in from the sidebar."
)

store = get_store()
if not store.persistent:
    st.warning(store.message)

teacher_key = os.environ.get("KVLAB_TEACHER_KEY", "")
if teacher_key:
    given = st.text_input("Teacher key", type="password", key="teacher_key")
    if not hmac.compare_digest(given.encode(), teacher_key.encode()):
        st.info("This server asks for the teacher key (set by whoever runs it in KVLAB_TEACHER_KEY).")
        st.stop()

raw_code = st.text_input("Class code", key="teacher_class_code", max_chars=40)
if not raw_code.strip():
    st.stop()
try:
    code = validate_name(raw_code, "class code")
    records = store.class_records(code)
    rows = class_report(records, LESSON_IDS)
except ValueError as exc:
    st.error(f"{exc}.")
    st.stop()
except ProgressStoreError as exc:
    st.error(str(exc))
    st.stop()

if not rows:
    st.info(f"No learner has signed in with the class code {code!r} yet (codes are not case-sensitive).")
    st.stop()

done = sum(1 for r in rows if r["lessons_visited"] == r["lessons_total"])
c1, c2, c3 = st.columns(3)
c1.metric("Learners", len(rows))
c2.metric("Visited every lesson", done)
c3.metric("Mean completion", f"{sum(r['completion_pct'] for r in rows) / len(rows):.0f} %")
st.dataframe(
    [{k: r[k] for k in REPORT_COLUMNS} for r in rows],
    hide_index=True,
    key="teacher_table",
    column_config={"completion_pct": st.column_config.ProgressColumn("completion", format="%.0f%%", max_value=100)},
)
st.caption(f"{len(rows)} learners in class {code}; completion counts the {len(LESSON_IDS)} lesson pages.")
st.download_button(
    "Download class report (CSV)",
    report_csv(rows),
    file_name=f"kvlab-{code.replace(' ', '_').casefold()}-progress.csv",
    mime="text/csv",
    key="teacher_csv",
)

st.subheader("Predictions")
predicted = prediction_rows(records)
if predicted:
    st.dataframe(
        [{k: r[k] for k in PREDICTION_COLUMNS} for r in predicted],
        hide_index=True,
        key="teacher_predictions",
        column_config={"off_by_pct": st.column_config.NumberColumn("off by", format="%+.1f%%")},
    )
    st.caption(
        "Each learner's last checked prediction per lesson: their value, the engine's answer, how far off "
        "(negative: too low) and whether it was within the exercise's tolerance."
    )
else:
    st.caption("No learner in this class has checked a prediction yet.")
