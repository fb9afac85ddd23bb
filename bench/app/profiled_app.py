"""app.py under cProfile, for `python -m bench.app.page_cost --profile DIR` (never the app itself).

Streamlit runs this file as the main script on every full run; it profiles the run's thread while app.py (and
the page it routes to) executes, and writes one stats file per run into $KVLAB_BENCH_PROFILE_DIR, named
``run-*.prof``. A widget inside a lesson's calculator re-runs only that ``st.fragment`` (ui.router.lesson_section),
not this file: the calculator is wrapped here so that such a run is profiled too, into ``fragment-*.prof``.
"""

import cProfile
import functools
import os
import threading
import time
from pathlib import Path

import ui.router

APP = Path(__file__).resolve().parents[2] / "app.py"
OUT = Path(os.environ["KVLAB_BENCH_PROFILE_DIR"])
_full_run = threading.local()  # set while this thread runs app.py: one profiler per thread at a time


def _profiled_fragment(body):
    @functools.wraps(body)
    def run():
        if getattr(_full_run, "active", False):
            return body()  # part of a full run, which is profiled as a whole
        profiler = cProfile.Profile()
        profiler.enable()
        try:
            return body()
        finally:
            profiler.disable()
            profiler.dump_stats(OUT / f"fragment-{time.time_ns()}-{threading.get_ident()}.prof")

    return run


if not getattr(ui.router.lesson_section, "profiled", False):
    _section = ui.router.lesson_section

    def lesson_section(body):
        return _section(_profiled_fragment(body))

    lesson_section.profiled = True
    ui.router.lesson_section = lesson_section  # pages import it from ui.router on each run, after this

_full_run.active = True
_profiler = cProfile.Profile()
_profiler.enable()
try:
    exec(compile(APP.read_text(), str(APP), "exec"), {"__name__": "__main__", "__file__": str(APP)})  # noqa: S102
finally:
    _profiler.disable()
    _full_run.active = False
    _profiler.dump_stats(OUT / f"run-{time.time_ns()}-{threading.get_ident()}.prof")
