"""KV Lab: the Streamlit router. Pages live in pages/; this file only builds navigation and the sidebar."""

import streamlit as st

from kernels.backend import describe

st.set_page_config(page_title="KV Lab", page_icon="🧠", layout="wide")


def home() -> None:
    st.title("KV Lab")
    st.write("An interactive course on how LLMs are served, built on a real inference engine.")


nav = st.navigation([st.Page(home, title="Welcome", default=True)])
info = describe()
st.sidebar.caption(f"Backend: **{info['label']}** · {info['device']}")
nav.run()
