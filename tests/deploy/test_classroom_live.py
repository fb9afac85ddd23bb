"""A live round on real components (bench/app/classroom_live.py): PostgreSQL, two app replicas and nginx on
loopback; learners follow the teacher's banner, predict, and the teacher's projector must count every answer.

Needs Debian's postgresql and nginx (scripts/install_postgres.sh, scripts/install_nginx.sh): without them the
round skips with the reason, and fails under CI (tests/pg.py).
"""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor

import pytest

from bench.app.classroom_live import LiveLearner, Room, completion_times, prediction_for, run_live
from lessons import predictions
from tests.pg import require_nginx, require_postgres


def _answered(idx: int, sent: float, done: float, joined: bool = True) -> LiveLearner:
    lr = LiveLearner(idx, 1.0, random.Random(idx))
    lr.check_sent, lr.check_done, lr.joined = sent, done, joined
    return lr


def test_an_answer_is_complete_when_the_projector_first_shows_that_many():
    room = Room([_answered(0, 1.0, 1.2), _answered(1, 2.0, 2.1), _answered(2, 2.5, 2.6, joined=False)], "", "", 0, 1)
    room.seen = [(1.1, 0), (1.5, 1), (2.05, 1), (2.4, 1), (3.0, 2)]
    # The first answer (done at 1.2) is shown at 1.5; the second (done at 2.1) only once the count reaches 2, at
    # 3.0 (1 at 2.4 is still the first); the third was never accepted, so it is nobody's to show.
    assert completion_times(room) == pytest.approx([0.5, 1.0])
    room.seen = [(1.5, 1), (2.4, 1)]
    assert completion_times(room) == pytest.approx([0.5])  # the second answer is missing


def test_the_seeded_class_holds_right_answers_slips_and_stray_guesses():
    pred = predictions.for_page("gqa")
    rng = random.Random(25)
    values = [prediction_for(i, rng) for i in range(10)]
    assert values.count(round(pred.answer)) == 4
    assert all(round(t.value, 2) in values for t in pred.traps[:3])
    assert [v for v in values if v != round(pred.answer) and v not in [round(t.value, 2) for t in pred.traps]]


@pytest.mark.slow
def test_a_live_round_on_two_replicas_shows_every_answer():
    require_postgres()
    require_nginx()
    # In a thread of its own: the browser tests' sync Playwright may leave an event loop on this one.
    with ThreadPoolExecutor(1) as pool:
        run = pool.submit(
            run_live, replicas=2, learners=4, think_s=0.3, ramp_s=1.0, idle_s=3.0, timeout_s=180, baseline_s=1.0
        )
        r = run.result()
    assert r["errors"] == 0, r["error_samples"]
    assert r["answers_accepted"] == r["answers_stored"] == r["answers_shown"] == r["learners"] == 4
    assert r["missing"] == 0 and r["followed"] == r["saw_reveal"] == 4
    assert 0 < r["complete_within_s"] < 30 and r["server_cpu_s_per_learner_10min"] > 0
    assert r["polling_cpu_s_per_learner_min"] >= 0
    assert sum(v["learners"] for v in r["per_replica"].values()) == 4
