"""Lesson 7's "Diagnose your own server" in a real browser: paste a real vLLM log, read the numbers back.

The log is a fixture from a public vLLM issue (tests/lessons/diagnosis/fixtures/); the learner pastes it into
the text area, submits with Ctrl+Enter (Streamlit's shortcut for text areas) and the page must show the pool
and how many requests fit, computed from the log's own numbers. Garbage gets a message, not an error.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.browser.helpers import error_texts, press_and_wait, wait_for_app

pytestmark = pytest.mark.browser
FIXTURES = Path(__file__).parents[1] / "lessons" / "diagnosis" / "fixtures"


def paste(page, label: str, text: str) -> None:
    box = page.get_by_label(label)
    box.scroll_into_view_if_needed()
    box.fill(text)
    press_and_wait(page, box, "Control+Enter")


def test_paste_a_real_log_and_read_the_room_for_requests(page, shoot):
    page.goto("/diagnosis")
    wait_for_app(page)
    assert error_texts(page) == []
    paste(page, "Your vLLM start-up log", (FIXTURES / "vllm-10517-20k-v0.log").read_text())
    room = page.get_by_text("Your KV pool holds")
    room.wait_for(timeout=30_000)
    text = room.inner_text()
    # 1952 blocks x 16 = 31,232 tokens; a 20,000-token request (the log's max_model_len) takes 1,250 blocks
    assert "31,232 tokens" in text and "1 such request fits at once" in text, text
    assert page.get_by_text("Flag changes and what vLLM's start-up arithmetic gives").count() == 1
    assert error_texts(page) == []
    room.scroll_into_view_if_needed()
    shoot(page, "diagnosis-paste")


def test_paste_garbage_gets_a_message(page):
    page.goto("/diagnosis")
    wait_for_app(page)
    paste(page, "Your vLLM start-up log", "this is not a vLLM log \u00ff\u0000" * 50)
    page.get_by_text("No vLLM start-up figures or known error lines found").wait_for(timeout=30_000)
    assert error_texts(page) == []
