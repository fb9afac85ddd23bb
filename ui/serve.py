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
from typing import Any

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


def install_middleware() -> bool:
    """Put the health check with its database (ui/health.py) and the session gauge (ui/metrics.py) first in
    Streamlit's middleware, once; True when installed by this call."""
    from starlette.middleware import Middleware
    from streamlit.web.server.starlette import starlette_app

    from ui.health import HealthCheck
    from ui.metrics import SessionCount

    original = starlette_app.create_streamlit_middleware
    if getattr(original, "kvlab_ops", False):
        return False

    def create_streamlit_middleware() -> list[Any]:
        return [Middleware(HealthCheck), Middleware(SessionCount), *original()]

    create_streamlit_middleware.kvlab_ops = True  # type: ignore[attr-defined]
    starlette_app.create_streamlit_middleware = create_streamlit_middleware
    return True


def observe(started: float, failed: list[str]) -> None:
    """The operator's side, set up once per process: JSON logs, the start-up event with the settings (secrets
    redacted), database errors counted, the metrics endpoint when KVLAB_METRICS_PORT asks for it.
    SystemExit naming the setting when one of these settings is wrong."""
    from ui import logs, metrics

    try:
        logs.configure()
        settings = metrics.metrics_settings()
        metrics.install_event_counter()
        metrics.start_server(settings)
    except (ValueError, OSError) as exc:  # a bad setting or a taken port: say which, and do not start half-seen
        raise SystemExit(f"kvlab: cannot start: {exc}") from None
    endpoint = f"http://{settings.address}:{settings.port}/metrics" if settings.port else None
    logs.event(
        "server_start",
        message="the app server is starting",
        settings=logs.settings_fields(),
        preload_s=round(time.perf_counter() - started, 2),
        not_preloaded=failed,
        metrics=endpoint,
        pid=os.getpid(),
    )


def main(argv: list[str] | None = None) -> None:
    """Preload, then run Streamlit's own command line as `streamlit run app.py ARGV...` (a first argument
    ending in .py runs that script instead: the benchmarks' profiled app)."""
    args = list(sys.argv[1:] if argv is None else argv)
    script = Path(args.pop(0)) if args and args[0].endswith(".py") else APP
    started = time.perf_counter()
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    failed = preload()
    observe(started, failed)
    log = logging.getLogger("kvlab")
    from streamlit.web import cli

    from ui import host_guard, widget_guard

    widget_guard.install()  # a forged widget value must not break a learner's session (ui/widget_guard.py)
    install_middleware()  # /healthz with the database, the sessions gauge (ui/health.py, ui/metrics.py)
    if host_guard.install():  # KVLAB_ALLOWED_HOSTS: no answer under another Host (ui/host_guard.py)
        log.info("answering only to the hosts in %s", host_guard.HOSTS_ENV)
    sys.argv = ["streamlit", "run", str(script), *args]
    cli.main()


if __name__ == "__main__":
    main()
