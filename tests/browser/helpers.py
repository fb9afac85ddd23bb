"""Driving the app in a real browser for the tests: start Chromium, wait for runs to finish, read widgets back.

``wait_for_runs`` and ``press_and_wait`` need bench/app/browser.py's RUNS_FINISHED_JS as an init script (the
`page` fixture adds it): it counts the finished script runs a page receives on its websocket. stApp's
`data-test-script-state` attribute (``wait_for_app``) is not enough after a key press, because React can
render a whole quick run in one batch and the attribute never leaves "notRunning" (see RUNS_FINISHED_JS).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from bench.app.browser import APP_IDLE, CHROMIUM_ARGS


@contextlib.contextmanager
def chromium_browser(executable: str) -> Iterator[Any]:
    """A headless Chromium (Playwright sync API) from ``executable``; closed afterwards."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def wait_for_app(page: Any, timeout_ms: float = 60_000) -> None:
    """Wait until the app is connected and its script run has finished (Streamlit's own e2e signal)."""
    page.wait_for_selector(APP_IDLE, timeout=timeout_ms)
    # A rerun triggered by the last widget event may start just after; settle for a moment.
    page.wait_for_timeout(150)
    page.wait_for_selector(APP_IDLE, timeout=timeout_ms)


def runs_finished(page: Any) -> int:
    """Script runs this page has seen finish so far."""
    return page.evaluate("window.__kvFinished")


def wait_for_runs(page: Any, more_than: int, timeout_ms: float = 60_000) -> None:
    """Wait until more than ``more_than`` runs have finished and the app shows the last one."""
    page.wait_for_function(f"window.__kvFinished > {more_than}", timeout=timeout_ms, polling=20)
    page.wait_for_selector(APP_IDLE, timeout=timeout_ms)


def press_and_wait(page: Any, target: Any, key: str, timeout_ms: float = 60_000) -> None:
    """Press ``key`` on ``target`` and wait for the re-run it triggers to finish."""
    before = runs_finished(page)
    target.press(key)
    wait_for_runs(page, before, timeout_ms)


def slider_input(page: Any, label_prefix: str) -> Any:
    """The keyboard-focusable range input of the slider whose label starts with ``label_prefix``."""
    return page.locator(f'[data-testid="stSlider"]:has-text("{label_prefix}") input[type="range"]').first


def metric_value(page: Any, label_prefix: str) -> str:
    """Displayed value of the st.metric whose label contains ``label_prefix``."""
    return page.locator(
        f'[data-testid="stMetric"]:has-text("{label_prefix}") [data-testid="stMetricValue"]'
    ).first.inner_text()


def error_texts(page: Any) -> list[str]:
    """Texts of exception and st.error elements on the page (empty when the page is healthy)."""
    loc = page.locator('[data-testid="stException"], [data-testid="stAlertContentError"]')
    return [loc.nth(i).inner_text()[:300] for i in range(loc.count())]
