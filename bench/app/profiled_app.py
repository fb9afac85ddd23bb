"""app.py under cProfile, for `python -m bench.app.page_cost --profile DIR` (never the app itself).

Streamlit runs this file as the main script on every run; it profiles the run's thread while app.py (and the
page it routes to) executes, and writes one stats file per run into $KVLAB_BENCH_PROFILE_DIR.
"""

import cProfile
import os
import threading
import time
from pathlib import Path

APP = Path(__file__).resolve().parents[2] / "app.py"
_profiler = cProfile.Profile()
_profiler.enable()
try:
    exec(compile(APP.read_text(), str(APP), "exec"), {"__name__": "__main__", "__file__": str(APP)})  # noqa: S102
finally:
    _profiler.disable()
    out = Path(os.environ["KVLAB_BENCH_PROFILE_DIR"])
    _profiler.dump_stats(out / f"run-{time.time_ns()}-{threading.get_ident()}.prof")
