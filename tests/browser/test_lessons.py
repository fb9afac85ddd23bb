"""Lesson pages driven like a learner would: keyboard on sliders, clicks on buttons, numbers read back.

Each test opens one page in a fresh session, acts through the real browser and checks the numbers the
page shows against the arithmetic they must follow (KV bytes scale with the group count; smaller
blocks waste less but need longer block tables).
"""

from __future__ import annotations

import math
import re

import pytest

from tests.browser.helpers import error_texts, metric_value, press_and_wait, slider_input, wait_for_app

pytestmark = pytest.mark.browser


def open_page(page, route: str) -> None:
    """Go to a lesson page by its URL path and wait until it has run without errors."""
    page.goto(f"/{route}")
    wait_for_app(page)
    assert error_texts(page) == []


def number(text: str) -> float:
    """First number in a displayed value ("1,024 KiB" -> 1024.0)."""
    match = re.search(r"-?\d[\d,]*\.?\d*", text)
    assert match, f"no number in {text!r}"
    return float(match.group().replace(",", ""))


def test_gqa_group_slider_changes_kv_bytes(page, shoot):
    open_page(page, "gqa")
    groups = slider_input(page, "KV groups G")
    g0 = number(groups.get_attribute("aria-valuetext"))
    kv0 = number(metric_value(page, "KV per token"))
    groups.focus()
    press_and_wait(page, groups, "ArrowLeft")  # one step down the divisors of the query heads
    g1 = number(groups.get_attribute("aria-valuetext"))
    kv1 = number(metric_value(page, "KV per token"))
    assert g1 < g0
    assert kv1 == pytest.approx(kv0 * g1 / g0, rel=0.01)  # bytes per token = 2·L·G·D·bytes: linear in G
    assert error_texts(page) == []
    groups.scroll_into_view_if_needed()
    shoot(page, "lesson-gqa")


def test_paged_block_size_slider_trades_waste_for_table_size(page, shoot):
    open_page(page, "paged_attention")
    block = slider_input(page, "Block size")
    max_context = number(slider_input(page, "Max context").get_attribute("aria-valuetext"))
    seen = []
    block.focus()
    for key in ("ArrowRight", "ArrowLeft", "ArrowLeft"):  # 16 -> 32 -> 16 -> 8 on vLLM's default scale
        bs = number(block.get_attribute("aria-valuetext"))
        seen.append((bs, number(metric_value(page, "Internal waste")), number(metric_value(page, "Table width"))))
        press_and_wait(page, block, key)
    seen.append(
        (
            number(block.get_attribute("aria-valuetext")),
            number(metric_value(page, "Internal waste")),
            number(metric_value(page, "Table width")),
        )
    )
    assert len({bs for bs, _, _ in seen}) == 3, f"the keyboard did not move the block size: {seen}"
    for bs, _, width in seen:
        assert width == math.ceil(max_context / bs)  # one table entry per block of the longest sequence
    by_size = sorted({bs: waste for bs, waste, _ in seen}.items())
    wastes = [waste for _, waste in by_size]
    assert wastes == sorted(wastes) and wastes[0] < wastes[-1], f"smaller blocks must waste less: {by_size}"
    assert error_texts(page) == []
    block.scroll_into_view_if_needed()
    shoot(page, "lesson-paged")


def test_diagnosis_can_be_resolved(page, shoot):
    open_page(page, "diagnosis")
    main = page.locator('[data-testid="stMain"]')
    # The first incident: sessions reserve KV for the whole context; paging the KV cache fixes it.
    main.locator('[data-testid="stCheckbox"]', has_text="reserves KV for the full").locator("label").click()
    wait_for_app(page)
    policy = main.locator('[data-testid="stRadio"]', has_text="KV memory policy")
    policy.locator('[data-testid="stRadioOption"]', has_text="paged").click()
    wait_for_app(page)
    main.get_by_role("button", name="Run the traffic again").click()
    verdict = main.locator('[data-testid="stAlertContentSuccess"]', has_text="RESOLVED")
    verdict.wait_for(timeout=90_000)
    wait_for_app(page)
    assert "diagnosis right" in verdict.inner_text()
    assert error_texts(page) == []
    verdict.scroll_into_view_if_needed()
    shoot(page, "lesson-diagnosis")


def test_playground_generates_text(page, shoot):
    open_page(page, "playground")
    main = page.locator('[data-testid="stMain"]')
    main.get_by_role("button", name="Generate").click()
    generated = main.locator('[data-testid="stMetric"]', has_text="Generated tokens")
    generated.or_(page.locator('[data-testid="stAlertContentError"]')).first.wait_for(timeout=120_000)
    wait_for_app(page, timeout_ms=120_000)
    assert error_texts(page) == [], "the playground could not generate"
    assert number(metric_value(page, "Generated tokens")) > 0
    assert number(metric_value(page, "Tokens/s")) > 0
    assert number(metric_value(page, "Scheduler steps")) >= 1
    assert error_texts(page) == []
    generated.scroll_into_view_if_needed()
    shoot(page, "lesson-playground")


def test_protocol_client_moves_sliders_like_a_browser(app_url):
    # bench.app.classroom's browserless client must drive the same app state as the keyboard does.
    import asyncio
    import concurrent.futures

    from bench.app.client import StreamlitSession, slider_position, slider_value

    async def scenario() -> tuple[str, str, list[str]]:
        async with StreamlitSession(app_url, timeout_s=120) as session:
            first = await session.run("gqa")
            slider = next(s for label, s in first.sliders.items() if label.startswith("KV groups G"))
            pos, low, _, step = slider_position(slider)
            second = await session.run("gqa", [slider_value(slider, pos - step)])  # 8 KV heads -> 4
            kv = [next(v for k, v in r.metrics.items() if k.startswith("KV per token")) for r in (first, second)]
            return kv[0], kv[1], first.errors + second.errors

    # Its own thread: Playwright's sync API keeps an event loop running in this one.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        before, after, errors = pool.submit(lambda: asyncio.run(scenario())).result(timeout=300)
    assert errors == []
    assert number(after) == pytest.approx(number(before) / 2)
