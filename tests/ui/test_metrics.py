"""ui/metrics.py: the settings, the side-port endpoint, and what each metric counts (read from the registry as
Prometheus scrapes it; the real server's endpoint is tested in tests/deploy/test_operations.py)."""

from __future__ import annotations

import logging
import threading
import time
import urllib.request

import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from bench.app_server import HOST, free_port
from lessons.labs.playground import EnginePool
from progress import ProgressStore, ProgressStoreError
from ui import logs, metrics


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, metrics.MetricsSettings(None)),
        ({"KVLAB_METRICS_PORT": " "}, metrics.MetricsSettings(None)),
        ({"KVLAB_METRICS_ADDRESS": "0.0.0.0"}, metrics.MetricsSettings(None, "0.0.0.0")),  # no port: off
        ({"KVLAB_METRICS_PORT": "9464"}, metrics.MetricsSettings(9464, "127.0.0.1")),
        ({"KVLAB_METRICS_PORT": "9464", "KVLAB_METRICS_ADDRESS": "0.0.0.0"}, metrics.MetricsSettings(9464, "0.0.0.0")),
        ({"KVLAB_METRICS_PORT": "65535", "KVLAB_METRICS_ADDRESS": "::1"}, metrics.MetricsSettings(65535, "::1")),
    ],
)
def test_the_endpoint_is_off_unless_a_port_is_set_and_local_unless_told(env, expected):
    assert metrics.metrics_settings(env) == expected


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"KVLAB_METRICS_PORT": "0"}, "KVLAB_METRICS_PORT='0'"),
        ({"KVLAB_METRICS_PORT": "70000"}, "KVLAB_METRICS_PORT='70000'"),
        ({"KVLAB_METRICS_PORT": "９４６４"}, "KVLAB_METRICS_PORT='９４６４'"),
        ({"KVLAB_METRICS_PORT": "-1"}, "KVLAB_METRICS_PORT='-1'"),
        ({"KVLAB_METRICS_PORT": "9464", "KVLAB_METRICS_ADDRESS": "metrics.local"}, "KVLAB_METRICS_ADDRESS="),
    ],
)
def test_a_bad_setting_is_named(env, named):
    with pytest.raises(ValueError, match=named.replace("(", r"\(")):
        metrics.metrics_settings(env)


def test_the_endpoint_serves_the_app_metrics_on_its_own_port():
    port = free_port()
    server = metrics.start_server(metrics.MetricsSettings(port, HOST))
    try:
        with urllib.request.urlopen(f"http://{HOST}:{port}/metrics", timeout=30) as resp:
            text = resp.read().decode()
    finally:
        server.shutdown()
        server.server_close()
    names = {family.name for family in text_string_to_metric_families(text)}
    expected = {"kvlab_sessions", "kvlab_page_runs", "kvlab_page_run_seconds", "kvlab_database_errors"}
    assert expected | {"kvlab_signin_failures", "kvlab_playground_waiting"} <= names
    assert metrics.start_server(metrics.MetricsSettings(None)) is None


def test_a_page_run_is_counted_and_timed_also_when_it_stops_early():
    runs, count = sample("kvlab_page_runs_total", page="probe"), sample("kvlab_page_run_seconds_count", page="probe")
    with metrics.page_run("probe"):
        pass
    with pytest.raises(KeyboardInterrupt), metrics.page_run("probe"):  # not an Exception, like st.stop's
        raise KeyboardInterrupt
    assert sample("kvlab_page_runs_total", page="probe") == runs + 2
    assert sample("kvlab_page_run_seconds_count", page="probe") == count + 2
    failures = sample("kvlab_page_failures_total", page="probe")
    metrics.page_failed("probe")
    assert sample("kvlab_page_failures_total", page="probe") == failures + 1


def test_database_errors_are_counted_from_the_stores_events(tmp_path):
    logger = logging.getLogger(logs.LOGGER)
    saved = list(logger.handlers), logger.level
    metrics.install_event_counter()
    metrics.install_event_counter()  # once: a second call adds no second counter
    try:
        assert sum(isinstance(h, metrics.EventCounter) for h in logger.handlers) == 1
        logger.setLevel(logging.INFO)
        before = sample("kvlab_database_errors_total")
        bad = tmp_path / "progress.sqlite3"
        bad.write_bytes(b"not a database" * 100)
        with pytest.raises(ProgressStoreError):
            ProgressStore(f"sqlite:///{bad}")
        assert sample("kvlab_database_errors_total") == before + 1
        logs.event("signin_failed")  # another event: not a database error
        assert sample("kvlab_database_errors_total") == before + 1
    finally:
        logger.handlers[:], logger.level = saved


def test_signin_failures_are_counted_by_kind():
    learner, teacher = (
        sample("kvlab_signin_failures_total", kind="learner"),
        sample("kvlab_signin_failures_total", kind="teacher"),
    )
    metrics.signin_failed("learner")
    metrics.signin_failed("teacher")
    metrics.signin_failed("teacher")
    assert sample("kvlab_signin_failures_total", kind="learner") == learner + 1
    assert sample("kvlab_signin_failures_total", kind="teacher") == teacher + 2


def _wait_for(predicate, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s  # a bound for a stuck test, not a timing assertion
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_the_playground_gauges_read_the_pool_when_scraped():
    pool = EnginePool(budget_bytes=100, wait_s=120.0)
    metrics.watch_pool(pool)
    first, second = pool.ticket(), pool.ticket()
    waited: list[object] = []

    def second_learner() -> None:
        with pool.lease(second, "b", 60, object) as llm:
            waited.append(llm)

    with pool.lease(first, "a", 60, object):
        assert (sample("kvlab_playground_engines"), sample("kvlab_playground_engines_running")) == (1.0, 1.0)
        assert sample("kvlab_playground_kv_bytes") == 60.0 and sample("kvlab_playground_waiting") == 0.0
        thread = threading.Thread(target=second_learner)
        thread.start()
        _wait_for(lambda: pool.stats().waiting == 1, "the second learner never waited for room")
        assert sample("kvlab_playground_waiting") == 1.0  # 60 + 60 bytes > 100: no room until the first is freed
    pool.release(first.id)  # the first learner's engine goes: the second one's fits
    thread.join(timeout=120)
    assert waited and sample("kvlab_playground_waiting") == 0.0
    assert (sample("kvlab_playground_engines"), sample("kvlab_playground_engines_running")) == (1.0, 0.0)
    metrics.watch_pool(EnginePool())  # a pool that is gone at once (nothing else holds it) reads as empty
    assert sample("kvlab_playground_engines") == 0.0 and sample("kvlab_playground_kv_bytes") == 0.0
