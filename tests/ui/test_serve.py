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
    monkeypatch.setattr(serve, "observe", lambda settings, environ: None)  # tested below, on a copy of the logger
    monkeypatch.setattr(serve, "install_middleware", lambda: True)
    monkeypatch.setattr(cli, "main", lambda: seen.append(list(sys.argv)))
    monkeypatch.setattr(sys, "argv", ["serve"])
    assert serve.main(argv, {"KVLAB_WARM": "0", "KVLAB_DATA_DIR": str(tmp_path)}) == 0
    assert seen == [["streamlit", "run", str(script), *rest]]


def _no_server(monkeypatch) -> list[list[str]]:
    from streamlit.web import cli

    seen: list[list[str]] = []
    monkeypatch.setattr(serve, "preload", lambda: [])
    monkeypatch.setattr(serve, "observe", lambda settings, environ: None)  # tested below, on a copy of the logger
    monkeypatch.setattr(serve, "install_middleware", lambda: True)
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


@pytest.fixture
def app_logger():
    """The app's logger as it was before (observe() configures it for the whole process)."""
    import logging

    logger = logging.getLogger("kvlab")
    saved = (list(logger.handlers), logger.level, logger.propagate)
    yield logger
    logger.handlers[:], logger.level, logger.propagate = saved


def test_observe_logs_the_start_with_its_settings_redacted(capsys, app_logger):
    import json

    from kvlab.settings import load_settings

    env = {
        "KVLAB_TEACHER_KEY": "planted-key-77aa",
        "KVLAB_DATABASE_URL": "postgresql+psycopg://kvlab:planted-pw-77aa@db/kvlab",
        "KVLAB_LOG_LEVEL": "info",
    }
    serve.observe(load_settings(env), env)
    err = capsys.readouterr().err
    assert "planted" not in err
    [start] = [json.loads(line) for line in err.splitlines() if '"server_start"' in line]
    assert start["fields"]["settings"]["KVLAB_TEACHER_KEY"] == "<redacted>"
    assert start["fields"]["settings"]["KVLAB_DATABASE_URL"] == "postgresql+psycopg://kvlab:***@db/kvlab"
    assert start["fields"]["metrics"] is None


@pytest.mark.parametrize(
    ("name", "value"),
    [("KVLAB_METRICS_PORT", "ninety"), ("KVLAB_LOG_LEVEL", "chatty"), ("KVLAB_METRICS_ADDRESS", "somewhere")],
)
def test_a_bad_operations_setting_stops_the_start_with_its_name(monkeypatch, capsys, name, value):
    seen = _no_server(monkeypatch)
    monkeypatch.setattr(serve, "preload", lambda: pytest.fail("preloaded despite a bad setting"))
    assert serve.main([], {"KVLAB_METRICS_PORT": "9464", name: value}) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kvlab: {name}=") and "Traceback" not in err and seen == []


def test_a_metrics_port_another_program_holds_stops_the_start(monkeypatch, capsys, app_logger):
    import socket

    from bench.app_server import HOST

    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen()
        port = taken.getsockname()[1]
        real = serve.observe
        seen = _no_server(monkeypatch)
        monkeypatch.setattr(serve, "observe", real)  # the real one: it tries to serve the metrics on that port
        assert serve.main([], {"KVLAB_WARM": "0", "KVLAB_METRICS_PORT": str(port)}) == 2
    err = capsys.readouterr().err
    assert f"kvlab: KVLAB_METRICS_PORT={port} cannot be served on 127.0.0.1" in err and seen == []


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
