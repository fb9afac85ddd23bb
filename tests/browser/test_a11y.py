"""Accessibility in a real browser: axe-core's WCAG 2.1 A/AA rules on every page, a keyboard-only lesson.

axe-core (the version package.json pins; scripts/install_browser.sh installs it with `npm ci`) is injected
into each page and run with the rule tags wcag2a, wcag2aa, wcag21a and wcag21aa, in a browser preferring
the light and one preferring the dark scheme: once at the page's defaults, once after one widget move with
every expander opened (chart tables, sign-in, copy-link). A serious or critical violation fails the test;
every violation of any impact is listed in the failure message and in
test-artifacts/a11y/axe-<page>-<scheme>.json, with every chart label under 4.5:1 (axe does not read them).
The light run saves a greyscale screenshot of each chart (test-artifacts/a11y/grey-<page>-<n>.png): what a
learner who cannot tell the colours apart sees.
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


# Chart text axe does not judge: every label plotly draws on the chart's own background (titles, ticks, axis
# titles, legends, annotations, point and outside bar labels), with its contrast against that background.
CHART_TEXT_JS = """() => {
  const rgb = (s) => (s.match(/[\\d.]+/g) || []).slice(0, 4).map(Number);
  const lin = (v) => (v /= 255) <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4;
  const lum = ([r, g, b]) => 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b);
  const app = getComputedStyle(document.querySelector('[data-testid="stApp"]')).backgroundColor;
  const out = [];
  for (const chart of document.querySelectorAll('[data-testid="stPlotlyChart"]')) {
    const paper = chart.querySelector('.main-svg');
    let bg = paper ? getComputedStyle(paper).backgroundColor : app;
    if (rgb(bg).length === 4 && rgb(bg)[3] === 0) bg = app;
    for (const t of chart.querySelectorAll('svg text')) {
      if (!t.textContent.trim() || t.closest('.bartext-inside, .hm, .heatmaplayer') ||
          (t.getAttribute('class') || '').includes('bartext-inside')) continue;
      const fill = getComputedStyle(t).fill;
      const [a, b] = [lum(rgb(fill)), lum(rgb(bg))];
      const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
      const text = t.textContent.trim().slice(0, 60);
      if (ratio < 4.5) out.push({text, fill, background: bg, ratio: +ratio.toFixed(2)});
    }
  }
  return out;
}"""


def open_expanders(page) -> int:
    """Open every collapsed expander (chart data tables, sign-in, copy-link, sources) so axe sees what is inside."""
    closed = page.locator('[data-testid="stExpander"] details:not([open]) > summary')
    opened = 0
    while closed.count() and opened < 60:
        closed.first.click()
        opened += 1
    if opened:
        settle(page)
    return opened


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
    report["chart text under 4.5:1"] = page.evaluate(CHART_TEXT_JS)
    if scheme == "light":
        report["shots"] = [str(p.relative_to(ROOT)) for p in grey_shots(page, course_page.id)]
    report["moved"] = move_one_widget(page)
    report["expanders opened"] = open_expanders(page)
    if report["moved"] or report["expanders opened"]:
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
    assert not report["chart text under 4.5:1"], f"{name}: chart labels under 4.5:1: {report['chart text under 4.5:1']}"


def test_playground_after_a_run_has_no_serious_violation(page, axe_script):
    # the playground draws its charts (timeline, block tables, pool) only once the engine has run
    page.goto("/playground")
    settle(page)
    main = page.locator('[data-testid="stMain"]')
    main.get_by_role("button", name="Generate").click()
    main.locator('[data-testid="stMetric"]', has_text="Generated tokens").wait_for(timeout=120_000)
    settle(page, timeout_ms=120_000)
    assert error_texts(page) == []
    found = axe_violations(page, axe_script)
    report = {"page": "playground", "state": "after Generate", "axe": TAGS, "after a run": found}
    report["chart text under 4.5:1"] = page.evaluate(CHART_TEXT_JS)
    report["shots"] = [str(p.relative_to(ROOT)) for p in grey_shots(page, "playground")]
    (A11Y / "axe-playground-run.json").write_text(json.dumps(report, indent=2))
    assert len(report["shots"]) == 3
    assert count(found, BLOCKING) == 0, f"playground after a run:\n{describe(found)}"
    assert not report["chart text under 4.5:1"], report["chart text under 4.5:1"]


# --- keyboard and screen reader -----------------------------------------------------------------------

ACTIVE_JS = """() => {
  const e = document.activeElement;
  if (!e) return {};
  const box = e.closest('[data-testid]');
  return {
    tag: e.tagName, type: e.type || '', role: e.getAttribute('role') || '', label: e.getAttribute('aria-label') || '',
    text: (e.innerText || '').trim().slice(0, 80), box: box ? box.getAttribute('data-testid') : '',
  };
}"""


def tab_to(page, wanted, what: str, max_tabs: int = 600) -> dict:
    """Press Tab until the focused element satisfies `wanted(info)` (ACTIVE_JS's description of it)."""
    seen = []
    for _ in range(max_tabs):
        page.keyboard.press("Tab")
        info = page.evaluate(ACTIVE_JS)
        if wanted(info):
            return info
        seen.append(f"{info.get('box')}:{info.get('tag')}:{info.get('text') or info.get('label')}"[:60])
    raise AssertionError(f"Tab never reached {what} in {max_tabs} presses; focus went through: {seen[-40:]}")


def key_and_wait(page, key: str) -> None:
    """Press `key` on whatever has the focus and wait for the re-run it triggers."""
    before = runs_finished(page)
    page.keyboard.press(key)
    wait_for_runs(page, before)


def test_a_lesson_works_with_the_keyboard_alone(page, shoot):
    # open lesson 1 from the navigation
    tab_to(page, lambda i: i["tag"] == "A" and "Memory bandwidth" in i["text"], "the lesson's navigation link")
    page.keyboard.press("Enter")
    page.wait_for_url("**/bandwidth**")
    settle(page)
    assert page.locator('[data-testid="stMain"] h1').first.inner_text().strip() != ""
    # move its slider with the arrow keys
    slider = slider_input_named(page, "Sequences decoding together")
    start = slider.get_attribute("aria-valuetext")
    tab_to(page, lambda i: i["role"] == "slider" or i["type"] == "range", "the batch slider")
    assert page.evaluate("() => document.activeElement.getAttribute('aria-valuetext')") == start
    key_and_wait(page, "ArrowRight")
    key_and_wait(page, "ArrowRight")
    settle(page)
    assert slider.get_attribute("aria-valuetext") != start, "the arrow keys did not move the slider"
    # answer the first check question: Tab into its radio group, Space picks the focused option
    main = page.locator('[data-testid="stMain"]')
    tab_to(page, lambda i: i["type"] == "radio", "the first check question")
    key_and_wait(page, "Space")
    settle(page)
    verdict = main.locator('[data-testid="stAlertContentSuccess"], [data-testid="stAlertContentWarning"]')
    assert verdict.count() >= 1, "answering with the keyboard showed no feedback"
    assert re.search(r"Correct|Not quite", verdict.first.inner_text()), verdict.first.inner_text()
    # type a prediction, then check it with the keyboard
    tab_to(page, lambda i: i["tag"] == "INPUT" and i["label"].startswith("Your prediction"), "the prediction input")
    page.keyboard.type("5")
    key_and_wait(page, "Enter")
    tab_to(page, lambda i: i["tag"] == "BUTTON" and i["text"] == "Check", "the Check button")
    key_and_wait(page, "Enter")
    settle(page)
    feedback = main.locator('[data-testid="stAlertContentSuccess"], [data-testid="stAlertContentWarning"]').last
    assert re.search(r"\b(Close|Off)\b", feedback.inner_text()), feedback.inner_text()
    assert error_texts(page) == []
    feedback.scroll_into_view_if_needed()
    shoot(page, "a11y-keyboard-walk")


def slider_input_named(page, label_prefix: str):
    """The range input of the main block's slider whose label starts with `label_prefix` (case-insensitive)."""
    sliders = page.locator('[data-testid="stMain"] [data-testid="stSlider"]')
    for i in range(sliders.count()):
        if sliders.nth(i).inner_text().lower().startswith(label_prefix.lower()):
            return sliders.nth(i).locator('input[type="range"]')
    raise AssertionError(f"no slider labelled {label_prefix!r}")


def test_navigation_names_are_the_page_titles_without_icon_words(page):
    # Streamlit draws a material icon as ligature text ("school"); it must stay out of the accessible name
    nav = page.locator('[data-testid="stSidebarNav"]')
    names = re.findall(r'link "([^"]+)"', nav.aria_snapshot())
    assert names == [p.title for p in COURSE], names
    icons = nav.locator('[data-testid="stIconMaterial"]')
    assert icons.count() == len(COURSE)
    assert all(icons.nth(i).get_attribute("aria-hidden") == "true" for i in range(icons.count()))
