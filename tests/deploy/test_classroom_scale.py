"""The classroom deployment on real components (bench/app/classroom_scale.py): PostgreSQL, app replicas and nginx
with deploy/nginx.conf on loopback; one replica is killed mid-run and no saved progress may be lost.

Needs Debian's postgresql and nginx (scripts/install_postgres.sh, scripts/install_nginx.sh): without them
these tests skip with the reason, and fail under CI (tests/pg.py).
"""

from __future__ import annotations

import random
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from bench.app.classroom_scale import Learner, lost_in_database, plan, run_scale
from bench.app_server import NGINX_SITE, fill_nginx_template, find_nginx, loopback_nginx_conf
from progress.store import ProgressStore
from tests.pg import require_nginx, require_postgres


def test_loopback_config_is_the_deploy_file_with_loopback_addresses(tmp_path):
    conf = loopback_nginx_conf([8001, 8002], 9000, tmp_path)
    lines = set(conf.splitlines())
    site = fill_nginx_template(NGINX_SITE.read_text())  # its ${KVLAB_...} names filled, as compose does
    swapped = ("app:8501", "listen 80;", "listen 80 default_server;")
    kept = [ln for ln in site.splitlines() if not any(part in ln for part in swapped)]
    assert all(("    " + ln if ln.strip() else "") in lines for ln in kept)  # every other line verbatim
    directives = "\n".join(ln.split("#", 1)[0] for ln in conf.splitlines())  # comments may name the old lines
    assert "server 127.0.0.1:8001;" in directives and "server 127.0.0.1:8002;" in directives
    assert "app:8501" not in directives and "listen 80;" not in directives
    assert "listen 127.0.0.1:9000;" in directives and "listen 127.0.0.1:9000 default_server;" in directives
    assert "listen 80 default_server;" not in directives  # the server that refuses other Hosts is on loopback too
    assert "proxy_set_header Host $http_host;" in conf  # Origin and Host must agree through the proxy


def test_loopback_config_passes_nginx_own_check(tmp_path):
    require_nginx()
    conf = tmp_path / "nginx.conf"
    conf.write_text(loopback_nginx_conf([8001, 8002], 9000, tmp_path))
    done = subprocess.run([find_nginx(), "-t", "-p", str(tmp_path), "-c", str(conf)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_loss_detector_counts_what_the_database_lacks(tmp_path):
    url = f"sqlite:///{tmp_path / 'p.sqlite3'}"
    a, b = plan(0), plan(1)
    assert (a.name, a.code) != (b.name, b.code) and a.name == b.name  # same name, two classes
    a.saved_visits, a.saved_answers = {"gqa", "paged"}, {"gqa.mqa": "One"}
    b.saved_visits = {"gqa"}
    store = ProgressStore(url)
    store.save(a.code, a.name, {"visited": ["gqa"], "quiz": {"gqa.mqa": {"answer": "Two", "correct": False}}})
    store.save(b.code, b.name, {"visited": ["gqa", "paged"], "quiz": {}})
    store.close()
    lost = lost_in_database(url, [a, b, Learner(2, "nobody", "class-c", [], random.Random(0))])
    assert len(lost) == 2 and "visit paged" in lost[0] and "gqa.mqa='One'" in lost[1]


@pytest.mark.slow
def test_a_replica_failure_loses_no_saved_progress():
    require_postgres()
    require_nginx()
    # In a thread of its own: the browser tests' sync Playwright may leave an event loop on this one.
    with ThreadPoolExecutor(1) as pool:
        run = pool.submit(run_scale, replicas=2, learners=8, think_s=0.3, kill_at=0.4, ramp_s=2.0, timeout_s=240)
        r = run.result()
    assert not r["timed_out"] and r["database"] == "postgresql+psycopg" and r["replicas"] == 2
    assert r["lost_progress"] == 0, r["lost_samples"]
    assert r["errors_on_survivors"] == 0, r["error_samples"]
    assert r["errors_on_killed_replica"] == []  # before it died, only its disconnect was expected
    assert r["dead_replica_learners"] >= 1  # the killed replica served learners when it died ...
    assert r["reconnected"] == r["dropped_learners"] == r["dead_replica_learners"]  # ... and all came back
    assert r["saved_actions"] == r["actions_planned"] == r["actions_done"]  # every learner finished on a survivor
    killed = [v for v in r["per_replica"].values() if v["killed"]]
    survivor = [v for v in r["per_replica"].values() if not v["killed"]]
    assert len(killed) == 1 and survivor[0]["learners_after_failover"] == r["dropped_learners"]
