"""The app's own Host check: with KVLAB_ALLOWED_HOSTS set, a request or websocket sent under any other Host is
refused before Streamlit sees it (a name an attacker rebound to this server's address: DNS rebinding).

KVLAB_ALLOWED_HOSTS is a list of host names or addresses separated by spaces or commas, compared without
the port and case-insensitively (e.g. "kvlab.school.example 10.0.0.5"). Unset or empty: no check (a
laptop's `./run.sh`). nginx checks the same in a deployment (deploy/nginx.conf, KVLAB_SERVER_NAME); this is
the replicas' own line, also for a port opened past the proxy. The health check is exempt: it reveals
nothing and the balancer asks it under its own upstream name. `ui.serve` installs it (`install`) into
Streamlit's middleware stack before the server starts.
"""

from __future__ import annotations

import os
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kvlab.settings import host_names

HOSTS_ENV = "KVLAB_ALLOWED_HOSTS"
EXEMPT_PATHS = ("/_stcore/health", "/healthz")  # Streamlit's and ui/health.py's (with the database)
REFUSED = b"This server does not answer to that host name."
_PORT = re.compile(r":\d{1,5}$")

Scope = dict[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]


def allowed_hosts(env: Mapping[str, str] | None = None) -> frozenset[str]:
    """The host names KVLAB_ALLOWED_HOSTS lists, lower-cased (empty: no check)."""
    return host_names((os.environ if env is None else env).get(HOSTS_ENV, ""))


def host_of(header: str) -> str:
    """A Host header's name without its port, lower-cased ("[::1]:8501" -> "[::1]")."""
    return _PORT.sub("", header.strip()).lower()


class HostCheck:
    """ASGI middleware: HTTP requests under another Host get 421, websockets are closed before they open."""

    def __init__(self, app: ASGIApp, hosts: frozenset[str]) -> None:
        self.app, self.hosts = app, hosts

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket") or scope.get("path") in EXEMPT_PATHS:
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        if host_of(headers.get(b"host", b"").decode("latin-1")) in self.hosts:
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})  # before accept: the handshake gets 403
            return None
        await send(
            {
                "type": "http.response.start",
                "status": 421,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", b"%d" % len(REFUSED))],
            }
        )
        await send({"type": "http.response.body", "body": REFUSED})
        return None


def install(env: Mapping[str, str] | None = None) -> bool:
    """Put HostCheck first in Streamlit's middleware when KVLAB_ALLOWED_HOSTS is set; True when installed."""
    hosts = allowed_hosts(env)
    if not hosts:
        return False
    from starlette.middleware import Middleware
    from streamlit.web.server.starlette import starlette_app

    original = starlette_app.create_streamlit_middleware
    if getattr(original, "kvlab_hosts", None) is not None:
        return False

    def create_streamlit_middleware() -> list[Any]:
        return [Middleware(HostCheck, hosts=hosts), *original()]

    create_streamlit_middleware.kvlab_hosts = hosts  # type: ignore[attr-defined]
    starlette_app.create_streamlit_middleware = create_streamlit_middleware
    return True


__all__ = ["EXEMPT_PATHS", "HOSTS_ENV", "HostCheck", "allowed_hosts", "host_of", "install"]
