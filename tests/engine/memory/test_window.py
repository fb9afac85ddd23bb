"""The sliding-window block cap (engine/core/sliding_window.py) in the serving footprint, and fp8 KV there.

Mistral-7B (window 4096) at its 32K context: one sequence holds at most ceil((4096 - 1 + 2048) / 16) + 1
= 385 blocks with 2048-token steps, not the 2048 blocks its full context would need, so the calculator's
concurrency is the pool over 385. An fp8 KV cache halves bf16's bytes per token: twice the blocks.
"""

import pytest

from engine.core.sliding_window import kv_blocks_per_seq
from engine.memory.footprint import kv_bytes_per_token, serving_footprint


def test_windowed_concurrency_uses_the_window_cap():
    fp = serving_footprint("mistral-7b", "a100-80gb", max_model_len=32768, max_num_batched_tokens=2048, block_size=16)
    assert kv_blocks_per_seq(32768, 16, 4096, 2048) == 385
    assert fp.max_concurrency() == fp.num_blocks // 385
    assert fp.max_concurrency(1000) == fp.num_blocks // 63  # shorter than the window: its own blocks
    full = serving_footprint("llama-2-7b", "a100-80gb", max_model_len=4096, max_num_batched_tokens=2048, block_size=16)
    assert full.max_concurrency() == full.num_blocks // 256  # no window: ceil(4096 / 16)


def test_fp8_kv_doubles_the_blocks_of_bf16():
    assert kv_bytes_per_token("mistral-7b", "fp8") * 2 == kv_bytes_per_token("mistral-7b", "bf16")
    bf16 = serving_footprint("mistral-7b", "a100-80gb", kv_dtype="bf16", max_model_len=8192)
    fp8 = serving_footprint("mistral-7b", "a100-80gb", kv_dtype="fp8", max_model_len=8192)
    assert fp8.num_blocks in (2 * bf16.num_blocks, 2 * bf16.num_blocks + 1)  # whole blocks of one budget


@pytest.mark.parametrize("bad", [0, -3, 2.5, True])
def test_bad_context_is_a_value_error(bad):
    with pytest.raises(ValueError, match="context_len=.* must be a whole number of tokens >= 1"):
        kv_blocks_per_seq(bad, 16, 4096)
