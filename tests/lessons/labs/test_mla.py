"""Lesson 2's MLA part (lessons/labs/mla.py) against hand arithmetic from published config.json files.

deepseek-ai/DeepSeek-V3: 61 layers, hidden 7168, 128 attention heads, num_key_value_heads 128, kv_lora_rank 512,
qk_rope_head_dim 64, qk_nope_head_dim 128, v_head_dim 128. meta-llama/Llama-3.1-70B: 80 layers, 8 KV heads, head
dim 128. vLLM caches the MLA latent once per token and layer, the same on every TP rank (get_num_kv_heads -> 1)."""

from __future__ import annotations

import pytest

from lessons.labs import mla

KiB = 1024
LATENT = 61 * (512 + 64)  # values per token, all layers
GQA_70B = 2 * 80 * 8 * 128  # K and V values per token, all layers


def test_deepseek_v3_stores_its_latent_not_its_heads():
    found = mla.mla_lesson("deepseek-v3", "bf16")
    assert found.bytes_per_token == LATENT * 2 == 70_272
    assert round(found.kib_per_token, 1) == 68.6
    generic, decompressed = (r.bytes_per_token for r in found.readings[1:])
    assert generic == 2 * 61 * 128 * (7168 // 128) * 2 == 1_748_992  # num_key_value_heads x hidden / heads
    assert decompressed == 61 * 128 * (128 + 64 + 128) * 2 == 4_997_120
    assert 24 < found.overcount(1) < 26 and 70 < found.overcount(2) < 72  # the "25-70x"
    assert found.total_gib(32_768, 1) == pytest.approx(70_272 * 32_768 / 2**30)
    assert "70,272 bytes (68.6 KiB)" in found.summary()
    assert [r["x the latent"] for r in found.rows()] == [1.0, 24.9, 71.1]


def test_fp8_halves_the_latent():
    assert mla.mla_lesson("deepseek-v3", "fp8").bytes_per_token == 35_136


def test_tensor_parallelism_splits_gqa_heads_but_not_the_latent():
    rows = mla.tp_rows("bf16")
    assert [r["tensor parallel"] for r in rows] == [1, 2, 4, 8]
    mla_col, gqa_col = (k for k in rows[0] if k != "tensor parallel")
    assert [r[mla_col] for r in rows] == [round(LATENT * 2 / KiB, 2)] * 4  # 68.63 on every GPU at every TP
    assert [r[gqa_col] for r in rows] == [GQA_70B * 2 / KiB / tp for tp in (1, 2, 4, 8)]  # 320, 160, 80, 40
    assert "stays at 68.6 KiB, then 68.6 KiB" in mla.tp_summary("bf16")
    assert "from 320.0 to 40.0 KiB" in mla.tp_summary("bf16")
    series = mla.tp_series("bf16")
    assert list(series) == ["DeepSeek-V3 (MLA)", "Llama-3.1-70B (GQA)"]


def test_a_model_without_mla_is_refused_by_name():
    assert mla.is_mla("deepseek-v3") and mla.is_mla("kimi-k2") and not mla.is_mla("llama-3-8b")
    with pytest.raises(ValueError, match="Llama-3-8B has no MLA layers"):
        mla.mla_lesson("llama-3-8b")
    with pytest.raises(ValueError, match="unknown model"):
        mla.mla_lesson("deepseek-v9")
