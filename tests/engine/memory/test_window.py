"""The sliding-window block cap (engine/core/sliding_window.py) in the serving footprint, and fp8 KV there.

Mistral-7B (window 4096) at its 32K context: one sequence holds at most ceil((4096 - 1 + 4096) / 16) + 1
= 513 blocks with two 2048-token batches in flight (vLLM's async scheduling, on by default), not the 2048
blocks its full context would need, so the calculator's concurrency is the pool over 513; on an H100 at its
defaults (an 8,192-token budget, 16,384 tokens in flight) vLLM counts 1,281 blocks per request. An fp8 KV cache
halves bf16's bytes per token: twice the blocks.
"""

import pytest

from engine.core.sliding_window import kv_blocks_per_seq
from engine.memory import (
    DEFAULT_IN_FLIGHT_TOKENS,
    GPUS,
    MAX_CONCURRENT_BATCHES,
    default_in_flight_tokens,
    default_max_num_batched_tokens,
    max_in_flight_tokens,
)
from engine.memory.footprint import kv_bytes_per_token, serving_footprint
from engine.memory.kv_pool import admission_blocks


def test_windowed_concurrency_uses_the_window_cap():
    fp = serving_footprint("mistral-7b", "a100-80gb", max_model_len=32768, max_num_batched_tokens=2048, block_size=16)
    assert fp.in_flight_tokens == 2 * 2048
    assert kv_blocks_per_seq(32768, 16, 4096, 4096) == 513
    assert fp.max_concurrency() == fp.num_blocks // 513
    sync = serving_footprint(
        "mistral-7b",
        "a100-80gb",
        max_model_len=32768,
        max_num_batched_tokens=2048,
        async_scheduling=False,
        block_size=16,
    )
    assert sync.in_flight_tokens == 2048 and sync.max_concurrency() == sync.num_blocks // 385
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


def test_mistral_7b_on_an_h100_holds_1281_blocks_per_request_as_vllm_counts():
    # vLLM v0.34.0: SlidingWindowSpec.max_admission_blocks_per_request is cdiv(min(window - 1 + in flight,
    # max_model_len), block) + 1 with VllmConfig.max_in_flight_tokens = (1 pipeline stage + 1 for async scheduling)
    # x max_num_batched_tokens, 8,192 by default on an H100: cdiv(min(4,095 + 16,384, 32,768), 16) + 1 = 1,281.
    gpu = GPUS["h100-sxm"]
    assert default_max_num_batched_tokens(gpu) == 8192 and default_in_flight_tokens(gpu) == 16384
    assert admission_blocks("mistral-7b", 32768, 16, 16384) == 1281
    assert admission_blocks("mistral-7b", 32768, 16, 8192) == 769  # one batch in flight: the course's old count
    assert admission_blocks("mistral-7b", 32768, 64, 16384) == 321  # at v0.34.0's default 64-token blocks
    fp = serving_footprint("mistral-7b", "h100-sxm", block_size=16)
    assert (fp.max_model_len, fp.max_num_batched_tokens, fp.in_flight_tokens) == (32768, 8192, 16384)
    # vLLM's start-up line: "GPU KV cache size: N tokens, Maximum concurrency for 32,768 tokens per request: X.XXx"
    assert fp.vllm_concurrency() == pytest.approx(fp.num_blocks / 1281)
    assert fp.kv_token_capacity == int(fp.num_blocks / 1281 * 32768)
    assert fp.max_concurrency() == fp.num_blocks // 1281
    sync = serving_footprint("mistral-7b", "h100-sxm", async_scheduling=False, block_size=16)
    assert sync.in_flight_tokens == 8192 and sync.vllm_concurrency() == pytest.approx(sync.num_blocks / 769)


@pytest.mark.parametrize("gpu", sorted(GPUS))
def test_the_default_in_flight_tokens_are_two_batches_of_the_devices_default_budget(gpu):
    assert MAX_CONCURRENT_BATCHES == 2
    assert default_in_flight_tokens(GPUS[gpu]) == 2 * default_max_num_batched_tokens(GPUS[gpu])


def test_the_deviceless_default_is_a_small_gpus_vllm_serve():
    assert DEFAULT_IN_FLIGHT_TOKENS == default_in_flight_tokens(GPUS["l4"]) == 2 * 2048


def test_in_flight_tokens_count_pipeline_stages_and_async_scheduling():
    assert max_in_flight_tokens(2048) == 4096
    assert max_in_flight_tokens(2048, async_scheduling=False) == 2048
    assert max_in_flight_tokens(2048, pipeline_parallel_size=4) == 5 * 2048  # pp + 1 batches under async
    assert max_in_flight_tokens(2048, False, 4) == 4 * 2048
    for bad in (0, -1, 2.5, True, None):
        with pytest.raises(ValueError, match="max_num_batched_tokens"):
            max_in_flight_tokens(bad)
    with pytest.raises(ValueError, match="pipeline_parallel_size"):
        max_in_flight_tokens(2048, pipeline_parallel_size=0)
