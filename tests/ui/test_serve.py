"""ui.serve: the app's modules are imported before Streamlit starts, then Streamlit's own `run` takes over."""

import sys

import pytest

from ui import serve


def test_every_app_module_imports():
    assert serve.preload() == []  # a module that fails to import would fail the first learner's page instead
    for name in ("torch", "pandas", "plotly.graph_objects", "ui.router", "lessons.labs.pressure", "progress.store"):
        assert name in sys.modules


@pytest.mark.parametrize(
    ("argv", "script", "rest"),
    [
        ([], serve.APP, []),
        (["--server.port", "8502"], serve.APP, ["--server.port", "8502"]),
        (
            ["bench/app/profiled_app.py", "--server.headless", "true"],
            "bench/app/profiled_app.py",
            ["--server.headless", "true"],
        ),
    ],
)
def test_main_hands_over_to_streamlit_run(monkeypatch, tmp_path, argv, script, rest):
    from streamlit.web import cli

    seen = []
    monkeypatch.setattr(serve, "preload", lambda: [])
    monkeypatch.setattr(cli, "main", lambda: seen.append(list(sys.argv)))
    monkeypatch.setattr(sys, "argv", ["serve"])
    assert serve.main(argv, {"KVLAB_WARM": "0", "KVLAB_DATA_DIR": str(tmp_path)}) == 0
    assert seen == [["streamlit", "run", str(script), *rest]]


def _no_server(monkeypatch) -> list[list[str]]:
    from streamlit.web import cli

    seen: list[list[str]] = []
    monkeypatch.setattr(serve, "preload", lambda: [])
    monkeypatch.setattr(cli, "main", lambda: seen.append(list(sys.argv)))
    return seen


def test_a_bad_setting_stops_the_start_with_its_message(monkeypatch, capsys):
    seen = _no_server(monkeypatch)
    monkeypatch.setattr(serve, "preload", lambda: pytest.fail("preloaded despite a bad setting"))
    assert serve.main([], {"KVLAB_MAX_MODEL_BYTES": "2 GB"}) == 2
    err = capsys.readouterr().err
    assert err.startswith("kvlab: KVLAB_MAX_MODEL_BYTES='2 GB' must be a whole number of bytes")
    assert "Traceback" not in err and seen == []


def test_the_lessons_are_warmed_before_streamlit_starts(monkeypatch, tmp_path):
    from ui import warm

    order: list[str] = []
    seen = _no_server(monkeypatch)
    monkeypatch.setattr(warm, "warm", lambda: order.append("warm") or [warm.Warmed("paged", 0.1)])
    from streamlit.web import cli

    monkeypatch.setattr(cli, "main", lambda: order.append("streamlit"))
    assert serve.main([], {"KVLAB_DATA_DIR": str(tmp_path)}) == 0
    assert order == ["warm", "streamlit"] and seen == []
    order.clear()
    serve.main([], {"KVLAB_WARM": "off", "KVLAB_DATA_DIR": str(tmp_path)})
    assert order == ["streamlit"]


def test_the_cookie_secret_comes_from_its_file(monkeypatch, tmp_path):
    _no_server(monkeypatch)
    secret = tmp_path / "cookie"
    secret.write_text("same-on-every-replica\n")
    env = {"KVLAB_WARM": "0", "KVLAB_COOKIE_SECRET_FILE": str(secret), "KVLAB_DATA_DIR": str(tmp_path)}
    assert serve.main([], env) == 0
    assert env["STREAMLIT_SERVER_COOKIE_SECRET"] == "same-on-every-replica"


def test_an_installed_app_passes_the_course_settings_as_options(tmp_path):
    assert serve.packaged_options(serve.APP, serve.ROOT) == []  # a checkout: Streamlit reads .streamlit/ itself
    options = serve.packaged_options(tmp_path / "app.py", tmp_path)
    assert "--server.headless=true" in options and "--browser.gatherUsageStats=false" in options
    assert "--client.showErrorDetails=none" in options and "--theme.light.textColor=#111111" in options


def test_a_new_database_is_created_at_this_releases_schema_before_the_start(monkeypatch, tmp_path):
    from progress import migrate

    seen = _no_server(monkeypatch)
    assert serve.main([], {"KVLAB_WARM": "0", "KVLAB_DATA_DIR": str(tmp_path)}) == 0
    assert migrate.current(f"sqlite:///{tmp_path}/progress.sqlite3") == migrate.head() and len(seen) == 1


def test_a_database_the_server_cannot_use_stops_the_start(monkeypatch, capsys):
    """A wrong password or a database that is not there: the start stops with the reason, never a password,
    instead of every learner's save failing later."""
    seen = _no_server(monkeypatch)
    monkeypatch.setattr(serve, "preload", lambda: pytest.fail("preloaded despite an unusable database"))
    url = "postgresql+psycopg://kvlab:hunter2@127.0.0.1:1/kvlab"  # port 1: nothing listens there
    assert serve.main([], {"KVLAB_WARM": "0", "KVLAB_DATABASE_URL": url}) == 2
    err = capsys.readouterr().err
    assert err.startswith("kvlab: the progress database cannot be used: ") and "KVLAB_DATABASE_URL" in err
    assert "hunter2" not in err and "Traceback" not in err and seen == []
