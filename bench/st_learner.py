"""A Streamlit protocol client that behaves like a learner's browser behind the load balancer.

bench/st_client.py measures one server; this one goes through nginx the way a browser does: it
connects to the balancer's loopback port under a site name (``Host`` / ``Origin`` ``kvlab.test:PORT``, as
a browser on a classroom's DNS name sends them; Streamlit accepts the websocket only when they agree
through the proxy), keeps the balancer's ``kvlab_route`` cookie so a reconnect is routed like the
browser's, reads which replica answered (the loopback config's ``X-KVLab-Upstream`` header), and sees a
page as its widgets: text inputs, form buttons and radios by label, alerts, captions, progress bars and
the sidebar's tables (Arrow data decoded). Sign-in forms and ``st.rerun()`` are followed to the end of
the last run. Only 127.0.0.1 is ever contacted.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import websockets
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.WidgetStates_pb2 import WidgetState

from bench.app_server import HOST, UPSTREAM_HEADER

SITE_NAME = "kvlab.test"  # the name the learners' browsers use for the balancer; only its 127.0.0.1 port is dialled
ROUTE_COOKIE = "kvlab_route"  # deploy/nginx.conf's sticky-session cookie
SIDEBAR = 1  # delta_path root of the sidebar (0 is the main area)


@dataclass
class Shown:
    """What one page run (after any st.rerun) showed."""

    seconds: float = 0.0
    widgets: list[tuple[str, Any]] = field(default_factory=list)  # (kind, proto) of text_input, button, radio
    texts: list[str] = field(default_factory=list)  # markdown, captions and progress-bar texts, in order
    sidebar_texts: list[str] = field(default_factory=list)
    alerts: list[tuple[str, str]] = field(default_factory=list)  # (ERROR / WARNING / INFO / SUCCESS, body)
    errors: list[str] = field(default_factory=list)  # exceptions and st.error bodies
    sidebar_tables: list[list[dict[str, Any]]] = field(default_factory=list)

    def widget(self, kind: str, label_prefix: str) -> Any:
        """The first widget of ``kind`` whose label starts with ``label_prefix``; LookupError naming what exists."""
        for k, proto in self.widgets:
            if k == kind and proto.label.startswith(label_prefix):
                return proto
        labels = [p.label for k, p in self.widgets if k == kind]
        raise LookupError(f"no {kind} labelled {label_prefix!r} on the page; found {labels}")

    def keyed(self, kind: str, key_prefix: str) -> list[Any]:
        """Widgets of ``kind`` whose user key starts with ``key_prefix`` (Streamlit ids end in ``-KEY``)."""
        return [p for k, p in self.widgets if k == kind and p.id.rsplit("-", 1)[-1].startswith(key_prefix)]


class LearnerSession:
    """One browser session through the balancer (``async with LearnerSession(port, cookie) as s``)."""

    def __init__(self, balancer_port: int, cookie: str | None = None, timeout_s: float = 60.0) -> None:
        self.port, self.cookie, self.timeout_s = balancer_port, cookie, timeout_s
        self.upstream: str | None = None  # "127.0.0.1:PORT" of the replica that accepted the websocket
        self.pages: dict[str, str] = {}  # navigation title -> URL path, from the app's navigation message
        self._ws: Any = None

    async def __aenter__(self) -> LearnerSession:
        site = f"{SITE_NAME}:{self.port}"
        headers = {"Origin": f"http://{site}"}
        if self.cookie:
            headers["Cookie"] = f"{ROUTE_COOKIE}={self.cookie}"
        self._ws = await websockets.connect(
            f"ws://{site}/_stcore/stream",
            host=HOST,  # the name is only the Host header; the socket goes to loopback
            port=self.port,
            subprotocols=["streamlit"],
            additional_headers=headers,
            max_size=2**27,
            open_timeout=self.timeout_s,
        )
        response = self._ws.response.headers
        tried = response.get(UPSTREAM_HEADER)  # nginx lists every replica it tried: "dead:port, live:port"
        self.upstream = tried.split(",")[-1].strip() if tried else None
        for cookie in response.get_all("Set-Cookie"):
            name, _, rest = cookie.partition("=")
            if name.strip() == ROUTE_COOKIE:
                self.cookie = rest.split(";", 1)[0]
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._ws.close()

    async def run(self, route: str, widgets: list[WidgetState] = ()) -> Shown:
        """Run page ``route`` (its URL path, "" for the default page) with these widget values; wait for
        the last script_finished (a run ended by st.rerun() is followed by the new one)."""
        msg = BackMsg()
        msg.rerun_script.page_name = route
        msg.rerun_script.widget_states.widgets.extend(widgets)
        start = time.perf_counter()
        await self._ws.send(msg.SerializeToString())
        shown = Shown()
        while True:
            left = start + self.timeout_s - time.perf_counter()
            if left <= 0:
                raise TimeoutError(f"no script_finished within {self.timeout_s:.0f} s on {route!r}")
            data = await asyncio.wait_for(self._ws.recv(), timeout=left)
            if isinstance(data, str):
                raise TypeError("the server sent a text frame; Streamlit sends binary protobufs")
            fwd = ForwardMsg()
            fwd.ParseFromString(data)
            kind = fwd.WhichOneof("type")
            if kind == "navigation":
                self.pages = {p.page_name: p.url_pathname for p in fwd.navigation.app_pages}
            elif kind == "delta" and fwd.delta.WhichOneof("type") == "new_element":
                in_sidebar = bool(fwd.metadata.delta_path) and fwd.metadata.delta_path[0] == SIDEBAR
                collect(fwd.delta.new_element, in_sidebar, shown)
            elif kind == "script_finished":
                if fwd.script_finished == ForwardMsg.FINISHED_EARLY_FOR_RERUN:
                    shown = Shown()  # st.rerun(): only the run that follows counts
                    continue
                shown.seconds = time.perf_counter() - start
                return shown


def collect(element: Any, in_sidebar: bool, shown: Shown) -> None:
    """Sort one element into ``shown``."""
    kind = element.WhichOneof("type")
    if kind in ("text_input", "button", "radio"):
        shown.widgets.append((kind, getattr(element, kind)))
    elif kind in ("markdown", "progress"):
        text = element.markdown.body if kind == "markdown" else element.progress.text
        shown.texts.append(text)
        if in_sidebar:
            shown.sidebar_texts.append(text)
    elif kind == "alert":
        fmt = element.alert.DESCRIPTOR.fields_by_name["format"].enum_type.values_by_number[element.alert.format].name
        shown.alerts.append((fmt, element.alert.body))
        if fmt == "ERROR":
            shown.errors.append(f"st.error: {element.alert.body[:200]}")
    elif kind == "exception":
        shown.errors.append(f"exception: {element.exception.message[:200]}")
    elif kind == "dataframe" and in_sidebar:
        shown.sidebar_tables.append(arrow_rows(element.dataframe.arrow_data.data))


def arrow_rows(data: bytes) -> list[dict[str, Any]]:
    """Rows of an Arrow IPC stream (how st.dataframe ships its data)."""
    import pyarrow as pa

    if not data:
        return []
    return pa.ipc.open_stream(data).read_all().to_pylist()


def text_value(proto: Any, value: str) -> WidgetState:
    """A text input's value."""
    return WidgetState(id=proto.id, string_value=value)


def click(proto: Any) -> WidgetState:
    """A button press (form submit buttons too)."""
    return WidgetState(id=proto.id, trigger_value=True)


def choose(proto: Any, option: str) -> WidgetState:
    """A radio choice, sent as its option text (how this Streamlit version's frontend sends radios)."""
    if option not in proto.options:
        raise ValueError(f"option {option!r} is not one of {list(proto.options)}")
    return WidgetState(id=proto.id, string_value=option)


def radio_value(proto: Any) -> str | None:
    """The choice the server told the browser to show (a restored answer), else the default, else None."""
    if proto.set_value:
        return proto.raw_value or None
    if proto.HasField("default"):
        return proto.options[proto.default]
    return None
