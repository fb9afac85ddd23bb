"""One live round in Chromium: the teacher opens it on the GQA lesson, two learners (their own browser
sessions) see the banner without reloading, follow, predict; the projector counts both without names; the
teacher reveals; a learner's banner shows their answer beside the class's and the engine's."""

from __future__ import annotations

import pytest

from lessons import predictions
from tests.browser.conftest import TEACHER_KEY, VIEWPORT
from tests.browser.helpers import error_texts, wait_for_app
from tests.browser.test_a11y import AXE, axe_violations, count, describe
from tests.browser.test_progress_signin import sign_in
from ui import live
from ui.course import page as course_page

pytestmark = pytest.mark.browser

CLASS = "Live-7"
LESSON = course_page("gqa").title
GQA = predictions.for_page("gqa")
POLL_MS = int(1000 * (live.LEARNER_POLL_S + live.LEARNER_MAX_AGE_S)) + 15_000  # a poll, plus a loaded machine


def _no_serious_axe_violation(pg, where: str) -> None:
    """axe-core's WCAG 2.1 A/AA rules (tests/browser/test_a11y.py) on the page as it is now."""
    if not AXE.exists():
        pytest.fail(f"{AXE} is missing; run scripts/install_browser.sh")
    found = axe_violations(pg, AXE)
    blocking = count(found, ("serious", "critical"))
    assert blocking == 0, f"{where}: {blocking} serious or critical axe violations:\n{describe(found)}"


def _context(browser, app_url: str):
    context = browser.new_context(viewport=VIEWPORT, base_url=app_url)
    context.set_default_timeout(30_000)
    return context


def _open_projector(pg) -> None:
    pg.goto("/teacher")
    wait_for_app(pg)
    main = pg.locator('[data-testid="stMain"]')
    main.get_by_label("Teacher key").fill(TEACHER_KEY)
    main.get_by_role("button", name="Open the teacher view").click()
    main.get_by_label("Class code").fill(CLASS)
    main.get_by_label("Class code").press("Enter")
    main.get_by_text("Live round (projector)").click()
    main.get_by_role("button", name="Start the live round").wait_for()
    main.get_by_label("Lesson").click()
    pg.get_by_role("option", name=LESSON).click()
    main.get_by_role("button", name="Start the live round").click()
    main.get_by_text("Waiting for the first answer").wait_for()
    wait_for_app(pg)


def _answers_shown(pg) -> str:
    return pg.locator('[data-testid="stMetric"]').filter(has_text="Answers").locator('[data-testid="stMetricValue"]')


def _follow_and_predict(pg, name: str, value: float) -> None:
    pg.goto("/")
    wait_for_app(pg)
    sign_in(pg, name, CLASS.lower())  # class codes are not case-sensitive
    banner = pg.locator(".st-key-live_banner")
    banner.get_by_text("your teacher is on").wait_for(timeout=POLL_MS)  # no reload: the banner polls
    assert LESSON in banner.inner_text()
    banner.get_by_role("button", name="Follow").click()
    entry = pg.get_by_label("Your prediction (KiB)")
    entry.wait_for()
    wait_for_app(pg)
    entry.fill(f"{value:g}")
    entry.press("Enter")
    wait_for_app(pg)
    pg.get_by_role("button", name="Check", exact=True).click()
    pg.get_by_text("Your answer joined your class's live round").wait_for()
    assert error_texts(pg) == []


def test_a_live_round_teacher_opens_learners_predict_teacher_reveals(browser, app_url, shoot):
    contexts = [_context(browser, app_url) for _ in range(3)]
    try:
        teacher, ana, bob = (c.new_page() for c in contexts)
        _open_projector(teacher)
        slip = GQA.traps[0].value  # the "read num_key_value_heads" slip (lesson 2 asks for DeepSeek-V3's MLA)
        _follow_and_predict(ana, "Ana", GQA.answer)
        _follow_and_predict(bob, "Bob", slip)
        answers = _answers_shown(teacher)
        teacher.wait_for_function(
            "el => el.innerText.trim() === '2'", arg=answers.element_handle(), timeout=15_000, polling=200
        )
        projector = teacher.locator(".st-key-live_screen")
        text = projector.inner_text()
        assert "Ana" not in text and "Bob" not in text  # counts only: no names on the projector
        assert "hidden until you reveal" in text
        shoot(teacher, "live-round-answers", whole=True)
        teacher.get_by_role("button", name="Reveal the answer").click()
        projector.get_by_text("read num_key_value_heads").first.wait_for()
        assert error_texts(teacher) == []
        shoot(teacher, "live-round-revealed", whole=True)
        _no_serious_axe_violation(teacher, "the revealed projector")
        line = bob.locator(".st-key-live_banner").get_by_text("The engine:")
        line.wait_for(timeout=POLL_MS)
        said = line.inner_text()
        assert f"{slip:g}" in said.replace(",", "") and "num_key_value_heads" in said
        line.scroll_into_view_if_needed()
        shoot(bob, "live-round-learner")
        _no_serious_axe_violation(bob, "the learner's lesson with the revealed banner")
    finally:
        for c in contexts:
            c.close()
