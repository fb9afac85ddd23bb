"""Single sign-on learners in the progress store (SQLite and PostgreSQL): saved under the key of their
provider subject, never under the name shown, and out of reach of every passphrase path (a typed name, a
lookalike of the shown name, a teacher's reset)."""

from __future__ import annotations

import hashlib

import pytest
import sqlalchemy as sa

from progress.live import LiveBoard
from progress.store import NullStore, auth_table, progress_table

PASS = "correct horse battery"


def sso_key(subject: str) -> str:
    """The stored key of ``subject`` at one issuer, as docs/SECURITY.md states it."""
    return "sso:" + hashlib.sha256(f"https://idp.example\n{subject}".encode()).hexdigest()[:36]


def rows(store, table: sa.Table) -> list[dict]:
    with store.engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(sa.select(table))]


def test_two_learners_called_ana_stay_two(store):
    a, b = sso_key("u-1"), sso_key("u-2")
    store.save("Room 7", "Ana", {"visited": ["bandwidth"]}, learner_key=a)
    store.save("Room 7", "Ana", {"visited": ["gqa"]}, learner_key=b)
    assert store.load("Room 7", "Ana", learner_key=a)["visited"] == ["bandwidth"]
    assert store.load("room 7", "whatever name", learner_key=b)["visited"] == ["gqa"]  # the key finds them
    assert store.load("Room 7", "Ana")["visited"] == []  # a typed "Ana" is nobody's SSO progress
    stored = {r["learner_key"]: r["learner"] for r in rows(store, progress_table)}
    assert stored == {a: "Ana", b: "Ana"}
    records = store.class_records("Room 7")
    assert [r["sso"] for r in records] == [True, True] and not any(r["has_passphrase"] for r in records)


def test_the_shown_name_is_cleaned_display_text(store):
    key = sso_key("u-3")
    store.save("Room 7", "O'Brien <b>\u200b" + "x" * 50, {"visited": ["gqa"]}, learner_key=key)
    (row,) = rows(store, progress_table)
    assert row["learner"] == ("O'Brien <b>" + "x" * 50)[:40] and row["learner_key"] == key


def test_no_passphrase_path_reaches_an_sso_learner(store):
    key = sso_key("u-1")
    store.save("Room 7", "Sasha", {"visited": ["bandwidth"]}, learner_key=key)
    lookalike = store.sign_in("Room 7", "Ѕаѕһа", PASS)  # Cyrillic letters that look like "Sasha"
    assert (lookalike.status, lookalike.learner) == ("new", "Ѕаѕһа")  # a learner of its own, not the SSO one
    typed = store.sign_in("Room 7", "Sasha", PASS)  # the shown name typed: the passphrase learners' "Sasha"
    assert (typed.status, typed.learner) == ("verified", "Ѕаѕһа")
    assert all(r["learner_key"] != key for r in rows(store, auth_table))  # no passphrase was set on the key
    assert not store.reset_passphrase("Room 7", "Sasha")  # the SSO learner's shown name: nothing to reset
    assert store.reset_passphrase("Room 7", "Ѕаѕһа")  # resets the typed one ...
    assert store.load("Room 7", "Sasha", learner_key=key)["visited"] == ["bandwidth"]  # ... and not this one


def test_a_key_must_be_an_sso_key(store):
    for bad in ("ana", "sso", "x:" + "0" * 36, "sso:" + "0" * 37):
        with pytest.raises(ValueError, match="not a single sign-on learner's key"):
            store.save("Room 7", "Ana", {"visited": []}, learner_key=bad)
        with pytest.raises(ValueError, match="not a single sign-on learner's key"):
            NullStore().load("Room 7", "Ana", learner_key=bad)
    assert NullStore().save("Room 7", "Ana <b>", {"visited": ["gqa"]}, learner_key=sso_key("u"))["visited"] == ["gqa"]


def test_live_answers_are_keyed_by_the_subject_too(store):
    board = LiveBoard(store)
    board.open_round("Room 7", "kv_size")
    board.set_closed("Room 7", True)  # closed to new names: the provider's learners are no made-up names
    a, b = sso_key("u-1"), sso_key("u-2")
    assert board.answer("Room 7", "Ana", "kv_size", 128.0, learner_key=a) == 1
    assert board.answer("Room 7", "Ana", "kv_size", 256.0, learner_key=b) == 1  # another Ana: another answer
    assert board.answer("Room 7", "Ana", "kv_size", 130.0, learner_key=a) == 1  # hers replaced
    assert sorted(board.answers("Room 7", 1)) == [130.0, 256.0]
    assert board.my_answer("Room 7", "Ana", 1, learner_key=b) == 256.0
    assert board.my_answer("Room 7", "Ana", 1) is None  # a typed "Ana" answered nothing
    with pytest.raises(ValueError, match="not a single sign-on learner's key"):
        board.answer("Room 7", "Ana", "kv_size", 1.0, learner_key="ana")
