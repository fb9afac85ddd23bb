"""Nobody locks a classmate out or passes for one, in Chromium with two browser contexts (two sessions):
a classmate's wrong passphrases slow the classmate and not the owner, a learner's wrong teacher keys slow the
learner and not the teacher, and a whole-script lookalike of a classmate's name is that classmate's name."""

from __future__ import annotations

import re

import pytest

from progress.auth import FREE_FAILURES
from tests.browser.conftest import TEACHER_KEY, VIEWPORT
from tests.browser.helpers import wait_for_app
from tests.browser.test_progress_signin import fill_sign_in, sign_in

pytestmark = pytest.mark.browser

OWNER_PASS = "alice's own passphrase"


def _page(browser, app_url: str):
    context = browser.new_context(viewport=VIEWPORT, base_url=app_url)
    context.set_default_timeout(30_000)
    pg = context.new_page()
    pg.goto("/")
    wait_for_app(pg)
    return context, pg


def _error(pg) -> str:
    alert = pg.locator('[data-testid="stAlertContentError"]').last
    alert.wait_for()
    return alert.inner_text()


def _retry(pg, passphrase: str) -> str:
    """Submit the sidebar form again with another passphrase; the error it shows."""
    sidebar = pg.locator('[data-testid="stSidebar"]')
    sidebar.get_by_label("Passphrase").fill(passphrase)
    sidebar.get_by_role("button", name="Sign in").click()
    wait_for_app(pg)
    return _error(pg)


def _wait_told(message: str) -> float:
    """The wait a refusal names ("wait 8 s before the next try"), 0 if none."""
    found = re.search(r"wait (\d+) s", message)
    return float(found.group(1)) if found else 0.0


def _guess_until_a_long_wait(pg, submit, at_least_s: float = 8.0) -> None:
    """Wrong tries, each after the last wait it was told ran out, until one is told to wait ``at_least_s``:
    the wait the hole let a guesser put on everyone (the owner's try comes within it)."""
    for i in range(FREE_FAILURES + 4):
        told = _wait_told(submit(f"a guess number {i}"))
        if told >= at_least_s:
            return
        if told:
            pg.wait_for_timeout(1000 * told + 300)
    pytest.fail(f"never told to wait {at_least_s} s")


def test_a_classmates_wrong_passphrases_do_not_lock_the_owner_out(browser, app_url):
    owner, pg = _page(browser, app_url)
    sign_in(pg, "Alice", "Lockout-1", OWNER_PASS)
    owner.close()
    again, alice = _page(browser, app_url)  # Alice on another device, the form filled: she signs in next
    guesser, mallory = _page(browser, app_url)
    fill_sign_in(mallory, "alice", "lockout-1", "a first guess")
    wait_for_app(mallory)
    assert "wrong passphrase" in _error(mallory)
    _guess_until_a_long_wait(mallory, lambda guess: _retry(mallory, guess))
    assert "too many wrong tries" in _retry(mallory, OWNER_PASS)  # the guesser is slowed, even when right
    sign_in(alice, "Alice", "Lockout-1", OWNER_PASS)  # within the guesser's wait: her session has no failures
    assert "Signed in as Alice" in alice.locator('[data-testid="stSidebar"]').inner_text()
    again.close()
    guesser.close()


def _teacher_key(pg, key: str) -> str:
    """Submit a teacher key; the error it shows ("" when the view opened)."""
    main = pg.locator('[data-testid="stMain"]')
    main.get_by_label("Teacher key").fill(key)
    main.get_by_role("button", name="Open the teacher view").click()
    wait_for_app(pg)
    opened = main.get_by_label("Class code")
    return "" if opened.count() else _error(pg)


def test_a_learners_wrong_teacher_keys_do_not_lock_the_teacher_out(browser, app_url):
    teacher, tp = _page(browser, app_url)  # the teacher's tab, open on the key form
    tp.goto("/teacher")
    wait_for_app(tp)
    learner, pg = _page(browser, app_url)
    pg.goto("/teacher")
    wait_for_app(pg)
    _guess_until_a_long_wait(pg, lambda guess: _teacher_key(pg, guess))
    assert "too many wrong tries" in _teacher_key(pg, TEACHER_KEY)  # the guessing session waits, even when right
    assert _teacher_key(tp, TEACHER_KEY) == ""  # within the learner's wait, the teacher's view opens
    tp.locator('[data-testid="stMain"]').get_by_label("Class code").wait_for()
    teacher.close()
    learner.close()


def test_a_lookalike_name_is_the_classmates_name(browser, app_url):
    first, pg = _page(browser, app_url)
    sign_in(pg, "Sasha", "Lookalike-1", OWNER_PASS)
    first.close()
    other, op = _page(browser, app_url)
    fill_sign_in(op, "Ѕаѕһа", "Lookalike-1", "not sasha's passphrase")  # Cyrillic, one script: it looks the same
    wait_for_app(op)
    text = _error(op)
    assert "looks the same as 'Sasha'" in text and "wrong passphrase" in text
    assert "Signed in as" not in op.locator('[data-testid="stSidebar"]').inner_text()
    other.close()
    owner, pg = _page(browser, app_url)  # the owner typing on a Cyrillic keyboard is signed in as herself
    sign_in(pg, "Ѕаѕһа", "Lookalike-1", OWNER_PASS)
    assert "Signed in as Sasha" in pg.locator('[data-testid="stSidebar"]').inner_text()
    owner.close()
