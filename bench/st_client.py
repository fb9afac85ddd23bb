"""A minimal Streamlit websocket client: one learner session without a browser.

It speaks the app's own protocol (protobuf BackMsg / ForwardMsg over ``/_stcore/stream``, the same
messages the browser sends): ask for a page run, read the elements the run sends back, send a new
widget value, time until ``script_finished``. The classroom load check uses it to measure the *server*
with many sessions while no browser rendering competes for the same CPUs. Loopback only.

``RUNS_FINISHED_JS`` brings the same protocol knowledge into a real browser: an init script that counts
the finished script runs a page receives, read off the websocket frames, for drivers that must know when
the re-run a key press caused has finished (see its comment for why the DOM cannot tell).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import websockets
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.WidgetStates_pb2 import WidgetState

_FINISHED = ForwardMsg.DESCRIPTOR.fields_by_name["script_finished"]
# A full-app run that ran to its end (a run cut short by a newer rerun, or a fragment run, is not one).
_DONE = [_FINISHED.enum_type.values_by_name[n].number for n in ("FINISHED_SUCCESSFULLY", "FINISHED_WITH_COMPILE_ERROR")]

# `window.__kvFinished` counts the ForwardMsgs with a finished `script_finished` status that reach the page,
# found by walking each frame's top-level protobuf fields (the field number comes from the installed
# Streamlit's ForwardMsg, so it cannot drift). Why not watch stApp's `data-test-script-state` attribute
# (bench/app_server.py's RUN_COUNTER_JS): when a busy server's whole run reaches the browser in one burst,
# React batches the state updates of all its messages into one render, the attribute goes straight from
# "notRunning" to "notRunning", and a run that really happened is never seen: in bench.classroom with 8
# Chromium sessions on 2 cores, 3-5 of 96 slider moves looked like lost commits that way.
RUNS_FINISHED_JS = """
() => {
  window.__kvFinished = 0;
  const FIELD = @FIELD@, DONE = new Set(@DONE@);
  const varint = (b, i) => {
    let v = 0, m = 1, x;
    do { x = b[i++]; v += (x & 127) * m; m *= 128; } while (x & 128);
    return [v, i];
  };
  const finished = (buf) => {
    const b = new Uint8Array(buf); let i = 0, tag, v;
    while (i < b.length) {
      [tag, i] = varint(b, i);
      const field = Math.floor(tag / 8), wire = tag & 7;
      if (wire === 0) { [v, i] = varint(b, i); if (field === FIELD) return DONE.has(v); }
      else if (wire === 2) { [v, i] = varint(b, i); i += v; }
      else if (wire === 1) i += 8; else if (wire === 5) i += 4; else return false;
    }
    return false;
  };
  const count = (data) => { if (finished(data)) window.__kvFinished += 1; };
  const Native = window.WebSocket;
  window.WebSocket = class extends Native {
    constructor(...args) {
      super(...args);
      if (!String(args[0]).includes('/_stcore/stream')) return;
      this.addEventListener('message', (e) => {
        if (e.data instanceof ArrayBuffer) count(e.data);
        else if (e.data instanceof Blob) e.data.arrayBuffer().then(count);
      });
    }
  };
}
""".replace("@FIELD@", str(_FINISHED.number)).replace("@DONE@", str(_DONE))


@dataclass
class RunResult:
    """What one script run sent back: seconds from request to script_finished, sliders, errors."""

    seconds: float
    sliders: dict[str, Any] = field(default_factory=dict)  # label -> Slider proto
    metrics: dict[str, str] = field(default_factory=dict)  # label -> displayed value
    errors: list[str] = field(default_factory=list)  # exception / st.error texts


class StreamlitSession:
    """One Streamlit session over a websocket (``async with StreamlitSession(url) as s``)."""

    def __init__(self, url: str, timeout_s: float = 60.0) -> None:
        if not url.startswith("http://127.0.0.1:"):
            raise ValueError(f"url {url!r} must be a loopback http://127.0.0.1:PORT address")
        self.url, self.timeout_s, self.route = url, timeout_s, ""
        self.widgets: dict[str, WidgetState] = {}  # widget id -> last value this client set
        self._ws: Any = None

    async def __aenter__(self) -> StreamlitSession:
        host = self.url.split("//", 1)[1]
        self._ws = await websockets.connect(
            f"ws://{host}/_stcore/stream",
            subprotocols=["streamlit"],
            additional_headers={"Origin": self.url},
            max_size=2**27,
            open_timeout=self.timeout_s,
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._ws.close()

    async def run(self, route: str) -> RunResult:
        """Run page ``route`` (its URL path) with the widget values set so far on it; wait for the end."""
        if route != self.route:  # navigating: the new page starts from its own defaults
            self.route, self.widgets = route, {}
        msg = BackMsg()
        msg.rerun_script.page_name = self.route
        msg.rerun_script.widget_states.widgets.extend(self.widgets.values())
        start = time.perf_counter()
        await self._ws.send(msg.SerializeToString())
        result = RunResult(0.0)
        deadline = start + self.timeout_s
        while True:
            left = deadline - time.perf_counter()
            if left <= 0:
                raise TimeoutError(f"no script_finished within {self.timeout_s:.0f} s on {self.route}")
            fwd = ForwardMsg()
            fwd.ParseFromString(await _recv(self._ws, left))
            kind = fwd.WhichOneof("type")
            if kind == "delta" and fwd.delta.WhichOneof("type") == "new_element":
                _collect(fwd.delta.new_element, result)
            elif kind == "script_finished":
                if fwd.script_finished not in _DONE:  # cut short by a rerun (st.rerun): its successor follows
                    result = RunResult(0.0)
                    continue
                result.seconds = time.perf_counter() - start
                return result

    def set_slider(self, slider: Any, index_or_value: float) -> None:
        """Set a slider (numeric value) or select_slider (option index) for the next run."""
        state = WidgetState(id=slider.id)
        if slider.options:  # select_slider: the formatted option text
            state.string_array_value.data.append(slider.options[int(index_or_value)])
        else:
            state.double_array_value.data.append(float(index_or_value))
        self.widgets[slider.id] = state


async def _recv(ws: Any, timeout_s: float) -> bytes:
    import asyncio

    data = await asyncio.wait_for(ws.recv(), timeout=timeout_s)
    if isinstance(data, str):
        raise TypeError("the server sent a text frame; Streamlit sends binary protobufs")
    return data


def _collect(element: Any, result: RunResult) -> None:
    """Keep sliders and metrics by label and the text of error elements."""
    kind = element.WhichOneof("type")
    if kind == "slider":
        result.sliders[element.slider.label] = element.slider
    elif kind == "metric":
        result.metrics[element.metric.label] = element.metric.body
    elif kind == "exception":
        result.errors.append(f"exception: {element.exception.message[:200]}")
    elif kind == "alert" and element.alert.format == element.alert.ERROR:
        result.errors.append(f"st.error: {element.alert.body[:200]}")


def slider_position(slider: Any) -> tuple[float, float, float, float]:
    """(current, low, high, step) of a slider on the scale the client sends (option index for select_slider)."""
    if slider.options:  # the server sends a select_slider's current option as text (raw_value) when it sets it
        if slider.raw_value and slider.raw_value[0] in slider.options:
            current = float(list(slider.options).index(slider.raw_value[0]))
        else:
            current = slider.value[0] if slider.value else slider.default[0]
        return current, 0.0, float(len(slider.options) - 1), 1.0
    current = slider.value[0] if slider.value else slider.default[0]
    return current, slider.min, slider.max, slider.step
