"""Deep links in a real browser: a lesson opened from a link, on a server nobody has visited yet, shows the
linked view inside the full app; moving a slider rewrites the address; a bad value shows a warning."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

import pytest

from bench.app.browser import RUNS_FINISHED_JS
from bench.app_server import running_app
from tests.browser.conftest import ARTIFACTS, VIEWPORT
from tests.browser.helpers import error_texts, metric_value, press_and_wait, slider_input, wait_for_runs

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def fresh_url(tmp_path_factory):
    """A server of its own: the deep link below is the first request it ever serves (as after a restart)."""
    with running_app(tmp_path_factory.mktemp("kvlab-links"), ARTIFACTS / "streamlit-links.log") as url:
        yield url


def open_link(browser, base_url: str, link: str):
    context = browser.new_context(viewport=VIEWPORT, base_url=base_url)
    context.set_default_timeout(60_000)
    context.add_init_script(f"({RUNS_FINISHED_JS})()")
    page = context.new_page()
    page.goto(link)
    wait_for_runs(page, 0, timeout_ms=120_000)
    return context, page


def query(page) -> dict[str, str]:
    return {k: v[-1] for k, v in parse_qs(urlparse(page.url).query).items()}


def test_a_deep_link_opens_that_view_in_the_app(browser, fresh_url, shoot):
    context, page = open_link(browser, fresh_url, "/paged_attention?block_size=64&max_context=4096")
    try:
        block, context_len = slider_input(page, "Block size"), slider_input(page, "Max context")
        assert block.get_attribute("aria-valuetext") == "64"
        assert context_len.get_attribute("aria-valuetext") == "4096"
        assert metric_value(page, "Table width") == "64"  # 4096 tokens / 64-token blocks
        # the page runs inside app.py: its navigation titles and sidebar, not Streamlit's pages/ fallback
        nav = page.locator('[data-testid="stSidebarNavLink"]').all_inner_texts()
        assert any("5 · PagedAttention" in t for t in nav), nav
        assert page.locator('[data-testid="stSidebar"]', has_text="Engine backend").count() == 1
        page.get_by_text("Copy link to this view").click()
        code = page.locator('[data-testid="stCode"]', has_text="paged_attention?").first
        assert "paged_attention?block_size=64&max_context=4096" in code.inner_text()
        shoot(page, "deep-link-paged")

        block.focus()
        press_and_wait(page, block, "ArrowLeft")  # 64 -> 32
        assert block.get_attribute("aria-valuetext") == "32"
        page.wait_for_function("() => location.search.includes('block_size=32')", timeout=30_000)
        assert query(page) == {"block_size": "32", "max_context": "4096"}
        assert metric_value(page, "Table width") == "128"
        assert error_texts(page) == []
    finally:
        context.close()


def test_a_bad_link_value_warns_and_shows_the_default(browser, fresh_url):
    context, page = open_link(browser, fresh_url, "/paged_attention?embed=true&block_size=7&max_context=4096")
    try:
        warning = page.locator('[data-testid="stAlertContentWarning"]', has_text="block_size").inner_text()
        assert "1, 2, 4, 8, 16, 32, 64, 128, 256" in warning and "default, 16" in warning
        assert slider_input(page, "Block size").get_attribute("aria-valuetext") == "16"
        assert slider_input(page, "Max context").get_attribute("aria-valuetext") == "4096"
        page.wait_for_function("() => location.search.includes('block_size=16')", timeout=30_000)
        assert query(page) == {"embed": "true", "block_size": "16", "max_context": "4096"}  # embed mode kept
        assert error_texts(page) == []
    finally:
        context.close()
