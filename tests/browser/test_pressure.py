"""Lesson 6 in a real browser, at its defaults: the real engine preempts under the default traffic, and after the
learner grows the KV pool with the keyboard the same traffic runs without a preemption."""

from __future__ import annotations

import pytest

from lessons.labs import pressure as lab
from tests.browser.helpers import error_texts, metric_value, press_and_wait, slider_input, wait_for_app

pytestmark = pytest.mark.browser


def test_preemptions_appear_under_traffic_and_vanish_with_a_larger_pool(page, shoot):
    page.goto("/pressure")
    wait_for_app(page, timeout_ms=180_000)  # the first visit runs the engine a dozen times (then cached)
    assert error_texts(page) == []
    pool = slider_input(page, "KV pool")
    assert pool.get_attribute("aria-valuetext") == str(lab.DEFAULTS["num_blocks"])
    assert slider_input(page, "Traffic").get_attribute("aria-valuetext") == str(lab.DEFAULTS["rate"])
    preempted = int(metric_value(page, "Preemptions"))
    assert preempted > 0, "the default traffic must preempt in the default pool"
    assert metric_value(page, "Limit that binds") == "KV pool"
    assert metric_value(page, "Peak KV-cache usage") == "100%"
    dashboard = page.locator('[data-testid="stMetric"]:has-text("Preemptions")').first
    dashboard.scroll_into_view_if_needed()
    shoot(page, "lesson-pressure-default")

    pool.focus()
    press_and_wait(page, pool, "End", timeout_ms=180_000)  # the largest pool …
    press_and_wait(page, pool, "ArrowLeft", timeout_ms=180_000)  # … one step back: GROWN_POOL blocks
    assert pool.get_attribute("aria-valuetext") == str(lab.GROWN_POOL)
    assert error_texts(page) == []
    assert metric_value(page, "Preemptions") == "0"
    assert metric_value(page, "Limit that binds") == "neither"
    assert "kv_blocks=96" in page.url  # the view is in the address bar, ready to share
    dashboard.scroll_into_view_if_needed()
    shoot(page, "lesson-pressure-grown-pool")
