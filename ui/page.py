"""Shared Streamlit helpers for KV Lab's pages: lesson prose, charts with their data, downloads, errors, checks.

Every page is a thin script: `page_header(page_id)`, widgets with explicit keys, figures from the `ui.charts*`
builders shown with `show_chart(...)`, then `lesson_check(page_id)`. Calculations live in engine/ and lessons/;
this module only wires them to Streamlit. Progress helpers (`record_diagnosis`, `clear_quiz`, ...) are in
ui/progress.py.

State rules (Streamlit runs each learner's session in its own thread):
- per-learner state lives only in `st.session_state`;
- `st.cache_resource` only for read-only shared objects (never mutate what it returns);
- `st.cache_data` for pure calculations; no module-level mutable state here or in pages.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import streamlit as st

from kernels.backend import describe
from lessons import content, quizzes
from ui.export import rows_to_csv, to_json
from ui.progress import ensure_progress, mark_visited, record_quiz

T = TypeVar("T")


@st.cache_resource(show_spinner=False)
def backend_info() -> dict:
    """kernels.backend.describe() computed once per process (read-only)."""
    return describe()


# --- page furniture ----------------------------------------------------------------------------------


def page_header(page_id: str) -> None:
    """Title and intro prose from lessons/<page_id>.md; marks the page visited."""
    lesson = content.load(page_id)
    st.title(lesson.title)
    intro = lesson.sections.get(content.INTRO, "")
    if intro:
        st.markdown(intro)
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


def show_error(message: str, hint: str | None = None) -> None:
    """A learner-facing error: what is wrong and how to fix it (never a traceback)."""
    st.error(f"{message}\n\n**How to fix:** {hint}" if hint else message)


def run_or_stop(fn: Callable[..., T], *args: Any, hint: str | None = None, **kwargs: Any) -> T:
    """Call fn; on a ValueError (bad learner input) show it with `show_error` and stop this re-run."""
    try:
        return fn(*args, **kwargs)
    except ValueError as exc:
        show_error(str(exc), hint)
        st.stop()
        raise  # unreachable: st.stop() raises; keeps type checkers honest


def download_rows(rows: Sequence[Mapping[str, Any]], name: str, key: str, label: str = "data") -> None:
    """Two download buttons (CSV and JSON) for a table of rows; `key` must be unique on the page."""
    if not rows:
        return
    c1, c2 = st.columns(2)
    c1.download_button(
        f"Download {label} (CSV)", rows_to_csv(rows), file_name=f"{name}.csv", mime="text/csv", key=f"{key}_csv"
    )
    c2.download_button(
        f"Download {label} (JSON)",
        to_json(list(rows)),
        file_name=f"{name}.json",
        mime="application/json",
        key=f"{key}_json",
    )


def show_table(rows: Sequence[Mapping[str, Any]], name: str, key: str, label: str = "table") -> None:
    """A table plus its CSV/JSON downloads."""
    st.dataframe(list(rows), hide_index=True, key=f"{key}_table")
    download_rows(rows, name, key, label)


def show_chart(fig: Any, caption: str, rows: Sequence[Mapping[str, Any]], name: str, key: str) -> None:
    """A plotly figure with its caption, a data-table alternative (accessibility) and downloads."""
    st.plotly_chart(fig, key=f"{key}_chart", config={"displaylogo": False})
    st.caption(caption)
    with st.expander("Data behind this chart (table)", expanded=False):
        st.dataframe(list(rows), hide_index=True, key=f"{key}_data")
        download_rows(rows, name, key, "chart data")


# --- end-of-lesson check -----------------------------------------------------------------------------


def lesson_check(page_id: str, title: str = "Check your understanding") -> tuple[int, int]:
    """The page's 1–3 questions as radios with immediate explained feedback; returns (correct, total)."""
    questions = quizzes.for_page(page_id)
    if not questions:
        return 0, 0
    st.divider()
    st.subheader(title)
    progress = ensure_progress()
    for q in questions:
        choice = st.radio(q.prompt, q.options, index=None, key=f"quiz_{q.id}")
        if choice is None:
            continue
        result = quizzes.grade(q.id, choice)
        record_quiz(q.id, result.answer, result.correct)
        # The words "Correct" / "Not quite" and the icon carry the verdict, so colour is never the only signal.
        if result.correct:
            st.success(result.feedback, icon="✅")
        else:
            st.warning(result.feedback, icon="✖️")
    correct, total = quizzes.score(progress["quiz"], page_id)
    st.caption(f"Score on this page: {correct} / {total}")
    return correct, total
