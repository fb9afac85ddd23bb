"""Single sign-on in the sidebar and the teacher view (AppTest, with ``AppTest.user`` as the ID token's claims
that Streamlit's signed cookie carries): learners saved under their provider subject, signing out of the
provider signs the session out, and every way single sign-on can be unavailable says why in the sign-in box
and keeps the passphrase sign-in (unless KVLAB_OIDC_ONLY)."""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3

import pytest
from streamlit.testing.v1 import AppTest

from progress import auth
from progress.live import LiveBoard
from progress.store import ProgressStore
from tests.app.conftest import make_app_test, open_signin
from ui import sso

ISSUER = "https://idp.example/realms/class"
ANA_1 = {"is_logged_in": True, "iss": ISSUER, "sub": "u-1", "name": "Ana"}
ANA_2 = {"is_logged_in": True, "iss": ISSUER, "sub": "u-2", "name": "Ana"}
TEACHER = {"is_logged_in": True, "iss": ISSUER, "sub": "t-1", "name": "*Ms T*", "groups": ["staff", "teachers"]}


@pytest.fixture(autouse=True)
def server(tmp_path, monkeypatch):
    """A server with SQLite in tmp_path, single sign-on configured, Streamlit's [auth] loaded, the provider up."""
    monkeypatch.setattr(auth, "ARGON2_MEMORY_KIB", 8)  # quick sign-ins (Argon2id at 8 KiB)
    monkeypatch.setenv("KVLAB_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("KVLAB_DATABASE_URL", raising=False)
    monkeypatch.delenv("KVLAB_TEACHER_KEY", raising=False)
    for name, value in {
        "ISSUER": ISSUER,
        "CLIENT_ID": "kvlab",
        "CLIENT_SECRET": "client secret",
        "COOKIE_SECRET": "c" * 40,
        "REDIRECT_URI": "https://kvlab.example/oauth2callback",
        "CLASS": "Room 7",
        "TEACHER_CLAIM": "groups",
        "TEACHER_VALUE": "teachers",
    }.items():
        monkeypatch.setenv("KVLAB_OIDC_" + name, value)
    monkeypatch.setattr(sso, "streamlit_has_auth", lambda: True)  # what ui.serve's [auth] file gives Streamlit
    monkeypatch.setattr(sso, "provider_problem_now", lambda settings: None)
    return tmp_path


def _probe_app() -> None:
    """app.py's calls around a page: sidebar sign-in, then a page that records an answer."""
    import streamlit as st

    from ui.signin import persist, sidebar_signin

    progress = sidebar_signin()
    if answer := st.text_input("answer", key="probe_answer"):
        progress["quiz"]["probe.q"] = {"answer": answer, "correct": answer == "8"}
        persist(progress)
    if value := st.text_input("live answer", key="probe_live"):
        from ui.live import join_round

        st.session_state["probe_joined"] = join_round("kv_size", float(value)) is not None


def login_buttons(at: AppTest) -> list:
    return [b for b in at.sidebar.button if b.key == "progress_sso_login"]


def session(user: dict | None = None) -> AppTest:
    at = AppTest.from_function(_probe_app, default_timeout=60)
    if user is not None:
        at.user = dict(user)
    return at.run()


def subject_key(subject: str) -> str:
    return "sso:" + hashlib.sha256(f"{ISSUER}\n{subject}".encode()).hexdigest()[:36]


def stored(data) -> dict[str, tuple[str, dict]]:
    con = sqlite3.connect(data / "progress.sqlite3")
    try:
        return {
            k: (n, json.loads(d)) for k, n, d in con.execute("select learner_key, learner, data from kvlab_progress")
        }
    finally:
        con.close()


def test_a_signed_on_learner_saves_under_their_subject(server, caplog):
    caplog.set_level(logging.INFO, logger="kvlab.sso")
    at = session(ANA_1)
    signed = [r.getMessage() for r in caplog.records if r.getMessage().startswith("signed on:")]
    assert signed == [f"signed on: learner {subject_key('u-1')} in class 'Room 7'"]  # the key, never the name
    at.text_input(key="probe_answer").input("8").run()
    assert not at.exception and not at.error
    assert "progress_learner" not in at.session_state  # no passphrase identity
    rows = stored(server)
    assert rows[subject_key("u-1")] == ("Ana", rows[subject_key("u-1")][1])
    assert rows[subject_key("u-1")][1]["quiz"]["probe.q"]["answer"] == "8"
    other = session(ANA_2)  # another "Ana": her own, empty progress
    assert "probe.q" not in other.session_state["progress"]["quiz"]
    again = session(ANA_1)  # a new session of the first Ana: her answer comes back
    assert again.session_state["progress"]["quiz"]["probe.q"]["answer"] == "8"
    assert any("Signed in by your school as" in s.value for s in again.sidebar.success)
    assert set(stored(server)) == {subject_key("u-1"), subject_key("u-2")}


def test_a_signed_on_learner_answers_a_live_round_under_their_subject(server):
    store = ProgressStore(f"sqlite:///{server / 'progress.sqlite3'}")
    board = LiveBoard(store)
    board.open_round("Room 7", "kv_size")
    for user, value in ((ANA_1, "128"), (ANA_2, "256")):
        at = session(user)
        at.text_input(key="probe_live").input(value).run()
        assert not at.exception and at.session_state["probe_joined"]
    assert sorted(board.answers("Room 7", 1)) == [128.0, 256.0]  # two Anas, two answers
    assert board.my_answer("Room 7", "Ana", 1, learner_key=subject_key("u-2")) == 256.0
    store.close()


def test_signing_out_of_the_provider_signs_the_session_out(server):
    at = session(ANA_1)
    at.text_input(key="probe_answer").input("8").run()
    at.user = {"is_logged_in": False}
    at.run()
    assert sso.SSO_KEY not in at.session_state and "progress_learner" not in at.session_state
    assert not any("Signed in by your school" in c.value for c in at.sidebar.caption)


def test_the_box_offers_the_provider_and_the_passphrase(monkeypatch):
    at = open_signin(session())
    assert [b.label for b in login_buttons(at)] == [sso.BUTTON_LABEL]
    assert at.sidebar.text_input(key="progress_pass")  # both paths (the default)
    monkeypatch.setenv("KVLAB_OIDC_ONLY", "true")
    only = open_signin(session())
    assert login_buttons(only) and not only.sidebar.text_input


@pytest.mark.parametrize(
    ("setup", "says"),
    [
        (lambda mp: mp.delenv("KVLAB_OIDC_CLIENT_ID"), "KVLAB_OIDC_CLIENT_ID is not set"),
        (lambda mp: mp.setattr(sso, "streamlit_has_auth", lambda: False), "started without its sign-on settings"),
        (
            lambda mp: mp.setattr(
                sso, "provider_problem_now", lambda s: "the provider at X cannot be reached (refused)"
            ),
            "cannot be reached",
        ),
    ],
)
def test_unavailable_sso_says_why_and_keeps_the_passphrase_sign_in(monkeypatch, setup, says):
    setup(monkeypatch)
    at = open_signin(session())
    assert not at.exception
    (warning,) = at.sidebar.warning
    assert warning.value.startswith("Single sign-on is unavailable:") and says in warning.value.replace("`", "")
    assert not login_buttons(at)
    at.sidebar.text_input(key="progress_name").input("Bea")
    at.sidebar.text_input(key="progress_class").input("Room 7")
    at.sidebar.text_input(key="progress_pass").input("bea's long passphrase")
    at.sidebar.button(key="FormSubmitter:progress_signin-Sign in").click().run()
    assert at.session_state["progress_learner"] == ("Room 7", "Bea") and not at.error


def test_only_sso_with_the_provider_down_offers_no_passphrase(monkeypatch):
    monkeypatch.setenv("KVLAB_OIDC_ONLY", "true")
    monkeypatch.setattr(sso, "provider_problem_now", lambda s: "the provider at X cannot be reached (refused)")
    at = open_signin(session())
    (warning,) = at.sidebar.warning
    assert "kept for this session only" in warning.value and not at.sidebar.text_input


def test_a_token_from_another_issuer_is_refused(server, caplog):
    at = open_signin(session({**ANA_1, "iss": "https://evil.example"}))
    at.run()
    refused = [r for r in caplog.records if r.getMessage().startswith("single sign-on refused:")]
    assert len(refused) == 1 and "evil.example" in refused[0].getMessage()  # once a session, not every run
    (warning,) = at.sidebar.warning
    assert "issuer" in warning.value and sso.SSO_KEY not in at.session_state
    assert "progress.sqlite3" not in {p.name for p in server.iterdir()} or not stored(server)


def _teacher_view(user: dict) -> AppTest:
    at = make_app_test("teacher", timeout=60)
    at.user = dict(user)
    return at.run()


def test_the_teacher_view_opens_by_the_claim_only(server):
    store = ProgressStore(f"sqlite:///{server / 'progress.sqlite3'}")
    store.save("Room 7", "*Ana*", {"visited": ["bandwidth"]}, learner_key=subject_key("u-1"))
    store.sign_in("Room 7", "Bea", "bea's long passphrase")
    store.save("Room 7", "Bea", {"visited": ["gqa"]})
    store.close()
    learner = _teacher_view(ANA_1)
    assert not learner.exception
    (note,) = learner.info
    assert "The teacher view is closed" in note.value and not learner.main.text_input
    teacher = _teacher_view(TEACHER)
    assert not teacher.exception and [t.key for t in teacher.main.text_input] == ["teacher_class_code"]  # no key
    teacher.text_input(key="teacher_class_code").input("Room 7").run()
    assert not teacher.exception and not teacher.error
    table = teacher.dataframe[0]
    assert sorted(table.value["learner"]) == ["*Ana*", "Bea"]
    reset = teacher.selectbox(key="teacher_reset_learner")
    assert reset.options == ["Bea"]  # a signed-on learner has no passphrase here to reset
