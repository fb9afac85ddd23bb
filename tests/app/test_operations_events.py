"""The operator's log events from the pages (AppTest; the records as the app's logger gets them, before any
formatting): the teacher's unlock, listing and reset, the live round's start, reveal, new round, move, gate and
end, and a learner's sign-in, failed sign-in and saves. No event holds a key, a passphrase or a learner's name."""

from __future__ import annotations

import logging

import pytest
from streamlit.testing.v1 import AppTest

from progress import auth, open_store
from ui.logs import learner_id
from ui.signin import LEARNER_KEY

from .conftest import open_signin

KEY = "planted teacher key 61"
CLASS = "Room 36"
PASSPHRASE, WRONG = "planted passphrase 62", "planted wrong guess 63"
NAMES = ("Ana", "Bot1")


@pytest.fixture(autouse=True)
def server(tmp_path, monkeypatch):
    monkeypatch.setenv("KVLAB_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("KVLAB_DATABASE_URL", raising=False)
    monkeypatch.setenv("KVLAB_TEACHER_KEY", KEY)
    monkeypatch.setattr(auth, "SCRYPT_N", 2**4)


def events(caplog) -> list[tuple[str, str, dict]]:
    found = [(r.event, r.levelname, r.fields) for r in caplog.records if hasattr(r, "event") and hasattr(r, "fields")]
    text = repr(found) + "".join(r.getMessage() for r in caplog.records)
    for secret in (KEY, PASSPHRASE, WRONG):
        assert secret not in text
    for name in NAMES:
        assert f"'{name}'" not in text  # names only as pseudonyms
    return found


def _unlock(app_test, key: str):
    at = app_test("teacher", timeout=60).run()
    at.text_input(key="teacher_key").input(key)
    return at.button(key="FormSubmitter:teacher_unlock-Open the teacher view").click().run()


def test_teacher_actions_are_logged(app_test, caplog):
    store = open_store()
    store.sign_in(CLASS, "Ana", PASSPHRASE)
    store.save(CLASS, "Ana", {"visited": ["gqa"]})
    store.close()
    caplog.set_level(logging.INFO, logger="kvlab")
    _unlock(app_test, WRONG)
    at = _unlock(app_test, KEY)
    at.text_input(key="teacher_class_code").input(CLASS).run()
    at.download_button(key="teacher_csv").click().run()
    at.selectbox(key="teacher_reset_learner").select_index(0).run()
    at.button(key="teacher_reset").click().run()
    at.button(key="teacher_reset_confirm").click().run()
    assert not at.exception
    found = events(caplog)
    names = [name for name, _, _ in found]
    assert names.count("teacher_unlock_failed") == 1 and names.count("teacher_unlocked") == 1
    [failed] = [f for f in found if f[0] == "teacher_unlock_failed"]
    assert failed[1] == "WARNING" and "wrong teacher key" in failed[2]["reason"]
    listed = [f for name, _, f in found if name == "teacher_class_listed"]
    assert listed and listed[0] == {"class_code": CLASS, "learners": 1, "address": "127.0.0.1"}
    [exported] = [f for name, _, f in found if name == "teacher_csv_exported"]
    assert exported == listed[0]
    [reset] = [f for name, _, f in found if name == "teacher_passphrase_reset"]
    assert reset["learner_id"] == learner_id(CLASS, "Ana") and reset["reset"] is True


def test_live_round_actions_are_logged(app_test, caplog):
    store = open_store()
    store.sign_in(CLASS, "Ana", PASSPHRASE)
    caplog.set_level(logging.INFO, logger="kvlab")
    at = _unlock(app_test, KEY)
    at.text_input(key="teacher_class_code").input(CLASS).run()
    at.radio(key="teacher_mode").set_value("Live round (projector)").run()
    at.selectbox(key="live_lesson").select("gqa")
    at.button(key="live_start").click().run()
    at.button(key="live_reveal").click().run()
    at.button(key="live_again").click().run()
    at.selectbox(key="live_move_to").select("paged")
    at.button(key="live_move").click().run()
    store.sign_in(CLASS, "Bot1", "made up on the spot")
    next(t for t in at.toggle if t.key.startswith("live_closed_")).set_value(True).run()
    from progress.live import LiveBoard

    board = LiveBoard(store)
    assert board.answer(CLASS, "Bot1", "paged", 4) == 3
    at.run()
    at.button(key="live_admit_bot1").click().run()
    at.button(key="live_end").click().run()
    assert not at.exception
    store.close()
    found = [(name, f) for name, _, f in events(caplog) if name.startswith("live_")]
    assert found == [
        ("live_round_started", {"class_code": CLASS, "lesson": "gqa", "round": 1}),
        ("live_round_revealed", {"class_code": CLASS, "lesson": "gqa", "round": 1, "answers": 0}),
        ("live_round_new", {"class_code": CLASS, "lesson": "gqa", "round": 2}),
        ("live_class_moved", {"class_code": CLASS, "lesson": "paged", "previous": "gqa", "round": 3}),
        ("live_class_closed", {"class_code": CLASS, "round": 3}),
        ("live_name_admitted", {"class_code": CLASS, "learner_id": learner_id(CLASS, "Bot1")}),
        ("live_session_ended", {"class_code": CLASS, "lesson": "paged", "round": 3}),
    ]


def _signin_app() -> None:
    """The sidebar's sign-in and a page that records a visit (app.py's calls around a page)."""
    from ui.progress import mark_visited
    from ui.signin import sidebar_signin

    sidebar_signin()
    mark_visited("gqa")


def test_a_learners_sign_ins_and_saves_are_logged(caplog):
    caplog.set_level(logging.INFO, logger="kvlab")
    for passphrase in (PASSPHRASE, WRONG):
        at = open_signin(AppTest.from_function(_signin_app, default_timeout=60).run())
        at.sidebar.text_input(key="progress_name").input("Ana")
        at.sidebar.text_input(key="progress_class").input(CLASS)
        at.sidebar.text_input(key="progress_pass").input(passphrase)
        at.sidebar.button(key="FormSubmitter:progress_signin-Sign in").click().run()
        assert (LEARNER_KEY in at.session_state) is (passphrase == PASSPHRASE)
    found = events(caplog)
    pseudonym = {"class_code": CLASS, "learner_id": learner_id(CLASS, "Ana")}
    [signin] = [f for name, _, f in found if name == "signin"]
    assert signin == {**pseudonym, "status": "new", "address": "127.0.0.1"}
    [failed] = [(level, f) for name, level, f in found if name == "signin_failed"]
    assert failed[0] == "WARNING" and failed[1]["learner_id"] == pseudonym["learner_id"]
    assert "passphrase" in failed[1]["reason"] and failed[1]["address"] == "127.0.0.1"
    saved = [f for name, _, f in found if name == "progress_saved"]
    assert saved and saved[0]["class_code"] == CLASS and saved[0]["learner_id"] == pseudonym["learner_id"]
