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
    monkeypatch.setattr(cli, "main", lambda: seen.append(list(sys.argv)))
    monkeypatch.setattr(sys, "argv", ["serve"])
    serve.main(argv)
    assert seen == [["streamlit", "run", str(script), *rest]]
