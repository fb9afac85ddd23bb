"""KV Lab's Streamlit side that the pages share: the course registry, page helpers, progress, sidebar, charts.

- `ui.course`: every page's id, script, title, icon and lesson flag, defined once (no Streamlit);
- page furniture, one module each: `ui.router` (how a page runs: inside app.py's navigation, an exception as one
  message, a lesson's calculator as a fragment), `ui.prose` (header, sections, sources), `ui.chart_view` (a
  chart with its summary and data table, metric rows), `ui.downloads`, `ui.errors` (a learner's error and its
  fix), `ui.quiz` (the lesson check), `ui.linked_view` (a page's deep-linked settings; the links themselves:
  lessons/links.py), `ui.styles` (the CSS the theme cannot set);
- `ui.memo`: the app's one cache for shared results; `ui.figure_cache` (built figures) and `ui.backend` use it;
- `ui.predict`, `ui.kv_precision`: the predict-then-observe exercise and the KV-precision section, widgets
  over lessons/predictions.py and lessons/labs/kv_precision.py;
- `ui.progress`, `ui.signin`, `ui.sidebar`: the learner's progress in session state, its saving, the sidebar;
- `ui.inert`: the one way a page shows text a user supplied;
- `ui.charts*`, `ui.export`: plotly figure builders and CSV / JSON export (no Streamlit, unit-tested alone).
Logic a page needs lives in lessons/ or engine/, not here. Modules are imported by path; this package
re-exports nothing.

A page is a thin script: `page_header(page_id)`, widgets with explicit keys, figures from the `ui.charts*`
builders shown with `show_chart(...)`, then `lesson_check(page_id)`. State rules (Streamlit runs each learner's
session in its own thread): per-learner state lives only in `st.session_state`; shared results (pure
calculations, built figures) only in `ui.memo`'s caches, read-only; `st.cache_resource` only for shared
resources nobody mutates through it; no other module-level mutable state in ui/ or pages/.
"""
