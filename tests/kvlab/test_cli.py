"""The `kvlab` command: its version, `serve` handing Streamlit's options through in order after the settings
check, and `kvlab db` calling the store's migration and backup functions on the server's database."""

from __future__ import annotations

import sys
import types

import pytest

import kvlab
from kvlab import cli


def test_version(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"kvlab {kvlab.__version__}"


def test_a_command_is_required(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main([])
    assert done.value.code == 2 and "COMMAND" in capsys.readouterr().err


@pytest.fixture
def served(monkeypatch) -> list:
    from ui import serve

    calls: list = []
    monkeypatch.setattr(serve, "serve", lambda args, settings: calls.append((list(args), settings)) or 0)
    return calls


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--server.port=8600", "--server.address=0.0.0.0"],
        ["--server.port", "8600", "--server.headless", "true"],
        ["bench/app/profiled_app.py", "--server.port", "8600"],
    ],
)
def test_serve_passes_streamlits_options_through_in_order(served, args):
    assert cli.main(["serve", *args], {"KVLAB_MAX_MODEL_BYTES": "4096"}) == 0
    ((passed, settings),) = served
    assert passed == args and settings.max_model_bytes == 4096


def test_a_bad_setting_stops_every_command_before_it_starts(served, capsys):
    for argv in (["serve"], ["db", "current"]):
        assert cli.main(argv, {"KVLAB_PLAYGROUND_IDLE_S": "soon"}) == 2
        err = capsys.readouterr().err
        assert err.startswith("kvlab: KVLAB_PLAYGROUND_IDLE_S='soon' must be a whole number of seconds")
    assert served == []


def test_other_commands_refuse_unknown_options(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["db", "current", "--server.port=1"])
    assert done.value.code == 2 and "unrecognized arguments: --server.port=1" in capsys.readouterr().err


@pytest.fixture
def store(monkeypatch) -> list:
    """progress.migrate and progress.backup as recorders (the real ones are the store's; tested there)."""
    import progress.store  # noqa: F401 - imported with the real migrate module before the recorders stand in

    calls: list = []
    migrate = types.SimpleNamespace(
        upgrade=lambda url: calls.append(("upgrade", url)) or "0002",
        current=lambda url: calls.append(("current", url)) or None,
    )
    backup = types.SimpleNamespace(
        backup=lambda url, path: calls.append(("backup", url, path)),
        restore=lambda url, path, force=False: calls.append(("restore", url, path, force)),
    )
    monkeypatch.setitem(sys.modules, "progress.migrate", migrate)
    monkeypatch.setitem(sys.modules, "progress.backup", backup)
    return calls


def test_db_commands_work_on_the_servers_database(store, tmp_path, capsys):
    url_file = tmp_path / "url"
    url_file.write_text("sqlite:////srv/kvlab/progress.sqlite3\n")
    env = {"KVLAB_DATABASE_URL_FILE": str(url_file)}
    url = "sqlite:////srv/kvlab/progress.sqlite3"
    assert cli.main(["db", "upgrade"], env) == 0
    assert "database at revision 0002" in capsys.readouterr().out
    assert cli.main(["db", "current"], env) == 0
    assert "none" in capsys.readouterr().out
    assert cli.main(["db", "backup", "class.bak"], env) == 0
    assert cli.main(["db", "restore", "class.bak"], env) == 0
    assert cli.main(["db", "restore", "--force", "class.bak"], env) == 0
    assert store == [
        ("upgrade", url),
        ("current", url),
        ("backup", url, "class.bak"),
        ("restore", url, "class.bak", False),
        ("restore", url, "class.bak", True),
    ]


def test_db_defaults_to_the_sqlite_file_in_the_data_dir(store, tmp_path):
    assert cli.main(["db", "current"], {"KVLAB_DATA_DIR": str(tmp_path)}) == 0
    ((action, url),) = store
    assert action == "current" and url == f"sqlite:///{tmp_path}/progress.sqlite3"


def test_a_failing_db_command_says_why_without_a_traceback(monkeypatch, tmp_path, capsys):
    import progress.store  # noqa: F401 - see the store fixture

    def refuse(url, path, force=False):
        raise FileNotFoundError(f"no backup at {path}")

    monkeypatch.setitem(sys.modules, "progress.backup", types.SimpleNamespace(restore=refuse))
    assert cli.main(["db", "restore", "missing.bak"], {"KVLAB_DATA_DIR": str(tmp_path)}) == 1
    err = capsys.readouterr().err
    assert err == "kvlab db restore: no backup at missing.bak\n"


def test_db_commands_on_a_real_class_database(tmp_path, capsys):
    """The store's own functions behind the command (SQLite): upgrade, current, then a class's progress backed
    up and restored into another server's empty database."""
    from progress import migrate, open_store
    from progress.store import database_url as server_url

    first, second = {"KVLAB_DATA_DIR": str(tmp_path / "a")}, {"KVLAB_DATA_DIR": str(tmp_path / "b")}
    assert cli.main(["db", "upgrade"], first) == 0
    assert capsys.readouterr().out.strip() == f"database at revision {migrate.head()}"
    assert cli.main(["db", "current"], first) == 0 and capsys.readouterr().out.strip() == migrate.head()
    store = open_store(server_url(first))
    store.save("Room 7", "Ana", {"visited": ["gqa", "paged"]})
    store.close()
    backup = tmp_path / "class.backup"
    assert cli.main(["db", "backup", str(backup)], first) == 0 and backup.is_file()
    assert cli.main(["db", "restore", str(backup)], second) == 0
    restored = open_store(server_url(second))
    assert set(restored.load("Room 7", "Ana")["visited"]) >= {"gqa", "paged"}
    restored.close()
