"""What an operator sees, on a real server on loopback (ui.serve, as run.sh and the image start it): the JSON log,
the Prometheus endpoint on its side port after real page runs and sign-ins, /healthz with a working and with a
broken database, and nginx (deploy/nginx.conf) passing neither /healthz nor the metrics to the public.

Secrets are planted (the teacher key, a passphrase, the database password) and looked for in every log line and
every answer; learner names are planted and must appear only as pseudonyms.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.engine import make_url

from bench.app.client import StreamlitSession, click, opened, text_value
from bench.app_server import HOST, ROOT, free_port, nginx_balancer, postgres_cluster, running_app
from tests.pg import require_nginx, require_postgres
from ui.logs import learner_id

TEACHER_KEY = "planted-teacher-key-5b7e"
PASSPHRASE, WRONG = "planted-passphrase-31", "planted-wrong-guess-32"
LEARNER, CLASS = "Zephyrine", "Ops-36"


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=60) as resp:
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")


def _samples(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    status, text = _get(f"http://{HOST}:{port}/metrics")
    assert status == 200
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _events(log: Path) -> list[dict]:
    """The server's JSON log lines (Streamlit's own start-up banner is plain text on stdout)."""
    return [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]


async def _sign_in(session: StreamlitSession, passphrase: str) -> list[str]:
    first = await session.run("")
    session.keep(opened(first.expanders["Save my progress"]))  # the form is made only while its box is open
    home = await session.run("")
    form = [
        text_value(home.widget("text_input", "Your name"), LEARNER),
        text_value(home.widget("text_input", "Class code"), CLASS),
        text_value(home.widget("text_input", "Passphrase"), passphrase),
        click(home.widget("button", "Sign in")),
    ]
    shown = await session.run("", form)
    return shown.sidebar_texts + shown.errors + [t for t in shown.texts]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    work = tmp_path_factory.mktemp("operations")
    port = free_port()
    env = {"KVLAB_METRICS_PORT": str(port), "KVLAB_TEACHER_KEY": TEACHER_KEY}
    with running_app(work / "data", work / "streamlit.log", extra_env=env) as url:
        yield {"url": url, "metrics": port, "log": work / "streamlit.log"}


def test_metrics_logs_and_health_of_a_working_server(served):
    url, port = served["url"], served["metrics"]
    before = _samples(port)
    runs_before = before.get(("kvlab_page_runs_total", (("page", "welcome"),)), 0.0)

    async def classroom() -> tuple[list[str], list[str], dict]:
        async with StreamlitSession(url, timeout_s=120) as ana, StreamlitSession(url, timeout_s=120) as guesser:
            signed = await _sign_in(ana, PASSPHRASE)  # the first sign-in sets the passphrase
            refused = await _sign_in(guesser, WRONG)
            await ana.run("golden_rules")
            return signed, refused, _samples(port)  # scraped while both sessions are connected

    signed, refused, during = asyncio.run(classroom())
    assert any(t.startswith("Signed in as") for t in signed), signed
    assert any("Not signed in" in t for t in refused), refused

    assert during[("kvlab_sessions", ())] == 2.0  # the two websockets open at the scrape
    runs = during[("kvlab_page_runs_total", (("page", "welcome"),))]
    assert runs >= runs_before + 6  # three runs of the sign-in per session, at least
    assert during[("kvlab_page_run_seconds_count", (("page", "welcome"),))] == runs
    assert during[("kvlab_signin_failures_total", (("kind", "learner"),))] == 1.0
    assert during[("kvlab_page_runs_total", (("page", "golden_rules"),))] == 1.0
    assert ("kvlab_playground_waiting", ()) in during and ("kvlab_database_errors_total", ()) in during

    deadline = time.monotonic() + 60  # the server notices the closed websockets: a bound, not a timing check
    while _samples(port)[("kvlab_sessions", ())] != 0.0:
        assert time.monotonic() < deadline, "kvlab_sessions stayed above 0 after every session closed"
        time.sleep(0.2)

    assert _get(f"{url}/healthz") == (200, "ok")
    status, body = _get(f"{url}/metrics")  # the app's port serves the app, not the metrics
    assert "kvlab_sessions" not in body and "# TYPE" not in body

    text = served["log"].read_text()
    for secret in (TEACHER_KEY, PASSPHRASE, WRONG, LEARNER):
        assert secret not in text, f"{secret!r} is in the server's log"
    events = _events(served["log"])
    names = [e["event"] for e in events]
    [start] = [e for e in events if e["event"] == "server_start"]
    assert start["fields"]["settings"]["KVLAB_TEACHER_KEY"] == "<redacted>"
    assert start["fields"]["metrics"] == f"http://127.0.0.1:{port}/metrics"
    pseudonym = learner_id(CLASS, LEARNER)
    [signin] = [e for e in events if e["event"] == "signin"]
    assert signin["fields"] | {"address": None} == {
        "class_code": CLASS,
        "learner_id": pseudonym,
        "status": "new",
        "address": None,
    }
    [failed] = [e for e in events if e["event"] == "signin_failed"]
    assert failed["level"] == "WARNING" and failed["fields"]["learner_id"] == pseudonym
    assert failed["fields"]["address"] == "127.0.0.1" and "passphrase" in failed["fields"]["reason"]
    assert "progress_saved" in names
    for e in events:
        assert set(e) >= {"time", "level", "logger", "event", "message", "fields"}, e


@pytest.fixture(scope="module")
def broken(tmp_path_factory):
    """A server started on a live PostgreSQL (the start refuses a database it cannot reach), which then goes away."""
    require_postgres()
    work = tmp_path_factory.mktemp("operations-broken")
    port = free_port()
    database = contextlib.ExitStack()
    with database:
        cluster = database.enter_context(postgres_cluster())
        env = {"KVLAB_METRICS_PORT": str(port), "KVLAB_DATABASE_URL": cluster["url"]}
        with running_app(work / "data", work / "streamlit.log", extra_env=env) as url:
            database.close()  # the cluster stops and is deleted while the server runs on
            password = make_url(cluster["url"]).password
            yield {"url": url, "metrics": port, "log": work / "streamlit.log", "password": password}


def test_a_broken_database_makes_healthz_unhealthy_with_the_reason_and_no_password(broken):
    url = broken["url"]
    assert _get(f"{url}/_stcore/health") == (200, "ok")  # Streamlit's own check cannot see it
    status, body = _get(f"{url}/healthz")
    assert status == 503
    assert body.startswith("progress database: Progress database error in the postgresql database 'kvlab' on")
    assert "check KVLAB_DATABASE_URL" in body and broken["password"] not in body
    assert _samples(broken["metrics"])[("kvlab_database_errors_total", ())] >= 1.0
    text = broken["log"].read_text()
    assert broken["password"] not in text
    errors = [e for e in _events(broken["log"]) if e["event"] == "db_error"]
    assert errors and errors[0]["fields"]["where"].startswith("the postgresql database 'kvlab'")
    [start] = [e for e in _events(broken["log"]) if e["event"] == "server_start"]
    assert start["fields"]["settings"]["KVLAB_DATABASE_URL"].startswith("postgresql+psycopg://kvlab:***@")


def test_nginx_passes_neither_healthz_nor_the_metrics(served):
    require_nginx()
    app_port = int(served["url"].rsplit(":", 1)[1])
    with nginx_balancer([app_port]) as lb:
        assert _get(f"{lb['url']}/healthz")[0] == 404
        assert _get(f"{lb['url']}/_stcore/health") == (200, "ok")
        status, body = _get(f"{lb['url']}/metrics")
        assert "kvlab_sessions" not in body and "# TYPE" not in body
    directives = [ln.split("#", 1)[0].strip() for ln in (ROOT / "deploy" / "nginx.conf").read_text().splitlines()]
    targets = {ln.split()[1].rstrip(";") for ln in directives if ln.startswith("proxy_pass ")}
    upstreams = [ln.split()[1].rstrip(";") for ln in directives if re.match(r"server\s+app\b", ln)]
    assert targets == {"http://kvlab_app"} and upstreams == ["app:8501"]  # the app's port, nothing else
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    app = compose["services"]["app"]
    assert "ports" not in app and app["expose"] == ["8501"]  # the metrics port is published nowhere
    assert "/healthz" in " ".join(app["healthcheck"]["test"])
    assert compose["services"]["lb"]["depends_on"]["app"]["condition"] == "service_healthy"
    assert "/healthz" in (ROOT / "Dockerfile").read_text()
