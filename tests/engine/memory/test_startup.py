"""vLLM V1's start-up arithmetic against the figures real vLLM logs print (vllm#10517, vLLM's own defaults)."""

from dataclasses import replace

import pytest

from engine.memory.catalog import GPUS, MODELS
from engine.memory.footprint import kv_blocks_from_budget, kv_bytes_per_token, serving_footprint
from engine.memory.specs import custom_model
from engine.memory.startup import (
    CUDA_GRAPH_BYTES_PER_LAYER,
    DEFAULT_GPU_MEMORY_UTILIZATION,
    EXTENSIBLE_KV_CACHE_GPU_MEMORY_UTILIZATION,
    PRE_V020_GPU_MEMORY_UTILIZATION,
    cuda_graph_bytes,
    cudagraph_capture_sizes,
    default_max_num_batched_tokens,
    default_max_num_seqs,
    kv_budget_from_profile,
    startup_error_text,
    token_budget,
)
from engine.memory.units import GiB


def test_vllm_10517_kv_cache_size_from_its_own_log_fields():
    # "total_gpu_memory=23.58GiB ... peak_torch_memory=17.06GiB ... non_torch_memory=0.35GiB kv_cache_size=3.81GiB
    #  gpu_memory_utilization=0.90" and "# GPU blocks: 1952" (Llama-3.1-8B-Instruct, 20k run)
    kv = kv_budget_from_profile(23.58 * GiB, 0.90, 17.06 * GiB, 0.35 * GiB)
    assert kv / GiB == pytest.approx(3.81, abs=0.005)
    per_token = kv_bytes_per_token("llama-3.1-8b")
    # the log rounds every figure to 0.01 GiB: the true budget lies within +-0.02 GiB, and 1952 blocks with it
    low, high = (kv_blocks_from_budget(kv + d * GiB, per_token) for d in (-0.02, 0.02))
    assert low <= 1952 <= high
    # the 29k run: peak torch 17.98 GiB -> kv_cache_size=2.89GiB, 1478 blocks = 23,648 tokens
    kv29 = kv_budget_from_profile(23.58 * GiB, 0.90, 17.98 * GiB, 0.35 * GiB)
    assert kv29 / GiB == pytest.approx(2.89, abs=0.005)
    assert (
        kv_blocks_from_budget(kv29 - 0.02 * GiB, per_token)
        <= 1478
        <= kv_blocks_from_budget(kv29 + 0.02 * GiB, per_token)
    )


def test_cuda_graph_estimate_comes_off_the_kv_budget():
    # vllm#53013: "Estimated CUDA graph memory: 118.65 GiB total" then "No available memory for the cache blocks"
    assert kv_budget_from_profile(80 * GiB, 0.9, 60 * GiB, 1 * GiB, 118.65 * GiB) < 0
    assert kv_budget_from_profile(24 * GiB, 0.9, 16 * GiB, 0.5 * GiB, 2 * GiB) == pytest.approx(3.1 * GiB)
    with pytest.raises(ValueError, match="gpu_memory_utilization"):
        kv_budget_from_profile(24 * GiB, 1.2, 16 * GiB, 0.5 * GiB)
    with pytest.raises(ValueError, match=">= 0"):
        kv_budget_from_profile(24 * GiB, 0.9, 16 * GiB, -1)


def test_default_batch_limits_follow_vllm_get_batch_defaults():
    # EngineArgs.get_batch_defaults at v0.34.0, `vllm serve` (OPENAI_API_SERVER): >= 160 GiB 16384 / 1024,
    # >= 70 GiB and not an A100 (nor a GB10) 8192 / 1024, otherwise 2048 / 256; the CPU backend 2048 / 128
    assert default_max_num_batched_tokens(GPUS["rtx-3090"]) == 2048 and default_max_num_seqs(GPUS["l4"]) == 256
    assert default_max_num_batched_tokens(GPUS["h100-sxm"]) == 8192 and default_max_num_seqs(GPUS["h200"]) == 1024
    assert default_max_num_batched_tokens(GPUS["h200"]) == 8192  # 140 GiB: below the 160 GiB tier
    assert default_max_num_batched_tokens(GPUS["a100-80gb"]) == 2048  # A100s are excluded (vLLM PR #17885)
    assert default_max_num_seqs(GPUS["a100-80gb"]) == 256
    for big in ("b200", "mi300x"):  # >= 160 GiB: the largest defaults, A100 test or not
        assert default_max_num_batched_tokens(GPUS[big]) == 16384 and default_max_num_seqs(GPUS[big]) == 1024
    assert default_max_num_batched_tokens(GPUS["cpu"]) == 2048 and default_max_num_seqs(GPUS["cpu"]) == 128
    gb10 = replace(GPUS["h100-sxm"], name="NVIDIA GB10")  # DGX Spark: the memory, not the compute
    assert default_max_num_batched_tokens(gb10) == 2048 and default_max_num_seqs(gb10) == 256
    exactly_160 = replace(GPUS["h200"], cuda_memory_bytes=None, memory_bytes=160 * GiB)
    assert default_max_num_batched_tokens(exactly_160) == 16384  # ">= 160 GiB"


def test_capture_sizes_and_graph_memory():
    sizes = cudagraph_capture_sizes(256, 8192)
    assert sizes[:5] == [1, 2, 4, 8, 16] and sizes[-1] == 512 and len(sizes) == 3 + 31 + 17
    assert cudagraph_capture_sizes(8, 8192) == [1, 2, 4, 8, 16]  # min(2 * max_num_seqs, 512)
    assert cudagraph_capture_sizes(256, 64)[-1] == 64  # never above max_num_batched_tokens
    # v0.34.0 appends max_num_batched_tokens and max_num_seqs when they are within the ceiling, off the stride too
    assert cudagraph_capture_sizes(256, 300)[-3:] == [272, 288, 300]
    assert cudagraph_capture_sizes(100, 8192)[-3:] == [184, 192, 200] and 100 in cudagraph_capture_sizes(100, 8192)
    assert 100 not in cudagraph_capture_sizes(100, 96)  # not above max_num_batched_tokens
    assert cudagraph_capture_sizes(3, 8192) == [1, 2, 3, 4]  # ceiling 2 * 3 = 6: the grid up to 6, plus 3
    assert cudagraph_capture_sizes(3, 6) == [1, 2, 3, 4, 6]  # a 6-token budget is captured too
    # compute capability 10.x (B200) raises the ceiling to 1024; an RTX 5090 (Blackwell, 12.0) keeps 512
    b200 = cudagraph_capture_sizes(1024, 16384, GPUS["b200"])
    assert b200[-1] == 1024 and len(b200) == 3 + 31 + 49
    assert cudagraph_capture_sizes(1024, 16384, GPUS["rtx-5090"])[-1] == 512
    assert cudagraph_capture_sizes(1024, 16384, GPUS["h200"]) == cudagraph_capture_sizes(1024, 16384)
    assert cudagraph_capture_sizes(256, 16384, GPUS["b200"])[-1] == 512  # still at most 2 * max_num_seqs
    assert cuda_graph_bytes(MODELS["llama-3.1-8b"], 1024, 16384, False, GPUS["b200"]) == 83 * 32 * (
        CUDA_GRAPH_BYTES_PER_LAYER
    )
    m = MODELS["llama-3.1-8b"]
    assert cuda_graph_bytes(m, 256, 2048, enforce_eager=True) == 0
    full = cuda_graph_bytes(m, 256, 2048, enforce_eager=False)
    assert full == 51 * 32 * CUDA_GRAPH_BYTES_PER_LAYER
    assert cuda_graph_bytes(m, 16, 2048, enforce_eager=False) < full / 5  # fewer sequences, fewer graphs
    with pytest.raises(ValueError, match="max_num_seqs=0"):
        cudagraph_capture_sizes(0, 2048)


def test_cuda_graph_estimate_matches_the_v020_logs_it_is_calibrated_on():
    # LMCache/LMCache#3430 (vLLM >= 0.20, 24 GB card): Qwen3-8B, 36 layers, the default capture sizes
    # "Profiling CUDA graph memory: PIECEWISE=51 (largest=512), FULL=35 (largest=256)"
    # "Estimated CUDA graph memory: 0.52 GiB total"
    qwen3_8b = custom_model(
        "Qwen3-8B",
        num_layers=36,
        hidden_size=4096,
        num_heads=32,
        num_kv_heads=8,
        intermediate_size=12288,
        vocab_size=151936,
        max_context=40960,
        head_dim=128,
    )
    assert len(cudagraph_capture_sizes(256, 2048)) == 51
    assert cuda_graph_bytes(qwen3_8b, 256, 2048, enforce_eager=False) / GiB == pytest.approx(0.52, abs=0.005)
    # an 8B Llama with the full default sizes lands inside the 0.36-0.76 GiB public v0.20+ logs show, far
    # below the 1.54 GiB the pre-v0.20 capture log (vllm#14286's 2.02 GiB for 67 sizes) implied
    llama = cuda_graph_bytes(MODELS["llama-3.1-8b"], 256, 2048, enforce_eager=False) / GiB
    assert 0.36 <= llama <= 0.76 and llama == pytest.approx(0.46, abs=0.01)


def test_vllm_defaults_of_the_release_the_course_follows():
    # v0.20.0 (vLLM PR #38284): CUDA graph profiling on by default, gpu_memory_utilization 0.9 -> 0.92; v0.34.0's
    # CacheConfig.DEFAULT_GPU_MEMORY_UTILIZATION is still 0.92 (1.0 when the extensible KV cache is on)
    assert DEFAULT_GPU_MEMORY_UTILIZATION == 0.92 and PRE_V020_GPU_MEMORY_UTILIZATION == 0.9
    assert EXTENSIBLE_KV_CACHE_GPU_MEMORY_UTILIZATION == 1.0
    fp = serving_footprint("llama-3-8b", "a100-80gb", max_model_len=8192)
    assert fp.gpu_memory_utilization == 0.92


def test_token_budget_with_and_without_chunked_prefill():
    l4, h100 = GPUS["l4"], GPUS["h100-sxm"]
    assert token_budget(l4, 32768) == 2048 and token_budget(h100, 32768) == 8192  # chunked prefill: the budget
    assert token_budget(l4, 32768, enable_chunked_prefill=False) == 32768  # a whole prompt per step
    assert token_budget(l4, 1024, enable_chunked_prefill=False) == 2048  # never below the default budget
    assert token_budget(l4, 32768, 4096, enable_chunked_prefill=False) == 32768
    m = MODELS["llama-3.1-8b"]
    chunked = serving_footprint(m, "l4", max_model_len=32768, max_num_batched_tokens=token_budget(l4, 32768))
    whole = serving_footprint(
        m, "l4", max_model_len=32768, max_num_batched_tokens=token_budget(l4, 32768, enable_chunked_prefill=False)
    )
    assert whole.activation_bytes == 16 * chunked.activation_bytes  # the activation peak grows with the budget
    assert whole.num_blocks < chunked.num_blocks
    with pytest.raises(ValueError, match="max_model_len=0"):
        token_budget(l4, 0)


def test_startup_errors_use_the_wording_of_vllm_v034():
    per_token = 128 * 1024
    assert startup_error_text(24 * GiB, 0, 0.92, 100, 16, per_token, 1584) is None  # 99 usable blocks
    assert startup_error_text(24 * GiB, 0, 0.92, 100, 16, per_token, 1600) is not None  # the null block
    too_long = startup_error_text(24 * GiB, 0, 0.92, 1000, 16, per_token, 131072)
    # _check_enough_kv_cache_memory at v0.34.0 (vllm/v1/core/kv_cache_planning.py), the null block held back
    # vLLM's format_gib rounds to 2 decimals and prints no trailing zero: "16.0", not "16.00"
    assert "with the model's max seq len (131072), (16.0 GiB KV cache is needed" in too_long
    assert "available KV cache memory (1.95 GiB)" in too_long and "maximum model length is 15984." in too_long
    assert "15984. Try increasing `gpu_memory_utilization` when initializing the engine (this flag also" in too_long
    assert "despite its name). Decreasing `max_model_len` also reduces what is needed. See https://" in too_long
    assert too_long.endswith("See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.")
    none = startup_error_text(24 * GiB, 0, 0.92, 0, 16, per_token, 16)
    assert none.startswith("ValueError: No available memory for the cache blocks. Try increasing")
    assert "(this flag also controls CPU memory reservation on the CPU backend, despite its name)" in none
    assert "estimated maximum" not in startup_error_text(24 * GiB, 0, 0.92, 1, 16, per_token, 16)  # 0 usable
    busy = startup_error_text(40 * GiB, 8 * GiB, 0.92, 100, 16, per_token, 16)
    # pytorch/pytorch#175666 quotes vLLM's: "Free memory on device cuda:1 (19.77/22.05 GiB) on startup is less
    # than desired GPU memory utilization (0.9, 19.84 GiB). Decrease GPU memory utilization or reduce ..."
    assert busy == (
        "ValueError: Free memory on device cuda:0 (32.0/40.0 GiB) on startup is less than desired GPU memory "
        "utilization (0.92, 36.8 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes."
    )


def test_a_sliding_window_caps_what_one_sequence_needs_at_start_up():
    per_token = 128 * 1024
    assert "max seq len (32768)" in startup_error_text(24 * GiB, 0, 0.92, 400, 16, per_token, 32768)
    assert startup_error_text(24 * GiB, 0, 0.92, 400, 16, per_token, 32768, blocks_per_seq=385) is None
    # 1 GiB is 512 blocks. Without async scheduling one 2,048-token batch is in flight: cdiv(4,095 + 2,048, 16) + 1
    # = 385 blocks per sequence fit. vLLM's default keeps two batches in flight: cdiv(4,095 + 4,096, 16) + 1 = 513
    # blocks, more than the pool, and vLLM refuses to start.
    one = serving_footprint(
        "mistral-7b", "l4", max_model_len=32768, kv_cache_memory_bytes=1 * GiB, async_scheduling=False, block_size=16
    )
    assert one.num_blocks == 512 and one.in_flight_tokens == 2048
    assert one.startup_error is None
    assert one.kv_token_capacity == int(512 / 385 * 32768)  # vLLM's line: max concurrency x max_model_len
    two = serving_footprint("mistral-7b", "l4", max_model_len=32768, kv_cache_memory_bytes=1 * GiB, block_size=16)
    assert two.in_flight_tokens == 4096
    assert "max seq len (32768)" in two.startup_error
