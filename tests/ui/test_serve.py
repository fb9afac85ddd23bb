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
def test_main_hands_over_to_streamlit_run(monkeypatch, argv, script, rest):
    from streamlit.web import cli

    seen = []
    monkeypatch.setattr(serve, "preload", lambda: [])
    monkeypatch.setattr(serve, "observe", lambda started, failed: None)  # tested below, on a copy of the logger
    monkeypatch.setattr(serve, "install_middleware", lambda: True)
    monkeypatch.setattr(cli, "main", lambda: seen.append(list(sys.argv)))
    monkeypatch.setattr(sys, "argv", ["serve"])
    serve.main(argv)
    assert seen == [["streamlit", "run", str(script), *rest]]


@pytest.fixture
def app_logger():
    """The app's logger as it was before (observe() configures it for the whole process)."""
    import logging

    logger = logging.getLogger("kvlab")
    saved = (list(logger.handlers), logger.level, logger.propagate)
    yield logger
    logger.handlers[:], logger.level, logger.propagate = saved


def test_observe_logs_the_start_with_its_settings_redacted(monkeypatch, capsys, app_logger):
    import json

    monkeypatch.setenv("KVLAB_TEACHER_KEY", "planted-key-77aa")
    monkeypatch.setenv("KVLAB_DATABASE_URL", "postgresql+psycopg://kvlab:planted-pw-77aa@db/kvlab")
    monkeypatch.delenv("KVLAB_METRICS_PORT", raising=False)
    serve.observe(0.0, ["triton (ImportError: no)"])
    err = capsys.readouterr().err
    assert "planted" not in err
    [start] = [json.loads(line) for line in err.splitlines() if '"server_start"' in line]
    assert start["fields"]["settings"]["KVLAB_TEACHER_KEY"] == "<redacted>"
    assert start["fields"]["settings"]["KVLAB_DATABASE_URL"] == "postgresql+psycopg://kvlab:***@db/kvlab"
    assert start["fields"]["metrics"] is None and start["fields"]["not_preloaded"] == ["triton (ImportError: no)"]


@pytest.mark.parametrize(
    ("name", "value"),
    [("KVLAB_METRICS_PORT", "ninety"), ("KVLAB_LOG_LEVEL", "chatty"), ("KVLAB_METRICS_ADDRESS", "somewhere")],
)
def test_a_bad_operations_setting_stops_the_start_with_its_name(monkeypatch, app_logger, name, value):
    monkeypatch.setenv("KVLAB_METRICS_PORT", "9464")
    monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit, match=f"kvlab: cannot start: {name}="):
        serve.observe(0.0, [])
