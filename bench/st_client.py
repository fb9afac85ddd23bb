"""A minimal Streamlit websocket client: one learner session without a browser.

It speaks the app's own protocol (protobuf BackMsg / ForwardMsg over ``/_stcore/stream``, the same
messages the browser sends): ask for a page run, read the elements the run sends back, send a new
widget value, time until ``script_finished``. The classroom load check uses it to measure the *server*
with many sessions while no browser rendering competes for the same CPUs. Loopback only.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import websockets
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.WidgetStates_pb2 import WidgetState


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
    if slider.options:
        current = slider.value[0] if slider.value else slider.default[0]
        return current, 0.0, float(len(slider.options) - 1), 1.0
    current = slider.value[0] if slider.value else slider.default[0]
    return current, slider.min, slider.max, slider.step
