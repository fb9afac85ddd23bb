"""Learner-facing errors: what is wrong and how to fix it, shown inertly, never a traceback."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import streamlit as st

from lessons.run_limit import RunLimitReached
from ui.inert import prose_md

T = TypeVar("T")


def show_error(message: object, hint: str | None = None) -> None:
    """A learner-facing error: what is wrong and how to fix it (never a traceback).

    ``message`` is shown inertly (`ui.inert.prose_md`): an exception's text often quotes the bad value a
    learner typed, so it is never read as Markdown, LaTeX, an icon or a link. ``hint`` is the course's own
    Markdown and is rendered as such."""
    body = prose_md(message)
    st.error(f"{body}\n\n**How to fix:** {hint}" if hint else body)


def run_or_stop(fn: Callable[..., T], *args: Any, hint: str | None = None, **kwargs: Any) -> T:
    """Call fn; on a ValueError (bad learner input) show it with `show_error` and stop this re-run."""
    try:
        return fn(*args, **kwargs)
    except ValueError as exc:
        show_error(exc, hint)
        st.stop()
        raise  # unreachable: st.stop() raises; keeps type checkers honest


def within_run_limit(make: Callable[[], T]) -> T | None:
    """make(), or None with the reason shown when this session's new engine runs are used up for now
    (lessons/run_limit.py): the page keeps its settings and what it showed, and says how long to wait."""
    try:
        return make()
    except RunLimitReached as exc:
        st.warning(prose_md(exc), icon=":material/hourglass_top:")
        return None
