"""Progress store: round trips, validation, injection safety, fallback on corrupt/locked files, reports."""

import csv
import io
import sqlite3
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from progress.report import class_report, report_csv
from progress.store import (
    NullStore,
    ProgressStore,
    ProgressStoreError,
    data_dir,
    database_url,
    empty_progress,
    merge_progress,
    normalize_progress,
    open_store,
    validate_name,
)

LESSONS = ["bandwidth", "gqa", "varlen", "fragmentation", "paged", "diagnosis", "rules", "playground"]
SAMPLE = {
    "visited": ["bandwidth", "gqa"],
    "quiz": {"gqa-1": {"answer": "8", "correct": True}, "rules-2": {"answer": 1, "correct": False}},
    "diagnosis": {"rtx3090": {"grade": "resolved", "fixes": ["max_model_len"]}},
}


@pytest.fixture
def store(tmp_path):
    s = ProgressStore(f"sqlite:///{tmp_path / 'p.sqlite3'}")
    yield s
    s.close()


def test_round_trip_and_reopen(tmp_path, store):
    store.save("Class-A", "Ana", SAMPLE)
    assert store.load("Class-A", "Ana") == normalize_progress(SAMPLE)
    # A server restart is a new engine over the same file.
    again = ProgressStore(store.url)
    assert again.load("class-a", "ANA") == normalize_progress(SAMPLE)  # keys are case-insensitive
    again.close()
    assert store.load("Class-A", "Bob") == empty_progress()
    assert store.load("Class-B", "Ana") == empty_progress()


def test_save_replaces_and_class_records(store):
    store.save("c1", "Ana", SAMPLE)
    store.save("c1", "Ana", {"visited": ["paged"], "quiz": {}, "diagnosis": {}})
    store.save("c1", "bob", empty_progress())
    store.save("c2", "Cy", SAMPLE)
    recs = store.class_records("C1")
    assert [r["learner"] for r in recs] == ["Ana", "bob"]
    assert recs[0]["progress"]["visited"] == ["paged"]
    assert recs[0]["updated_at"] is not None


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


def test_names_are_bound_not_interpolated(tmp_path, store):
    # Quote characters are refused before SQL; a stored name with SQL-ish content must be data only.
    store.save("c1", "O.Brien -- x", SAMPLE)
    assert [r["learner"] for r in store.class_records("c1")] == ["O.Brien -- x"]
    con = sqlite3.connect(tmp_path / "p.sqlite3")
    assert con.execute("select count(*) from kvlab_progress").fetchone() == (1,)
    con.close()


def test_bad_progress_shapes():
    with pytest.raises(ValueError, match="visited"):
        normalize_progress({"visited": "gqa"})
    with pytest.raises(ValueError, match="quiz"):
        normalize_progress({"quiz": [1]})
    with pytest.raises(ValueError, match="JSON"):
        normalize_progress({"quiz": {"q": {1, 2}}})
    with pytest.raises(ValueError, match="limit"):
        normalize_progress({"visited": ["x" * 70_000]})


def test_merge_prefers_current_session():
    saved = {"visited": ["a", "b"], "quiz": {"q1": {"correct": False}}, "diagnosis": {}}
    cur = {"visited": ["c", "a"], "quiz": {"q1": {"correct": True}}, "diagnosis": {"s": {"grade": "x"}}}
    m = merge_progress(saved, cur)
    assert m["visited"] == ["a", "b", "c"] and m["quiz"]["q1"]["correct"] is True and "s" in m["diagnosis"]


def test_corrupt_file_falls_back_with_message(tmp_path):
    path = tmp_path / "progress.sqlite3"
    path.write_bytes(b"this is not a database at all" * 100)
    s = open_store(f"sqlite:///{path}")
    assert isinstance(s, NullStore) and not s.persistent
    assert "damaged" in s.message and str(path) in s.message
    assert s.load("c", "Ana") == empty_progress()
    s.save("c", "Ana", SAMPLE)  # accepted and dropped, never raises


def test_locked_file_gives_clear_error(tmp_path, store):
    store.save("c", "Ana", SAMPLE)
    con = sqlite3.connect(tmp_path / "p.sqlite3", timeout=0)
    con.execute("BEGIN EXCLUSIVE")  # another program holds the write lock
    try:
        with pytest.raises(ProgressStoreError, match="lock"):
            store.save("c", "Ana", empty_progress())
    finally:
        con.rollback()
        con.close()
    assert store.load("c", "Ana") == normalize_progress(SAMPLE)  # the failed write left nothing half-done


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


def test_round_trip_on_a_real_server_database(monkeypatch):
    # Optional: set KVLAB_TEST_DATABASE_URL (e.g. a scratch PostgreSQL) to run the store against it.
    import os

    url = os.environ.get("KVLAB_TEST_DATABASE_URL")
    if not url:
        pytest.skip("KVLAB_TEST_DATABASE_URL not set (optional PostgreSQL check)")
    store = ProgressStore(url)
    try:
        code = f"ci-{os.getpid()}"
        store.save(code, "Ana", SAMPLE)
        store.save(code, "ana", {"visited": ["gqa"], "quiz": {}, "diagnosis": {}})
        assert store.load(code, "ANA")["visited"] == ["gqa"]
        assert [r["learner"] for r in store.class_records(code)] == ["ana"]
    finally:
        with store.engine.begin() as conn:
            from progress.store import progress_table

            conn.execute(progress_table.delete().where(progress_table.c.class_code == f"ci-{os.getpid()}"))
        store.close()
