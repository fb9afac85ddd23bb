"""Single sign-on end to end: a real OpenID Provider (oidc-provider, tests/browser/oidc_provider.mjs) on
loopback, the app started by ui.serve with KVLAB_OIDC_* settings, and Chromium signing in through st.login.

A learner's progress lands under their provider subject (the key computed here from the issuer and the
subject, as docs/SECURITY.md states it), two learners the provider calls "Ana" stay two rows, the teacher
view opens for the account with the teacher group and not for a learner, the teacher's name (markup) is
shown as text, and a provider that stops answering leaves a clear message and the passphrase sign-in."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from pathlib import Path

import pytest

from bench.app_server import HOST, free_port, running_app
from tests.browser.conftest import ARTIFACTS, VIEWPORT
from tests.browser.helpers import error_texts, wait_for_app
from tests.browser.oidc import CLIENT_ID, running_provider

pytestmark = pytest.mark.browser

CLIENT_SECRET = "the test provider's client secret"
COOKIE_SECRET = "c0ffee" * 8  # 48 characters
CLASS = "Room-7"


@pytest.fixture(scope="module")
def sso_app(tmp_path_factory: pytest.TempPathFactory):
    """(app URL, provider issuer, data folder): the app with single sign-on through a provider on loopback."""
    data = tmp_path_factory.mktemp("kvlab-sso-data")
    secrets = tmp_path_factory.mktemp("kvlab-sso-secrets")
    (secrets / "client").write_text(CLIENT_SECRET + "\n")
    (secrets / "cookie").write_text(COOKIE_SECRET + "\n")
    port = free_port()
    issuer = f"http://{HOST}:{port}"
    env = {
        "KVLAB_OIDC_ISSUER": issuer,
        "KVLAB_OIDC_CLIENT_ID": CLIENT_ID,
        "KVLAB_OIDC_CLIENT_SECRET_FILE": str(secrets / "client"),
        "KVLAB_OIDC_COOKIE_SECRET_FILE": str(secrets / "cookie"),
        "KVLAB_OIDC_REDIRECT_URI": f"http://{HOST}:{{port}}/oauth2callback",  # Streamlit fills in its port
        "KVLAB_OIDC_CLASS": CLASS,
        "KVLAB_OIDC_TEACHER_CLAIM": "groups",
        "KVLAB_OIDC_TEACHER_VALUE": "kvlab-teachers",
        "KVLAB_OIDC_PROMPT": "login",
        "KVLAB_TEACHER_KEY": "",  # no key: only the claim opens the teacher view
    }
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with running_app(data, ARTIFACTS / f"streamlit-sso-{worker}.log", extra_env=env) as url:
        log = ARTIFACTS / f"oidc-provider-{worker}.log"
        with running_provider(port, f"{url}/oauth2callback", CLIENT_SECRET, log) as got:
            assert got == issuer
            yield url, issuer, data


def subject_key(issuer: str, subject: str) -> str:
    """The stored key docs/SECURITY.md promises: "sso:" + the first 36 hex digits of SHA-256(issuer \\n sub)."""
    return "sso:" + hashlib.sha256(f"{issuer}\n{subject}".encode()).hexdigest()[:36]


def stored_rows(data: Path) -> dict[str, tuple[str, str, dict]]:
    """learner_key -> (class key, name shown, progress) straight from the app's SQLite file."""
    con = sqlite3.connect(data / "progress.sqlite3")
    try:
        rows = con.execute("select learner_key, class_code, learner, data from kvlab_progress").fetchall()
    finally:
        con.close()
    return {key: (code, name, json.loads(text)) for key, code, name, text in rows}


def open_signin(page) -> None:
    page.goto("/")
    wait_for_app(page)
    page.locator('[data-testid="stSidebar"]').get_by_text("Save my progress").click()
    wait_for_app(page)


def sign_on(browser, url: str, account: str):
    """A new browser session signed in as ``account`` through the provider's login form; returns its page."""
    context = browser.new_context(viewport=VIEWPORT, base_url=url)
    context.set_default_timeout(60_000)
    page = context.new_page()
    open_signin(page)
    sidebar = page.locator('[data-testid="stSidebar"]')
    sidebar.get_by_role("button", name="Sign in with your school account").click()
    page.wait_for_selector('input[name="login"]')  # the provider's own page
    page.fill('input[name="login"]', account)
    page.fill('input[name="password"]', "any password")
    page.click('button[type="submit"]')
    page.wait_for_url(f"{url}/**")
    wait_for_app(page)
    sidebar.get_by_text("Signed in by your school as").first.wait_for()
    wait_for_app(page)
    return page


def test_learners_and_teacher_sign_on(browser, sso_app, shoot):
    url, issuer, data = sso_app
    ana = sign_on(browser, url, "ana-1")
    assert error_texts(ana) == []
    shoot(ana, "sso-signed-in")
    rows = stored_rows(data)
    mine = subject_key(issuer, "ana-1")
    assert mine in rows, f"no row under ana-1's subject: {sorted(rows)}"
    code, name, progress = rows[mine]
    assert (code, name) == (CLASS.casefold(), "Ana") and progress["visited"]

    ana.goto("/teacher")  # a learner: the claim is missing, and there is no key to type
    wait_for_app(ana)
    main = ana.locator('[data-testid="stMain"]')
    main.get_by_text("The teacher view is closed").wait_for()
    assert main.get_by_label("Class code").count() == 0

    other = sign_on(browser, url, "ana-2")  # another person the provider also calls "Ana"
    rows = stored_rows(data)
    theirs = subject_key(issuer, "ana-2")
    assert theirs in rows and mine in rows and theirs != mine
    assert rows[theirs][1] == rows[mine][1] == "Ana"  # same name shown, two learners
    assert not any(key.casefold() == "ana" for key in rows)  # nobody is keyed by the name

    teacher = sign_on(browser, url, "teach-1")
    sidebar = teacher.locator('[data-testid="stSidebar"]')
    assert "Ms **T** <b>bold</b>" in sidebar.inner_text()  # a claim is text: no Markdown, no HTML
    assert sidebar.locator("b", has_text="bold").count() == 0
    teacher.goto("/teacher")
    wait_for_app(teacher)
    main = teacher.locator('[data-testid="stMain"]')
    main.get_by_label("Class code").fill(CLASS)
    main.get_by_label("Class code").press("Enter")
    wait_for_app(teacher)
    main.get_by_text("learners in class").wait_for()
    table = main.locator('[data-testid="stDataFrame"]').first
    table.wait_for()
    assert error_texts(teacher) == []
    shoot(teacher, "sso-teacher-view")
    for pg in (ana, other, teacher):
        pg.context.close()


def test_unreachable_provider_keeps_the_passphrase_sign_in(browser, tmp_path):
    """The app pointed at a provider that does not answer: the sign-in box says why, and the passphrase
    sign-in saves as before."""
    secret = tmp_path / "client"
    secret.write_text(CLIENT_SECRET)
    env = {
        "KVLAB_OIDC_ISSUER": f"http://{HOST}:{free_port()}",  # nothing listens there
        "KVLAB_OIDC_CLIENT_ID": CLIENT_ID,
        "KVLAB_OIDC_CLIENT_SECRET_FILE": str(secret),
        "KVLAB_OIDC_COOKIE_SECRET": COOKIE_SECRET,
        "KVLAB_OIDC_REDIRECT_URI": f"http://{HOST}:{{port}}/oauth2callback",
        "KVLAB_OIDC_CLASS": CLASS,
    }
    data = tmp_path / "data"
    with running_app(data, ARTIFACTS / "streamlit-sso-down.log", extra_env=env) as url:
        context = browser.new_context(viewport=VIEWPORT, base_url=url)
        page = context.new_page()
        open_signin(page)
        sidebar = page.locator('[data-testid="stSidebar"]')
        warning = sidebar.get_by_text("Single sign-on is unavailable")
        warning.wait_for()
        assert "cannot be reached" in warning.inner_text() and "KVLAB_OIDC_ISSUER" in warning.inner_text()
        assert sidebar.get_by_role("button", name="Sign in with your school account").count() == 0
        sidebar.get_by_label("Your name").fill("Bea")
        sidebar.get_by_label("Class code").fill(CLASS)
        sidebar.get_by_label("Passphrase").fill("bea's long passphrase")
        sidebar.get_by_role("button", name="Sign in").click()
        sidebar.get_by_text("Signed in as").wait_for()
        assert page.locator('[data-testid="stException"]').count() == 0
        assert stored_rows(data)["bea"][0] == CLASS.casefold()
        context.close()
