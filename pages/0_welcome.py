"""Welcome page: what the course is, how the pages fit together, and where the evidence comes from."""

import streamlit as st

from ui.prose import page_header, prose

page_header("welcome")
prose("welcome", "How the course works")
prose("welcome", "The lessons")
st.info("Use the navigation on the left. Your progress appears at the bottom of the sidebar.", icon="ℹ️")
