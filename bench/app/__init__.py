"""The web load benchmarks: many learners at once against the real app (``classroom``, ``classroom_scale``),
page re-run times (``latency``), and what they share: one Streamlit protocol client (``client``) and what
drives the app in a real Chromium (``browser``). Run each with ``python -m bench.app.NAME --json``."""
