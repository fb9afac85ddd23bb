"""The app's health check with its database: ``GET /healthz`` answers 200 ``ok`` only when Streamlit is ready for
browsers and the progress database answers a trivial query, else 503 with the reason (never a password).

Streamlit's own ``/_stcore/health`` says only that the web server runs: a replica whose PostgreSQL is gone
still answers it, and the balancer keeps sending learners whose saves then fail. The balancer (compose.yaml,
deploy/, a Kubernetes readiness probe) asks ``/healthz`` instead. The check opens the database as the app does
(``progress.ProgressStore``, kept for the next check: one connection pool per process) and runs ``SELECT 1``
within ``TIMEOUT_S`` seconds, in a worker thread so a hanging database never blocks the server's event loop.
`ui.serve` installs :class:`HealthCheck` into Streamlit's middleware; the Host check lets it through like
Streamlit's own health check (ui/host_guard.py).
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import sqlalchemy as sa
from sqlalchemy.exc import SQLAlchemyError

from progress import ProgressStore, ProgressStoreError, database_url
from progress.store import explain_failure

HEALTH_PATH = "/healthz"
TIMEOUT_S = 5.0


class DatabaseCheck:
    """Whether the progress database answers now: None when it does, else the reason (no password in it)."""

    def __init__(self, url: Callable[[], str] = database_url) -> None:
        self.url = url
        self.stores: dict[str, ProgressStore] = {}
        self.lock = threading.Lock()

    def store(self, url: str) -> ProgressStore:
        """The store for ``url``, opened on first use (ProgressStoreError when that fails; tried again next time)."""
        with self.lock:
            if url not in self.stores:
                self.stores[url] = ProgressStore(url)
            return self.stores[url]

    def __call__(self) -> str | None:
        try:
            store = self.store(self.url())
        except OSError as exc:
            return f"cannot create the progress folder ({exc.strerror or exc}); set KVLAB_DATA_DIR"
        except ProgressStoreError as exc:
            return str(exc)
        try:
            with store.engine.connect() as conn:
                conn.execute(sa.text("SELECT 1")).scalar_one()
        except SQLAlchemyError as exc:
            return explain_failure(exc, store.describe())
        return None


async def streamlit_ready() -> str | None:
    """None when Streamlit's runtime accepts browsers, else why not."""
    from streamlit.runtime import Runtime

    if not Runtime.exists():
        return "the Streamlit runtime has not started"
    ok, message = await Runtime.instance().is_ready_for_browser_connection
    return None if ok else f"Streamlit is not ready ({message})"


async def health(
    check: Callable[[], str | None],
    timeout_s: float = TIMEOUT_S,
    ready: Callable[[], Awaitable[str | None]] = streamlit_ready,
) -> tuple[int, str]:
    """(HTTP status, body): 200 "ok", or 503 with the first reason the app cannot serve learners well."""
    reason = await ready()
    if reason is None:
        reason = f"the progress database did not answer within {timeout_s:g} s"
        with anyio.move_on_after(timeout_s):
            failure = await anyio.to_thread.run_sync(check, abandon_on_cancel=True)
            reason = None if failure is None else f"progress database: {failure}"
    return (200, "ok") if reason is None else (503, reason)


class HealthCheck:
    """ASGI middleware answering GET and HEAD on HEALTH_PATH itself; every other request goes on to Streamlit."""

    def __init__(self, app: Any, check: Callable[[], str | None] | None = None) -> None:
        self.app = app
        self.check = DatabaseCheck() if check is None else check

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("path") != HEALTH_PATH:
            return await self.app(scope, receive, send)
        if scope.get("method") not in ("GET", "HEAD"):
            status, text = 405, "use GET or HEAD"
        else:
            status, text = await health(self.check)
        body = text.encode("utf-8")
        headers = [
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"content-length", b"%d" % len(body)),
            (b"cache-control", b"no-store"),
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": b"" if scope.get("method") == "HEAD" else body})
        return None


__all__ = ["HEALTH_PATH", "TIMEOUT_S", "DatabaseCheck", "HealthCheck", "health", "streamlit_ready"]
