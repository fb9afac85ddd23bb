"""Start the course: `python -m ui.serve [SCRIPT.py] [streamlit options]` is `streamlit run app.py` (or SCRIPT)
with the app's imports done before the server answers its health check, and widget values no browser sends
dropped before they reach Streamlit's widgets (ui/widget_guard.py).

Streamlit imports a page's modules on the first run that needs them, so the first learner after a start waited
for torch (about 3 s on a small CPU), pandas, plotly and the progress store: some 5 s of a 6.7 s first render.
Streamlit runs every session's script in this process, so importing them here, before the server starts,
means a first render costs what any new learner's costs (a tenth of a second), and a replica behind the
balancer is reported healthy only once it can answer at that speed.
"""

from __future__ import annotations

import importlib
import logging
import os
import pkgutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "app.py"
# What the pages import, and the libraries Streamlit loads on its first table or chart.
PACKAGES = ("ui", "lessons", "engine", "kernels", "progress")
LIBRARIES = ("pandas", "pyarrow", "plotly.graph_objects", "plotly.io", "streamlit.elements.arrow")
SKIP = ("ui.serve",)


def _modules(package: str) -> list[str]:
    root = importlib.import_module(package)
    names = [package]
    for info in pkgutil.walk_packages(root.__path__, prefix=f"{package}."):
        if not info.name.startswith(SKIP):
            names.append(info.name)
    return names


def preload() -> list[str]:
    """Import the app's packages and the libraries its first run needs; returns what could not be imported
    (an optional backend, say), which the app then reports itself when a page needs it."""
    failed = []
    for name in (*LIBRARIES, *(m for p in PACKAGES for m in _modules(p))):
        try:
            importlib.import_module(name)
        except Exception as exc:  # an optional dependency (triton off Linux, a GPU-only module): not fatal here
            failed.append(f"{name} ({type(exc).__name__}: {exc})")
    return failed


def main(argv: list[str] | None = None) -> None:
    """Preload, then run Streamlit's own command line as `streamlit run app.py ARGV...` (a first argument
    ending in .py runs that script instead: the benchmarks' profiled app)."""
    args = list(sys.argv[1:] if argv is None else argv)
    script = Path(args.pop(0)) if args and args[0].endswith(".py") else APP
    started = time.perf_counter()
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    failed = preload()
    log = logging.getLogger("kvlab")
    log.info("preloaded the app's modules in %.1f s", time.perf_counter() - started)
    for line in failed:
        log.info("not preloaded: %s", line)
    from streamlit.web import cli

    from ui import host_guard, sso, widget_guard

    widget_guard.install()  # a forged widget value must not break a learner's session (ui/widget_guard.py)
    if host_guard.install():  # KVLAB_ALLOWED_HOSTS: no answer under another Host (ui/host_guard.py)
        log.info("answering only to the hosts in %s", host_guard.HOSTS_ENV)
    args += sso.startup_args(os.environ)  # KVLAB_OIDC_*: Streamlit's [auth] file for st.login (ui/sso.py)
    sys.argv = ["streamlit", "run", str(script), *args]
    cli.main()


if __name__ == "__main__":
    main()
