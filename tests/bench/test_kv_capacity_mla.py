"""bench.kv_capacity_mla at a small budget: capacities found by serving equal the counts derived from the shapes.

GQA: 2 layers x 2 KV heads x 16 x 2 (K, V) x 4 bytes = 512 bytes per token; MLA: 2 layers x (32 + 8) x 4 = 320.
At 32 KiB and blocks of 16: GQA 4 blocks (64 tokens), MLA 6 blocks (96 tokens, of 102 that fit); requests of
8 + 24 tokens end in 2 blocks each (31 tokens stored): 2 and 3 at once. (Admission checks whole prompts, one
block each here, with no watermark, so it does not bind before the pool does.)
"""

from __future__ import annotations

import pytest

from bench import kv_capacity_mla as bench


@pytest.fixture
def small(monkeypatch):
    monkeypatch.setattr(bench, "BUDGET_BYTES", 32 * 2**10)
    monkeypatch.setattr(bench, "PROMPT", 8)
    monkeypatch.setattr(bench, "OUTPUT", 24)


@pytest.mark.parametrize(
    ("config", "per_token", "blocks", "concurrent"), [(bench.gqa_config, 512, 4, 2), (bench.mla_config, 320, 6, 3)]
)
def test_capacities_follow_the_bytes_per_token(small, config, per_token, blocks, concurrent):
    side = bench.measure(config())
    assert side["kv_bytes_per_token"] == per_token
    assert side["num_gpu_blocks"] == blocks == 32 * 2**10 // (per_token * 16)
    assert side["longest_context_tokens"] == blocks * 16
    assert side["most_concurrent_requests"] == concurrent
