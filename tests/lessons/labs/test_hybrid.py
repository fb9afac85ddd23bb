"""Lesson 4's hybrid section (lessons/labs/hybrid.py) against hand arithmetic from the published configs.

openai/gpt-oss-120b: 36 layers alternating sliding (window 128) and full attention, 8 KV heads, head dim 64.
google/gemma-3-27b-it (text_config): 62 layers, every sixth global (10), the rest sliding over 1024 tokens,
16 KV heads, head dim 128. vLLM keeps a sliding layer's window - 1 tokens plus the tokens in flight, whole blocks,
+ 1 block (SlidingWindowSpec); full layers keep every token."""

from __future__ import annotations

import math

import pytest

from lessons.labs import hybrid

GIB = 2**30
GPT_OSS_ALL = 2 * 36 * 8 * 64 * 2  # 73,728 bytes per token, every layer charged
GPT_OSS_FULL = 2 * 18 * 8 * 64 * 2  # 36,864: the 18 full layers
GEMMA_ALL = 2 * 62 * 16 * 128 * 2  # 507,904
GEMMA_FULL = 2 * 10 * 16 * 128 * 2  # 81,920


def test_the_all_full_line_is_the_one_formula_in_whole_blocks():
    curve = hybrid.hybrid_curve("gpt-oss-120b")
    assert curve.per_token_all_full == GPT_OSS_ALL and curve.per_token_long == GPT_OSS_FULL
    for p in curve.points:
        assert p.all_full_bytes == math.ceil(p.tokens / 16) * 16 * GPT_OSS_ALL
    gemma = hybrid.hybrid_curve("gemma-3-27b")
    assert gemma.per_token_all_full == GEMMA_ALL and gemma.per_token_long == GEMMA_FULL
    assert (gemma.full_layers, gemma.window, curve.full_layers, curve.window) == (10, 1024, 18, 128)


def test_past_the_window_only_the_full_layers_grow():
    for model, full in (("gpt-oss-120b", GPT_OSS_FULL), ("gemma-3-27b", GEMMA_FULL)):
        curve = hybrid.hybrid_curve(model)
        a, b = curve.points[-2], curve.points[-1]  # 64k and 128k tokens: both far past the window
        assert b.per_kind_bytes - a.per_kind_bytes == (b.tokens - a.tokens) * full
        assert b.all_full_bytes - a.all_full_bytes == (b.tokens - a.tokens) * curve.per_token_all_full
        assert b.ratio > a.ratio > 1


def test_the_lines_part_just_past_the_window_and_the_tokens_in_flight():
    curve = hybrid.hybrid_curve("gpt-oss-120b")
    # with two 2,048-token batches in flight (a default `vllm serve` on a small GPU) a sliding layer holds
    # cdiv(min(127 + 4096, n), 16) + 1 = 265 blocks at most: fewer than a full layer's cdiv(n, 16) once
    # n > 265 * 16 = 4,240 tokens
    assert curve.parts_at == 265 * 16 + 1
    gemma = hybrid.hybrid_curve("gemma-3-27b")
    assert gemma.parts_at > 1024  # never inside the window
    for c in (curve, gemma):
        before = [p for p in c.points if p.tokens < c.parts_at]
        after = [p for p in c.points if p.tokens >= c.parts_at]
        assert all(p.per_kind_bytes < p.all_full_bytes for p in after)
        assert all(p.per_kind_bytes >= p.all_full_bytes for p in before)


def test_the_chart_series_rows_and_summary_agree():
    curves = hybrid.hybrid_curves("bf16")
    series = hybrid.series(curves)
    assert len(series) == 4 and all(len(v) == len(hybrid.CONTEXTS) for v in series.values())
    rows = hybrid.rows(curves)
    assert len(rows) == 2 * len(hybrid.CONTEXTS)
    last = rows[len(hybrid.CONTEXTS) - 1]
    assert last["all layers full (GiB)"] == pytest.approx(131_072 * GPT_OSS_ALL / GIB)
    text = hybrid.summary(curves)
    assert (
        "gpt-oss-120b's per-kind line falls below the all-full one at 4,241 tokens" in text
        and "36 KiB per token instead of 72" in text
    )
    assert "80 KiB per token instead of 496" in text


def test_fp8_halves_both_lines():
    bf16, fp8 = hybrid.hybrid_curve("gpt-oss-120b", "bf16"), hybrid.hybrid_curve("gpt-oss-120b", "fp8")
    for a, b in zip(bf16.points, fp8.points, strict=True):
        assert (b.all_full_bytes * 2, b.per_kind_bytes * 2) == (a.all_full_bytes, a.per_kind_bytes)


def test_a_model_with_one_kind_is_refused():
    with pytest.raises(ValueError, match="one layer kind"):
        hybrid.hybrid_curve("llama-3-8b")
