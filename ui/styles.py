"""The course's few style rules: what the theme (.streamlit/config.toml) cannot set."""

from __future__ import annotations

import streamlit as st

# What the theme (.streamlit/config.toml) cannot set. A slider's value is drawn in the accent colour, 3.9:1 on
# the dark theme's background (WCAG asks 4.5:1). Streamlit's light plotly theme writes tick labels, axis
# titles, annotations and outside bar labels in #808495, 3.8:1 on white; the dark theme's #e6eaf1 is fine. Both
# take the body text colour instead (currentColor: the theme's, so the rule holds in either theme). The live
# round's projector screen (ui/live_screens.py) is read from the back of a room: its text and count are large.
PAGE_CSS = """<style>
[data-testid="stSliderThumbValue"], [data-testid="stSliderThumbValue"] p { color: inherit !important; }
[data-testid="stPlotlyChart"] text[style*="fill: rgb(128, 132, 149)"] { fill: currentColor !important; }
.st-key-live_screen p, .st-key-live_screen li { font-size: 1.6rem; line-height: 1.4; }
.st-key-live_screen [data-testid="stMetricValue"] { font-size: 4rem; line-height: 1.2; }
.st-key-live_screen [data-testid="stMetricValue"] * { font-size: inherit; }
</style>"""


def page_styles() -> None:
    """The course's few style rules (PAGE_CSS); a style-only st.html adds no element to the page."""
    st.html(PAGE_CSS)
