"""Signing in from the sidebar saves progress to the server's SQLite file, and a new browser session
(a reconnect) that signs in with the same name and passphrase gets it back; a wrong passphrase does not."""

from __future__ import annotations

import json
import sqlite3

import pytest

from tests.browser.helpers import error_texts, wait_for_app

pytestmark = pytest.mark.browser


PASSPHRASE = "ada's analytical engine"


def fill_sign_in(page, name: str, class_code: str, passphrase: str = PASSPHRASE) -> None:
    """Open the sidebar's sign-in box and submit name, class code and passphrase."""
    sidebar = page.locator('[data-testid="stSidebar"]')
    sidebar.get_by_text("Save my progress").click()
    sidebar.get_by_label("Your name").fill(name)
    sidebar.get_by_label("Class code").fill(class_code)
    field = sidebar.get_by_label("Passphrase")
    assert field.get_attribute("type") == "password"  # never shown on screen
    field.fill(passphrase)
    sidebar.get_by_role("button", name="Sign in").click()


def sign_in(page, name: str, class_code: str, passphrase: str = PASSPHRASE) -> None:
    """Sign in and wait until the sidebar says so."""
    fill_sign_in(page, name, class_code, passphrase)
    page.locator('[data-testid="stSidebar"]').get_by_text("Signed in as").wait_for()
    wait_for_app(page)


def stored_visits(data_dir, class_code: str, name: str) -> list[str]:
    """Pages recorded as visited in the app's SQLite file (read directly, independent of the app)."""
    con = sqlite3.connect(data_dir / "progress.sqlite3")
    try:
        row = con.execute(
            "select data from kvlab_progress where class_code = ? and learner_key = ?",
            (class_code.casefold(), name.casefold()),
        ).fetchone()
    finally:
        con.close()
    return json.loads(row[0])["visited"] if row else []


def test_progress_survives_a_reconnect(browser, app_url, app_data_dir, shoot):
    first = browser.new_context(base_url=app_url)
    page = first.new_page()
    page.goto("/")
    wait_for_app(page)
    sign_in(page, "Ada L.", "Room-42")
    assert error_texts(page) == []
    shoot(page, "signin")
    visited = stored_visits(app_data_dir, "Room-42", "Ada L.")
    assert visited, "signing in on a page should save the page visit"
    first.close()

    # A new context is a new Streamlit session: nothing carries over except the database.
    second = browser.new_context(base_url=app_url)
    page = second.new_page()
    page.goto("/")
    wait_for_app(page)
    fill_sign_in(page, "ada l.", "room-42", "not ada's passphrase")  # someone else trying her name
    alert = page.locator('[data-testid="stAlertContentError"]')
    alert.wait_for()
    assert "wrong passphrase for this name in this class" in alert.inner_text()
    sidebar = page.locator('[data-testid="stSidebar"]')
    sidebar.get_by_label("Passphrase").fill(PASSPHRASE)
    sidebar.get_by_role("button", name="Sign in").click()
    sidebar.get_by_text("Signed in as").wait_for()
    wait_for_app(page)
    assert "Signed in as ada l." in sidebar.inner_text()  # names and codes are case-insensitive keys
    assert stored_visits(app_data_dir, "room-42", "ada l.")[: len(visited)] == visited
    second.close()


def test_bad_name_shows_error_not_traceback(page):
    sidebar = page.locator('[data-testid="stSidebar"]')
    sidebar.get_by_text("Save my progress").click()
    sidebar.get_by_label("Your name").fill("<b>x</b>")
    sidebar.get_by_label("Class code").fill("c1")
    sidebar.get_by_label("Passphrase").fill(PASSPHRASE)
    sidebar.get_by_role("button", name="Sign in").click()
    alert = page.locator('[data-testid="stAlertContentError"]')
    alert.wait_for()
    assert "letters, digits" in alert.inner_text()
    assert page.locator('[data-testid="stException"]').count() == 0
    assert page.locator("b", has_text="x").count() == 0  # the name was never rendered as HTML
