"""A Streamlit protocol client: one learner's session without a browser, for the load benchmarks and tests.

It speaks the app's own protocol (protobuf BackMsg / ForwardMsg over ``/_stcore/stream``, the messages a
browser sends and receives): ask for a page run with some widget values, wait until that run has finished,
and read what it showed. It connects to a port on 127.0.0.1 only, optionally under another ``Host`` (a
virtual host on nginx, as a browser on the classroom's DNS name sends it; ``Origin`` follows, since
Streamlit accepts a websocket only when the two agree), sends the cookies it was given and keeps those the
handshake sets (a load balancer's sticky-session cookie), so a reconnect is routed like a browser's.

When a requested run has finished (``ends_request``): every script run starts with a ``new_session``
message and ends with one ``script_finished``, whose status says how it ended. ``FINISHED_EARLY_FOR_RERUN``
means the run was cut short (``st.rerun()``, a newer request) and another run follows, so the request is
not done and what the cut run showed is superseded. A full-app request is done at the first
``FINISHED_SUCCESSFULLY`` or ``FINISHED_WITH_COMPILE_ERROR`` after a ``new_session``: only that status
ends a full run (after a compile error, the client also reads the exception, which Streamlit sends right
after the finish). ``FINISHED_FRAGMENT_RUN_SUCCESSFULLY`` ends one fragment's run, which ends a fragment
request but not a full one. ``session_status_changed`` cannot tell: its "not running" also comes between
the runs of an ``st.rerun()`` chain.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import websockets
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.WidgetStates_pb2 import WidgetState

from bench.app_server import HOST, UPSTREAM_HEADER

FULL_RUN_ENDS = frozenset({ForwardMsg.FINISHED_SUCCESSFULLY, ForwardMsg.FINISHED_WITH_COMPILE_ERROR})
FRAGMENT_RUN_ENDS = FULL_RUN_ENDS | {ForwardMsg.FINISHED_FRAGMENT_RUN_SUCCESSFULLY}
SCRIPT_FINISHED_FIELD = ForwardMsg.DESCRIPTOR.fields_by_name["script_finished"].number
SIDEBAR = 1  # delta_path root of the sidebar (0 is the main area)
MAX_MESSAGE_BYTES = 2**27  # Streamlit's server.maxMessageSize is in MB; charts and tables can be large

_URL = re.compile(r"http://127\.0\.0\.1:(\d{1,5})/?")
_HOST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?(?::\d{1,5})?")
_COOKIE_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # an RFC 6265 token
_COOKIE_VALUE = re.compile(r"[\x21\x23-\x2b\x2d-\x3a\x3c-\x5b\x5d-\x7e]*")  # cookie-octets


def ends_request(status: int, fragment_request: bool = False) -> bool:
    """Whether a ``script_finished`` with ``status`` ends a request's runs (see the module docstring)."""
    return status in (FRAGMENT_RUN_ENDS if fragment_request else FULL_RUN_ENDS)


@dataclass
class PageRun:
    """What the last run of one request showed (after any ``st.rerun()``), and how long the request took."""

    seconds: float = 0.0  # from sending the request to the script_finished that ended it
    runs: int = 0  # script runs the request took: 1, plus one for each st.rerun()
    widgets: list[tuple[str, Any]] = field(default_factory=list)  # (element kind, proto) of each widget
    metrics: dict[str, str] = field(default_factory=dict)  # label -> displayed value
    texts: list[str] = field(default_factory=list)  # markdown (captions too) and progress-bar texts, in order
    sidebar_texts: list[str] = field(default_factory=list)
    alerts: list[tuple[str, str]] = field(default_factory=list)  # (ERROR / WARNING / INFO / SUCCESS, body)
    errors: list[str] = field(default_factory=list)  # exceptions, st.error bodies, compile errors, short
    exceptions: list[str] = field(default_factory=list)  # exception messages in full
    sidebar_tables: list[list[dict[str, Any]]] = field(default_factory=list)  # st.dataframe rows, decoded
    fragments: list[str] = field(default_factory=list)  # ids of the fragments that sent elements
    widget_fragments: dict[str, str] = field(default_factory=dict)  # widget id -> id of the fragment it is in
    expanders: dict[str, Any] = field(default_factory=dict)  # label -> Expandable block proto (keyed ones have an id)
    auto_reruns: dict[str, float] = field(default_factory=dict)  # fragment id -> seconds (st.fragment(run_every=))
    charts: list[dict[str, Any]] = field(default_factory=list)  # plotly figures (their JSON spec), in order
    messages: int = 0  # ForwardMsgs the server sent for the last run (elements, blocks, session events)
    message_bytes: int = 0  # their serialized size

    def fragment_of(self, proto: Any) -> str:
        """The fragment a widget was drawn in ("" outside any): a browser moving it asks for that fragment's run."""
        return self.widget_fragments.get(proto.id, "")

    @property
    def sliders(self) -> dict[str, Any]:
        """Sliders and select sliders by label."""
        return {proto.label: proto for kind, proto in self.widgets if kind == "slider"}

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


class StreamlitSession:
    """One Streamlit session over a websocket: ``async with StreamlitSession(url) as s: await s.run(route)``.

    ``url`` is the server's (or the balancer's) ``http://127.0.0.1:PORT``; ``host`` the Host header to send
    instead of ``127.0.0.1:PORT`` (the socket still goes to 127.0.0.1); ``cookies`` name -> value sent on
    the handshake. After connecting, ``cookies`` also holds what the handshake's Set-Cookie headers set,
    ``upstream`` the replica the loopback nginx names (bench/app_server.py's UPSTREAM_HEADER), and ``pages``
    the app's navigation (title -> URL path) once a run has sent it. After a TimeoutError the session's
    later messages belong to the run that timed out: close it and open a new one.
    """

    def __init__(
        self,
        url: str,
        host: str | None = None,
        cookies: Mapping[str, str] | None = None,
        timeout_s: float = 60.0,
    ) -> None:
        match = _URL.fullmatch(url)
        if not match or not 0 < int(match.group(1)) < 65536:
            raise ValueError(
                f"url {url!r} must be a loopback address http://127.0.0.1:PORT (this client dials no other)"
            )
        if host is not None and not _HOST.fullmatch(host):
            raise ValueError(f"host {host!r} must be a host name with an optional :PORT, e.g. 'kvlab.test:8080'")
        for name, value in (cookies or {}).items():
            if not _COOKIE_NAME.fullmatch(name) or not _COOKIE_VALUE.fullmatch(value):
                raise ValueError(
                    f"cookie {name!r}={value!r}: names are RFC 6265 tokens, values cookie-octets (no space, quote, "
                    "comma, semicolon or backslash)"
                )
        if not timeout_s > 0:
            raise ValueError(f"timeout_s={timeout_s!r} must be a positive number of seconds")
        self.port = int(match.group(1))
        self.host = host or f"{HOST}:{self.port}"
        self.cookies: dict[str, str] = dict(cookies or {})
        self.timeout_s = timeout_s
        self.upstream: str | None = None  # "127.0.0.1:PORT" of the replica that accepted the websocket
        self.pages: dict[str, str] = {}  # navigation title -> URL path
        self._ws: Any = None
        self.kept: dict[str, WidgetState] = {}  # sent with every run, as a browser resends a widget it holds

    def keep(self, state: WidgetState) -> None:
        """Send ``state`` with every later run (an opened sidebar expander: a browser keeps it open)."""
        self.kept[state.id] = state

    async def __aenter__(self) -> StreamlitSession:
        headers = {"Origin": f"http://{self.host}"}
        if self.cookies:
            headers["Cookie"] = "; ".join(f"{name}={value}" for name, value in self.cookies.items())
        self._ws = await websockets.connect(
            f"ws://{self.host}/_stcore/stream",
            host=HOST,  # the URL's name is only the Host header; the socket goes to loopback
            port=self.port,
            subprotocols=["streamlit"],
            additional_headers=headers,
            max_size=MAX_MESSAGE_BYTES,
            open_timeout=self.timeout_s,
        )
        response = self._ws.response.headers
        tried = response.get(UPSTREAM_HEADER)  # nginx lists every replica it tried: "dead:port, live:port"
        self.upstream = tried.split(",")[-1].strip() if tried else None
        for header in response.get_all("Set-Cookie"):
            name, sep, value = header.split(";", 1)[0].partition("=")
            if sep and name.strip():
                self.cookies[name.strip()] = value.strip()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._ws.close()

    async def run(
        self, route: str, widgets: Iterable[WidgetState] = (), fragment_id: str = "", auto_rerun: bool = False
    ) -> PageRun:
        """Run page ``route`` (its URL path, "" for the default page) with these widget values, as a browser
        does after a widget changes (widgets not given take their defaults); wait until the run has finished.

        ``fragment_id`` (from ``PageRun.fragments``) runs only that fragment, as a widget inside it does;
        with ``auto_rerun`` it is the timer's run of a polling fragment (``PageRun.auto_reruns``: the browser
        re-runs each such fragment every so many seconds, flagged as an automatic re-run)."""
        msg = BackMsg()
        msg.rerun_script.page_name = route
        given = list(widgets)
        named = {w.id for w in given}
        msg.rerun_script.widget_states.widgets.extend([w for i, w in self.kept.items() if i not in named] + given)
        if fragment_id:
            msg.rerun_script.fragment_id = fragment_id
        msg.rerun_script.is_auto_rerun = auto_rerun
        start = time.perf_counter()
        await self._ws.send(msg.SerializeToString())
        shown, started, compile_error = PageRun(), False, False
        while True:
            left = start + self.timeout_s - time.perf_counter()
            if left <= 0:
                raise TimeoutError(f"the run of {route!r} did not finish within {self.timeout_s:.0f} s")
            fwd, raw = ForwardMsg(), await _recv(self._ws, left)
            fwd.ParseFromString(raw)
            kind = fwd.WhichOneof("type")
            if kind != "new_session":  # counted in the run it belongs to (a new_session starts a new PageRun)
                shown.messages, shown.message_bytes = shown.messages + 1, shown.message_bytes + len(raw)
            if kind == "new_session":  # a run starts: it supersedes what an earlier run of the request showed
                shown, started = PageRun(runs=shown.runs + 1), True
            elif kind == "auto_rerun":
                shown.auto_reruns[fwd.auto_rerun.fragment_id] = fwd.auto_rerun.interval
            elif kind == "navigation":
                self.pages = {p.page_name: p.url_pathname for p in fwd.navigation.app_pages}
            elif kind == "delta" and fwd.delta.WhichOneof("type") == "new_element":
                if fwd.delta.fragment_id and fwd.delta.fragment_id not in shown.fragments:
                    shown.fragments.append(fwd.delta.fragment_id)
                in_sidebar = bool(fwd.metadata.delta_path) and fwd.metadata.delta_path[0] == SIDEBAR
                collect(fwd.delta.new_element, in_sidebar, shown)
                if (
                    fwd.delta.fragment_id
                    and shown.widgets
                    and shown.widgets[-1][1] is _element_proto(fwd.delta.new_element)
                ):
                    shown.widget_fragments[shown.widgets[-1][1].id] = fwd.delta.fragment_id
            elif kind == "delta" and fwd.delta.WhichOneof("type") == "add_block":
                block = fwd.delta.add_block
                if block.WhichOneof("type") == "expandable":
                    shown.expanders[block.expandable.label] = block.expandable
            elif kind == "session_event" and fwd.session_event.WhichOneof("type") == "script_compilation_exception":
                exc = fwd.session_event.script_compilation_exception
                shown.errors.append(f"compile error: {exc.type} {exc.message[:200]}".strip())
                shown.exceptions.append(exc.message)
                if compile_error:
                    return shown
            elif kind == "page_not_found":
                shown.errors.append(f"page not found: {fwd.page_not_found.page_name!r}")
            elif kind == "script_finished" and started and ends_request(fwd.script_finished, bool(fragment_id)):
                shown.seconds = time.perf_counter() - start
                if fwd.script_finished != ForwardMsg.FINISHED_WITH_COMPILE_ERROR:
                    return shown
                compile_error = True  # Streamlit sends the exception right after the finish: read it too


async def _recv(ws: Any, timeout_s: float) -> bytes:
    data = await asyncio.wait_for(ws.recv(), timeout=timeout_s)
    if isinstance(data, str):
        raise TypeError("the server sent a text frame; Streamlit sends binary protobufs")
    return data


def collect(element: Any, in_sidebar: bool, shown: PageRun) -> None:
    """Sort one element into ``shown``: widgets (every element with an id and a label), texts, alerts,
    metrics, errors and the sidebar's tables."""
    kind = element.WhichOneof("type")
    proto = getattr(element, kind) if kind else None
    fields = proto.DESCRIPTOR.fields_by_name if proto is not None else {}
    if "id" in fields and "label" in fields:
        shown.widgets.append((kind, proto))
    elif kind in ("markdown", "progress"):
        text = proto.body if kind == "markdown" else proto.text
        shown.texts.append(text)
        if in_sidebar:
            shown.sidebar_texts.append(text)
    elif kind == "metric":
        shown.metrics[proto.label] = proto.body
    elif kind == "alert":
        fmt = proto.DESCRIPTOR.fields_by_name["format"].enum_type.values_by_number[proto.format].name
        shown.alerts.append((fmt, proto.body))
        if fmt == "ERROR":
            shown.errors.append(f"st.error: {proto.body[:200]}")
    elif kind == "exception":
        shown.errors.append(f"exception: {proto.message[:200]}")
        shown.exceptions.append(proto.message)
    elif kind == "plotly_chart":
        shown.charts.append(json.loads(proto.spec) if proto.spec else {})
    elif kind == "dataframe" and in_sidebar:
        shown.sidebar_tables.append(arrow_rows(proto.arrow_data.data))


def _element_proto(element: Any) -> Any:
    kind = element.WhichOneof("type")
    return getattr(element, kind) if kind else None


def arrow_rows(data: bytes) -> list[dict[str, Any]]:
    """Rows of an Arrow IPC stream (how st.dataframe ships its data)."""
    import pyarrow as pa

    if not data:
        return []
    return pa.ipc.open_stream(data).read_all().to_pylist()


# --- Widget values, as the browser sends them --------------------------------------------------------------


def slider_value(proto: Any, index_or_value: float) -> WidgetState:
    """A slider's numeric value, or a select slider's option by index (sent as the option's text)."""
    state = WidgetState(id=proto.id)
    if proto.options:
        index = int(index_or_value)
        if not 0 <= index < len(proto.options):
            raise ValueError(
                f"option index {index_or_value!r} is outside 0..{len(proto.options) - 1} of {proto.label!r}"
            )
        state.string_array_value.data.append(proto.options[index])
    else:
        state.double_array_value.data.append(float(index_or_value))
    return state


def slider_position(proto: Any) -> tuple[float, float, float, float]:
    """(current, low, high, step) of a slider on the scale ``slider_value`` takes (option index for select sliders)."""
    if proto.options:  # the server sends a select slider's current option as text (raw_value) when it sets it
        if proto.raw_value and proto.raw_value[0] in proto.options:
            current = float(list(proto.options).index(proto.raw_value[0]))
        else:
            current = proto.value[0] if proto.value else proto.default[0]
        return current, 0.0, float(len(proto.options) - 1), 1.0
    current = proto.value[0] if proto.value else proto.default[0]
    return current, proto.min, proto.max, proto.step


def text_value(proto: Any, value: str) -> WidgetState:
    """A text input's value."""
    return WidgetState(id=proto.id, string_value=value)


def number_value(proto: Any, value: float) -> WidgetState:
    """A number input's value."""
    return WidgetState(id=proto.id, double_value=float(value))


def opened(expander: Any) -> WidgetState:
    """An expander opened, as the browser sends it for one with a key and ``on_change`` (its contents are made
    only while it is open: ui.chart_view.chart_table); ValueError for one that does not report its state."""
    if not expander.id:
        raise ValueError(f"expander {expander.label!r} has no key: the server does not track whether it is open")
    return WidgetState(id=expander.id, bool_value=True)


def click(proto: Any) -> WidgetState:
    """A button press (form submit buttons too)."""
    return WidgetState(id=proto.id, trigger_value=True)


def choose(proto: Any, option: str) -> WidgetState:
    """A radio or select box choice, sent as its option text (how this Streamlit version's frontend sends them;
    a select box's options arrive formatted)."""
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
