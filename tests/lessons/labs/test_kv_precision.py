"""lessons/labs/kv_precision.py's page-facing helpers: the bytes table, the summary per choice, bad choices."""

from __future__ import annotations

import pytest

from lessons.labs import kv_precision as lab

RESULT = {
    "auto": {
        "kv_cache_dtype": "float32",
        "kv_bytes_per_token": 4096,
        "num_gpu_blocks": 128,
        "token_capacity": 2048,
        "kv_cache_bytes": 8 * 2**20,
    },
    "fp8": {
        "kv_cache_dtype": "float8_e4m3fn",
        "kv_bytes_per_token": 1024,
        "num_gpu_blocks": 512,
        "token_capacity": 8192,
        "kv_cache_bytes": 8 * 2**20,
    },
    "max_logit_error": 0.2,
    "top1_agreement": 0.95,
    "identical_generations": 3,
}


def test_bytes_per_token_follow_the_formula():
    # The demo model: 4 layers, 2 KV heads, head_dim 64 -> 2 x 4 x 2 x 64 = 1024 elements per token.
    assert lab.bytes_per_token(4, 2, 64) == {"fp32": 4096, "bf16": 2048, "fp8": 1024}


def test_summary_shows_the_price_only_for_fp8():
    assert "top1_agreement" not in lab.summary(RESULT, "auto")
    fp8 = lab.summary(RESULT, "fp8")
    assert fp8["top1_agreement"] == 0.95 and fp8["kv_bytes_per_token"] == 1024
    with pytest.raises(ValueError, match="'int3' is not offered"):
        lab.summary(RESULT, "int3")


def test_pool_rows():
    rows = lab.pool_rows(RESULT)
    assert [r["KV bytes / token"] for r in rows] == [4096, 1024]
    assert [r["tokens in budget"] for r in rows] == [2048, 8192] and rows[1]["pool MiB"] == 8.0


def test_engine_rejects_an_unknown_precision():
    with pytest.raises(ValueError, match="KV precision 'int3' is not offered"):
        lab.engine((None, None, None), "int3")
    with pytest.raises(ValueError, match="prompts is empty"):
        lab.compare(prompts=())
