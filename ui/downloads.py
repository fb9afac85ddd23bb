"""A table and its CSV / JSON downloads (made only when a learner asks for one)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import streamlit as st

from ui.export import rows_to_csv, to_json


def download_rows(rows: Sequence[Mapping[str, Any]], name: str, key: str, label: str = "data") -> None:
    """Two download buttons (CSV and JSON) for a table of rows; `key` must be unique on the page."""
    if not rows:
        return
    # The files are made when a learner asks for one (Streamlit calls ``data`` on the click), not on every
    # run: most runs never download, and every chart on every page has both buttons.
    rows = list(rows)
    row = st.container(horizontal=True)  # one block, not a row of two columns: every message costs a run time
    row.download_button(
        f"Download {label} (CSV)",
        lambda: rows_to_csv(rows),
        file_name=f"{name}.csv",
        mime="text/csv",
        key=f"{key}_csv",
    )
    row.download_button(
        f"Download {label} (JSON)",
        lambda: to_json(rows),
        file_name=f"{name}.json",
        mime="application/json",
        key=f"{key}_json",
    )


def show_table(rows: Sequence[Mapping[str, Any]], name: str, key: str, label: str = "table") -> None:
    """A table plus its CSV/JSON downloads."""
    st.dataframe(list(rows), hide_index=True, key=f"{key}_table")
    download_rows(rows, name, key, label)
