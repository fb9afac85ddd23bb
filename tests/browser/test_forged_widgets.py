"""A hand-made client (no browser) sends widget values no browser form would, to the real server: a select box
value outside its options, a select-slider index past its options. Streamlit passes the first to the page and
fails inside its own widget code on the second; either way the learner gets the app's clear message, never a
stopped page, and the session keeps working."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest
from streamlit.proto.WidgetStates_pb2 import WidgetState

from bench.app.client import StreamlitSession
from ui.router import PAGE_FAILED

pytestmark = pytest.mark.browser
FORGED = "FORGED<b>x</b>[l](https://evil.example)"


def _forge(kind: str, widget_id: str) -> WidgetState:
    state = WidgetState(id=widget_id)
    if kind == "selectbox":
        state.string_value = FORGED
    else:  # a select slider sends the index of its option
        state.double_array_value.data.extend([999.0])
    return state


async def _forged_runs(url: str) -> list[tuple[str, list[str], list[str], list[str]]]:
    found = []
    async with StreamlitSession(url, timeout_s=120) as session:
        await session.run("")
        for route, kind, key in (("gqa", "selectbox", "gqa_model"), ("paged_attention", "slider", "paged_block")):
            page = await session.run(route)
            widget_id = next(w.id for k, w in page.widgets if k == kind and f"-{key}" in w.id)
            forged = await session.run(route, [_forge(kind, widget_id)])
            again = await session.run(route)  # the session goes on (a fresh page run, default widgets)
            bodies = [body for fmt, body in forged.alerts if fmt == "ERROR"]
            found.append((route, bodies, forged.exceptions, again.exceptions))
    return found


def test_forged_widget_values_get_the_clear_message(app_url):
    # In a thread of its own: the other browser tests' sync Playwright may leave an event loop on this one.
    with ThreadPoolExecutor(1) as pool:
        runs = pool.submit(asyncio.run, _forged_runs(app_url)).result()
    for route, errors, exceptions, later in runs:
        assert not exceptions and not later, (route, exceptions, later)  # no stopped page
        assert PAGE_FAILED in errors, (route, errors)
        assert not any("evil.example" in e for e in errors)  # the forged text is never echoed


# Values of the wrong kind, and numbers no widget holds, for each kind of widget the lessons draw. Streamlit
# reads them before the page runs (SessionState.on_script_will_rerun): unguarded, several raised there and
# broke the session until a reload (ui/widget_guard.py drops them instead).
def _wrong_kinds(widget_id: str) -> dict[str, WidgetState]:
    values = {
        "string": ("string_value", "FORGED"),
        "nan": ("double_value", float("nan")),
        "inf": ("double_value", float("-inf")),
        "big int": ("int_value", 2**62),
        "bool": ("bool_value", True),
        "json": ("json_value", "{not json"),
    }
    states = {}
    for name, (field, value) in values.items():
        states[name] = WidgetState(id=widget_id, **{field: value})
    for name, data in (("nan list", [float("nan")]), ("number list", [1.0, 2.0, 3.0])):
        states[name] = WidgetState(id=widget_id)
        states[name].double_array_value.data.extend(data)
    states["text list"] = WidgetState(id=widget_id)
    states["text list"].string_array_value.data.extend(["FORGED", "x"])
    return states


DROPPED = ("string", "nan", "inf", "nan list", "text list")  # what a number input cannot hold
WIDGETS = (  # (route, element kind, user key): a number input, a slider, a select box, a radio, a select slider
    ("gqa", "number_input", "gqa_context"),
    ("gqa", "slider", "gqa_groups"),
    ("gqa", "selectbox", "gqa_model"),
    ("gqa", "radio", "gqa_kv_precision"),
    ("paged_attention", "slider", "paged_block"),
)


async def _wrong_kind_runs(url: str) -> list[tuple[str, str, list[str], list[str], dict[str, str]]]:
    found = []
    for route, kind, key in WIDGETS:
        async with StreamlitSession(url, timeout_s=120) as probe:
            page = await probe.run(route)
        widget_id = next(w.id for k, w in page.widgets if k == kind and f"-{key}" in w.id)
        for name, state in _wrong_kinds(widget_id).items():
            async with StreamlitSession(url, timeout_s=120) as session:  # a fresh session: one forgery each
                first = await session.run(route)
                forged = await session.run(route, [state])
                again = await session.run(route)  # the next run, as the browser's next widget change sends it
                found.append((f"{key} <- {name}", kind, forged.exceptions, again.exceptions, again.metrics))
                if kind == "number_input" and name in DROPPED:  # dropped: the page shows what it showed before
                    assert first.metrics and again.metrics == first.metrics, (key, name)
    return found


def test_values_of_the_wrong_kind_never_break_the_session(app_url):
    with ThreadPoolExecutor(1) as pool:
        runs = pool.submit(asyncio.run, _wrong_kind_runs(app_url)).result()
    broken = [(what, exceptions[:1], later[:1]) for what, _, exceptions, later, _ in runs if exceptions or later]
    assert not broken, broken
    assert len(runs) == len(WIDGETS) * 9
