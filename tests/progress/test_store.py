"""Progress store: round trips, validation, injection safety, fallback on corrupt/locked files, reports.

Tests taking the ``store`` fixture run twice, on SQLite and on a real PostgreSQL server (conftest.py).
"""

import csv
import io
import json
import sqlite3
import threading

import pytest
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st

from progress.names import validate_name
from progress.records import empty_progress, normalize_progress, visible_progress
from progress.report import PREDICTION_COLUMNS, class_report, prediction_rows, report_csv
from progress.store import (
    NullStore,
    ProgressStore,
    ProgressStoreError,
    data_dir,
    database_url,
    open_store,
    progress_table,
)
from tests.pg import require_postgres

LESSONS = ["bandwidth", "gqa", "varlen", "fragmentation", "paged", "diagnosis", "rules", "playground"]
SAMPLE = {
    "visited": ["bandwidth", "gqa"],
    "quiz": {"gqa-1": {"answer": "8", "correct": True}, "rules-2": {"answer": 1, "correct": False}},
    "diagnosis": {"rtx3090": {"grade": "resolved", "fixes": ["max_model_len"]}},
    "predict": {
        "gqa": {"value": 512.0, "answer": 128.0, "close": False},
        "paged": {"value": 63, "answer": 63.0, "close": True},
    },
}


def test_round_trip_and_reopen(store):
    saved = store.save("Class-A", "Ana", SAMPLE)
    assert store.load("Class-A", "Ana") == saved and visible_progress(saved) == visible_progress(SAMPLE)
    assert set(saved["written_at_us"]["quiz"]) == set(SAMPLE["quiz"])  # each entry got its write time
    # A server restart (or another replica) is a new engine over the same database.
    again = ProgressStore(store.url)
    assert again.load("class-a", "ANA") == saved  # keys are case-insensitive
    again.close()
    assert store.load("Class-A", "Bob") == empty_progress()
    assert store.load("Class-B", "Ana") == empty_progress()


def test_save_merges_and_class_records(store):
    store.save("c1", "Ana", SAMPLE)
    store.save("c1", "Ana", {"visited": ["paged"], "quiz": {"gqa-1": {"answer": "4", "correct": False}}})
    store.save("c1", "bob", empty_progress())
    store.save("c2", "Cy", SAMPLE)
    recs = store.class_records("C1")
    assert [r["learner"] for r in recs] == ["Ana", "bob"]
    ana = recs[0]["progress"]
    assert ana["visited"] == ["bandwidth", "gqa", "paged"]  # a later save adds visits, never removes them
    assert ana["quiz"] == {"gqa-1": {"answer": "4", "correct": False}, "rules-2": SAMPLE["quiz"]["rules-2"]}
    assert ana["predict"] == SAMPLE["predict"] and "written_at_us" not in ana  # the report's view: no stamps
    assert recs[0]["updated_at"] is not None and recs[0]["learner_key"] == "ana"


def test_default_file_is_created_under_data_dir(tmp_path):
    env = {"KVLAB_DATA_DIR": str(tmp_path / "new" / "dir")}
    assert data_dir(env) == tmp_path / "new" / "dir"
    url = database_url(env)
    s = open_store(url)
    assert s.persistent and (tmp_path / "new" / "dir" / "progress.sqlite3").is_file()
    s.close()
    assert database_url({"KVLAB_DATABASE_URL": "postgresql+psycopg://u:p@db/kv"}) == "postgresql+psycopg://u:p@db/kv"
    xdg = data_dir({"XDG_DATA_HOME": str(tmp_path)})
    assert xdg.name == "kvlab"


@pytest.mark.parametrize(
    "bad", ["", " ", "x" * 41, "Robert'); DROP TABLE kvlab_progress;--", "<script>", "a/b", "a\nb", 7]
)
def test_bad_names_are_refused(store, bad):
    with pytest.raises(ValueError, match="learner name|class code"):
        store.save("c1", bad, SAMPLE)
    with pytest.raises(ValueError, match="class code"):
        store.load(bad, "Ana")


def test_names_trimmed_and_unicode_letters_ok():
    assert validate_name("  José   M.  ") == "José M."
    assert validate_name("x" * 40) == "x" * 40


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8"), min_size=0, max_size=50))
def test_validation_accepts_only_the_allowed_alphabet(text):
    try:
        out = validate_name(text)
    except ValueError:
        return
    assert 1 <= len(out) <= 40 and all(c.isalnum() or c in " -_." for c in out)


def test_names_are_bound_not_interpolated(store):
    # Quote characters are refused before SQL; a stored name with SQL-ish content must be data only.
    store.save("c1", "O.Brien -- x", SAMPLE)
    assert [r["learner"] for r in store.class_records("c1")] == ["O.Brien -- x"]
    with store.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(progress_table)).scalar_one() == 1


def test_same_name_in_two_classes_never_mixes(store):
    other = {"visited": ["paged"], "quiz": {"paged.q": {"answer": "x", "correct": False}}, "diagnosis": {}}
    store.save("Class-A", "Sam", SAMPLE)
    store.save("class-b", "sam", other)
    store.save("CLASS-A", "SAM", {**SAMPLE, "visited": ["paged"]})  # the same learner as the first save
    assert store.load("class-a", "Sam")["visited"] == ["bandwidth", "gqa", "paged"]
    assert store.load("Class-A", "Sam")["quiz"] == normalize_progress(SAMPLE)["quiz"]
    assert visible_progress(store.load("Class-B", "Sam")) == visible_progress(other)
    assert [r["learner"] for r in store.class_records("class-a")] == ["SAM"]  # the name as last typed
    assert [r["progress"] for r in store.class_records("class-b")] == [visible_progress(other)]


def test_a_second_replica_sees_every_committed_save(store):
    # Two app replicas = two engines on one database: a save returns only once it is committed.
    replica = ProgressStore(store.url)
    try:
        for i in range(5):
            progress = {"visited": [f"p{j}" for j in range(i + 1)], "quiz": {}, "diagnosis": {}}
            store.save("c", "Ana", progress)
            assert visible_progress(replica.load("c", "Ana")) == visible_progress(progress)
            replica.save("c", "Bob", progress)
            assert visible_progress(store.load("c", "Bob")) == visible_progress(progress)
    finally:
        replica.close()


def test_bad_progress_shapes():
    with pytest.raises(ValueError, match="visited"):
        normalize_progress({"visited": "gqa"})
    with pytest.raises(ValueError, match="quiz"):
        normalize_progress({"quiz": [1]})
    with pytest.raises(ValueError, match="predict"):
        normalize_progress({"predict": [128]})
    with pytest.raises(ValueError, match="JSON"):
        normalize_progress({"quiz": {"q": {1, 2}}})
    with pytest.raises(ValueError, match="limit"):
        normalize_progress({"visited": ["x" * 70_000]})
    with pytest.raises(ValueError, match="written_at_us"):
        normalize_progress({"written_at_us": {"quiz": {"q": "yesterday"}}})


def test_progress_saved_before_predictions_existed_loads_with_none(store):
    old = {"visited": ["gqa"], "quiz": {}, "diagnosis": {}}  # the shape of rows written before this version
    with store.engine.begin() as conn:
        conn.execute(
            progress_table.insert().values(
                class_code="c", learner_key="old", learner="Old", data=json.dumps(old), updated_at=sa.func.now()
            )
        )
    assert visible_progress(store.load("c", "old")) == {**old, "predict": {}}
    assert class_report(store.class_records("c"), LESSONS)[0]["predictions"] == 0


def test_corrupt_file_falls_back_with_message(tmp_path):
    path = tmp_path / "progress.sqlite3"
    path.write_bytes(b"this is not a database at all" * 100)
    s = open_store(f"sqlite:///{path}")
    assert isinstance(s, NullStore) and not s.persistent
    assert "damaged" in s.message and str(path) in s.message
    assert s.load("c", "Ana") == empty_progress()
    s.save("c", "Ana", SAMPLE)  # accepted and dropped, never raises


def test_locked_file_gives_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr("progress.store.SQLITE_BUSY_TIMEOUT_S", 0.5)  # the lock below is never released in time
    store = ProgressStore(f"sqlite:///{tmp_path / 'p.sqlite3'}")
    store.save("c", "Ana", SAMPLE)
    con = sqlite3.connect(tmp_path / "p.sqlite3", timeout=0)
    con.execute("BEGIN EXCLUSIVE")  # another program holds the write lock
    try:
        with pytest.raises(ProgressStoreError, match="stayed locked for 0.5 s: another program holds its lock"):
            store.save("c", "Ana", {"visited": ["paged"]})
    finally:
        con.rollback()
        con.close()
    assert visible_progress(store.load("c", "Ana")) == visible_progress(SAMPLE)  # the failed write left nothing
    store.close()


def test_bad_url_and_unwritable_dir(tmp_path):
    s = open_store("not a url at all")
    assert isinstance(s, NullStore) and "KVLAB_DATABASE_URL" in s.message
    s = open_store("postgresql+nosuchdriver://u@h/db")
    assert isinstance(s, NullStore)


def test_concurrent_first_saves_of_same_learner(store):
    errors = []

    def worker(i):
        try:
            store.save("c", "Ana", {"visited": [f"p{i}"], "quiz": {}, "diagnosis": {}})
        except Exception as exc:  # noqa: BLE001 - the test reports any failure
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(store.class_records("c")) == 1


def test_report_and_csv(store):
    store.save("c", "Ana", SAMPLE)
    store.save("c", "-Bob", {"visited": LESSONS, "quiz": {}, "diagnosis": {"s": {"grade": "worse"}}})
    rows = class_report(store.class_records("c"), LESSONS)
    ana, bob = sorted(rows, key=lambda r: r["learner"].lstrip("-"))
    assert (ana["lessons_visited"], ana["completion_pct"], ana["quiz_answered"], ana["quiz_correct"]) == (2, 25.0, 2, 1)
    assert (ana["diagnoses"], ana["diagnoses_resolved"]) == (1, 1)
    assert (bob["completion_pct"], bob["diagnoses_resolved"]) == (100.0, 0)
    assert (ana["predictions"], ana["predictions_close"], bob["predictions"]) == (2, 1, 0)
    predicted = prediction_rows(store.class_records("c"))
    assert [tuple(r[k] for k in PREDICTION_COLUMNS) for r in predicted] == [
        ("Ana", "gqa", 512.0, 128.0, 300.0, False),  # 4x the answer: +300 %
        ("Ana", "paged", 63, 63.0, 0.0, True),
    ]
    parsed = list(csv.DictReader(io.StringIO(report_csv(rows))))
    assert {p["learner"] for p in parsed} == {"Ana", "'-Bob"}  # formula-like cell neutralised
    assert parsed[0]["lessons_total"] == "8"
    with pytest.raises(ValueError, match="lesson_ids"):
        class_report(store.class_records("c"), [])


def test_schema_and_statements_compile_for_postgresql():
    # The shared-deployment path: the same Core statements must compile for PostgreSQL with bound parameters.
    import sqlalchemy as sa
    from sqlalchemy.dialects import postgresql

    from progress.store import progress_table

    dialect = postgresql.dialect()
    ddl = str(sa.schema.CreateTable(progress_table).compile(dialect=dialect))
    assert "TIMESTAMP WITH TIME ZONE" in ddl and "PRIMARY KEY (class_code, learner_key)" in ddl
    update = progress_table.update().where(progress_table.c.learner_key == "x'; drop").values(data="{}")
    compiled = update.compile(dialect=dialect)
    assert "drop" not in str(compiled) and "%(learner_key_1)s" in str(compiled)
    assert compiled.params["learner_key_1"] == "x'; drop"


def test_postgresql_store_hides_the_password_and_refuses_a_wrong_one(postgres_url):
    store = ProgressStore(postgres_url)
    password = sa.make_url(postgres_url).password
    try:
        assert store.persistent and "postgresql" in store.message and password not in store.message
    finally:
        store.close()
    wrong = sa.make_url(postgres_url).set(password="not-the-password").render_as_string(hide_password=False)
    s = open_store(wrong)
    assert isinstance(s, NullStore) and "password" in s.message and "not-the-password" not in s.message


def test_unreachable_postgresql_fails_fast_with_a_message():
    from bench.app_server import free_port

    require_postgres()  # the driver is what answers here
    s = open_store(f"postgresql+psycopg://kvlab:pw@127.0.0.1:{free_port()}/kvlab")  # nothing listens there
    assert isinstance(s, NullStore) and "KVLAB_DATABASE_URL" in s.message and "pw@" not in s.message
