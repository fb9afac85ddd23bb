"""The router: app.py runs every course page, and shows the backend badge and the learner's progress."""

from kernels.backend import describe
from ui import live
from ui.course import COURSE, LESSON_IDS, page


def test_app_runs_with_sidebar_badge_and_progress(app_test):
    at = app_test("app.py").run()
    assert not at.exception
    sidebar_text = " ".join(m.value for m in at.sidebar.markdown) + " ".join(c.value for c in at.sidebar.caption)
    assert describe()["label"] in sidebar_text
    assert describe()["device"] in sidebar_text
    progress = at.session_state["progress"]
    assert set(progress) >= {"visited", "quiz", "diagnosis"}
    assert "welcome" in progress["visited"]  # the default page is the welcome page
    assert not at.error


def test_switching_to_lesson_pages_records_visits(app_test):
    at = app_test("app.py").run()
    for page_id in ("bandwidth", "golden_rules"):
        at.switch_page(page(page_id).file).run()
        assert not at.exception and not at.error
        assert page_id in at.session_state["progress"]["visited"]


def test_every_course_page_is_in_the_navigation(app_test):
    at = app_test("app.py").run()
    for p in COURSE:
        at.switch_page(p.file)  # raises for a script the navigation does not list
    assert len(COURSE) == 11


def test_the_navigation_serves_each_renumbered_lesson_at_its_published_url(app_test):
    at = app_test("app.py").run()
    assert at.session_state[live.PAGE_KEY] == ""  # the default page, at the app's root
    # Lesson 5's path is not its id; lessons 7 and 8 were renumbered on disk (pages/7_diagnosis.py, ...).
    for page_id, url in (("paged", "paged_attention"), ("diagnosis", "diagnosis"), ("golden_rules", "golden_rules")):
        at.switch_page(page(page_id).file).run()
        assert not at.exception and at.session_state[live.PAGE_KEY] == url


def test_sidebar_progress_counts_lessons_and_repairs_the_contract_shape(app_test):
    at = app_test("app.py")
    at.session_state["progress"] = {
        "visited": ["gqa", "packing"],
        "quiz": {"gqa.mqa": {"answer": "One", "correct": True}},
    }
    at.run()
    assert not at.exception
    (bar,) = at.sidebar.get("progress")
    assert f"Lessons visited: 2 / {len(LESSON_IDS)}" in bar.proto.text
    assert len(LESSON_IDS) == 8  # welcome, the playground and the teacher view are not lessons
    assert any("Quiz answers correct: 1 /" in c.value for c in at.sidebar.caption)
    progress = at.session_state["progress"]
    assert progress["visited"][:2] == ["gqa", "packing"] and progress["diagnosis"] == {}


def test_the_sidebar_names_the_release(app_test):
    import tomllib

    from ui.course import ROOT

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    at = app_test("app.py").run()
    assert f"KV Lab {version}" in [c.value for c in at.sidebar.caption]
