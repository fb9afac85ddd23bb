"""Teacher view: a class code in, its learners' completion (table + CSV export) and predictions out, and a
learner's passphrase reset; or, for the same class, the live round on a projector (ui/live_screens.py: no names).

Closed unless the server sets KVLAB_TEACHER_KEY: without a key anyone who knows a class code could list
the class, so the page then only says how to open it. With a key it asks for it (constant-time check;
repeated wrong keys make the next try wait, counted for the whole server in the database, so a new tab
does not start over) and remembers for this session that the key was given, until the key changes.
With single sign-on, a session the school's provider signed in with the teacher claim opens it without a
key (ui/sso.py); no other sign-on learner does. Learners signed in by the provider have no passphrase to reset.
"""

from __future__ import annotations

import hashlib
import os

import streamlit as st

from kvlab.settings import TEACHER_KEY, read_secret
from progress import (
    PREDICTION_COLUMNS,
    REPORT_COLUMNS,
    ProgressStoreError,
    SignInError,
    class_report,
    prediction_rows,
    report_csv,
    validate_name,
)
from progress.report import class_summary, report_file_name
from ui import signin, sso
from ui.course import LESSON_IDS
from ui.errors import run_or_stop
from ui.inert import inert, inert_md, prose_md
from ui.live_screens import teacher_screen
from ui.logs import learner_id
from ui.router import through_the_router
from ui.signin import get_store, teacher_event

UNLOCKED_KEY = "teacher_unlocked"  # session state: fingerprint of the key this session gave
RESET_KEY = "teacher_reset_pending"  # session state: (class code, learner name) awaiting confirmation
LIVE_MODE, REPORT_MODE = "Live round (projector)", "Class report"  # the two views of a class

through_the_router()  # a bookmarked /teacher after a server start still gets the app's sidebar
st.title("Teacher view")

teacher_key = run_or_stop(read_secret, os.environ, TEACHER_KEY, hint="whoever runs the server fixes it.") or ""
by_claim = sso.teacher_signed_on()  # the provider says so (KVLAB_OIDC_TEACHER_CLAIM); nothing typed does
if not teacher_key and not by_claim:
    st.info(
        "The teacher view is closed: this server has no teacher key. It lists every learner of a class, so it "
        "opens only with a key (whoever runs the server sets KVLAB_TEACHER_KEY and restarts it) or for a teacher "
        "signed in with the school's account (single sign-on; see docs/SECURITY.md)."
    )
    st.stop()

st.write(
    "Enter a class code to see who has signed in with it, how many lessons each learner has opened, "
    "their check answers, their predictions and their diagnosis grades. Learners sign in from the sidebar."
)
store = get_store()
if not store.persistent:
    st.warning(prose_md(store.message))

fingerprint = hashlib.sha256(teacher_key.encode("utf-8")).hexdigest()  # never the key itself in the session
if not by_claim and st.session_state.get(UNLOCKED_KEY) != fingerprint:
    with st.form("teacher_unlock", border=False):
        given = st.text_input("Teacher key", type="password", key="teacher_key", max_chars=256)
        opened = st.form_submit_button("Open the teacher view")
    if opened:
        try:
            store.check_teacher_key(
                given.strip(), teacher_key, signin.client()
            )  # like the variable: outer spaces do not count
            st.session_state[UNLOCKED_KEY] = fingerprint
            teacher_event("teacher_unlocked")
            st.rerun()
        except SignInError as exc:
            teacher_event("teacher_unlock_failed", reason=str(exc), retry_after_s=exc.retry_after_s)
            st.error(f"Not opened: {prose_md(exc)}.")
        except ProgressStoreError as exc:
            st.error(prose_md(exc))
    st.info("This server asks for the teacher key (set by whoever runs it in KVLAB_TEACHER_KEY).")
    st.stop()

raw_code = st.text_input("Class code", key="teacher_class_code", max_chars=40)
if not raw_code.strip():
    st.stop()
try:
    code = validate_name(raw_code, "class code")
except ValueError as exc:
    st.error(f"{prose_md(exc)}.")
    st.stop()
mode = st.radio("Show", [REPORT_MODE, LIVE_MODE], key="teacher_mode", horizontal=True)
if mode == LIVE_MODE:
    teacher_screen(code)  # made for a projector: counts only, no names
    st.stop()
try:
    records = store.class_records(code)
    rows = class_report(records, LESSON_IDS)
    summary = class_summary(rows, LESSON_IDS)
except ValueError as exc:
    st.error(f"{prose_md(exc)}.")
    st.stop()
except ProgressStoreError as exc:
    st.error(prose_md(exc))
    st.stop()
teacher_event("teacher_class_listed", class_code=code, learners=summary.learners)

if not summary.learners:
    st.info(f"No learner has signed in with the class code {inert_md(code)} yet (codes are not case-sensitive).")
    st.stop()

c1, c2, c3 = st.columns(3)
c1.metric("Learners", summary.learners)
c2.metric("Visited every lesson", summary.visited_every_lesson)
c3.metric("Mean completion", f"{summary.mean_completion_pct:.0f} %")
st.dataframe(
    [{k: r[k] for k in REPORT_COLUMNS} for r in rows],
    hide_index=True,
    key="teacher_table",
    column_config={"completion_pct": st.column_config.ProgressColumn("completion", format="%.0f%%", max_value=100)},
)
st.caption(
    f"{summary.learners} learners in class {inert_md(code)}; "
    f"completion counts the {summary.lessons_total} lesson pages."
)
st.download_button(
    "Download class report (CSV)",
    report_csv(rows),
    file_name=report_file_name(code),
    mime="text/csv",
    key="teacher_csv",
    on_click=lambda: teacher_event("teacher_csv_exported", class_code=code, learners=summary.learners),
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

st.subheader("Reset a passphrase")
st.caption(
    "A learner who forgot their passphrase (or whose name someone else took first) asks you; after a reset "
    "their next sign-in with this name sets a new passphrase. Their progress stays; whoever is still signed in "
    "with the old passphrase is signed out at their next save."
)
by_key = {r["learner_key"]: r for r in records if not r["sso"]}  # the provider keeps sign-on learners' secrets
chosen = st.selectbox(
    "Learner",
    list(by_key),
    index=None,
    key="teacher_reset_learner",
    format_func=lambda k: inert(by_key[k]["learner"]) + ("" if by_key[k]["has_passphrase"] else " (no passphrase)"),
    placeholder="pick a learner of this class",
)
if st.button("Reset passphrase…", key="teacher_reset", disabled=chosen not in by_key) and chosen in by_key:
    st.session_state[RESET_KEY] = (code, by_key[chosen]["learner"])
pending = st.session_state.get(RESET_KEY)
if pending and pending[0] == code:
    who = f"{inert_md(pending[1])} in class {inert_md(pending[0])}"
    st.warning(f"Reset the passphrase of {who}? Anyone who then signs in first with this name sets the next one.")
    yes, no = st.columns(2)
    if yes.button("Confirm reset", key="teacher_reset_confirm", type="primary"):
        st.session_state.pop(RESET_KEY, None)
        try:
            reset = store.reset_passphrase(*pending)
            teacher_event("teacher_passphrase_reset", class_code=code, learner_id=learner_id(*pending), reset=reset)
            if reset:
                st.success(f"Passphrase of {who} reset: their next sign-in sets a new one.")
            else:
                st.info(f"{who} has no passphrase yet: their next sign-in sets one.")
        except (ValueError, ProgressStoreError) as exc:
            st.error(prose_md(exc))
    if no.button("Cancel", key="teacher_reset_cancel"):
        st.session_state.pop(RESET_KEY, None)
        st.rerun()
