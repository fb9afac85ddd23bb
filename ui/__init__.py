"""KV Lab's Streamlit side that the pages share: the course registry, page helpers, progress, sidebar, charts.

- `ui.course`: every page's id, script, title, icon and lesson flag, defined once (no Streamlit);
- `ui.page`: page furniture (prose, charts with their data tables, downloads, guided errors, the lesson check,
  a page's deep-linked settings and the note on a bad link value; the links themselves: lessons/links.py);
- `ui.predict`, `ui.kv_precision`: the predict-then-observe exercise and the KV-precision section, widgets
  over lessons/predictions.py and lessons/labs/kv_precision.py;
- `ui.progress`, `ui.signin`, `ui.sidebar`: the learner's progress in session state, its saving, the sidebar;
- `ui.inert`: the one way a page shows text a user supplied;
- `ui.charts*`, `ui.export`: plotly figure builders and CSV / JSON export (no Streamlit, unit-tested alone).
Logic a page needs lives in lessons/ or engine/, not here. Modules are imported by path; this package
re-exports nothing.
"""
