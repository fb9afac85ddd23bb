"""The app's Prometheus metrics, served on a side port an operator scrapes (off unless KVLAB_METRICS_PORT is set).

One process serves every learner's session (Streamlit runs them as threads), so these counters are the
process's: no learner's state, only counts. `ui.serve` starts the endpoint once per process, before Streamlit
(:func:`start_server`); it listens on 127.0.0.1 unless KVLAB_METRICS_ADDRESS says otherwise, never on the app's
port, and deploy/nginx.conf does not proxy it. What each metric means: docs/OPERATIONS.md.

- ``kvlab_sessions``: browser sessions connected to this process now (open websockets; :class:`SessionCount`);
- ``kvlab_page_runs_total{page}`` and ``kvlab_page_run_seconds{page}``: full runs of each page and their time
  (``ui.router.run_page``), ``kvlab_page_failures_total{page}``: runs that ended in the page's error message;
- ``kvlab_database_errors_total``: progress-database failures, counted from the store's ``db_error`` events
  (:class:`EventCounter` on the app's logger; progress/ itself knows nothing of metrics);
- ``kvlab_signin_failures_total{kind}``: refused sign-ins (``learner``) and teacher keys (``teacher``);
- ``kvlab_playground_engines``, ``_running``, ``_waiting``, ``kvlab_playground_kv_bytes``: the playground's
  engine pool, read when scraped (:func:`watch_pool`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, start_http_server

from kvlab import settings
from ui.logs import LOGGER

if TYPE_CHECKING:
    from lessons.labs.playground import EnginePool

PORT_ENV, ADDRESS_ENV = settings.METRICS_PORT, settings.METRICS_ADDRESS
DEFAULT_ADDRESS = settings.LOOPBACK
DB_ERROR_EVENT = "db_error"
# Page runs take from a few ms (a sidebar click) to seconds (an engine run on the playground).
PAGE_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

SESSIONS = Gauge("kvlab_sessions", "Browser sessions connected to this app process (open websockets)")
PAGE_RUNS = Counter("kvlab_page_runs", "Full runs of a page in this process", ["page"])
PAGE_FAILURES = Counter("kvlab_page_failures", "Page runs that raised and showed the page's error message", ["page"])
PAGE_SECONDS = Histogram("kvlab_page_run_seconds", "Time of a page's full run", ["page"], buckets=PAGE_BUCKETS)
DATABASE_ERRORS = Counter("kvlab_database_errors", "Progress-database failures (the store's db_error events)")
SIGNIN_FAILURES = Counter("kvlab_signin_failures", "Refused sign-ins: learner passphrases, teacher keys", ["kind"])
POOL_ENGINES = Gauge("kvlab_playground_engines", "Playground engines held by the pool (one per learner at most)")
POOL_RUNNING = Gauge("kvlab_playground_engines_running", "Playground engines running a learner's generation now")
POOL_WAITING = Gauge("kvlab_playground_waiting", "Learners waiting for room in the playground's pool")
POOL_BYTES = Gauge("kvlab_playground_kv_bytes", "KV-cache bytes held by the playground's engines")


@dataclass(frozen=True)
class MetricsSettings:
    """Where the endpoint listens: ``port`` None when it is off (the default)."""

    port: int | None
    address: str = DEFAULT_ADDRESS


def metrics_settings(env: Mapping[str, str] | None = None) -> MetricsSettings:
    """KVLAB_METRICS_PORT (1-65535; unset or empty: no endpoint) and KVLAB_METRICS_ADDRESS (an IP address;
    unset or empty: 127.0.0.1), parsed by kvlab.settings; SettingsError (a ValueError) names a bad one."""
    env = os.environ if env is None else env
    return MetricsSettings(settings.metrics_port(env), settings.metrics_address(env))


def start_server(endpoint: MetricsSettings) -> Any:
    """Serve /metrics in a daemon thread when a port is set (once per process: `ui.serve` calls it before
    Streamlit starts); returns the HTTP server, or None when metrics are off. OSError when the port is taken."""
    if endpoint.port is None:
        return None
    server, _thread = start_http_server(endpoint.port, addr=endpoint.address, registry=REGISTRY)
    return server


@contextlib.contextmanager
def page_run(page: str) -> Iterator[None]:
    """Count one full run of ``page`` and time it (also a run that stops early: st.stop, st.rerun)."""
    started = time.perf_counter()
    try:
        yield
    finally:
        with contextlib.suppress(Exception):  # a metric never breaks a page
            PAGE_RUNS.labels(page).inc()
            PAGE_SECONDS.labels(page).observe(time.perf_counter() - started)


def page_failed(page: str) -> None:
    """Count a page run that raised (the learner saw the page's error message)."""
    with contextlib.suppress(Exception):
        PAGE_FAILURES.labels(page).inc()


def signin_failed(kind: str) -> None:
    """Count a refused sign-in: ``learner`` (a passphrase) or ``teacher`` (the teacher key)."""
    with contextlib.suppress(Exception):
        SIGNIN_FAILURES.labels(kind).inc()


def watch_pool(pool: EnginePool) -> None:
    """Read the playground's gauges from ``pool`` whenever they are scraped (the pool of this process; a
    pool that is gone reads as empty)."""
    ref = weakref.ref(pool)

    def read(attr: str) -> float:
        current = ref()
        return float(getattr(current.stats(), attr)) if current is not None else 0.0

    POOL_ENGINES.set_function(lambda: read("engines"))
    POOL_RUNNING.set_function(lambda: read("running"))
    POOL_WAITING.set_function(lambda: read("waiting"))
    POOL_BYTES.set_function(lambda: read("used_bytes"))


class EventCounter(logging.Handler):
    """Counts the store's ``db_error`` events into ``kvlab_database_errors_total`` (installed by `install`)."""

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "event", None) == DB_ERROR_EVENT:
            DATABASE_ERRORS.inc()

    def handleError(self, record: logging.LogRecord) -> None:
        pass


def install_event_counter() -> None:
    """Attach one EventCounter to the app's logger (a second call adds none)."""
    logger = logging.getLogger(LOGGER)
    if not any(isinstance(h, EventCounter) for h in logger.handlers):
        logger.addHandler(EventCounter())


class SessionCount:
    """ASGI middleware: ``kvlab_sessions`` goes up when a browser's websocket opens and down when it ends."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            return await self.app(scope, receive, send)
        SESSIONS.inc()
        try:
            return await self.app(scope, receive, send)
        finally:
            SESSIONS.dec()


__all__ = [
    "ADDRESS_ENV",
    "DATABASE_ERRORS",
    "PAGE_RUNS",
    "PAGE_SECONDS",
    "PORT_ENV",
    "SESSIONS",
    "SIGNIN_FAILURES",
    "EventCounter",
    "MetricsSettings",
    "SessionCount",
    "install_event_counter",
    "metrics_settings",
    "page_failed",
    "page_run",
    "signin_failed",
    "start_server",
    "watch_pool",
]
