"""KV Lab's Streamlit side that the pages share: the course registry, page helpers, progress, sidebar, charts.

- `ui.course`: every page's id, script, title, icon and lesson flag, defined once (no Streamlit);
- `ui.page`: page furniture (prose, charts with their data tables, downloads, guided errors, the lesson check);
- `ui.progress`, `ui.signin`, `ui.sidebar`: the learner's progress in session state, its saving, the sidebar;
- `ui.charts*`, `ui.export`: plotly figure builders and CSV / JSON export (no Streamlit, unit-tested alone).
Modules are imported by path; this package re-exports nothing.
"""
