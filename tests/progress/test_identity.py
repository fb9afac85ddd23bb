"""Learners own their names: passphrases (Argon2id, never stored in plain; the last release's scrypt hashes are
verified and replaced), the wait after failures, the teacher's reset and key, name normalisation, and the
upgrade of a schema-1 database. SQLite and PostgreSQL.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import threading

import argon2
import pytest
import sqlalchemy as sa

from progress import auth, migrate
from progress.auth import Client, SignInError, lock_seconds, verify_passphrase
from progress.names import looks_alike, name_key, skeleton, validate_name
from progress.records import visible_progress
from progress.store import (
    NullStore,
    ProgressStore,
    ProgressStoreError,
    SignedOut,
    auth_table,
    progress_table,
    tries_table,
)

PASS = "correct horse battery"


class Clock:
    """A settable clock for the store (seconds since 1970)."""

    def __init__(self, t: float = 1_800_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clocked(store_url):
    clock = Clock()
    s = ProgressStore(store_url, clock=clock)
    yield s, clock
    s.close()


def _rows(store: ProgressStore, table: sa.Table) -> list[dict]:
    with store.engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(sa.select(table))]


def _client_rows(store: ProgressStore) -> list[dict]:
    """The tries rows of sessions and addresses (not the subjects' own rows, client "*")."""
    return [r for r in _rows(store, tries_table) if r["client"] != "*"]


def _until_refused_or_in(store, clock, try_once, tries: int) -> list[float]:
    """Call ``try_once`` ``tries`` times, each as soon as the last wait ran out; the waits it was told."""
    waits = []
    for _ in range(tries):
        with pytest.raises(SignInError) as err:
            try_once()
        waits.append(err.value.retry_after_s or 0.0)
        clock.t += err.value.retry_after_s or 0.0
    return waits


def test_first_sign_in_sets_the_passphrase_and_later_ones_need_it(store):
    assert store.sign_in("Room 1", "Ana", PASS).status == "new"
    assert store.sign_in("room 1", "ANA", PASS).status == "verified"  # same learner, any case
    with pytest.raises(SignInError, match="wrong passphrase for this name in this class.*ask your teacher"):
        store.sign_in("Room 1", "Ana", PASS.upper())
    with pytest.raises(SignInError, match="type your passphrase"):
        store.sign_in("Room 1", "Ana", "")
    assert store.sign_in("Room 2", "Ana", "another passphrase").status == "new"  # another class, another learner


def test_a_new_passphrase_must_be_long_enough(store):
    with pytest.raises(SignInError, match="at least 8 visible characters .* this one has 5"):
        store.sign_in("c", "Ana", "short")
    with pytest.raises(SignInError, match="the limit is 128"):
        store.sign_in("c", "Ana", "x" * 129)
    assert _rows(store, auth_table) == []  # a refused passphrase claims nothing
    assert store.sign_in("c", "Ana", "ｆｕｌｌｗｉｄｔｈ!").status == "new"  # NFKC: 9 characters either way
    assert store.sign_in("c", "Ana", "fullwidth!").status == "verified"


def _argon2id_reference(passphrase: str, salt_hex: str, m: int, t: int) -> str:
    """The Argon2id hash of ``passphrase`` in hex, by argon2-cffi's PHC-string API (not the code under test):
    hash to ``$argon2id$v=19$m=..,t=..,p=1$salt$hash`` and decode its last field."""
    phc = argon2.PasswordHasher(time_cost=t, memory_cost=m, parallelism=1, hash_len=32, type=argon2.Type.ID)
    encoded = argon2.low_level.hash_secret(
        passphrase.encode(), bytes.fromhex(salt_hex), t, m, 1, 32, argon2.low_level.Type.ID
    ).decode()
    assert phc.verify(encoded, passphrase)
    assert encoded.startswith(f"$argon2id$v=19$m={m},t={t},p=1$")
    raw = encoded.rsplit("$", 1)[1]
    return base64.b64decode(raw + "=" * (-len(raw) % 4)).hex()


def test_only_a_salted_argon2id_hash_is_stored(store):
    store.sign_in("c", "Ana", PASS)
    store.sign_in("c", "Bob", PASS)  # the same passphrase: different salts, different hashes
    rows = _rows(store, auth_table)
    assert len(rows) == 2 and rows[0]["salt"] != rows[1]["salt"] and rows[0]["pass_hash"] != rows[1]["pass_hash"]
    params = json.loads(rows[0]["params"])
    assert params == {"alg": "argon2id", "v": 19, "m": 8, "t": 1, "p": 1, "len": 32}  # the tests' low cost
    assert len(bytes.fromhex(rows[0]["salt"])) == 16
    assert rows[0]["pass_hash"] == _argon2id_reference(PASS, rows[0]["salt"], m=8, t=1)
    # No table holds the passphrase in any spelling: scan every cell of every table.
    with store.engine.connect() as conn:
        cells = [
            str(v).casefold()
            for table in (auth_table, progress_table, tries_table)
            for row in conn.execute(sa.select(table))
            for v in row
        ]
    for needle in (PASS, PASS.encode().hex(), "horse"):
        assert not any(needle.casefold() in c for c in cells), needle


def test_parameters_travel_with_the_hash_and_are_raised_on_sign_in(store, monkeypatch):
    store.sign_in("c", "Ana", PASS)  # at the tests' low cost, m=8 KiB
    monkeypatch.setattr(auth, "ARGON2_MEMORY_KIB", 16)  # a later version raises the cost
    assert store.sign_in("c", "Ana", PASS).status == "verified"  # the stored parameters still check the old hash
    (row,) = _rows(store, auth_table)
    assert json.loads(row["params"])["m"] == 16 and verify_passphrase(
        PASS, row["pass_hash"], row["salt"], row["params"]
    )
    assert row["pass_hash"] == _argon2id_reference(PASS, row["salt"], m=16, t=1)
    assert store.sign_in("c", "Ana", PASS).status == "verified"


def _scrypt_row(passphrase: str, n: int = 2**14) -> dict:
    """A kvlab_learner_auth hash as the last release stored it: hashlib.scrypt, its parameters as JSON."""
    salt = os.urandom(16)
    digest = hashlib.scrypt(passphrase.encode(), salt=salt, n=n, r=8, p=1, dklen=32)
    params = json.dumps({"alg": "scrypt", "dklen": 32, "n": n, "p": 1, "r": 8}, sort_keys=True, separators=(",", ":"))
    return {"pass_hash": digest.hex(), "salt": salt.hex(), "params": params}


def test_a_stored_scrypt_hash_is_verified_then_replaced_by_argon2id(store):
    store.sign_in("c", "Ana", PASS)
    with store.engine.begin() as conn:  # Ana signed in with the last release: her row holds its scrypt hash
        conn.execute(auth_table.update().values(**_scrypt_row(PASS, n=2**4)))
    with pytest.raises(SignInError, match="wrong passphrase"):
        store.sign_in("c", "Ana", PASS + "!")  # a wrong one is refused and rewrites nothing
    (row,) = _rows(store, auth_table)
    assert json.loads(row["params"])["alg"] == "scrypt"
    signed = store.sign_in("c", "Ana", PASS)
    assert signed.status == "verified" and signed.version == row["version"]  # same passphrase: no sign-out
    (row,) = _rows(store, auth_table)
    assert json.loads(row["params"]) == auth.current_params() and json.loads(row["params"])["alg"] == "argon2id"
    assert row["pass_hash"] == _argon2id_reference(PASS, row["salt"], m=8, t=1)
    assert store.sign_in("c", "Ana", PASS).status == "verified"
    assert not verify_passphrase(PASS + "!", row["pass_hash"], row["salt"], row["params"])


def test_a_reset_then_sign_in_writes_argon2id(store):
    store.sign_in("c", "Ana", PASS)
    with store.engine.begin() as conn:
        conn.execute(auth_table.update().values(**_scrypt_row(PASS, n=2**4)))
    assert store.reset_passphrase("c", "Ana")
    assert store.sign_in("c", "Ana", "a new passphrase").status == "set"
    (row,) = _rows(store, auth_table)
    assert json.loads(row["params"])["alg"] == "argon2id"
    assert row["pass_hash"] == _argon2id_reference("a new passphrase", row["salt"], m=8, t=1)


def test_the_documented_cost_is_owasps_argon2id_and_the_old_scrypt_still_checks(monkeypatch):
    monkeypatch.undo()  # the real cost, not the tests' (cheap_hash)
    # OWASP Password Storage Cheat Sheet: Argon2id, 19 MiB, 2 iterations, 1 degree of parallelism.
    assert (auth.ARGON2_TIME_COST, auth.ARGON2_PARALLELISM, auth.HASH_BYTES, auth.SALT_BYTES) == (2, 1, 32, 16)
    salt = "73" * 16
    params = {"alg": "argon2id", "v": 19, "m": 19 * 1024, "t": 2, "p": 1, "len": 32}
    assert auth.ARGON2_MEMORY_KIB == params["m"]
    derived = auth._derive("x" * 8, bytes.fromhex(salt), params).hex()
    assert derived == _argon2id_reference("x" * 8, salt, m=19 * 1024, t=2)
    old = _scrypt_row("x" * 8)  # the last release's default n=2**14 fits the memory limit and checks
    assert verify_passphrase("x" * 8, old["pass_hash"], old["salt"], old["params"])
    assert auth.needs_rehash(old["params"])
    assert not verify_passphrase("y" * 8, old["pass_hash"], old["salt"], old["params"])


def test_a_damaged_hash_row_is_a_wrong_passphrase_not_a_crash():
    for params in ('{"alg": "argon2id", "v": 19, "m": 1, "t": 1, "p": 1, "len": 32}', '{"alg": "md5"}', "not json"):
        assert not verify_passphrase(PASS, "00" * 32, "00" * 16, params)


def test_repeated_failures_wait_longer_each_time_and_hold_across_replicas(clocked):
    store, clock = clocked
    store.sign_in("c", "Ana", PASS)
    for i in range(1, 5):  # four free failures
        with pytest.raises(SignInError, match="wrong passphrase") as err:
            store.sign_in("c", "Ana", f"guess number {i}")
        assert err.value.retry_after_s is None
    with pytest.raises(SignInError, match="wait 2 s before the next try") as err:
        store.sign_in("c", "Ana", "guess number 5")
    assert err.value.retry_after_s == 2.0
    # Another replica (a new engine, same database) refuses too, even the right passphrase, without checking.
    other = ProgressStore(store.url, clock=clock)
    try:
        with pytest.raises(SignInError, match="too many wrong tries; wait 2 s") as err:
            other.sign_in("c", "ana", PASS)
        assert err.value.retry_after_s == pytest.approx(2.0)
        clock.t += 1.5
        with pytest.raises(SignInError, match="wait 1 s"):
            other.sign_in("c", "ana", PASS)
        clock.t += 0.6
        with pytest.raises(SignInError, match="wait 4 s before the next try"):  # the 6th failure doubles it
            other.sign_in("c", "ana", "guess number 6")
        clock.t += 4
        assert other.sign_in("c", "ana", PASS).status == "verified"  # a success clears the count
    finally:
        other.close()
    assert _client_rows(store) == []
    with pytest.raises(SignInError) as err:
        store.sign_in("c", "Ana", "wrong again!")
    assert err.value.retry_after_s is None  # counting starts over
    # Another learner of the class was never slowed down.
    assert store.sign_in("c", "Bob", PASS).status == "new"


def test_the_wait_is_exponential_and_capped():
    assert [lock_seconds(f) for f in range(1, 9)] == [0, 0, 0, 0, 2, 4, 8, 16]
    assert lock_seconds(14) == 900 and lock_seconds(10_000) == 900  # 15 minutes at most


def test_parallel_guesses_cannot_slip_past_the_limit(store):
    store.sign_in("c", "Ana", PASS)
    refused_unchecked = []

    def guess(i):
        try:
            store.sign_in("c", "Ana", f"parallel guess {i}")
        except SignInError as exc:
            if "too many wrong tries" in str(exc):
                refused_unchecked.append(i)

    threads = [threading.Thread(target=guess, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    (row,) = _client_rows(store)
    assert row["failures"] == 5 and len(refused_unchecked) == 7  # the count comes before the check


def test_teacher_reset_lets_the_next_sign_in_set_a_new_passphrase(clocked):
    store, _ = clocked
    store.sign_in("c", "Ana", PASS)
    store.save("c", "Ana", {"visited": ["gqa"]})
    for i in range(5):
        with pytest.raises(SignInError):
            store.sign_in("c", "Ana", f"forgotten {i}!")
    assert store.reset_passphrase("C", "ANA") is True
    assert store.reset_passphrase("c", "Ana") is False  # nothing left to reset
    assert _rows(store, tries_table) == []  # the waits go with it
    (row,) = _rows(store, auth_table)
    assert row["pass_hash"] is None and row["salt"] is None and row["version"] == 2
    assert store.sign_in("c", "Ana", "a brand new one").status == "set"
    assert store.load("c", "Ana")["visited"] == ["gqa"]  # progress stays
    with pytest.raises(SignInError, match="wrong passphrase"):
        store.sign_in("c", "Ana", PASS)
    assert [r["has_passphrase"] for r in store.class_records("c")] == [True]


def test_concurrent_first_sign_ins_of_one_name_one_wins(store):
    outcomes = []

    def claim(i):
        try:
            outcomes.append(store.sign_in("c", "Ana", f"passphrase {i}").status)
        except SignInError:
            outcomes.append("refused")

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["new", "refused", "refused", "refused"]


def test_teacher_key_is_checked_in_constant_time_and_throttled_per_client(clocked):
    store, clock = clocked
    tab = Client("a teacher's tab", "192.0.2.7")
    store.check_teacher_key("s3cret key", "s3cret key", tab)
    for _ in range(4):
        with pytest.raises(SignInError, match="^wrong teacher key$"):
            store.check_teacher_key("guess", "s3cret key", tab)
    with pytest.raises(SignInError, match="wait 2 s"):
        store.check_teacher_key("guess", "s3cret key", tab)
    replica = ProgressStore(store.url, clock=clock)  # the same tab on another replica: the same count
    try:
        with pytest.raises(SignInError, match="too many wrong tries"):
            replica.check_teacher_key("s3cret key", "s3cret key", tab)
    finally:
        replica.close()
    rows = _client_rows(store)
    assert {r["scope"] for r in rows} == {"teacher"} and sorted(r["failures"] for r in rows) == [5, 5]
    assert not any("192.0.2.7" in r["client"] or "a teacher" in r["client"] for r in rows)  # digests only
    clock.t += 2
    store.check_teacher_key("s3cret key", "s3cret key", tab)
    assert _client_rows(store) == []
    with pytest.raises(SignInError, match="no teacher key"):
        store.check_teacher_key("", "")


def test_a_learner_hammering_the_teacher_key_never_keeps_the_teacher_out(clocked):
    store, clock = clocked
    learner = Client("learner tab", "198.51.100.23")
    waits = _until_refused_or_in(store, clock, lambda: store.check_teacher_key("guess", "k3y", learner), 40)
    assert max(waits) == 900  # the guesser's own session waits up to 15 minutes
    store.check_teacher_key("k3y", "k3y", Client("teacher tab", "203.0.113.5"))  # at once, from elsewhere
    # New sessions from the guesser's address are slowed too: its address has failed 40 times by now, so a
    # new tab's first failure waits the address's longest wait (a minute for the teacher key)...
    with pytest.raises(SignInError, match="wrong teacher key; wait 60 s"):
        store.check_teacher_key("guess", "k3y", Client("a new tab of the learner", "198.51.100.23"))
    with pytest.raises(SignInError, match="too many wrong tries; wait 60 s"):  # ... and so does the next new tab
        store.check_teacher_key("k3y", "k3y", Client("one more new tab", "198.51.100.23"))
    assert lock_seconds(14, auth.TEACHER_LOCK_MAX_S) == 60 and lock_seconds(14) == 900


def test_wrong_tries_on_a_name_never_refuse_the_owners_right_passphrase(clocked):
    # Hole 1: a classmate's wrong tries on "alice", each as soon as the last wait ends, locked Alice out.
    store, clock = clocked
    store.sign_in("c", "Alice", PASS, Client("alice's laptop", "203.0.113.10"))
    mallory = Client("mallory's tab", "198.51.100.66")
    waits = _until_refused_or_in(store, clock, lambda: store.sign_in("c", "alice", "a guess!!", mallory), 30)
    assert waits[:6] == [0, 0, 0, 0, 2, 4] and max(waits) == 900  # the guesser waits longer each time
    with pytest.raises(SignInError, match="wait 900 s"):
        store.sign_in("c", "alice", "one more guess", mallory)
    alice = Client("alice's phone", "203.0.113.11")
    assert store.sign_in("c", "Alice", PASS, alice).status == "verified"  # at once: her client has no failures
    with pytest.raises(SignInError, match="too many wrong tries; wait 900 s"):
        store.sign_in("c", "alice", PASS, mallory)  # the guesser stays slowed, even with the right one
    assert store.sign_in("c", "Bob", PASS, mallory).status == "new"  # another name is another subject


def test_new_sessions_from_a_guessing_address_wait_after_many_failures(clocked):
    store, clock = clocked
    store.sign_in("c", "Alice", PASS)
    tabs = [Client(f"script session {i}", "198.51.100.66") for i in range(5)]
    for tab in tabs[:4]:  # each session's own four free failures: 16 on the address
        for _ in range(4):
            with pytest.raises(SignInError, match="wrong passphrase") as err:
                store.sign_in("c", "alice", "a guess!!", tab)
            assert err.value.retry_after_s is None
    for n in (17, 18, 19):
        with pytest.raises(SignInError) as err:
            store.sign_in("c", "alice", "a guess!!", tabs[4])
        assert err.value.retry_after_s is None, n
    with pytest.raises(SignInError, match="wait 2 s before the next try"):  # the address's 20th failure
        store.sign_in("c", "alice", "a guess!!", tabs[4])
    with pytest.raises(SignInError, match="too many wrong tries; wait 2 s"):
        store.sign_in("c", "alice", PASS, Client("yet another session", "198.51.100.66"))  # the address waits
    assert store.sign_in("c", "alice", PASS, Client("alice at home", "203.0.113.10")).status == "verified"


def test_guessing_from_many_addresses_meets_a_ceiling_that_spares_clean_clients(clocked):
    store, clock = clocked
    store.sign_in("c", "Alice", PASS)
    for i in range(50):  # one wrong try from each of 50 addresses: the name's 50th failure starts its wait
        with pytest.raises(SignInError):
            store.sign_in("c", "alice", "a guess!!", Client(f"bot {i}", f"10.0.{i}.1"))
    with pytest.raises(SignInError, match="too many wrong tries"):
        store.sign_in("c", "alice", "another guess", Client("bot 3", "10.0.3.1"))  # a bot that failed before
    # A client without failures is still checked: a right passphrase gets in, a wrong one joins the wait.
    assert store.sign_in("c", "alice", PASS, Client("alice", "203.0.113.10")).status == "verified"
    with pytest.raises(SignInError, match="wrong passphrase.*wait 4 s") as err:
        store.sign_in("c", "alice", "a guess!!", Client("bot 99", "10.0.99.1"))
    assert err.value.retry_after_s == 4.0
    with pytest.raises(SignInError, match="too many wrong tries"):
        store.sign_in("c", "alice", "a guess!!", Client("bot 99", "10.0.99.1"))


def test_the_null_store_checks_the_teacher_key_too():
    s = NullStore()
    s.check_teacher_key("k", "k")
    with pytest.raises(SignInError):
        s.check_teacher_key("x", "k")
    with pytest.raises(SignInError):
        s.check_teacher_key("", "")
    assert s.sign_in("c", "Ana", "whatever").status == "unsaved"


# --- names ------------------------------------------------------------------------------------------------


def test_names_are_normalised_once_nfkc_and_casefold(store):
    assert validate_name("Ａｎａ") == "Ana" and name_key("Ａｎａ") == name_key("ana") == "ana"
    assert name_key("Straße") == name_key("STRASSE") == "strasse"
    store.sign_in("Ｒｏｏｍ 1", "Ａｎａ", PASS)
    assert store.sign_in("room 1", "ana", PASS).status == "verified"  # one learner
    store.save("room 1", "ANA", {"visited": ["gqa"]})
    store.save("Ｒｏｏｍ 1", "Ａｎａ", {"visited": ["paged"]})
    (rec,) = store.class_records("ROOM 1")
    assert rec["progress"]["visited"] == ["gqa", "paged"] and rec["learner"] == "Ana"  # display form kept (NFKC)
    store.sign_in("c", "Straße", PASS)
    with pytest.raises(SignInError, match="wrong passphrase"):
        store.sign_in("c", "STRASSE", "not the same one")  # the same name: it has a passphrase


def test_length_limits_count_the_normalised_form():
    assert validate_name("ß" * 20) == "ß" * 20  # 40 once case-folded ("ss" each): just fits
    with pytest.raises(ValueError, match="1–40 characters, got 42"):
        validate_name("ß" * 21)
    with pytest.raises(ValueError, match="got 41"):
        validate_name("ｘ" * 41)  # fullwidth x: 41 plain letters
    assert validate_name("ﬀ" * 20) == "ff" * 20  # a ligature is two letters after NFKC


@pytest.mark.parametrize(
    ("name", "scripts"),
    [("аdmin", "Cyrillic and Latin"), ("Bοb", "Latin and Greek"), ("Anaαβ 1", "Latin and Greek")],
)
def test_names_mixing_scripts_are_refused(name, scripts):
    with pytest.raises(ValueError, match=f"mixes {scripts} letters"):
        validate_name(name)
    with pytest.raises(ValueError, match="class code mixes"):
        validate_name(name, "class code")


@pytest.mark.parametrize("name", ["Анна", "Ελένη", "山田 たろう", "カタカナ漢字", "José-María 2", "r2 d2", "李"])
def test_one_script_names_digits_and_japanese_are_fine(name):
    assert validate_name(name) == name


# --- migration --------------------------------------------------------------------------------------------

OLD_DDL = (
    "CREATE TABLE kvlab_progress (class_code VARCHAR(40) NOT NULL, learner_key VARCHAR(40) NOT NULL, "
    "learner VARCHAR(40) NOT NULL, data TEXT NOT NULL, updated_at TIMESTAMP WITH TIME ZONE NOT NULL, "
    "PRIMARY KEY (class_code, learner_key))"
)


def test_a_schema_1_database_is_migrated_and_old_records_keep_their_progress(store_url):
    # A database made before passphrases: only kvlab_progress, with a learner's row (no stamps either).
    engine = sa.create_engine(store_url)
    with engine.begin() as conn:
        for table in (
            "alembic_version",
            "kvlab_auth_throttle",
            "kvlab_auth_tries",
            "kvlab_class_member",
            "kvlab_learner_auth",
            "kvlab_progress",
        ):
            conn.execute(sa.text(f"DROP TABLE IF EXISTS {table}"))
        conn.execute(sa.text(OLD_DDL))
        old = {"visited": ["gqa"], "quiz": {"gqa.mqa": {"answer": "One", "correct": True}}, "diagnosis": {}}
        conn.execute(
            sa.text("INSERT INTO kvlab_progress VALUES ('room 1', 'old timer', 'Old Timer', :d, CURRENT_TIMESTAMP)"),
            {"d": json.dumps(old)},
        )
    engine.dispose()
    with pytest.raises(ProgressStoreError, match="from before migrations.*run `kvlab db upgrade`"):
        ProgressStore(store_url)  # an older schema is not upgraded unless the operator says so
    assert migrate.current(store_url) is None
    assert migrate.upgrade(store_url) == migrate.head()  # the new tables appear, the old one is untouched
    store = ProgressStore(store_url)
    try:
        names = set(sa.inspect(store.engine).get_table_names())
        assert {"kvlab_progress", "kvlab_learner_auth", "kvlab_auth_tries", "kvlab_class_member"} <= names
        cols = {c["name"] for c in sa.inspect(store.engine).get_columns("kvlab_progress")}
        assert cols == {"class_code", "learner_key", "learner", "data", "updated_at"}
        assert store.class_records("Room 1")[0]["has_passphrase"] is False
        assert store.sign_in("Room 1", "Old Timer", PASS).status == "set"  # their next sign-in sets one
        assert visible_progress(store.load("room 1", "old timer")) == {**old, "predict": {}}
        store.save("room 1", "old timer", {"visited": ["paged"]})
        assert store.load("room 1", "old timer")["quiz"] == old["quiz"]  # unstamped old answers survive a merge
        assert store.sign_in("Room 1", "Old Timer", PASS).status == "verified"
    finally:
        store.close()
    ProgressStore(store_url).close()  # opening a migrated database again changes nothing


def test_a_reset_signs_out_whoever_used_the_old_passphrase(store):
    squatter = store.sign_in("c", "Ana", "took her name first")  # someone claimed Ana's name before she came
    assert squatter.version == 1
    store.save("c", "Ana", {"visited": ["gqa"]}, auth_version=squatter.version)
    assert store.reset_passphrase("c", "Ana")  # Ana asks the teacher
    ana = store.sign_in("c", "Ana", "anas own passphrase")
    assert (ana.status, ana.version) == ("set", 3)
    with pytest.raises(SignedOut):
        store.save("c", "Ana", {"quiz": {"q": {"answer": "vandalised"}}}, auth_version=squatter.version)
    assert store.load("c", "Ana")["quiz"] == {}  # nothing written
    store.save("c", "Ana", {"quiz": {"q": {"answer": "hers"}}}, auth_version=ana.version)
    assert store.sign_in("c", "Ana", "anas own passphrase").version == 3  # a check or a re-hash keeps the version
    with pytest.raises(SignedOut):
        store.save("c", "Bob", {"visited": ["gqa"]}, auth_version=1)  # no passphrase row at all: no write either


@pytest.mark.parametrize("name", [".", "-", "_ . -", "..."])
def test_a_name_needs_a_letter_or_digit(name):
    with pytest.raises(ValueError, match="has no letter or digit"):
        validate_name(name)


@pytest.mark.parametrize("name", ["", "   "])
def test_an_empty_name_is_asked_for_not_called_too_long(name):
    with pytest.raises(ValueError, match="is empty; type one"):
        validate_name(name)


# --- passphrases of nothing, and one message for every name (hole 5) --------------------------------------


@pytest.mark.parametrize(
    "blank",
    [
        " " * 8,
        "\x00" * 8,
        "\t" * 8,
        "\u200b" * 8,
        "\u3164" * 8,
        "\u115f\u1160" * 4,
        "ab\u200b\u200b\u200b\u200b\u200bcd",
    ],
)
def test_a_passphrase_of_nothing_is_refused(store, blank):
    with pytest.raises(SignInError, match="visible characters|control characters") as err:
        store.sign_in("c", "Ana", blank)
    assert "wrong passphrase" not in str(err.value)
    assert _rows(store, auth_table) == []  # nothing claimed


def test_spaces_between_words_are_fine_but_do_not_count(store):
    assert store.sign_in("c", "Ana", "ab cd ef gh").status == "new"  # 8 visible, 11 in all
    with pytest.raises(SignInError, match="this one has 7"):
        store.sign_in("c", "Bob", "ab cd ef g")


@pytest.mark.parametrize("short", ["abc", "        ", "abc\u200bdefg"])
def test_a_short_passphrase_gets_one_message_for_a_known_and_an_unknown_name(store, short):
    # A classmate typing a short passphrase must not learn whether "Ana" is in the class.
    store.sign_in("c", "Ana", PASS)
    messages = []
    for name in ("Ana", "Nobody Here"):
        with pytest.raises(SignInError) as err:
            store.sign_in("c", name, short)
        messages.append(str(err.value))
    assert messages[0] == messages[1] and "at least 8 visible characters" in messages[0]
    assert _rows(store, tries_table) == []  # a passphrase no name can have is not a guess: nothing counted


# --- names that pass for a classmate's (hole 2) -----------------------------------------------------------


@pytest.mark.parametrize(
    ("lookalike", "original"),
    [("Ѕаѕһа", "Sasha"), ("ΑΝΑ", "ANA"), ("ΑΝΑ", "Ana"), ("Јое", "Joe"), ("Јое", "joe")],
)
def test_a_whole_script_lookalike_is_the_classmates_name(store, lookalike, original):
    assert validate_name(lookalike) == lookalike  # one script: the mixing rule alone lets it through
    assert looks_alike(lookalike, original) and name_key(lookalike) != name_key(original)
    store.sign_in("Room 7", original, PASS)
    store.save("Room 7", original, {"visited": ["gqa"]})
    with pytest.raises(SignInError, match=f"{lookalike!r} looks the same as {original!r}.*wrong passphrase"):
        store.sign_in("room 7", lookalike, "i am not them")
    assert [r["learner"] for r in store.class_records("Room 7")] == [original]  # no second row that looks alike
    who = store.sign_in("room 7", lookalike, PASS)  # the owner typing on another keyboard: it is their name
    assert (who.status, who.learner) == ("verified", original)
    assert store.sign_in("Room 8", lookalike, PASS).learner == lookalike  # another class: nothing to mistake


def test_a_lookalike_of_a_name_with_progress_but_no_passphrase_takes_that_name(store):
    store.save("c", "Sasha", {"visited": ["gqa"]})  # from before passphrases
    who = store.sign_in("c", "Ѕаѕһа", PASS)
    assert (who.status, who.learner) == ("set", "Sasha")
    assert [r["learner"] for r in store.class_records("c")] == ["Sasha"]


@pytest.mark.parametrize(("a", "b"), [("Maria", "Marta"), ("Ali", "All"), ("Anna", "Ana"), ("Jo", "Joe")])
def test_names_that_merely_resemble_stay_apart(store, a, b):
    assert not looks_alike(a, b)
    store.sign_in("c", a, PASS)
    assert store.sign_in("c", b, PASS).learner == b


def test_the_skeleton_is_unicodes():
    # UTS #39: skeleton("ѕ") is "s", "0" looks like "O", "m" like "rn"; case matters inside a skeleton.
    assert skeleton("Ѕаѕһа") == skeleton("Sasha") and skeleton("ΑΝΑ") == skeleton("ANA")
    assert skeleton("rn") == skeleton("m") and skeleton("0") == skeleton("O")
    assert skeleton("α") != skeleton("A")


@pytest.mark.parametrize(
    "name", ["\u3164", "\u115f", "\u1160", "\u3164\u3164 \u3164", "Bob\u3164", "\ufeffAna", "A\u200dB"]
)
def test_a_name_that_renders_as_nothing_is_refused(name):
    with pytest.raises(ValueError, match=r"show as nothing \(U\+"):
        validate_name(name)


# --- mutation survivors -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "scripts"), [("Ana山田", "Latin and Han"), ("ｶﾀｶﾅabc", "Katakana and Latin")])
def test_japanese_scripts_mix_only_with_each_other(name, scripts):
    # progress/names.py: the Japanese exception is "every script is Japanese", not "one of them is".
    with pytest.raises(ValueError, match=f"mixes {scripts} letters"):
        validate_name(name)


def test_two_sign_ins_racing_to_set_a_reset_passphrase_one_wins(store, monkeypatch):
    # After a reset two sign-ins both read "no passphrase"; the second claim must find it taken and check
    # against the first's, not silently replace it (a takeover). The race is made, not waited for: the other
    # sign-in runs while this one hashes, after it read the row.
    from progress import store as store_module

    store.sign_in("c", "Ana", PASS)
    assert store.reset_passphrase("c", "Ana")
    real_hash, raced = store_module.hash_passphrase, []

    def hash_and_let_the_other_in(secret):
        if not raced:
            raced.append(None)  # once: the other sign-in hashes too
            raced[0] = store.sign_in("c", "Ana", "the first one in")
        return real_hash(secret)

    monkeypatch.setattr(store_module, "hash_passphrase", hash_and_let_the_other_in)
    with pytest.raises(SignInError, match="wrong passphrase"):
        store.sign_in("c", "Ana", "the second one")
    assert raced[0].status == "set"
    assert store.sign_in("c", "Ana", "the first one in").status == "verified"
    (row,) = _rows(store, auth_table)
    assert row["version"] == 3  # one reset, one set: the loser changed nothing


# --- whose address a try comes from ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("peer", "forwarded", "setting", "address"),
    [
        (None, "198.51.100.7", None, "198.51.100.7"),  # nginx on loopback (the default trust) names the learner
        (None, "6.6.6.6, 198.51.100.7", None, "198.51.100.7"),  # what the learner wrote first is not believed
        ("203.0.113.9", "1.2.3.4", None, "203.0.113.9"),  # a direct connection: its header is ignored
        ("10.0.0.5", "1.2.3.4", "10.0.0.0/24", "1.2.3.4"),  # a configured proxy network
        ("10.0.0.5", "10.0.0.6, 1.2.3.4, 10.0.0.7", "10.0.0.0/24", "1.2.3.4"),  # two proxies in a row
        (None, "1.2.3.4", "none", "127.0.0.1"),  # no proxy trusted: the connection itself
        (None, "not an address", None, "127.0.0.1"),  # a garbled header: the last proxy
        (None, None, None, "127.0.0.1"),  # local use, no proxy
    ],
)
def test_x_forwarded_for_is_believed_only_from_a_trusted_proxy(peer, forwarded, setting, address):
    assert auth.client_address(peer, forwarded, setting) == address


def test_a_bad_trusted_proxies_setting_names_the_entry():
    with pytest.raises(ValueError, match="KVLAB_TRUSTED_PROXIES entry 'nginx' is not an address"):
        auth.client_address(None, "1.2.3.4", "127.0.0.1, nginx")
