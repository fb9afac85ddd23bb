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
        log.info("progress database at schema revision %s", check_database(settings, environ))
    except SettingsError as exc:
        print(f"kvlab: {exc}", file=sys.stderr)
        return 2
    failed = preload()
    log.info("preloaded the app's modules in %.1f s", time.perf_counter() - started)
    for line in failed:
        log.info("not preloaded: %s", line)
    if settings.warm:
        from ui.warm import warm

        for done in warm():
            log.info("warmed %s in %.1f s%s", done.page, done.seconds, f" (failed: {done.error})" if done.error else "")
    log.info("ready to answer after %.1f s", time.perf_counter() - started)
    from streamlit.web import cli

    from ui import host_guard, widget_guard

    widget_guard.install()  # a forged widget value must not break a learner's session (ui/widget_guard.py)
    if host_guard.install(environ):  # KVLAB_ALLOWED_HOSTS: no answer under another Host (ui/host_guard.py)
        log.info("answering only to the hosts in %s", host_guard.HOSTS_ENV)
    if settings.cookie_secret is not None:  # KVLAB_COOKIE_SECRET(_FILE): every replica signs cookies alike
        environ["STREAMLIT_SERVER_COOKIE_SECRET"] = settings.cookie_secret
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
