"""Every page of the running app loads in a real browser with no exception or error element."""

from __future__ import annotations

import re
from urllib.parse import urlparse

import pytest

from tests.browser.helpers import error_texts, wait_for_app

pytestmark = pytest.mark.browser


def nav_links(page) -> list[tuple[str, str]]:
    """(title, href) of every page in the sidebar navigation, expanding "View more" if shown."""
    more = page.locator('[data-testid="stSidebarNavViewButton"]')
    if more.count() and "more" in more.inner_text().lower():
        more.click()
    links = page.locator('[data-testid="stSidebarNavLink"]')
    if links.count() == 0:  # Streamlit hides the navigation while the app has a single page
        return [("home", page.url)]
    return [(links.nth(i).inner_text().strip(), links.nth(i).get_attribute("href")) for i in range(links.count())]


def slug(title: str) -> str:
    """A file-name-safe version of a page's URL path ("" is the default page)."""
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") or "welcome"


def test_every_page_loads_without_errors(page, shoot):
    links = nav_links(page)
    failures = {}
    for title, href in links:
        page.goto(href)
        wait_for_app(page)
        try:
            page.locator('[data-testid="stMain"] h1').first.wait_for(timeout=60_000)
        except Exception as exc:  # noqa: BLE001 - reported with the page's screenshot below
            failures[title] = [f"no page title rendered: {type(exc).__name__}"]
        errors = error_texts(page)
        if errors:
            failures[title] = failures.get(title, []) + errors
        shoot(page, f"page-{slug(urlparse(href).path)}", whole=True)
    assert not failures, f"pages showing errors: {failures}"
