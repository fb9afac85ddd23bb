"""Sidebar sign-in (ui/signin.py): passphrases (set on first sign-in, checked after, the wait after failures,
a record from before passphrases), two tabs of one learner merging, and the course keeping working,
session-only, when the database is damaged or locked."""

import itertools
import sqlite3
from datetime import datetime, timezone

import pytest
from streamlit.testing.v1 import AppTest

from progress import auth
from progress.store import ProgressStore, progress_table
from tests.app.conftest import open_signin

PASS = "blue whale song"


@pytest.fixture(autouse=True)
def cheap_hash(monkeypatch):
    """New hashes at a low Argon2id cost, so each sign-in is quick (the stored parameters say which)."""
    monkeypatch.setattr(auth, "ARGON2_MEMORY_KIB", 8)  # quick sign-ins (Argon2id at 8 KiB)


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("KVLAB_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("KVLAB_DATABASE_URL", raising=False)
    return tmp_path


def _probe_app() -> None:
    """app.py's calls around a page: sidebar sign-in, then a page that records progress."""
    import streamlit as st

    from ui.signin import persist, sidebar_signin

    progress = sidebar_signin()
    answer = st.text_input("answer", key="probe_answer")
    if answer:
        progress["quiz"]["probe.q"] = {"answer": answer, "correct": answer == "8"}
        persist(progress)
    other = st.text_input("other", key="probe_other")
    if other:
        progress["quiz"]["probe.o"] = {"answer": other, "correct": False}
        persist(progress)
    if st.button("clear", key="probe_clear"):
        progress["quiz"].pop("probe.q", None)
        persist(progress)


def _sign_in(at, name: str, code: str, passphrase: str = PASS):
    open_signin(at)
    at.sidebar.text_input(key="progress_name").input(name)
    at.sidebar.text_input(key="progress_class").input(code)
    at.sidebar.text_input(key="progress_pass").input(passphrase)
    return at.sidebar.button(key="FormSubmitter:progress_signin-Sign in").click().run()


def _new_session() -> AppTest:
    return AppTest.from_function(_probe_app, default_timeout=60).run()


def _store(data_dir) -> ProgressStore:
    return ProgressStore(f"sqlite:///{data_dir / 'progress.sqlite3'}")


def test_first_sign_in_sets_the_passphrase_and_a_wrong_one_is_refused(data_dir):
    at = _sign_in(_new_session(), "Ana", "c1")
    assert not at.exception and not at.error
    assert at.session_state["progress_learner"] == ("c1", "Ana")
    assert any("Passphrase set for" in s.value for s in at.sidebar.success)
    field = open_signin(_new_session()).sidebar.text_input(key="progress_pass")
    assert field.label.startswith("Passphrase") and field.proto.type == field.proto.PASSWORD
    other = _sign_in(_new_session(), "ANA", "C1", "not her passphrase")
    assert "progress_learner" not in other.session_state
    (err,) = other.sidebar.error
    assert "wrong passphrase for this name in this class" in err.value and "ask your teacher to reset it" in err.value
    assert "`ANA`" in err.value and "`C1`" in err.value  # the names, as inert code spans
    same = _sign_in(_new_session(), "ana", "c1")
    assert same.session_state["progress_learner"] == ("c1", "ana") and not same.sidebar.error


def test_a_short_passphrase_gets_a_clear_message(data_dir):
    at = _sign_in(_new_session(), "Ana", "c1", "abc")
    assert "progress_learner" not in at.session_state and not at.exception
    assert (
        "at least 8 visible characters" in at.sidebar.error[0].value and "this one has 3" in at.sidebar.error[0].value
    )


def test_repeated_failures_slow_the_guessing_tab_not_the_owner(data_dir, monkeypatch):
    # The app's store on a clock that moves a millisecond a reading: the guesser's 2 s wait cannot run out
    # while a busy machine runs the next sign-in, so "refused while its wait runs" is not left to timing.
    ticks = itertools.count()

    class SlowClockStore(ProgressStore):
        def __init__(self, url: str) -> None:
            super().__init__(url, clock=lambda: 1_700_000_000 + next(ticks) / 1000)

    monkeypatch.setattr("ui.signin.ProgressStore", SlowClockStore)
    _sign_in(_new_session(), "Ana", "c1")
    at = _new_session()
    for i in range(4):
        _sign_in(at, "Ana", "c1", f"guess number {i}")
        assert "wrong passphrase" in at.sidebar.error[0].value
    _sign_in(at, "Ana", "c1", "guess number 5")
    assert "wait 2 s before the next try" in at.sidebar.error[0].value
    _sign_in(at, "Ana", "c1")  # the guessing tab, even with the right passphrase: refused while its wait runs
    assert "progress_learner" not in at.session_state
    assert "too many wrong tries; wait" in at.sidebar.error[0].value and not at.exception
    owner = _sign_in(_new_session(), "Ana", "c1")  # Ana's own tab: no failures of its own, in at once
    assert owner.session_state["progress_learner"] == ("c1", "Ana") and not owner.sidebar.error


def test_the_session_id_and_the_forwarded_address_reach_the_store(data_dir, monkeypatch):
    from progress.store import ProgressStore as Store

    seen = []
    real = Store.sign_in

    def spy(self, class_code, learner, passphrase, client):
        seen.append(client)
        return real(self, class_code, learner, passphrase, client)

    monkeypatch.setattr(Store, "sign_in", spy)
    at = _new_session()
    _sign_in(at, "Ana", "c1", "not long")
    _sign_in(at, "Ana", "c1", "not long")
    _sign_in(_new_session(), "Ana", "c1", "not long")
    assert seen[0] == seen[1] and seen[0].session != seen[2].session and len(seen[0].session) == 32
    assert seen[0].address == "127.0.0.1"  # AppTest has no connection: loopback


def test_a_record_from_before_passphrases_keeps_its_progress_and_gets_one(data_dir):
    store = _store(data_dir)
    with store.engine.begin() as conn:
        conn.execute(
            progress_table.insert().values(
                class_code="c1",
                learner_key="old",
                learner="Old",
                data='{"visited": ["gqa"], "quiz": {"probe.q": {"answer": "8", "correct": true}}, "diagnosis": {}}',
                updated_at=datetime.now(timezone.utc),
            )
        )
    store.close()
    at = _sign_in(_new_session(), "Old", "c1")
    assert not at.exception and not at.error
    assert any("your saved progress is kept" in s.value for s in at.sidebar.success)
    assert at.session_state["progress"]["quiz"]["probe.q"] == {"answer": "8", "correct": True}
    assert "gqa" in at.session_state["progress"]["visited"]
    again = _sign_in(_new_session(), "old", "C1", "the wrong one")
    assert "wrong passphrase" in again.sidebar.error[0].value  # from now on the name is theirs


def test_two_tabs_of_one_learner_merge_and_a_clear_holds(data_dir):
    tab1 = _sign_in(_new_session(), "Ana", "c1")
    tab2 = _sign_in(_new_session(), "Ana", "c1")
    tab1.text_input(key="probe_answer").input("8").run()
    # Tab 2 never saw tab 1's answer; its own save brings it in: the session's dict holds the union.
    tab2.text_input(key="probe_other").input("x").run()
    assert tab2.session_state["progress"]["quiz"]["probe.q"]["answer"] == "8"
    assert tab2.session_state["progress"]["quiz"]["probe.o"]["answer"] == "x"
    store = _store(data_dir)
    assert {k: v["answer"] for k, v in store.load("c1", "ana")["quiz"].items()} == {"probe.q": "8", "probe.o": "x"}
    tab2.button(key="probe_clear").click().run()  # tab 2 clears the answer it got from tab 1
    assert "probe.q" not in store.load("c1", "ana")["quiz"]
    # Tab 1 still holds that answer; its next save (another answer) must not bring it back.
    tab1.text_input(key="probe_other").input("y").run()
    saved = store.load("c1", "ana")["quiz"]
    assert "probe.q" not in saved and saved["probe.o"]["answer"] == "y"  # the later write of probe.o wins
    assert "probe.q" not in tab1.session_state["progress"]["quiz"]  # tab 1 now shows the clear too
    store.close()


def test_a_teacher_reset_signs_out_the_sessions_of_the_old_passphrase(data_dir):
    squatter = _sign_in(_new_session(), "Ana", "c1", "got here first")
    store = _store(data_dir)
    assert store.reset_passphrase("c1", "Ana")  # the real Ana asked the teacher
    ana = _sign_in(_new_session(), "Ana", "c1", "the real anas one")
    assert ana.session_state["progress_learner"] == ("c1", "Ana")
    squatter.text_input(key="probe_answer").input("4").run()
    assert not squatter.exception and "progress_learner" not in squatter.session_state
    assert any("Signed out" in w.value and "was reset or set again" in w.value for w in squatter.warning)
    assert "probe.q" not in store.load("c1", "ana")["quiz"]  # nothing of theirs reached Ana's record
    ana.text_input(key="probe_answer").input("8").run()
    assert store.load("c1", "ana")["quiz"]["probe.q"]["answer"] == "8"
    store.close()


def test_ui_keeps_working_on_a_corrupt_database(data_dir):
    (data_dir / "progress.sqlite3").write_bytes(b"garbage" * 500)
    at = _new_session()
    assert not at.exception
    assert not any("damaged" in c.value for c in at.sidebar.caption)  # the box is closed: nothing in it is made
    assert any("damaged" in c.value for c in open_signin(at).sidebar.caption)
    _sign_in(at, "Ana", "c1")
    at.text_input(key="probe_answer").input("8").run()
    assert not at.exception and not at.error
    assert at.session_state["progress"]["quiz"]["probe.q"]["correct"] is True  # kept for the session


def test_ui_falls_back_when_the_database_locks_mid_lesson(data_dir, monkeypatch):
    monkeypatch.setattr("progress.store.SQLITE_BUSY_TIMEOUT_S", 0.5)  # the lock below is never released in time
    at = _sign_in(_new_session(), "Ana", "c1")
    assert at.session_state["progress_learner"] == ("c1", "Ana")
    con = sqlite3.connect(data_dir / "progress.sqlite3", timeout=0)
    con.execute("BEGIN EXCLUSIVE")  # another program holds the write lock
    try:
        at.text_input(key="probe_answer").input("4").run()
    finally:
        con.rollback()
        con.close()
    assert not at.exception
    assert any("lock" in w.value for w in at.warning)
    assert at.session_state["progress"]["quiz"]["probe.q"]["answer"] == "4"  # still in the session
    at.text_input(key="probe_answer").input("8").run()  # later changes: session only, no crash
    assert not at.exception and any("this session only" in c.value for c in at.sidebar.caption)
