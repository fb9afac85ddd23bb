"""Streamlit-free building blocks for KV Lab's pages: plotly figure builders and data export.

`ui.charts` returns `plotly.graph_objects.Figure`s and `ui.export` turns rows into CSV / JSON text.
Nothing here imports streamlit, so every builder is unit-tested on its own; the Streamlit side
(caching, session state, widgets) lives in `pages/_ui.py`.
"""
