"""The router: app.py runs, lists only existing pages, and shows the backend badge and progress."""

from pathlib import Path

from streamlit.testing.v1 import AppTest

from kernels.backend import describe
from ui.page import PAGES, available_pages

ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / "app.py")


def test_app_runs_with_sidebar_badge_and_progress():
    at = AppTest.from_file(APP, default_timeout=30).run()
    assert not at.exception
    sidebar_text = " ".join(m.value for m in at.sidebar.markdown) + " ".join(c.value for c in at.sidebar.caption)
    assert describe()["label"] in sidebar_text
    assert describe()["device"] in sidebar_text
    progress = at.session_state["progress"]
    assert set(progress) >= {"visited", "quiz", "diagnosis"}
    assert "welcome" in progress["visited"]  # the default page is the welcome page
    assert not at.error


def test_available_pages_filters_missing_files(tmp_path):
    (tmp_path / "pages").mkdir()
    (tmp_path / "pages" / "0_welcome.py").write_text("")
    (tmp_path / "pages" / "2_gqa.py").write_text("")
    found = [path for path, _, _ in available_pages(tmp_path)]
    assert found == ["pages/0_welcome.py", "pages/2_gqa.py"]
    assert len(PAGES) == 9  # welcome + eight lessons
    assert available_pages()[0][0] == "pages/0_welcome.py"  # the default page exists in the real tree


def test_switching_to_lesson_pages_records_visits():
    at = AppTest.from_file(APP, default_timeout=30).run()
    for path, page_id in [("pages/1_bandwidth.py", "bandwidth"), ("pages/7_golden_rules.py", "golden_rules")]:
        at.switch_page(path).run()
        assert not at.exception and not at.error
        assert page_id in at.session_state["progress"]["visited"]


def test_sidebar_progress_counts_lessons_and_repairs_the_contract_shape():
    at = AppTest.from_file(APP, default_timeout=30)
    at.session_state["progress"] = {
        "visited": ["gqa", "packing"],
        "quiz": {"gqa.mqa": {"answer": "One", "correct": True}},
    }
    at.run()
    assert not at.exception
    (bar,) = at.sidebar.get("progress")
    assert "Lessons visited: 2 / 7" in bar.proto.text  # welcome is not a lesson
    assert any("Quiz answers correct: 1 /" in c.value for c in at.sidebar.caption)
    progress = at.session_state["progress"]
    assert progress["visited"][:2] == ["gqa", "packing"] and progress["diagnosis"] == {}
