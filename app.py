"""KV Lab: the Streamlit router. Builds the page list and the shared sidebar; pages live in pages/.

The course order lives in `pages/_ui.PAGES`; a page whose file does not exist yet is left out, so the app
runs while the course is being written and picks new pages up when their files land.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from ui.page import available_pages, ensure_progress, sidebar, sidebar_progress

ROOT = Path(__file__).resolve().parent

st.set_page_config(page_title="KV Lab", page_icon=":material/memory:", layout="wide")
ensure_progress()
nav = st.navigation(
    [
        st.Page(str(ROOT / path), title=title, icon=icon, default=(i == 0))
        for i, (path, title, icon) in enumerate(available_pages())
    ]
    + [st.Page(str(ROOT / "pages/teacher.py"), title="Teacher view", icon=":material/groups:")]
)
slot = sidebar()
try:
    nav.run()
finally:  # also after st.stop() on a page's bad input, so the sidebar never loses the learner's progress
    sidebar_progress(slot)
