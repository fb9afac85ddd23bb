"""ui/host_guard.py on a real server on loopback: with KVLAB_ALLOWED_HOSTS set, the app itself answers only
under those names (pages, static files, the websocket), whatever the port; the health check answers to any;
without the setting nothing changes."""

from __future__ import annotations

import asyncio
import http.client

import pytest
from websockets.exceptions import InvalidStatus

from bench.app.client import StreamlitSession
from bench.app_server import HOST, running_app
from ui.host_guard import allowed_hosts, host_of


def _status(port: int, host: str, path: str = "/", websocket: bool = False) -> int:
    conn = http.client.HTTPConnection(HOST, port, timeout=30)
    headers = {"Host": host}
    if websocket:
        headers |= {
            "Upgrade": "websocket",
            "Connection": "Upgrade",
            "Sec-WebSocket-Version": "13",
            "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
            "Sec-WebSocket-Protocol": "streamlit",
            "Origin": f"http://{host}",
        }
    try:
        conn.request("GET", path, headers=headers)
        return conn.getresponse().status
    finally:
        conn.close()


def _session_texts(url: str, host: str) -> int:
    async def run() -> int:
        try:
            async with StreamlitSession(url, host=host, timeout_s=60) as session:
                return len((await session.run("")).texts)
        except InvalidStatus as exc:
            return -exc.response.status_code

    return asyncio.run(run())


def test_the_names_are_read_and_compared_without_the_port():
    assert allowed_hosts({"KVLAB_ALLOWED_HOSTS": " Kvlab.Test, 10.0.0.5\t127.0.0.1 "}) == {
        "kvlab.test",
        "10.0.0.5",
        "127.0.0.1",
    }
    assert allowed_hosts({}) == frozenset() and allowed_hosts({"KVLAB_ALLOWED_HOSTS": " , "}) == frozenset()
    assert host_of("KVLab.test:8080") == "kvlab.test" and host_of("[::1]:8501") == "[::1]" and host_of("x") == "x"


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    work = tmp_path_factory.mktemp("app-hosts")
    env = {"KVLAB_ALLOWED_HOSTS": f"kvlab.test {HOST}"}
    with running_app(work / "data", work / "streamlit.log", extra_env=env) as url:
        yield url


def test_the_app_answers_only_under_its_names(guarded):
    port = int(guarded.rsplit(":", 1)[1])
    for name in (f"{HOST}:{port}", f"kvlab.test:{port}", "KVLAB.test", "kvlab.test:1"):
        assert _status(port, name) == 200, name
    assert _status(port, f"kvlab.test:{port}", "/_stcore/stream", websocket=True) == 101
    for name in ("evil.example", f"evil.example:{port}", f"kvlab.test.evil.example:{port}", "localhost"):
        assert _status(port, name) == 421, name
        assert _status(port, name, "/static/favicon.png") == 421, name
        assert _status(port, name, "/_stcore/stream", websocket=True) == 403, name
    assert _status(port, "evil.example", "/_stcore/health") == 200  # the balancer's check, under its own name
    assert _status(port, "evil.example", "/healthz") == 200  # and the one with the database (ui/health.py)
    assert _session_texts(guarded, f"kvlab.test:{port}") > 0
    assert _session_texts(guarded, f"rebound.example:{port}") == -403


def test_without_the_setting_every_host_is_answered(tmp_path):
    with running_app(tmp_path / "data", tmp_path / "streamlit.log", extra_env={"KVLAB_ALLOWED_HOSTS": ""}) as url:
        port = int(url.rsplit(":", 1)[1])
        assert _status(port, "anything.example") == 200
