"""Start the course: `python -m ui.serve [SCRIPT.py] [streamlit options]` is `streamlit run app.py` (or SCRIPT)
with the app's imports done before the server answers its health check, and widget values no browser sends
dropped before they reach Streamlit's widgets (ui/widget_guard.py).

Streamlit imports a page's modules on the first run that needs them, so the first learner after a start waited
for torch (about 3 s on a small CPU), pandas, plotly and the progress store: some 5 s of a 6.7 s first render.
Streamlit runs every session's script in this process, so importing them here, before the server starts,
means a first render costs what any new learner's costs (a tenth of a second), and a replica behind the
balancer is reported healthy only once it can answer at that speed.

Before that, the settings are checked (kvlab/settings.py): a bad one stops the start with its message and exit
status 2, no traceback. After the imports, every lesson runs once at its defaults (ui/warm.py; KVLAB_WARM=0
skips it) so the caches its first visit fills are full before the health check answers. Installed as a
package (`kvlab serve`), the app carries its Streamlit settings with it (kvlab/streamlit/config.toml, the
checkout's .streamlit/config.toml) and passes them as options, which a later option on the command line
overrides.
"""

from __future__ import annotations

import importlib
import logging
import os
import pkgutil
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kvlab import settings as kvlab_settings
from kvlab.settings import Settings, SettingsError, load_settings

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "app.py"
# What the pages import, and the libraries Streamlit loads on its first table or chart.
PACKAGES = ("ui", "lessons", "engine", "kernels", "progress")
LIBRARIES = ("pandas", "pyarrow", "plotly.graph_objects", "plotly.io", "streamlit.elements.arrow")
SKIP = ("ui.serve", "progress.migrations")  # the migrations run inside Alembic only


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


def observe(settings: Settings, environ: Mapping[str, str]) -> None:
    """The operator's side, set up once per process before anything else is logged: JSON logs at
    KVLAB_LOG_LEVEL, database errors counted, the metrics endpoint when KVLAB_METRICS_PORT asks for it, and
    the start-up event with every KVLAB_* setting (secrets redacted). SettingsError when the port is taken."""
    from ui import logs, metrics

    logs.configure(environ)
    metrics.install_event_counter()
    endpoint = metrics.MetricsSettings(settings.metrics_port, settings.metrics_address)
    try:
        metrics.start_server(endpoint)
    except OSError as exc:  # another program holds the port: say which setting, and do not start half-seen
        raise SettingsError(
            kvlab_settings.METRICS_PORT,
            f"{kvlab_settings.METRICS_PORT}={endpoint.port} cannot be served on {endpoint.address} "
            f"({exc.strerror or exc}); choose a free port or unset it",
        ) from None
    url = f"http://{endpoint.address}:{endpoint.port}/metrics" if endpoint.port else None
    logs.event(
        "server_start",
        message="the app server is starting",
        settings=logs.settings_fields(environ),
        metrics=url,
        pid=os.getpid(),
    )


def packaged_options(script: Path, cwd: Path) -> list[str]:
    """The course's Streamlit settings as command-line options, when Streamlit would not find them itself (no
    .streamlit/config.toml beside the script or in the working folder: an installed package)."""
    if (script.parent / ".streamlit" / "config.toml").is_file() or (cwd / ".streamlit" / "config.toml").is_file():
        return []
    packaged = Path(kvlab_settings.__file__).parent / "streamlit" / "config.toml"  # a wheel; a checkout: below
    if not packaged.is_file():
        packaged = ROOT / ".streamlit" / "config.toml"
    try:
        import tomllib
    except ImportError:  # Python 3.10: Streamlit's own TOML reader
        import toml as tomllib  # type: ignore[no-redef]
    return [f"--{key}={value}" for key, value in _flat(tomllib.loads(packaged.read_text(encoding="utf-8")))]


def _flat(table: Mapping[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    out = []
    for key, value in table.items():
        if isinstance(value, Mapping):
            out += _flat(value, f"{prefix}{key}.")
        else:
            out.append((f"{prefix}{key}", str(value).lower() if isinstance(value, bool) else str(value)))
    return out


def _fields(event: str, **fields: Any) -> dict[str, Any]:
    """A log record's `extra` for the JSON log (ui/logs.py): its event name and fields."""
    return {"event": event, "fields": fields}


def serve(argv: Sequence[str], settings: Settings, environ: dict[str, str] | None = None) -> int:
    """Preload, warm the lessons (unless settings.warm is off), then run Streamlit's own command line as
    `streamlit run app.py ARGV...` (a first argument ending in .py runs that script instead: the benchmarks'
    profiled app). Returns Streamlit's exit status."""
    environ = os.environ if environ is None else environ
    args = list(argv)
    script = Path(args.pop(0)) if args and args[0].endswith(".py") else APP
    log = logging.getLogger("kvlab")
    started = time.perf_counter()
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    try:
        observe(settings, environ)  # JSON logs from here on, metrics, the start-up event (docs/OPERATIONS.md)
        log.info("progress database at schema revision %s", check_database(settings, environ))
    except SettingsError as exc:
        print(f"kvlab: {exc}", file=sys.stderr)
        return 2
    failed = preload()
    preloaded = round(time.perf_counter() - started, 2)
    log.info("preloaded the app's modules in %.1f s", preloaded, extra=_fields("preloaded", seconds=preloaded))
    for line in failed:
        log.info("not preloaded: %s", line, extra=_fields("not_preloaded", module=line))
    if settings.warm:
        from ui.warm import warm

        for done in warm():
            note = f" (failed: {done.error})" if done.error else ""
            fields = _fields("warmed", page=done.page, seconds=round(done.seconds, 2), error=done.error)
            log.info("warmed %s in %.1f s%s", done.page, done.seconds, note, extra=fields)
    ready = round(time.perf_counter() - started, 2)
    log.info("ready to answer after %.1f s", ready, extra=_fields("server_ready", seconds=ready))
    from streamlit.web import cli

    from ui import host_guard, sso, widget_guard

    widget_guard.install()  # a forged widget value must not break a learner's session (ui/widget_guard.py)
    install_middleware()  # /healthz with the database, the sessions gauge (ui/health.py, ui/metrics.py)
    if host_guard.install(environ):  # KVLAB_ALLOWED_HOSTS: no answer under another Host (ui/host_guard.py)
        log.info("answering only to the hosts in %s", host_guard.HOSTS_ENV)
    if settings.cookie_secret is not None:  # KVLAB_COOKIE_SECRET(_FILE): every replica signs cookies alike
        environ["STREAMLIT_SERVER_COOKIE_SECRET"] = settings.cookie_secret
    args = [*args, *sso.startup_args(environ)]  # KVLAB_OIDC_*: Streamlit's [auth] file for st.login (ui/sso.py)
    sys.argv = ["streamlit", "run", str(script), *packaged_options(script, Path.cwd()), *args]
    try:
        cli.main()
    except SystemExit as exc:  # Streamlit's command line ends by exiting; its status is ours
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0


def check_database(settings: Settings, environ: Mapping[str, str]) -> str:
    """The progress database the server will use, ready at this release's schema (a new one is created; an older
    one upgraded when KVLAB_DB_AUTO_UPGRADE says so): its revision; SettingsError naming the database setting when
    it cannot be opened, reached or used (a wrong password, an older schema), so the start stops there instead of
    every learner's save failing later."""
    from progress.migrate import SchemaError, prepare
    from progress.store import database_url

    try:
        return prepare(database_url(environ), settings.db_auto_upgrade)
    except (SchemaError, OSError) as exc:
        raise SettingsError(kvlab_settings.DATABASE_URL, f"the progress database cannot be used: {exc}") from exc


def main(argv: list[str] | None = None, environ: dict[str, str] | None = None) -> int:
    """`python -m ui.serve [SCRIPT.py] [streamlit options]` (./run.sh): check the settings, then `serve`."""
    environ = os.environ if environ is None else environ
    try:
        settings = load_settings(environ)
    except SettingsError as exc:
        print(f"kvlab: {exc}", file=sys.stderr)
        return 2
    return serve(sys.argv[1:] if argv is None else argv, settings, environ)


if __name__ == "__main__":
    raise SystemExit(main())
