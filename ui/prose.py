"""A lesson's prose on its page: the header (title, objective, intro, the prediction teaser), named sections and
the sources, from lessons/<page_id>.md."""

from __future__ import annotations

import streamlit as st

from lessons import content
from ui.predict import prediction_teaser
from ui.progress import mark_visited
from ui.router import through_the_router

OBJECTIVE = "Objective"  # the `## Objective` section: what the learner will be able to do after the lesson


def page_header(page_id: str) -> None:
    """Title, the lesson's objective and intro prose from lessons/<page_id>.md; marks the page visited."""
    through_the_router()
    lesson = content.load(page_id)
    st.title(lesson.title)
    objective = lesson.sections.get(OBJECTIVE)
    if objective:
        st.info(f"**Objective:** {objective}", icon=":material/flag:")
    intro = lesson.sections.get(content.INTRO, "")
    if intro:
        st.markdown(intro)
    prediction_teaser(page_id)
    mark_visited(page_id)


def prose(page_id: str, section: str) -> None:
    """Render one `## section` of a lesson's Markdown (silently nothing if the file lacks it)."""
    text = content.load(page_id).sections.get(section)
    if text:
        st.markdown(text)


def sources(page_id: str) -> None:
    """The lesson's `## Sources` section in a collapsed expander (citations for the page's figures)."""
    text = content.load(page_id).sections.get("Sources")
    if text:
        with st.expander("Sources", expanded=False):
            st.markdown(text)
