"""Sidebar sign-in (ui/signin.py): the course keeps working, session-only, when the database is damaged or locked."""

import sqlite3

from streamlit.testing.v1 import AppTest


def _probe_app() -> None:
    """app.py's calls around a page: sidebar sign-in, then a page that records progress."""
    import streamlit as st

    from ui.signin import persist, sidebar_signin

    progress = sidebar_signin()
    answer = st.text_input("answer", key="probe_answer")
    if answer:
        progress["quiz"]["probe.q"] = {"answer": answer, "correct": answer == "8"}
        persist(progress)


def _sign_in(at, name: str, code: str):
    at.sidebar.text_input(key="progress_name").input(name)
    at.sidebar.text_input(key="progress_class").input(code)
    return at.sidebar.button[0].click().run()


def test_ui_keeps_working_on_a_corrupt_database(tmp_path, monkeypatch):
    (tmp_path / "progress.sqlite3").write_bytes(b"garbage" * 500)
    monkeypatch.setenv("KVLAB_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("KVLAB_DATABASE_URL", raising=False)
    at = AppTest.from_function(_probe_app, default_timeout=60).run()
    assert not at.exception
    assert any("damaged" in c.value for c in at.sidebar.caption)
    _sign_in(at, "Ana", "c1")
    at.text_input(key="probe_answer").input("8").run()
    assert not at.exception and not at.error
    assert at.session_state["progress"]["quiz"]["probe.q"]["correct"] is True  # kept for the session


def test_ui_falls_back_when_the_database_locks_mid_lesson(tmp_path, monkeypatch):
    monkeypatch.setenv("KVLAB_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("KVLAB_DATABASE_URL", raising=False)
    at = _sign_in(AppTest.from_function(_probe_app, default_timeout=60).run(), "Ana", "c1")
    assert at.session_state["progress_learner"] == ("c1", "Ana")
    con = sqlite3.connect(tmp_path / "progress.sqlite3", timeout=0)
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
