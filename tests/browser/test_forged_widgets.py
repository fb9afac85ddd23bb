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
            widget_id = next(w.id for k, w in page.widgets if k == kind and w.id.endswith("-" + key))
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
