"""The router: app.py runs, lists only existing pages, and shows the backend badge and progress."""

from pathlib import Path

from streamlit.testing.v1 import AppTest

from kernels.backend import describe
from pages._ui import PAGES, available_pages

ROOT = Path(__file__).resolve().parents[1]
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
