"""Backups (progress/backup.py) on SQLite (the online backup API) and PostgreSQL (pg_dump / pg_restore): a live
class's database (learners with passphrases, answers, an open live round with its answers) round-trips into a
new database row for row; a restore over data is refused unless forced, and forced it replaces everything;
files that are not a backup of that database's kind, or of a revision this version does not know, are refused
with a message saying what to do; a backup made before the upgrade restores to the old schema.
"""

from __future__ import annotations

import sqlite3

import pytest
import sqlalchemy as sa

from progress import backup, migrate
from progress.live import LiveBoard
from progress.records import visible_progress
from progress.store import ProgressStore
from tests.progress.test_migrate import fill_old_class, old_database, snapshot

CLASS = "Room 7"
ANA, BOB = "correct horse battery", "tea is ready at four"


class Clock:
    def __init__(self) -> None:
        self.t = 1_800_000_000.0

    def __call__(self) -> float:
        self.t += 0.001
        return self.t


def live_class(url: str) -> None:
    """A class in the middle of a lesson: two learners signed in with progress, a live round with answers."""
    store = ProgressStore(url, clock=Clock())
    try:
        board = LiveBoard(store)
        board.open_round(CLASS, "gqa", {"tokens": "4096"})
        for name, passphrase, value in (("Ana", ANA, 4.0), ("Bob", BOB, 8.0)):
            version = store.sign_in(CLASS, name, passphrase).version
            store.save(CLASS, name, {"visited": ["gqa"], "predict": {"gqa": {"value": value}}}, auth_version=version)
            assert board.answer(CLASS, name, "gqa", value, auth_version=version) == 1
        store.save(CLASS, "Ana", {"quiz": {"gqa.mqa": {"answer": "One", "correct": True}}})
    finally:
        store.close()


def everything(url: str) -> dict:
    """Every row of every kvlab table and the stored revision."""
    return {"revision": migrate.current(url), **snapshot(url)}


def test_a_live_class_round_trips_into_a_new_database(new_db, tmp_path):
    source, target = new_db(), new_db()
    live_class(source)
    file = tmp_path / "class.backup"
    backup.backup(source, file)
    assert file.is_file() and not (tmp_path / "class.backup.partial").exists()
    backup.restore(target, file)
    assert everything(target) == everything(source)
    assert everything(target)["revision"] == migrate.head() and len(everything(target)["kvlab_live_answer"]) == 2

    store = ProgressStore(target)  # the restored class works as the old one did
    try:
        assert store.sign_in(CLASS, "Ana", ANA).status == "verified"
        ana = visible_progress(store.load(CLASS, "Ana"))
        assert ana["quiz"] == {"gqa.mqa": {"answer": "One", "correct": True}} and ana["predict"]["gqa"]["value"] == 4.0
        live = LiveBoard(store).current(CLASS)
        assert (live.lesson, live.round, live.answers, live.settings) == ("gqa", 1, 2, (("tokens", "4096"),))
        assert sorted(LiveBoard(store).answers(CLASS, 1)) == [4.0, 8.0]
    finally:
        store.close()


def test_a_restore_over_data_is_refused_unless_forced_and_forced_replaces_it_all(new_db, tmp_path):
    url = new_db()
    live_class(url)
    file = tmp_path / "class.backup"
    backup.backup(url, file)
    at_backup = everything(url)
    store = ProgressStore(url)
    try:  # the class goes on after the backup: a new learner, a changed answer, a new round
        store.sign_in(CLASS, "Cy", "a third passphrase")
        store.save(CLASS, "Ana", {"visited": ["paged"]})
        LiveBoard(store).open_round(CLASS, "paged")
    finally:
        store.close()
    later = everything(url)
    with pytest.raises(backup.BackupError, match=r"already holds \d+ row\(s\) of learners' data.*--force"):
        backup.restore(url, file)
    assert everything(url) == later  # refused: nothing changed
    backup.restore(url, file, force=True)
    assert everything(url) == at_backup  # everything after the backup is gone, everything before it is back


def test_a_database_the_app_just_created_takes_a_restore_without_force(new_db, tmp_path):
    source, target = new_db(), new_db()
    live_class(source)
    ProgressStore(target).close()  # the app started on it: the tables exist, empty
    backup.backup(source, tmp_path / "b")
    backup.restore(target, tmp_path / "b")
    assert everything(target) == everything(source)


def test_a_backup_from_before_the_upgrade_restores_to_the_old_schema(new_db, tmp_path):
    old, target = new_db(), new_db()
    old_database(old)
    fill_old_class(old)
    backup.backup(old, tmp_path / "before-upgrade")  # what an operator does before `kvlab db upgrade`
    ProgressStore(target).close()  # a database at head, empty
    backup.restore(target, tmp_path / "before-upgrade")
    assert everything(target) == everything(old) and migrate.current(target) is None
    assert migrate.upgrade(target) == migrate.head() and snapshot(target) == snapshot(old)


def test_files_that_are_not_a_backup_of_this_kind_are_refused(new_db, tmp_path):
    url = new_db()
    live_class(url)
    backend = sa.make_url(url).get_backend_name()
    text = tmp_path / "notes.txt"
    text.write_text("not a backup")
    with pytest.raises(backup.BackupError, match=f"notes.txt is not a kvlab backup, and .* is a {backend} database"):
        backup.restore(url, text)
    with pytest.raises(backup.BackupError, match="no backup file at .*missing"):
        backup.restore(url, tmp_path / "missing")
    other = f"sqlite:///{tmp_path / 'other.sqlite3'}" if backend == "postgresql" else None
    if other is not None:
        live_class(other)
        backup.backup(other, tmp_path / "sqlite.backup")
        with pytest.raises(backup.BackupError, match="is a SQLite backup, and the postgresql database .* restore a"):
            backup.restore(url, tmp_path / "sqlite.backup", force=True)
    before = everything(url)
    with pytest.raises(backup.BackupError, match="folder .* does not exist"):
        backup.backup(url, tmp_path / "no" / "such" / "b")
    with pytest.raises(backup.BackupError, match="is a folder; name the backup file"):
        backup.backup(url, tmp_path)
    assert everything(url) == before


def test_a_backup_of_a_newer_revision_is_refused(new_db, tmp_path):
    source, target = new_db(), new_db()
    live_class(source)
    file = tmp_path / "newer.backup"
    if sa.make_url(source).get_backend_name() == "sqlite":
        backup.backup(source, file)
        with sqlite3.connect(file) as conn:
            conn.execute("UPDATE alembic_version SET version_num = 'f00d'")
    else:
        engine = sa.create_engine(source)
        with engine.begin() as conn:
            conn.execute(sa.text("UPDATE alembic_version SET version_num = 'f00d'"))
        engine.dispose()
        backup.backup(source, file)
    with pytest.raises(backup.BackupError, match="revision f00d, which this kvlab does not know: a newer kvlab"):
        backup.restore(target, file)
    assert migrate.current(target) is None  # nothing restored


def test_nothing_to_back_up_and_unreachable_servers_are_clear(new_db, tmp_path):
    url = new_db()
    with pytest.raises(backup.BackupError, match="(does not exist|holds no kvlab table: nothing to back up)"):
        backup.backup(url, tmp_path / "b")
    assert not (tmp_path / "b").exists()
    from bench.app_server import free_port

    down = f"postgresql+psycopg://kvlab:hunter2-secret@127.0.0.1:{free_port()}/kvlab"
    for call in (lambda: backup.backup(down, tmp_path / "b"), lambda: backup.restore(down, tmp_path / "b")):
        with pytest.raises(backup.BackupError) as err:
            call()
        assert "hunter2" not in str(err.value)
    with pytest.raises(backup.BackupError, match="in-memory SQLite database cannot be backed up"):
        backup.backup("sqlite://", tmp_path / "b")
