"""lessons.labs.mla_cache: the engine's latent cache on the tiny MLA model, against numbers derived here.

The tiny model has 2 layers, kv_lora_rank 32, qk_rope_head_dim 8, 4 heads of 16 + 8 (q/k) and 16 (v), in fp32;
DeepSeek-V3's numbers are its published config.json's (61 layers, 512 + 64; 128 heads of 192 and 128).
A cache that kept K and V per head, or the latent twice, or a byte count taken from the formula instead of the
tensor would fail `test_the_measured_bytes_are_the_formulas`.
"""

from __future__ import annotations

import pytest

from lessons.labs import mla_cache as lab


@pytest.fixture(scope="module")
def run():
    return lab.run_latent_cache()


def test_the_measured_bytes_are_the_formulas(run):
    assert run.measured_bytes_per_token == 2 * (32 + 8) * 4 == 320
    assert run.formula_bytes_per_token == 320 and run.matches
    assert run.expanded_bytes_per_token == 2 * 4 * ((16 + 8) + 16) * 4 == 1280 and run.saving == 4.0
    assert run.cache_shape == (lab.NUM_BLOCKS, lab.BLOCK_SIZE, 1, 40)
    assert run.pool_bytes == lab.NUM_BLOCKS * lab.BLOCK_SIZE * 320


def test_the_run_served_every_token(run):
    assert run.tokens_served == sum(lab.PROMPT_LENS) + len(lab.PROMPT_LENS) * lab.MAX_TOKENS


def test_the_table_rows(run):
    rows = run.rows()
    assert [r["bytes per token"] for r in rows] == [320, 320, 1280]
    assert rows[1]["cache"] == "formula: 2 x (32 + 8) x 4"


def test_deepseek_v3_arithmetic():
    assert lab.deepseek_v3_bytes_per_token() == (61 * 576 * 2, 61 * 128 * (192 + 128) * 2) == (70_272, 4_997_120)
