"""The shared sidebar app.py draws around every page: engine backend badge, sign-in, and the learner's progress."""

from __future__ import annotations

from typing import Any

import streamlit as st

import kvlab
from lessons import quizzes
from lessons.progress_table import progress_rows
from ui import signin
from ui.backend import backend_info
from ui.course import LESSON_IDS
from ui.export import to_json
from ui.inert import prose_md
from ui.progress import ensure_progress
from ui.styles import page_styles


def sidebar() -> Any:
    """Backend badge, device name and sign-in; returns a sidebar container for `sidebar_progress` to fill."""
    info = backend_info()
    page_styles()  # every page draws the sidebar, so every page gets the course's styles
    with st.sidebar:
        st.markdown(f"**Engine backend:** `{info['label']}`")
        st.caption(f"Device: {info['device']} · torch {info['torch']} · {info['threads']} threads")
        st.caption(f"KV Lab {kvlab.__version__}")  # which release a class ran (CHANGELOG.md)
        try:
            signin.sidebar_signin()
        except Exception as exc:  # a broken store must not take the course down
            st.warning(f"Sign-in is unavailable ({prose_md(exc)}); progress is kept for this session only.")
        return st.container()


def sidebar_progress(slot: Any) -> None:
    """Lesson progress in the sidebar; called after the page ran so this visit and its answers count."""
    progress = ensure_progress()
    rows = progress_rows(progress, LESSON_IDS)
    done = sum(1 for r in rows if r["visited"])
    with slot:
        st.progress(done / len(rows), text=f"Lessons visited: {done} / {len(rows)}")
        correct, total = quizzes.score(progress["quiz"])
        st.caption(f"Quiz answers correct: {correct} / {total}")
        box = st.expander("My progress", key="sidebar_progress_open", on_change="rerun")
        if not box.open:
            return  # the table is made only while it is open (ui.chart_view.chart_table says why)
        with box:
            st.dataframe(rows, hide_index=True, key="sidebar_progress_table")
            st.download_button(
                "Download progress (JSON)",
                lambda: to_json(progress),  # made on the click: progress changes only in runs, which redraw this
                file_name="kvlab-progress.json",
                mime="application/json",
                key="sidebar_progress_json",
            )
