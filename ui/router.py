"""How a page runs: always inside app.py's navigation, a page's exception as one clear message, and a lesson's
calculator as an ``st.fragment`` of its own."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

import streamlit as st
from streamlit.runtime.pages_manager import PagesManager

from ui import metrics
from ui.course import COURSE


def through_the_router() -> None:
    """Make sure this page runs inside app.py (its sidebar, sign-in and progress), also on a deep link.

    Streamlit 1.67 treats an app with a `pages/` folder as a v1 multipage app until some run has executed
    `st.navigation` (app.py's): until then a request for a page's URL runs that page script alone, and the
    first learners to open `/paged_attention?...` after a server start (an embedded lesson, say) got the
    page without the app around it. Streamlit's own flag for that mode is switched off here and the run
    restarted; the re-run goes through app.py's navigation to the same page with the same query.
    """
    if PagesManager.uses_pages_directory:
        PagesManager.uses_pages_directory = False  # what st.navigation itself does on its first call
        st.rerun()


PAGE_FAILED = (
    "This page could not use what it was sent: a value no browser form sends, or a fault of ours. Reload the "
    "page to start it again from its defaults; your progress is kept, and the server's log has the details."
)


def run_page(page: Any) -> None:
    """Run the navigation's page; an exception it raises becomes a clear message and a logged traceback.

    Streamlit returns a select box's or a radio's value as the client sent it, even one that is not among
    the options, and some forged values fail inside Streamlit's own widget code: a hand-made client can make
    any page raise. Script control (st.stop, st.rerun) is not an Exception and passes through.
    """
    name = str(getattr(page, "url_path", "") or COURSE[0].url)  # the default page's url_path is ""
    with metrics.page_run(name):  # counted and timed per page (ui/metrics.py), also when it stops early
        try:
            page.run()
        except Exception:
            metrics.page_failed(name)
            logging.getLogger("kvlab").exception("page %r failed", name, extra={"event": "page_failed"})
            st.error(PAGE_FAILED, icon=":material/restart_alt:")


def lesson_section(body: Callable[[], None]) -> None:
    """Run ``body`` (a lesson's calculator: its linked view, widgets, numbers and charts) as an ``st.fragment``.

    A widget inside it re-runs ``body`` alone: not app.py's navigation and sidebar, not the page's header,
    sources or end-of-lesson check, none of which depend on those widgets (the learner's progress changes
    only in the full runs that draw the header and the check). A full run (opening the page, a quiz answer)
    still runs everything in page order. An exception inside a fragment run never reaches ``run_page``, so it
    is handled here the same way: the clear message and a logged traceback."""

    @functools.wraps(body)
    def section() -> None:
        try:
            body()
        except Exception:
            logging.getLogger("kvlab").exception(
                "lesson section %r failed", body.__qualname__, extra={"event": "section_failed"}
            )
            st.error(PAGE_FAILED, icon=":material/restart_alt:")

    st.fragment(section)()
