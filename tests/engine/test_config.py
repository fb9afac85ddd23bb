"""engine/config.py: every limit checked once, and the KV pool a loaded model gets (blocks, max_model_len).

The expected numbers are written out from the formulas (2 x layers x KV heads x head_dim x bytes per token;
blocks = budget // (bytes per token x block size)), not taken from the code under test.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from engine.config import CPU_KV_BUDGET_BYTES, EngineConfig
from engine.model.config import ModelConfig

# 2 layers, 2 KV heads of 8 dims: 2 * 2 * 2 * 8 = 64 elements of K and V per token (256 bytes in fp32).
MODEL = ModelConfig(
    vocab_size=50,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=128,
)
WINDOWED = dataclasses.replace(MODEL, sliding_window=16, architecture="MistralForCausalLM")


def test_defaults_are_vllms_and_resolved_once():
    cfg = EngineConfig(device="cpu")
    assert (cfg.block_size, cfg.max_num_seqs, cfg.max_num_batched_tokens, cfg.gpu_memory_utilization) == (
        16,
        64,
        2048,
        0.92,  # vLLM v0.20+ (PR #38284), still the default at v0.34.0
    )
    assert cfg.device == torch.device("cpu") and cfg.backend == "torch" and cfg.dtype is None
    assert EngineConfig(device="cpu", dtype="bfloat16").dtype == torch.bfloat16


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"block_size": 24}, "block_size=24 is not supported; use a power of two"),
        ({"max_num_seqs": 0}, r"max_num_seqs=0 must be an integer >= 1"),
        ({"max_model_len": 2.5}, r"max_model_len=2.5 must be an integer >= 1"),
        ({"num_gpu_blocks": True}, r"num_gpu_blocks=True must be an integer >= 1"),
        ({"gpu_memory_utilization": 1.5}, r"gpu_memory_utilization=1.5 must be a fraction in \(0, 1\]"),
        ({"kv_cache_dtype": "int4"}, "kv_cache_dtype='int4' is not supported"),
        ({"kv_cache_memory_bytes": -1}, "kv_cache_memory_bytes=-1 must be a whole number of bytes"),
        ({"kv_cache_memory_bytes": 4096, "num_gpu_blocks": 2}, "both size the KV pool; give one of them"),
        ({"dtype": "float64"}, "dtype='float64' is not supported"),
        ({"backend": "cuda"}, "backend='cuda' is not supported"),
        ({"enable_prefix_caching": "yes"}, "enable_prefix_caching='yes' must be True or False"),
    ],
)
def test_each_bad_limit_is_named_with_its_fix(kwargs, match):
    with pytest.raises(ValueError, match=match):
        EngineConfig(device="cpu", **kwargs)


def test_given_blocks_and_the_models_length():
    cache = EngineConfig(device="cpu", block_size=4, num_gpu_blocks=40).size_cache(MODEL, torch.float32)
    assert (cache.num_blocks, cache.kv_bytes_per_token, cache.dtype) == (40, 256, torch.float32)
    assert cache.max_model_len == 128 and cache.pool_tokens is None  # 40 x 4 = 160 slots hold 128 tokens


def test_a_small_pool_sets_max_model_len_and_says_so():
    cache = EngineConfig(device="cpu", block_size=4, num_gpu_blocks=10).size_cache(MODEL, torch.float32)
    assert cache.max_model_len == cache.pool_tokens == 40


def test_a_requested_length_the_pool_cannot_hold_is_refused():
    cfg = EngineConfig(device="cpu", block_size=4, num_gpu_blocks=10, max_model_len=64)
    with pytest.raises(ValueError, match=r"max_model_len=64 is larger than .* \(10 blocks x 4 = 40\)"):
        cfg.size_cache(MODEL, torch.float32)
    with pytest.raises(ValueError, match=r"max_model_len=129 must be in 1..128"):
        EngineConfig(device="cpu", max_model_len=129).size_cache(MODEL, torch.float32)


def test_a_sliding_window_needs_only_its_windows_blocks():
    # Window 16, 4-token steps: at most ceil((16 - 1 + 4) / 4) + 1 = 6 blocks per sequence, at any length.
    cfg = EngineConfig(device="cpu", block_size=4, num_gpu_blocks=6, max_num_batched_tokens=4)
    assert cfg.size_cache(WINDOWED, torch.float32).max_model_len == 128
    with pytest.raises(ValueError, match="with the 16-token sliding window a sequence needs 6 blocks"):
        EngineConfig(
            device="cpu", block_size=4, num_gpu_blocks=5, max_num_batched_tokens=4, max_model_len=128
        ).size_cache(WINDOWED, torch.float32)


def test_a_byte_budget_buys_whole_blocks_and_fp8_buys_four_times_fp32():
    full = EngineConfig(device="cpu", block_size=4, kv_cache_memory_bytes=10_000).size_cache(MODEL, torch.float32)
    assert full.num_blocks == 10_000 // (256 * 4) == 9
    fp8 = EngineConfig(device="cpu", block_size=4, kv_cache_memory_bytes=10_000, kv_cache_dtype="fp8")
    cache = fp8.size_cache(MODEL, torch.float32)
    assert cache.dtype == torch.float8_e4m3fn and cache.kv_bytes_per_token == 64
    assert cache.num_blocks == 10_000 // (64 * 4) == 39
    with pytest.raises(ValueError, match="kv_cache_memory_bytes=100 must be a whole number of bytes holding"):
        EngineConfig(device="cpu", block_size=4, kv_cache_memory_bytes=100).size_cache(MODEL, torch.float32)


def test_the_cpu_pool_is_its_budget_capped_by_the_batch():
    cfg = EngineConfig(device="cpu", block_size=16, max_num_seqs=2)
    cache = cfg.size_cache(MODEL, torch.float32)
    assert cache.num_blocks == min(CPU_KV_BUDGET_BYTES, 2 * 128 * 256) // (256 * 16) == 16
    sched = cfg.scheduler_config(cache)
    assert (sched.max_num_seqs, sched.max_num_batched_tokens, sched.max_model_len) == (2, 2048, 128)
