"""Browser test set-up: one `streamlit run app.py` per session on a free loopback port, one headless
system Chromium, a fresh browser context per test, screenshots into test-artifacts/screenshots/. Under xdist
each worker is a session: its own app (log test-artifacts/streamlit-gwN.log, data folder) and Chromium.

Run only these with ``pytest -m browser``; scripts/refresh_screenshots.sh runs them and refreshes the
README gallery in docs/screenshots/ from the screenshots.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from bench.app.browser import RUNS_FINISHED_JS, find_chromium
from bench.app_server import ROOT, running_app
from tests.browser.helpers import chromium_browser, wait_for_app

ARTIFACTS = ROOT / "test-artifacts"
SHOTS = ARTIFACTS / "screenshots"
VIEWPORT = {"width": 1280, "height": 860}
TEACHER_KEY = "the browser tests' teacher key"  # the app under test has a teacher view (tests/browser/test_live.py)


# Streamlit draws a grey skeleton where an element of the running script has not arrived yet and marks the
# elements of the previous run stale (faded) until the new run replaces them: a screenshot taken while
# either is on screen shows a half-drawn page.
UNSETTLED = '[data-testid="stSkeleton"], [data-stale="true"], [data-testid="stSpinner"]'


MAX_SHOT_HEIGHT = 14_000  # px: a whole lesson page fits; anything longer is cut
WHOLE_HEIGHT_JS = """() => {
  const main = document.querySelector('[data-testid="stMain"]');
  const block = document.querySelector('[data-testid="stMainBlockContainer"]');
  return Math.ceil(Math.max(main ? main.scrollHeight : 0, block ? block.scrollHeight + 120 : 0));
}"""


def settle(pg, timeout_ms: float = 60_000) -> None:
    """Wait until a full script run has finished, the app is idle and nothing on screen is a placeholder."""
    # a context made without the `page` fixture's init scripts has no counter: then the idle wait must do
    pg.wait_for_function("window.__kvFinished === undefined || window.__kvFinished > 0", timeout=timeout_ms, polling=50)
    wait_for_app(pg, timeout_ms)
    pg.wait_for_function(f"!document.querySelector({UNSETTLED!r})", timeout=timeout_ms, polling=50)


@pytest.fixture(scope="session")
def chromium_path() -> str:
    path = find_chromium()
    if path is None:
        msg = "BROWSER TESTS SKIPPED: no chromium on PATH; run scripts/install_browser.sh (or set KVLAB_CHROMIUM)"
        print(f"\n*** {msg} ***", file=sys.stderr)
        if os.environ.get("CI"):  # CI must run the browser tests, not skip them
            pytest.fail(msg)
        pytest.skip(msg)
    return path


@pytest.fixture(scope="session")
def app_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """KVLAB_DATA_DIR of the app under test (its SQLite progress file lands here)."""
    return tmp_path_factory.mktemp("kvlab-data")


@pytest.fixture(scope="session")
def app_url(app_data_dir: Path) -> str:
    """Base URL of the running app."""
    log = ARTIFACTS / f"streamlit-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.log"  # one app per xdist worker
    with running_app(app_data_dir, log, extra_env={"KVLAB_TEACHER_KEY": TEACHER_KEY}) as url:
        yield url


@pytest.fixture(scope="session")
def browser(chromium_path: str):
    with chromium_browser(chromium_path) as b:
        yield b


@pytest.fixture
def page(browser, app_url: str):
    """A new browser context (its own Streamlit session) already showing the app's home page."""
    context = browser.new_context(viewport=VIEWPORT, base_url=app_url)
    context.set_default_timeout(30_000)
    context.add_init_script(f"({RUNS_FINISHED_JS})()")  # window.__kvFinished: runs seen on the websocket
    pg = context.new_page()
    pg.goto("/")
    wait_for_app(pg)
    yield pg
    context.close()


@pytest.fixture(scope="session")
def shoot():
    """``shoot(page, name)`` saves a viewport PNG to test-artifacts/screenshots/NAME.png."""
    SHOTS.mkdir(parents=True, exist_ok=True)

    def _shoot(pg, name: str, whole: bool = False) -> Path:
        """Viewport PNG; `whole=True` grows the viewport to the page's full height first (Streamlit scrolls
        inside stMain, so Playwright's own full_page shot would still stop at the window's edge)."""
        settle(pg)
        path = SHOTS / f"{name}.png"
        size = pg.viewport_size
        if whole:
            height = pg.evaluate(WHOLE_HEIGHT_JS)
            pg.set_viewport_size({"width": size["width"], "height": min(max(height, size["height"]), MAX_SHOT_HEIGHT)})
            settle(pg)  # a taller window re-lays out the charts
        pg.screenshot(path=str(path), full_page=False, animations="disabled")
        if whole:
            pg.set_viewport_size(size)
        return path

    return _shoot
