"""The app works in Chromium under deploy/nginx.conf's Content-Security-Policy: behind the real nginx, every
page a learner opens loads, its widgets re-run the script over the websocket, its charts draw, and the
browser reports no policy violation; an inline script the app did not ship is blocked (the policy is
enforced, and the check would see a violation)."""

from __future__ import annotations

import time

import pytest

from bench.app.browser import RUNS_FINISHED_JS
from bench.app_server import nginx_balancer
from tests.browser.conftest import VIEWPORT
from tests.browser.helpers import error_texts, metric_value, runs_finished, slider_input, wait_for_app
from tests.pg import require_nginx

pytestmark = pytest.mark.browser

# Every violation the page sees, as the browser reports it to the document (also those of workers' and
# frames' loads that the page itself started).
VIOLATIONS_JS = """() => {
  window.__csp = [];
  document.addEventListener('securitypolicyviolation', (e) => {
    window.__csp.push(`${e.effectiveDirective} blocked ${e.blockedURI || 'inline'} (${e.sourceFile}:${e.lineNumber})`);
  });
}"""
PAGES = ("", "bandwidth", "gqa", "paged_attention", "playground")


@pytest.fixture(scope="module")
def site(app_url):
    require_nginx()
    with nginx_balancer([int(app_url.rsplit(":", 1)[1])]) as lb:
        yield lb["url"]


@pytest.fixture
def guarded_page(browser, site):
    context = browser.new_context(viewport=VIEWPORT, base_url=site)
    context.set_default_timeout(60_000)
    context.add_init_script(f"({RUNS_FINISHED_JS})()")
    context.add_init_script(f"({VIOLATIONS_JS})()")
    console: list[str] = []
    pg = context.new_page()
    pg.on("console", lambda msg: console.append(msg.text))
    pg.console_messages = console
    yield pg
    context.close()


def wait_until(page, expression: str, timeout_s: float = 60.0) -> None:
    """Poll ``expression`` from here: Playwright's wait_for_function evaluates its predicate with eval(), which
    this policy blocks (as it should)."""
    deadline = time.monotonic() + timeout_s
    while not page.evaluate(f"() => Boolean({expression})"):
        assert time.monotonic() < deadline, f"timed out waiting for {expression}"
        page.wait_for_timeout(50)


def violations(page) -> list[str]:
    return page.evaluate("window.__csp") + [m for m in page.console_messages if "Content Security Policy" in m]


def test_the_app_runs_under_the_policy_with_no_violation(guarded_page):
    page = guarded_page
    first = page.goto("/")
    policy = first.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "default-src 'self'" in policy, policy  # nginx's, not absent
    wait_for_app(page)
    charts = 0
    for route in PAGES:
        page.goto(f"/{route}")
        wait_for_app(page)
        page.locator('[data-testid="stMain"] h1').first.wait_for()
        assert error_texts(page) == [], route
        charts += page.locator('[data-testid="stPlotlyChart"] .main-svg').count()
    assert charts > 0  # Plotly drew under the policy
    page.goto("/gqa")
    wait_for_app(page)
    groups = slider_input(page, "KV groups G")
    before = metric_value(page, "KV per token")
    groups.focus()
    runs = runs_finished(page)
    groups.press("ArrowLeft")  # a widget event over the websocket, a re-run, new numbers
    wait_until(page, f"window.__kvFinished > {runs}")
    wait_for_app(page)
    assert metric_value(page, "KV per token") != before
    assert violations(page) == []


def test_an_inline_script_the_app_did_not_ship_is_blocked(guarded_page):
    page = guarded_page
    page.goto("/")
    wait_for_app(page)
    ran = page.evaluate(
        """() => { const s = document.createElement('script'); s.textContent = 'window.__injected = 1';
                   document.body.appendChild(s); return window.__injected === 1; }"""
    )
    assert ran is False
    wait_until(page, "window.__csp.length > 0", timeout_s=10)
    assert any(v.startswith("script-src") for v in violations(page)), violations(page)
