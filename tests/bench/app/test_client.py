"""The protocol client (bench/app/client.py) against real Streamlit servers: a probe script (probe_app.py) that
shows what the handshake carried, restarts itself with st.rerun() and has a fragment; a script that does not
compile; nginx with deploy/nginx.conf in front of two probes for the sticky-session cookie. Message orders a
real server makes only in races come from a scripted websocket server.

Every scenario runs its event loop in a thread of its own: the browser tests' sync Playwright may leave one
running on the main thread in a full run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.Slider_pb2 import Slider
from websockets.asyncio.server import serve

from bench.app.client import (
    FRAGMENT_RUN_ENDS,
    FULL_RUN_ENDS,
    PageRun,
    StreamlitSession,
    choose,
    click,
    ends_request,
    slider_position,
    slider_value,
)
from bench.app_server import free_port, nginx_balancer, running_app, running_apps
from tests.pg import require_nginx

PROBE = Path(__file__).with_name("probe_app.py")
ROUTE_COOKIE = "kvlab_route"  # deploy/nginx.conf's sticky-session cookie
TIMEOUT_S = 30.0  # a client waiting for the wrong message fails in this time, not in the default minute


def in_thread(coro: Coroutine[Any, Any, Any]) -> Any:
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result(timeout=4 * TIMEOUT_S)


async def one_run(url: str, **options: Any) -> tuple[StreamlitSession, PageRun]:
    async with StreamlitSession(url, timeout_s=TIMEOUT_S, **options) as session:
        return session, await session.run("")


@pytest.fixture(scope="module")
def probes(tmp_path_factory) -> list[dict[str, Any]]:
    work = tmp_path_factory.mktemp("probe")
    with running_apps(2, work / "data", work / "logs", script=PROBE) as apps:
        yield apps


@pytest.fixture(scope="module")
def probe(probes) -> str:
    return probes[0]["url"]


# --- When a run has finished ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "ends_full", "ends_fragment"),
    [
        (ForwardMsg.FINISHED_SUCCESSFULLY, True, True),
        (ForwardMsg.FINISHED_WITH_COMPILE_ERROR, True, True),
        (ForwardMsg.FINISHED_EARLY_FOR_RERUN, False, False),  # st.rerun() or a newer request: a run follows
        (ForwardMsg.FINISHED_FRAGMENT_RUN_SUCCESSFULLY, False, True),  # a fragment's run, not the app's
    ],
)
def test_which_status_ends_a_request(status, ends_full, ends_fragment):
    assert ends_request(status) is ends_full
    assert ends_request(status, fragment_request=True) is ends_fragment


def test_every_status_of_this_streamlit_is_classified():
    statuses = set(ForwardMsg.ScriptFinishedStatus.values())
    known = {ForwardMsg.FINISHED_EARLY_FOR_RERUN} | FRAGMENT_RUN_ENDS
    assert statuses == known, f"classify the new script_finished statuses {statuses - known} in bench/app/client.py"
    assert FULL_RUN_ENDS < FRAGMENT_RUN_ENDS


def forward(kind: str, value: Any = None) -> ForwardMsg:
    """One ForwardMsg as Streamlit sends it: new_session, script_finished (a status) or a markdown delta."""
    msg = ForwardMsg()
    if kind == "new_session":
        msg.new_session.SetInParent()
    elif kind == "script_finished":
        msg.script_finished = value
    else:
        msg.delta.new_element.markdown.body = value
    return msg


async def against_script(messages: list[ForwardMsg]) -> PageRun:
    """One full-app request to a websocket server that answers with ``messages``: orders a real server makes
    only in races (a fragment's run finishing while a full run is asked for; a finish left from before)."""
    received: list[BackMsg] = []

    async def answer(ws: Any) -> None:
        received.append(BackMsg.FromString(await ws.recv()))
        for msg in messages:
            await ws.send(msg.SerializeToString())
        await ws.wait_closed()

    async with serve(answer, "127.0.0.1", 0, subprotocols=["streamlit"]) as server:
        port = server.sockets[0].getsockname()[1]
        async with StreamlitSession(f"http://127.0.0.1:{port}", timeout_s=5) as session:
            page = await session.run("gqa")
    assert [m.rerun_script.page_name for m in received] == ["gqa"]
    return page


def test_a_fragment_run_that_finishes_during_a_full_request_does_not_end_it():
    page = in_thread(
        against_script(
            [
                forward("new_session"),
                forward("markdown", "the fragment's"),
                forward("script_finished", ForwardMsg.FINISHED_FRAGMENT_RUN_SUCCESSFULLY),
                forward("new_session"),
                forward("markdown", "the app's"),
                forward("script_finished", ForwardMsg.FINISHED_SUCCESSFULLY),
            ]
        )
    )
    assert page.texts == ["the app's"]


def test_a_finish_before_the_request_started_a_run_is_not_its_end():
    page = in_thread(
        against_script(
            [
                forward("script_finished", ForwardMsg.FINISHED_SUCCESSFULLY),  # an earlier run's
                forward("new_session"),
                forward("markdown", "this request's"),
                forward("script_finished", ForwardMsg.FINISHED_SUCCESSFULLY),
            ]
        )
    )
    assert page.texts == ["this request's"] and page.runs == 1


def test_a_plain_run_is_one_run(probe):
    _, page = in_thread(one_run(probe))
    assert page.runs == 1 and page.errors == []
    assert "run 0 of 0" in page.texts and page.metrics["Restarted"] == "0"
    assert page.seconds > 0
    # every message of the run is counted: at least its elements and the script_finished that ended it
    assert page.messages >= len(page.texts) + len(page.metrics) + 1 and page.message_bytes > 0


def test_st_rerun_is_followed_to_the_run_that_ends(probe):
    async def scenario() -> tuple[PageRun, PageRun]:
        async with StreamlitSession(probe, timeout_s=TIMEOUT_S) as session:
            first = await session.run("")
            restarts = slider_value(first.widget("slider", "Restarts"), 3)
            return await session.run("", [restarts]), await session.run("", [restarts])

    chain, again = in_thread(scenario())
    for page in (chain, again):  # the same again: the probe starts its count over
        assert page.runs == 4  # the first run and one per st.rerun()
        assert page.metrics["Restarted"] == "3"
        runs_shown = [t for t in page.texts if t.startswith("run ")]
        assert runs_shown == ["run 3 of 3"]  # only what the last run showed


def test_a_fragment_request_ends_at_its_fragment_run(probe):
    async def scenario() -> tuple[PageRun, PageRun, PageRun]:
        async with StreamlitSession(probe, timeout_s=TIMEOUT_S) as session:
            first = await session.run("")
            [fragment] = first.fragments
            button = first.widget("button", "Fragment button")
            part = await session.run("", [click(button)], fragment_id=fragment)
            return first, part, await session.run("")

    first, part, after = in_thread(scenario())
    assert "fragment ran" in first.texts and "run 0 of 0" in first.texts
    assert part.runs == 1 and part.texts == ["fragment ran"]  # the fragment's run sends only its own elements
    assert part.fragments == first.fragments and part.widget("button", "Fragment button")
    assert after.runs == 1 and "run 0 of 0" in after.texts  # the session goes on with full runs
    # which fragment each widget was drawn in: a browser moving it asks for that fragment's run
    [fragment] = first.fragments
    button = first.widget("button", "Fragment button")
    assert first.fragment_of(button) == fragment and part.fragment_of(button) == fragment
    assert first.fragment_of(first.widget("slider", "Restarts")) == ""


def test_a_script_that_does_not_compile_ends_its_run(tmp_path):
    broken = tmp_path / "broken_app.py"
    broken.write_text("import streamlit as st\n\nst.markdown('never shown'\n")
    with running_app(tmp_path / "data", tmp_path / "streamlit.log", script=broken) as url:
        _, page = in_thread(one_run(url))
    assert page.runs == 1 and page.texts == []
    assert len(page.errors) == 1 and page.errors[0].startswith("compile error"), page.errors


# --- What the handshake carries ---------------------------------------------------------------------------


def test_the_host_header_and_origin_default_to_the_loopback_address(probe):
    _, page = in_thread(one_run(probe))
    netloc = probe.removeprefix("http://")
    assert f"host {netloc}" in page.texts and f"origin http://{netloc}" in page.texts


def test_a_virtual_host_is_sent_as_host_and_origin(probe):
    site = f"kvlab.test:{probe.rsplit(':', 1)[1]}"
    session, page = in_thread(one_run(probe, host=site))
    assert session.host == site
    assert f"host {site}" in page.texts and f"origin http://{site}" in page.texts


def test_the_cookies_given_are_sent(probe):
    _, page = in_thread(one_run(probe, cookies={"probe": "abc", "other": "x-1"}))
    assert "cookies [other=x-1; probe=abc]" in page.texts


def test_the_balancer_cookie_is_kept_and_routes_every_reconnect_to_the_same_replica(probes):
    require_nginx()
    replicas = {f"127.0.0.1:{a['port']}" for a in probes}
    with nginx_balancer([a["port"] for a in probes]) as lb:
        site = f"kvlab.test:{lb['port']}"

        async def scenario() -> list[tuple[StreamlitSession, PageRun]]:
            first = await one_run(lb["url"], host=site)
            cookies = first[0].cookies
            return [first] + [await one_run(lb["url"], host=site, cookies=cookies) for _ in range(4)]

        runs = in_thread(scenario())
    (first, first_page), later = runs[0], runs[1:]
    route = first.cookies[ROUTE_COOKIE]  # set by nginx on the handshake, its attributes (Path, ...) left out
    assert route and ";" not in route and "cookies []" in first_page.texts  # the first visit carried none
    assert first.upstream in replicas
    for session, page in later:
        assert f"cookies [{ROUTE_COOKIE}={route}]" in page.texts  # sent back on the websocket
        assert f"host {site}" in page.texts  # through nginx unchanged
        assert session.upstream == first.upstream  # and hashed to the same replica every time
        assert session.cookies == {ROUTE_COOKIE: route}  # nginx sets no new one when the browser has it


def test_the_replica_named_is_the_one_that_answered_when_another_was_down(probe):
    require_nginx()
    live = probe.removeprefix("http://")
    with nginx_balancer([free_port(), int(live.rsplit(":", 1)[1])]) as lb:
        # Fresh sessions: each a new random route, so about half are hashed to the dead replica first, and
        # nginx's header lists both, "dead, live".
        async def scenario() -> list[StreamlitSession]:
            return [(await one_run(lb["url"]))[0] for _ in range(6)]

        sessions = in_thread(scenario())
    assert [s.upstream for s in sessions] == [live] * 6


# --- Arguments and widget values --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"url": "http://localhost:8501"}, "url"),
        ({"url": "https://127.0.0.1:8501"}, "url"),
        ({"url": "http://127.0.0.1:99999"}, "url"),
        ({"url": "http://127.0.0.1:8501/path"}, "url"),
        ({"host": "kvlab.test:80\r\nX-Evil: 1"}, "host"),
        ({"host": "a b"}, "host"),
        ({"cookies": {"route": "a;b"}}, "cookie"),
        ({"cookies": {"a b": "1"}}, "cookie"),
        ({"timeout_s": 0}, "timeout_s"),
    ],
)
def test_bad_arguments_are_value_errors_naming_them(options, named):
    kwargs = {"url": "http://127.0.0.1:8501", **options}
    with pytest.raises(ValueError, match=named):
        StreamlitSession(**kwargs)


def test_slider_values_go_on_the_wire_as_the_browser_sends_them():
    numeric = Slider(id="s-1", label="Batch", min=1, max=64, step=1, default=[8])
    state = slider_value(numeric, 16)
    assert list(state.double_array_value.data) == [16.0] and state.id == "s-1"
    assert slider_position(numeric) == (8, 1, 64, 1)
    select = Slider(id="s-2", label="Block", options=["8", "16", "32"], default=[1])
    assert list(slider_value(select, 2).string_array_value.data) == ["32"]  # the option's text, not its index
    assert slider_position(select) == (1, 0, 2, 1)
    select.raw_value.append("32")  # the server set it: its text says where it is
    assert slider_position(select)[0] == 2
    with pytest.raises(ValueError, match="option index 3"):
        slider_value(select, 3)


def test_a_radio_choice_must_be_one_of_its_options():
    from streamlit.proto.Radio_pb2 import Radio

    radio = Radio(id="r-1", label="Which?", options=["One", "Two"])
    assert choose(radio, "Two").string_value == "Two"
    with pytest.raises(ValueError, match="'Three' is not one of"):
        choose(radio, "Three")


def test_a_missing_widget_is_named_with_the_ones_that_exist():
    from streamlit.proto.Button_pb2 import Button

    page = PageRun(widgets=[("button", Button(id="b", label="Sign in"))])
    with pytest.raises(LookupError, match=r"no button labelled 'Start'.*\['Sign in'\]"):
        page.widget("button", "Start")
