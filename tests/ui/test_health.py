"""ui/health.py without a server: the database check's answers and reasons, the timeout, the ASGI responses.
On a real server with a broken database URL: tests/deploy/test_operations.py."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import anyio
import pytest

from ui import health


def _run(func, *args):
    """anyio.run in a thread of its own: an earlier test in this worker may leave an event loop marked running in
    the main thread (then anyio.run there refuses with "Already running asyncio in this thread")."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(anyio.run, func, *args).result()


PLANTED = "planted-Secret-9c2d"


async def ready() -> None:
    return None


def test_a_working_sqlite_database_is_healthy_and_its_store_is_kept(tmp_path):
    url = f"sqlite:///{tmp_path / 'progress.sqlite3'}"
    check = health.DatabaseCheck(lambda: url)
    assert check() is None and check() is None
    assert list(check.stores) == [url]  # one store (one pool) for every later check


def test_a_damaged_file_and_an_unreachable_server_give_the_reason_without_the_password(tmp_path):
    bad = tmp_path / "progress.sqlite3"
    bad.write_bytes(b"not a database" * 100)
    reason = health.DatabaseCheck(lambda: f"sqlite:///{bad}")()
    assert reason is not None and "damaged" in reason and str(bad) in reason
    url = f"postgresql+psycopg://kvlab:{PLANTED}@127.0.0.1:9/kvlab"  # nothing listens on port 9
    reason = health.DatabaseCheck(lambda: url)()
    assert reason is not None and "127.0.0.1" in reason and "KVLAB_DATABASE_URL" in reason
    assert PLANTED not in reason
    reason = health.DatabaseCheck(lambda: f"postgresql+psycopg://kvlab:{PLANTED}@127.0.0.1:notaport/kvlab")()
    assert reason is not None and "not a valid database URL" in reason and PLANTED not in reason


def test_a_database_that_breaks_after_the_first_check_is_reported(tmp_path):
    path = tmp_path / "progress.sqlite3"
    check = health.DatabaseCheck(lambda: f"sqlite:///{path}")
    assert check() is None
    check.stores[f"sqlite:///{path}"].engine.dispose()
    path.write_bytes(b"damaged" * 1000)  # the file is overwritten under the running server
    for suffix in ("-wal", "-shm"):
        (tmp_path / f"progress.sqlite3{suffix}").unlink(missing_ok=True)
    reason = check()
    assert reason is not None and "database" in reason


def test_the_status_is_200_only_when_streamlit_and_the_database_answer():
    assert _run(health.health, lambda: None, 5.0, ready) == (200, "ok")
    status, body = _run(health.health, lambda: "the file x is damaged", 5.0, ready)
    assert status == 503 and body == "progress database: the file x is damaged"

    async def not_ready() -> str:
        return "Streamlit is not ready (unavailable)"

    assert _run(health.health, lambda: None, 5.0, not_ready) == (503, "Streamlit is not ready (unavailable)")
    status, body = _run(health.health, lambda: None, 5.0)  # no Streamlit runtime in this process
    assert status == 503 and "not started" in body


def test_a_database_that_does_not_answer_is_unhealthy_after_the_timeout():
    stuck = threading.Event()
    try:
        status, body = _run(health.health, lambda: stuck.wait(600) and None, 0.2, ready)
    finally:
        stuck.set()  # the abandoned check's thread ends
    assert status == 503 and body == "the progress database did not answer within 0.2 s"


def _asgi(method: str, path: str, check) -> tuple[list[dict], list[str]]:
    sent, passed = [], []

    async def app(scope, receive, send):
        passed.append(scope["path"])

    async def send(message):
        sent.append(message)

    async def run():
        middleware = health.HealthCheck(app, check)
        await middleware({"type": "http", "method": method, "path": path}, None, send)

    _run(run)
    return sent, passed


@pytest.mark.parametrize(("method", "status"), [("GET", 503), ("HEAD", 503), ("POST", 405)])
def test_the_middleware_answers_only_its_path(method, status):
    sent, passed = _asgi(method, "/healthz", lambda: None)  # no Streamlit runtime here: 503
    assert passed == [] and sent[0]["status"] == status
    body = sent[1]["body"]
    assert (body == b"") if method == "HEAD" else body
    assert dict(sent[0]["headers"])[b"cache-control"] == b"no-store"
    sent, passed = _asgi(method, "/healthz/x", lambda: None)
    assert passed == ["/healthz/x"] and sent == []
