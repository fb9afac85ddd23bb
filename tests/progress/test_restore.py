"""A learner's progress after their server (replica) is lost: signing in on another one restores the sidebar's
lesson ticks and scores, the check answers and the checked prediction on the page, on SQLite and on PostgreSQL
(AppTest); and two tabs of one learner on one lesson never undo each other's answers.

Each AppTest is a new Streamlit session; clearing Streamlit's resource cache between them gives the second
session a new database engine, as a fresh replica process has. The app is app.py's composition around a
lesson (sidebar, page header's visit mark, the lesson check, sidebar progress) without the navigation.
"""

from __future__ import annotations

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from lessons import predictions, quizzes
from progress.store import ProgressStore
from tests.app.conftest import open_signin
from ui.course import LESSON_IDS


def _lesson_app() -> None:
    """app.py's calls around the gqa lesson: sidebar with sign-in, the visit, the check, sidebar progress."""
    from ui.progress import ensure_progress, mark_visited
    from ui.quiz import lesson_check
    from ui.sidebar import sidebar, sidebar_progress

    ensure_progress()
    slot = sidebar()
    mark_visited("gqa")
    lesson_check("gqa")
    sidebar_progress(slot)


def _replica(url: str, monkeypatch) -> AppTest:
    """A new session on a "new replica" (no shared engine from an earlier session) of the app on ``url``."""
    monkeypatch.setenv("KVLAB_DATABASE_URL", url)
    st.cache_resource.clear()
    at = AppTest.from_function(_lesson_app, default_timeout=60).run()
    assert not at.exception and not at.error
    return at


def _sign_in(at: AppTest, name: str, code: str, passphrase: str = "sam's passphrase") -> AppTest:
    open_signin(at)
    at.sidebar.text_input(key="progress_name").input(name)
    at.sidebar.text_input(key="progress_class").input(code)
    at.sidebar.text_input(key="progress_pass").input(passphrase)
    at.sidebar.button(key="FormSubmitter:progress_signin-Sign in").click().run()
    assert not at.exception and not at.error
    return at


def _sidebar_counts(at: AppTest) -> tuple[str, str]:
    visited = at.sidebar.get("progress")[0].proto.text
    score = next(c.value for c in at.sidebar.caption if c.value.startswith("Quiz answers correct"))
    return visited, score


@pytest.mark.slow
def test_sign_in_on_another_replica_restores_ticks_scores_and_answers(store_url, monkeypatch):
    first, second = quizzes.for_page("gqa")[:2]
    wrong = next(o for o in second.options if o != second.correct_option)
    a = _sign_in(_replica(store_url, monkeypatch), "Sam", "Room-1")
    a.radio(key=f"quiz_{first.id}").set_value(first.correct_option).run()
    a.radio(key=f"quiz_{second.id}").set_value(wrong).run()
    a.number_input(key="predict_gqa").set_value(512).run()
    a.button(key="predict_gqa_check").click().run()
    assert not a.exception and not a.error
    shown = _sidebar_counts(a)
    assert shown == (f"Lessons visited: 1 / {len(LESSON_IDS)}", f"Quiz answers correct: 1 / {len(quizzes.BANK)}")
    # What the page showed is already committed: an independent engine reads it back now.
    direct = ProgressStore(store_url)
    saved = direct.load("room-1", "sam")
    direct.close()
    assert saved["visited"] == ["gqa"]
    assert saved["quiz"] == {
        first.id: {"answer": first.correct_option, "correct": True},
        second.id: {"answer": wrong, "correct": False},
    }
    answer = predictions.for_page("gqa").answer
    assert saved["predict"] == {"gqa": {"value": 512.0, "answer": answer, "close": False}}

    # The replica is gone; the learner opens the course again elsewhere and signs in.
    b = _replica(store_url, monkeypatch)
    assert b.radio(key=f"quiz_{first.id}").value is None  # a new session knows nothing yet
    b = _sign_in(b, "SAM", "room-1")
    assert _sidebar_counts(b) == shown
    assert b.radio(key=f"quiz_{first.id}").value == first.correct_option  # the radios on screen show them
    assert b.radio(key=f"quiz_{second.id}").value == wrong
    assert b.number_input(key="predict_gqa").value == 512  # the prediction and its verdict come back too
    assert any(w.value.startswith("Off — you predicted 512 KiB") for w in b.warning)
    b.run()  # and keep showing them on later runs (no answer is re-recorded differently)
    assert b.radio(key=f"quiz_{second.id}").value == wrong and _sidebar_counts(b) == shown

    # The same name in another class is another learner: nothing of Sam's from Room-1.
    c = _sign_in(_replica(store_url, monkeypatch), "Sam", "Room-2")
    assert _sidebar_counts(c) == (
        f"Lessons visited: 1 / {len(LESSON_IDS)}",
        f"Quiz answers correct: 0 / {len(quizzes.BANK)}",
    )
    assert c.radio(key=f"quiz_{first.id}").value is None
    direct = ProgressStore(store_url)
    assert direct.load("Room-2", "Sam")["quiz"] == {} and direct.load("Room-1", "Sam")["quiz"] == saved["quiz"]
    assert direct.load("Room-2", "Sam")["predict"] == {} and c.number_input(key="predict_gqa").value is None
    direct.close()


def test_an_answer_shows_again_after_navigating_away_and_back(tmp_path, monkeypatch):
    # The check's radios read the saved answer: a remount (another page in between) shows it, not a blank.
    q = quizzes.for_page("gqa")[0]
    at = _replica(f"sqlite:///{tmp_path / 'p.sqlite3'}", monkeypatch)
    at.radio(key=f"quiz_{q.id}").set_value(q.options[0]).run()
    fresh = AppTest.from_function(_lesson_app, default_timeout=60)
    fresh.session_state["progress"] = at.session_state["progress"]  # same progress, radio never mounted
    fresh.run()
    assert fresh.radio(key=f"quiz_{q.id}").value == q.options[0]


def test_a_checked_prediction_shows_again_after_navigating_away_and_back(tmp_path, monkeypatch):
    at = _replica(f"sqlite:///{tmp_path / 'p.sqlite3'}", monkeypatch)
    at.number_input(key="predict_gqa").set_value(69).run()  # DeepSeek-V3's 68.6 KiB per token, within tolerance
    at.button(key="predict_gqa_check").click().run()
    fresh = AppTest.from_function(_lesson_app, default_timeout=60)
    fresh.session_state["progress"] = at.session_state["progress"]  # same progress, input never mounted
    fresh.run()
    assert fresh.number_input(key="predict_gqa").value == 69
    assert any(s.value.startswith("Close — you predicted 69 KiB") for s in fresh.success)


def test_two_tabs_on_one_lesson_keep_each_others_answers(store_url, monkeypatch):
    # Tab B answered q2, then tab A changed q2; B's next answer (q1) saves and adopts A's q2. B's q2 radio
    # still shows B's old choice for the rest of that run: it must not be recorded again over A's newer one.
    q1, q2 = quizzes.for_page("gqa")[:2]
    wrong2 = next(o for o in q2.options if o != q2.correct_option)
    a = _sign_in(_replica(store_url, monkeypatch), "Sam", "Room-1")
    b = _sign_in(AppTest.from_function(_lesson_app, default_timeout=60).run(), "Sam", "Room-1")
    b.radio(key=f"quiz_{q2.id}").set_value(q2.correct_option).run()
    a.run()  # tab A has not seen B's answer (no save since)
    a.radio(key=f"quiz_{q2.id}").set_value(wrong2).run()  # the later answer to q2
    b.radio(key=f"quiz_{q1.id}").set_value(q1.correct_option).run()
    assert not b.exception and not b.error
    assert b.session_state["progress"]["quiz"][q2.id]["answer"] == wrong2  # B's dict holds A's answer at once
    direct = ProgressStore(store_url)
    saved = direct.load("room-1", "sam")["quiz"]
    assert {k: v["answer"] for k, v in saved.items()} == {q1.id: q1.correct_option, q2.id: wrong2}
    b.run()  # the next run shows A's answer in B's radio, and records nothing over it
    assert b.radio(key=f"quiz_{q2.id}").value == wrong2
    assert direct.load("room-1", "sam")["quiz"][q2.id]["answer"] == wrong2
    # A choice B makes now is a new answer and wins.
    b.radio(key=f"quiz_{q2.id}").set_value(q2.correct_option).run()
    assert direct.load("room-1", "sam")["quiz"][q2.id]["answer"] == q2.correct_option
    direct.close()
