"""How a lesson shows its numbers: a chart with its one-sentence summary, caption and data table (made only while
it is open), and a row of metrics."""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import streamlit as st

from ui.downloads import download_rows


def metric_row(count: int) -> list[Any]:
    """A row for ``count`` st.metric calls, made in order: ``m1, m2 = metric_row(2)`` then ``m1.metric(...)``,
    ``m2.metric(...)``. One horizontal container (each returned name is the same one), not ``st.columns``: a
    row of columns is one message per column on every run, and a page run's cost follows its messages."""
    row = st.container(horizontal=True)
    return [row] * count


SUMMARY_LEAD = "In short:"  # starts every chart's one-sentence summary on the page
# plotly's tool bar puts about ten buttons per chart in the Tab order; a keyboard learner would step through
# them on every chart. Kept: saving the picture (and Streamlit's full screen); dragging still zooms, a double
# click resets, and the table under each chart has the exact numbers.
CHART_CONFIG = {
    "displaylogo": False,
    "modeBarButtonsToRemove": [
        "zoom2d",
        "pan2d",
        "select2d",
        "lasso2d",
        "zoomIn2d",
        "zoomOut2d",
        "autoScale2d",
        "resetScale2d",
    ],
}


def chart_alt(fig: Any, summary: str | None = None) -> str:
    """The chart's accessible name: its title (plotly's markup and escapes removed), then the summary."""
    spec = getattr(fig, "_frozen_spec", None)
    title = spec.get("layout", {}).get("title", {}).get("text") if spec is not None else fig.layout.title.text
    plain = " ".join(html.unescape(re.sub(r"<[^>]*>", " ", title or "")).split())
    text = " ".join(part for part in (plain and f"{plain.rstrip('.')}.", summary) if part)
    return text or "Chart (its data is in the table below)"


Rows = Sequence[Mapping[str, Any]]


def show_chart(
    fig: Any,
    caption: str,
    rows: Rows | Callable[[], Rows],
    name: str,
    key: str,
    *,
    summary: str,
) -> None:
    """A plotly figure with its one-sentence summary, caption, a data-table alternative and downloads.

    Accessibility: `summary` says what the chart shows at the current settings (the number the lesson is
    about; the labs compute it). Screen readers get it twice: in the chart's accessible name (`alt`, after
    its title) and as the text under it; the table under it holds every number the chart draws. Every
    course chart passes one (tests/ui/test_chart_summaries.py)."""
    if not summary.strip():
        raise ValueError(f"chart {key!r}: give a one-sentence summary of what it shows")
    st.plotly_chart(fig, key=f"{key}_chart", config=CHART_CONFIG, alt=chart_alt(fig, summary))
    st.markdown(f"**{SUMMARY_LEAD}** {summary}")
    st.caption(caption)
    chart_table(rows, name, key)


CHART_TABLE_LABEL = "Data behind this chart (table)"
CHART_TABLE_OPEN = "_table_open"  # suffix of the session-state key that holds whether a chart's table is open


def chart_table(rows: Rows | Callable[[], Rows], name: str, key: str) -> None:
    """The chart's numbers as a table with CSV/JSON downloads, in an expander whose contents are made only
    while it is open.

    A data table is the costliest element of a page run (pandas, then Arrow: several milliseconds each, and a
    lesson draws up to nine), and most learners never open one. Opening the expander re-runs the part of the
    page it is in (the lesson's calculator, a fragment) and the table is drawn; it stays open, and current,
    across later runs until it is closed. Its state is ``st.session_state[key + CHART_TABLE_OPEN]``. ``rows``
    may be a function that makes them (a large table: it is then made only while the table is open too)."""
    box = st.expander(CHART_TABLE_LABEL, key=f"{key}{CHART_TABLE_OPEN}", on_change="rerun")
    if box.open:
        rows = rows() if callable(rows) else rows
        with box:
            st.dataframe(list(rows), hide_index=True, key=f"{key}_data")
            download_rows(rows, name, key, "chart data")
