"""Today's models in a real browser: `/gqa?model=deepseek-v3` opens lesson 2 on MLA and 68.6 KiB per token, the
config.json paste box reads a pasted config back (layers, kinds, KV per token), and lesson 4 draws the hybrid
chart. Each saves its screenshot for the gallery (docs/screenshots)."""

from __future__ import annotations

import json

import pytest

from engine.memory import published
from lessons.labs import hybrid as hybrid_lab
from tests.browser.helpers import error_texts, metric_value, press_and_wait, wait_for_app, wait_for_runs

pytestmark = pytest.mark.browser


def open_view(page, link: str) -> None:
    page.goto(link)
    wait_for_runs(page, 0, timeout_ms=120_000)
    wait_for_app(page, 120_000)


def test_lesson_2_opens_on_deepseek_v3(page, shoot):
    open_view(page, "/gqa?model=deepseek-v3")
    assert metric_value(page, "KV per token (MLA)") == "68.6 KiB"
    assert page.get_by_text("61 layers × (512 kv_lora_rank + 64 qk_rope_head_dim) × 2 bytes").count() >= 1
    assert error_texts(page) == []
    page.locator('[data-testid="stMetric"]:has-text("KV per token (MLA)")').first.scroll_into_view_if_needed()
    shoot(page, "lesson-gqa-deepseek-v3")


def test_the_paste_box_reads_a_config_back(page, shoot):
    open_view(page, "/gqa")
    box = page.get_by_label("Your model's config.json", exact=False)
    box.scroll_into_view_if_needed()
    box.fill(json.dumps(published.gpt_oss_120b(), indent=1))
    press_and_wait(page, box, "Control+Enter", timeout_ms=120_000)
    said = page.get_by_text("Your config.json describes 36 layers")
    said.wait_for(timeout=30_000)
    assert "18 sliding window of 128, 18 full attention" in said.inner_text()
    assert "36.0 KiB of KV per token in bf16" in said.inner_text()
    assert error_texts(page) == []
    said.scroll_into_view_if_needed()
    shoot(page, "lesson-gqa-your-config")


def test_lesson_4_draws_the_hybrid_chart(page, shoot):
    open_view(page, "/fragmentation")
    parts_at = hybrid_lab.hybrid_curve("gpt-oss-120b").parts_at  # the lab's own figure (4,241 at v0.34.0)
    summary = page.get_by_text(f"gpt-oss-120b's per-kind line falls below the all-full one at {parts_at:,} tokens")
    summary.wait_for(timeout=60_000)
    chart = page.locator('[data-testid="stPlotlyChart"]').last  # the page's last chart is the hybrid one
    # the chart's top (title, legend) under Streamlit's header: scroll it to the top, then back by the header
    chart.evaluate("e => e.scrollIntoView({block: 'start'})")
    page.evaluate("() => document.querySelector('[data-testid=\"stMain\"]').scrollBy(0, -90)")
    assert error_texts(page) == []
    shoot(page, "lesson-fragmentation-hybrid")
