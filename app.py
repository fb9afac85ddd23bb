"""KV Lab: the Streamlit router. Builds the navigation from the course (ui/course.py) and the shared sidebar."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from ui import live
from ui.course import COURSE
from ui.live_screens import learner_banner, teacher_banner
from ui.progress import ensure_progress
from ui.router import run_page
from ui.sidebar import sidebar, sidebar_progress

# A local icon: a `:material/...:` page icon makes every browser fetch the favicon from a font CDN.
st.set_page_config(page_title="KV Lab", page_icon=str(Path(__file__).parent / "ui" / "favicon.png"), layout="wide")
ensure_progress()
nav = st.navigation(
    [st.Page(p.path, title=p.title, icon=p.icon, url_path=p.url, default=(i == 0)) for i, p in enumerate(COURSE)]
)
st.session_state[live.PAGE_KEY] = nav.url_path  # which page this run shows (the live banners' Follow needs it)
slot = sidebar()
teacher_banner()  # a session that leads a live round: which round, and one click to show this lesson
learner_banner()  # a signed-in learner: the class's live round, polled in a fragment
try:
    run_page(nav)  # a page that raises shows a clear message, not a stopped page
finally:  # also after st.stop() on a page's bad input, so the sidebar never loses the learner's progress
    sidebar_progress(slot)
