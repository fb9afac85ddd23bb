"""Schema migrations (progress/migrate.py, Alembic) on SQLite and PostgreSQL: a class database made by the last
release before migrations (kvlab 0.1, built from the committed DDL of commit 4f48132 in fixtures/) is refused
until upgraded, then upgraded with every row intact: each learner's progress, their passphrase (the release's
scrypt hash, accepted and re-hashed as Argon2id), the live round and its answers. A new database is created at
head, and head defines exactly the tables the code uses.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from datetime import datetime, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from progress import auth, migrate
from progress.live import LiveBoard, session_table
from progress.records import visible_progress
from progress.store import ProgressStore, ProgressStoreError, auth_table, progress_table

FIXTURES = Path(__file__).with_name("fixtures")
CLASS = "Room 7"
PASSPHRASES = {"ana": "correct horse battery", "bob": "tea is ready at four"}
WHEN = datetime(2026, 11, 2, 9, 30, tzinfo=timezone.utc)
T0 = 1_793_600_000.0  # seconds since 1970, in the class's hour


def old_database(url: str) -> None:
    """Create kvlab 0.1's tables (fixtures/kvlab_0.1_<backend>.sql) in the empty database at ``url``."""
    engine = sa.create_engine(url)
    text = (FIXTURES / f"kvlab_0.1_{engine.dialect.name}.sql").read_text()
    sql = "\n".join(line for line in text.splitlines() if not line.startswith("--"))
    with engine.begin() as conn:
        for statement in filter(str.strip, sql.split(";")):
            conn.exec_driver_sql(statement)
    engine.dispose()


def scrypt_hash(passphrase: str) -> dict[str, str]:
    """A hash as kvlab 0.1 stored it: hashlib.scrypt at its parameters (n=2**14, r=8, p=1), JSON beside it."""
    salt = os.urandom(16)
    digest = hashlib.scrypt(passphrase.encode(), salt=salt, n=2**14, r=8, p=1, dklen=32, maxmem=64 * 2**20)
    params = json.dumps({"alg": "scrypt", "n": 2**14, "r": 8, "p": 1, "dklen": 32}, sort_keys=True)
    return {"pass_hash": digest.hex(), "salt": salt.hex(), "params": params.replace(" ", "")}


def progress_of(visited: list[str], quiz: dict, predict: dict) -> dict:
    return {"visited": visited, "quiz": quiz, "diagnosis": {}, "predict": predict}


LEARNERS = {  # learner_key -> (display name, progress as kvlab 0.1 stored it)
    "ana": (
        "Ana",
        progress_of(["gqa", "paged"], {"gqa.mqa": {"answer": "One", "correct": True}}, {"gqa": {"value": 4.0}}),
    ),
    "bob": ("Bob", progress_of(["gqa"], {"gqa.mqa": {"answer": "Eight", "correct": False}}, {})),
    "old timer": ("Old Timer", progress_of(["intro"], {}, {})),  # from before passphrases: no auth row
}


def fill_old_class(url: str) -> None:
    """A class in kvlab 0.1's tables, written as that release wrote it (reflected tables, plain rows)."""
    engine = sa.create_engine(url)
    meta = sa.MetaData()
    meta.reflect(engine)
    t = meta.tables
    key = {"class_code": "room 7"}
    with engine.begin() as conn:
        for name, (display, data) in LEARNERS.items():
            row = {**key, "learner_key": name, "learner": display, "data": json.dumps(data), "updated_at": WHEN}
            conn.execute(t["kvlab_progress"].insert().values(**row))
        for i, name in enumerate(PASSPHRASES):
            values = {**key, "learner_key": name, "learner": LEARNERS[name][0], "version": 1, "updated_at": WHEN}
            conn.execute(t["kvlab_learner_auth"].insert().values(**values, **scrypt_hash(PASSPHRASES[name])))
            conn.execute(t["kvlab_class_member"].insert().values(**key, learner_key=name, first_seen=T0 + i))
        conn.execute(
            t["kvlab_auth_tries"]
            .insert()
            .values(scope="learner", subject="room 7|bob", client="*", failures=1, last_try=T0)
        )
        settings = json.dumps([["tokens", "4096"]])
        conn.execute(
            t["kvlab_live_session"]
            .insert()
            .values(
                **key,
                display=CLASS,
                lesson="gqa",
                round=2,
                revealed=False,
                settings=settings,
                opened_at=T0,
                updated_at=WHEN,
            )
        )
        for name, value in (("ana", 4.0), ("bob", 8.0)):
            conn.execute(
                t["kvlab_live_answer"]
                .insert()
                .values(**key, learner_key=name, round=2, value=value, answered_at=T0 + 5)
            )
        conn.execute(t["kvlab_live_gate"].insert().values(**key, started_at=T0 - 60, closed=True))
        conn.execute(t["kvlab_live_admit"].insert().values(**key, learner_key="bob"))
    engine.dispose()


def snapshot(url: str) -> dict[str, list[tuple]]:
    """Every row of every kvlab table, sorted (alembic_version left out)."""
    engine = sa.create_engine(url)
    meta = sa.MetaData()
    meta.reflect(engine)
    with engine.connect() as conn:
        rows = {
            name: sorted(tuple(r) for r in conn.execute(sa.select(table)))
            for name, table in meta.tables.items()
            if name.startswith("kvlab_")
        }
    engine.dispose()
    return rows


def test_a_class_database_of_the_last_release_is_refused_then_upgraded_without_loss(new_db_url):
    old_database(new_db_url)
    fill_old_class(new_db_url)
    before = snapshot(new_db_url)
    assert len(before) == 9 and sum(len(rows) for rows in before.values()) == 13

    with pytest.raises(ProgressStoreError, match=r"kvlab 0\.1 \(from before migrations\).*`kvlab db upgrade`"):
        ProgressStore(new_db_url)  # the app's default: refuse, and say what to run
    assert migrate.current(new_db_url) is None and snapshot(new_db_url) == before  # refusing wrote nothing

    assert migrate.upgrade(new_db_url) == migrate.head() == "0001"
    assert migrate.current(new_db_url) == "0001"
    assert snapshot(new_db_url) == before  # every row of every table as it was

    store = ProgressStore(new_db_url)
    try:
        for display, data in LEARNERS.values():
            assert visible_progress(store.load(CLASS, display)) == data
        records = {r["learner_key"]: r for r in store.class_records(CLASS)}
        assert {k: r["has_passphrase"] for k, r in records.items()} == {"ana": True, "bob": True, "old timer": False}
        for name, passphrase in PASSPHRASES.items():
            signed = store.sign_in(CLASS, LEARNERS[name][0], passphrase)  # the release's scrypt hash still opens it
            assert (signed.status, signed.version) == ("verified", 1)
        with store.engine.connect() as conn:
            params = [json.loads(p) for p in conn.execute(sa.select(auth_table.c.params)).scalars()]
        assert [p["alg"] for p in params] == ["argon2id", "argon2id"] and params[0] == auth.current_params()
        for name, passphrase in PASSPHRASES.items():  # and the Argon2id hash that replaced it opens it too
            assert store.sign_in(CLASS, LEARNERS[name][0], passphrase).status == "verified"
        with pytest.raises(auth.SignInError, match="wrong passphrase"):
            store.sign_in(CLASS, "Ana", "not her passphrase")
        assert store.sign_in(CLASS, "Old Timer", "a passphrase at last").status == "set"

        live = LiveBoard(store).current(CLASS)
        assert (live.lesson, live.round, live.revealed, live.settings) == ("gqa", 2, False, (("tokens", "4096"),))
        # Both names are new this live session (first seen after it started) and the class is closed to new
        # names: Bob's answer counts (admitted), Ana's waits for the teacher.
        assert (live.answers, live.waiting, live.new_answers, live.closed) == (1, 1, 1, True)
        store.save(CLASS, "Ana", {"visited": ["bandwidth"]})
        assert store.load(CLASS, "Ana")["visited"] == ["gqa", "paged", "bandwidth"]
    finally:
        store.close()
    assert migrate.upgrade(new_db_url) == "0001"  # at head already: nothing to do


def test_a_schema_1_database_gains_the_tables_it_lacks(new_db_url):
    engine = sa.create_engine(new_db_url)
    with engine.begin() as conn:  # kvlab_progress is the only table of schema 1
        text = (FIXTURES / f"kvlab_0.1_{engine.dialect.name}.sql").read_text()
        create = text[text.index("CREATE TABLE kvlab_progress") :].split(";")[0]
        conn.exec_driver_sql(create)
    engine.dispose()
    fill = {"class_code": "c", "learner_key": "ana", "learner": "Ana", "data": json.dumps(LEARNERS["ana"][1])}
    engine = sa.create_engine(new_db_url)
    with engine.begin() as conn:
        conn.execute(progress_table.insert().values(**fill, updated_at=WHEN))
    engine.dispose()
    assert migrate.upgrade(new_db_url) == "0001"
    store = ProgressStore(new_db_url)
    try:
        assert set(snapshot(new_db_url)) == {t.name for t in all_tables()}
        assert visible_progress(store.load("c", "Ana")) == LEARNERS["ana"][1]
    finally:
        store.close()


def all_tables() -> list[sa.Table]:
    return [*progress_table.metadata.sorted_tables, *session_table.metadata.sorted_tables]


def test_a_new_database_is_created_at_head_with_exactly_the_codes_tables(new_db):
    assert migrate.prepare(new_db(), upgrade_older=False) == migrate.head()  # a server starting on a new one
    new_db_url = new_db()
    assert migrate.current(new_db_url) is None
    if new_db_url.startswith("sqlite"):
        assert not Path(sa.make_url(new_db_url).database).exists()  # asking made no file
    store = ProgressStore(new_db_url)  # a new database needs no permission to be created
    try:
        assert migrate.current(new_db_url) == migrate.head()
        combined = sa.MetaData()
        for table in all_tables():
            table.to_metadata(combined)
        with store.engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn), combined)
        assert diff == []  # head's tables, columns, types and keys are the ones store.py and live.py use
    finally:
        store.close()


def test_the_setting_lets_the_app_upgrade_at_start(new_db_url, monkeypatch):
    old_database(new_db_url)
    fill_old_class(new_db_url)
    before = snapshot(new_db_url)
    with pytest.raises(migrate.SchemaError, match="kvlab 0.1 .*Back it up .*then run `kvlab db upgrade`"):
        migrate.prepare(new_db_url, upgrade_older=False)  # what `kvlab serve` checks before it starts
    monkeypatch.setenv(migrate.AUTO_UPGRADE_ENV, "maybe")
    with pytest.raises(ProgressStoreError, match="KVLAB_DB_AUTO_UPGRADE='maybe' is not a yes/no value; set it to 1"):
        ProgressStore(new_db_url)
    monkeypatch.setenv(migrate.AUTO_UPGRADE_ENV, "0")
    with pytest.raises(ProgressStoreError, match="kvlab db upgrade"):
        ProgressStore(new_db_url)
    monkeypatch.setenv(migrate.AUTO_UPGRADE_ENV, "1")
    ProgressStore(new_db_url).close()
    assert migrate.current(new_db_url) == "0001" and snapshot(new_db_url) == before


def test_auto_upgrade_reads_yes_and_no():
    assert [migrate.auto_upgrade({"KVLAB_DB_AUTO_UPGRADE": v}) for v in ("1", "true", " YES ", "on")] == [True] * 4
    assert [migrate.auto_upgrade({"KVLAB_DB_AUTO_UPGRADE": v}) for v in ("", "0", "false", "No", "off")] == [False] * 5
    assert migrate.auto_upgrade({}) is False


def test_a_revision_from_a_newer_kvlab_is_refused(new_db_url):
    ProgressStore(new_db_url).close()
    engine = sa.create_engine(new_db_url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = 'f00d'"))
    engine.dispose()
    newer = r"has schema revision f00d, which this kvlab does not know .*a newer kvlab upgraded it"
    with pytest.raises(ProgressStoreError, match=newer):
        ProgressStore(new_db_url, upgrade_older=True)
    with pytest.raises(migrate.SchemaError, match=newer):
        migrate.upgrade(new_db_url)
    assert migrate.current(new_db_url) == "f00d"


def test_replicas_starting_at_once_upgrade_once(new_db_url):
    old_database(new_db_url)
    fill_old_class(new_db_url)
    before = snapshot(new_db_url)
    barrier, results, errors = threading.Barrier(4), [], []

    def start() -> None:
        barrier.wait()
        try:
            results.append(migrate.upgrade(new_db_url))
        except Exception as exc:  # noqa: BLE001 - the test reports any failure
            errors.append(exc)

    threads = [threading.Thread(target=start, daemon=True) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)  # generous: only a deadlock takes this long
    assert not any(thread.is_alive() for thread in threads), "the upgrades deadlocked"
    assert errors == [] and results == ["0001"] * 4
    engine = sa.create_engine(new_db_url)
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT version_num FROM alembic_version")).all() == [("0001",)]
    engine.dispose()
    assert snapshot(new_db_url) == before


def test_errors_name_the_database_never_its_password():
    from bench.app_server import free_port

    url = f"postgresql+psycopg://kvlab:hunter2-secret@127.0.0.1:{free_port()}/kvlab"  # nothing listens there
    for call in (migrate.upgrade, migrate.current):
        with pytest.raises(migrate.SchemaError) as err:
            call(url)
        assert "the postgresql database 'kvlab' on 127.0.0.1" in str(err.value)
        assert "hunter2" not in str(err.value) and "check KVLAB_DATABASE_URL" in str(err.value)
    with pytest.raises(migrate.SchemaError, match="not a valid SQLAlchemy URL") as err:
        migrate.upgrade("postgresql+psycopg://kvlab:hunter2-secret@127.0.0.1:notaport/kvlab")
    assert "hunter2" not in str(err.value)
