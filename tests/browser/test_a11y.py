"""Accessibility in a real browser: axe-core's WCAG 2.1 A/AA rules on every page, a keyboard-only lesson.

axe-core (the version package.json pins; scripts/install_browser.sh installs it with `npm ci`) is injected
into each page and run with the rule tags wcag2a, wcag2aa, wcag21a and wcag21aa, once at the page's defaults
and once after one widget move. A serious or critical violation fails the test; every violation of any
impact is listed in the failure message and in test-artifacts/a11y/axe-<page>.json. The same test saves
a greyscale screenshot of each chart (test-artifacts/a11y/grey-<page>-<n>.png): what a learner who cannot
tell the colours apart sees.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from bench.app.browser import RUNS_FINISHED_JS
from bench.app_server import ROOT
from tests.browser.conftest import ARTIFACTS, MAX_SHOT_HEIGHT, VIEWPORT, WHOLE_HEIGHT_JS, settle
from tests.browser.helpers import error_texts, press_and_wait, runs_finished, wait_for_runs
from ui.course import COURSE, CoursePage

pytestmark = pytest.mark.browser

AXE = ROOT / "node_modules" / "axe-core" / "axe.min.js"
A11Y = ARTIFACTS / "a11y"
TAGS = ("wcag2a", "wcag2aa", "wcag21a", "wcag21aa")
BLOCKING = ("serious", "critical")

AXE_RUN_JS = """async (tags) => {
  const result = await axe.run(document, {runOnly: {type: 'tag', values: tags}, resultTypes: ['violations']});
  return result.violations.map((v) => ({
    id: v.id, impact: v.impact, help: v.help, helpUrl: v.helpUrl,
    nodes: v.nodes.map((n) => ({target: n.target.join(' '), html: n.html.slice(0, 240),
                                summary: (n.failureSummary || '').slice(0, 400)})),
  }));
}"""


@pytest.fixture(scope="module")
def axe_script() -> Path:
    if not AXE.exists():
        msg = f"ACCESSIBILITY TEST SKIPPED: {AXE.relative_to(ROOT)} is missing; run scripts/install_browser.sh"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return AXE


def route(p: CoursePage) -> str:
    """The page's URL path: the default page is "/", the others their script's name without its number."""
    return "/" if p is COURSE[0] else "/" + re.sub(r"^\d+_", "", Path(p.file).stem)


def axe_violations(page, script: Path) -> list[dict]:
    """axe-core's violations of the WCAG 2.1 A/AA rules on the whole page as it is now.

    The window is first made as tall as the page: Streamlit scrolls inside its main block, and axe can only
    judge the contrast of text it sees on screen (the rest it reports as "needs review", not as a violation).
    """
    size = page.viewport_size
    height = page.evaluate(WHOLE_HEIGHT_JS)
    page.set_viewport_size({"width": size["width"], "height": min(max(height, size["height"]), MAX_SHOT_HEIGHT)})
    settle(page)
    try:
        if not page.evaluate("typeof window.axe !== 'undefined'"):
            page.add_script_tag(path=str(script))
        return page.evaluate(AXE_RUN_JS, list(TAGS))
    finally:
        page.set_viewport_size(size)


def move_one_widget(page) -> str:
    """Move the page's first slider one step with the keyboard, else pick its first radio's second option, else
    tick its first checkbox; returns what it did ("" when the page has none of them)."""
    main = page.locator('[data-testid="stMain"]')
    slider = main.locator('[data-testid="stSlider"] input[type="range"]').first
    if slider.count():
        slider.focus()
        press_and_wait(page, slider, "ArrowRight")
        return f"slider moved to {slider.get_attribute('aria-valuetext')}"
    radio = main.locator('[data-testid="stRadio"]').first
    if radio.count() and radio.locator('[data-testid="stRadioOption"]').count() > 1:
        before = runs_finished(page)
        radio.locator('[data-testid="stRadioOption"]').nth(1).click()
        wait_for_runs(page, before)
        return "radio: second option"
    box = main.locator('[data-testid="stCheckbox"] label').first
    if box.count():
        before = runs_finished(page)
        box.click()
        wait_for_runs(page, before)
        return "checkbox ticked"
    return ""


def describe(violations: list[dict]) -> str:
    """One line per violation and node: impact, rule, where and why."""
    lines = []
    for v in violations:
        for n in v["nodes"]:
            why = " ".join(n["summary"].split())
            lines.append(f"  [{v['impact']}] {v['id']} ({v['help']}) at {n['target']}: {why}")
    return "\n".join(lines)


def count(violations: list[dict], impacts: tuple[str, ...] | None = None) -> int:
    """Violating nodes (of the given impacts)."""
    return sum(len(v["nodes"]) for v in violations if impacts is None or v["impact"] in impacts)


def grey_shots(page, name: str) -> list[Path]:
    """A greyscale PNG of each chart on the page (Playwright's screenshot, converted with Pillow)."""
    from PIL import Image, ImageOps

    charts = page.locator('[data-testid="stPlotlyChart"]')
    paths = []
    for i in range(charts.count()):
        chart = charts.nth(i)
        chart.scroll_into_view_if_needed()
        path = A11Y / f"grey-{name}-{i + 1}.png"
        chart.screenshot(path=str(path), animations="disabled")
        with Image.open(path) as img:
            ImageOps.grayscale(img.convert("RGB")).save(path)
        paths.append(path)
    return paths


BACKGROUND_JS = """() => getComputedStyle(document.querySelector('[data-testid="stApp"]')).backgroundColor"""


@pytest.fixture(params=["light", "dark"])
def scheme_page(request, browser, app_url: str):
    """A fresh session in a browser that prefers the light or the dark colour scheme (Streamlit follows it)."""
    context = browser.new_context(viewport=VIEWPORT, base_url=app_url, color_scheme=request.param)
    context.set_default_timeout(30_000)
    context.add_init_script(f"({RUNS_FINISHED_JS})()")
    yield request.param, context.new_page()
    context.close()


def is_dark(rgb: str) -> bool:
    """Whether a CSS rgb()/rgba() colour is darker than mid-grey."""
    r, g, b = (int(v) for v in re.findall(r"\d+", rgb)[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b < 128


@pytest.mark.parametrize("course_page", COURSE, ids=[p.id for p in COURSE])
def test_axe_finds_no_serious_violation(scheme_page, axe_script, course_page: CoursePage):
    scheme, page = scheme_page
    name = f"{course_page.id}-{scheme}"
    A11Y.mkdir(parents=True, exist_ok=True)
    page.goto(route(course_page))
    settle(page)
    assert error_texts(page) == []
    assert is_dark(page.evaluate(BACKGROUND_JS)) == (scheme == "dark"), f"the app did not follow the {scheme} scheme"
    report: dict[str, object] = {"page": course_page.id, "scheme": scheme, "route": route(course_page), "axe": TAGS}
    report["defaults"] = axe_violations(page, axe_script)
    if scheme == "light":
        report["shots"] = [str(p.relative_to(ROOT)) for p in grey_shots(page, course_page.id)]
    report["moved"] = move_one_widget(page)
    if report["moved"]:
        settle(page)
        report["after move"] = axe_violations(page, axe_script)
    report["counts"] = {
        state: {"all": count(found), "serious or critical": count(found, BLOCKING)}
        for state in ("defaults", "after move")
        if isinstance(found := report.get(state), list)
    }
    (A11Y / f"axe-{name}.json").write_text(json.dumps(report, indent=2))
    text = "\n".join(f"{state}:\n{describe(report[state])}" for state in report["counts"] if report[state])
    blocking = sum(c["serious or critical"] for c in report["counts"].values())
    assert blocking == 0, f"{name}: {blocking} serious or critical axe violations {report['counts']}:\n{text}"
