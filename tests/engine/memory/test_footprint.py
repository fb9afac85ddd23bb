"""Memory model: catalog against published configs, vLLM's KV arithmetic (vllm#10517), TP, roofline."""

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.memory.catalog import GPUS, MODELS, UnknownKeyError, get_gpu, get_model, resolve_model
from engine.memory.footprint import (
    activation_bytes,
    kv_blocks_from_budget,
    kv_budget_bytes,
    kv_bytes_per_token,
    kv_cache_bytes,
    serving_footprint,
    weight_bytes,
)
from engine.memory.hf_config import model_from_config
from engine.memory.roofline import StepTimeModel, roofline
from engine.memory.specs import custom_model, estimate_params
from engine.memory.units import GiB, kv_bytes

KiB = 1024
CATALOG_KEYS = [
    "llama-2-7b",
    "llama-2-13b",
    "llama-2-70b",
    "llama-3-8b",
    "llama-3-70b",
    "llama-3.1-8b",
    "llama-3.1-70b",
    "llama-3.1-405b",
    "mistral-7b",
    "mixtral-8x7b",
    "qwen2.5-0.5b",
    "qwen2.5-7b",
    "qwen2.5-72b",
    "deepseek-v3",
    "kimi-k2",
    "gpt-oss-20b",
    "gpt-oss-120b",
    "gemma-3-27b",
    "qwen3-8b",
    "qwen3-235b-a22b",
    "qwen3-next-80b-a3b",
    "llama-4-scout",
    "demo",
]

# KV bytes per token at 2 bytes/element, from the published config.json files
PUBLISHED_KV = [
    ("llama-2-7b", 524288),
    ("llama-3-8b", 131072),
    ("qwen2.5-7b", 57344),
    ("llama-2-70b", 327680),
    ("llama-3-70b", 327680),
    ("llama-3.1-405b", 516096),
    ("mistral-7b", 131072),
]
# (layers, hidden, heads, kv_heads, vocab, max_position_embeddings) as in each config.json
PUBLISHED_ARCH = {
    "llama-2-7b": (32, 4096, 32, 32, 32000, 4096),
    "llama-3-8b": (32, 4096, 32, 8, 128256, 8192),
    "llama-3.1-8b": (32, 4096, 32, 8, 128256, 131072),
    "llama-3.1-405b": (126, 16384, 128, 8, 128256, 131072),
    "mistral-7b": (32, 4096, 32, 8, 32000, 32768),
    "qwen2.5-7b": (28, 3584, 28, 4, 152064, 131072),
    "qwen2.5-0.5b": (24, 896, 14, 2, 151936, 32768),
}


def test_catalog_keys_are_the_public_contract():
    assert list(MODELS) == CATALOG_KEYS
    assert {"a100-40gb", "a100-80gb", "h100-sxm", "h200", "l4", "rtx-4090", "rtx-3090", "cpu"} <= set(GPUS)
    assert {"b200", "h20", "mi300x", "rtx-5090"} <= set(GPUS)


def test_catalogs_are_read_only_and_name_the_known_keys_on_a_miss():
    with pytest.raises(KeyError, match="unknown model 'gpt-5'; known models: llama-2-7b, .*, demo"):
        MODELS["gpt-5"]
    with pytest.raises(ValueError, match="known GPUs: a100-40gb"):  # the same error is a ValueError too
        GPUS["tpu-v5e"]
    with pytest.raises(UnknownKeyError):
        MODELS[["unhashable"]]
    with pytest.raises(TypeError):
        MODELS["mine"] = MODELS["demo"]  # type: ignore[index]
    assert "demo" in MODELS and [] not in MODELS and MODELS.get("gpt-5") is None
    assert dict(MODELS.items())["llama-3-8b"] is MODELS["llama-3-8b"] and len(GPUS) == len(list(GPUS))
    assert resolve_model("llama-3-8b") is resolve_model(MODELS["llama-3-8b"]) is MODELS["llama-3-8b"]


def test_kv_bytes_is_the_one_formula():
    m = MODELS["llama-3-8b"]
    assert m.kv_bytes_per_token(dtype_bytes=2) == kv_bytes(32, 8, 128, 2) == kv_bytes_per_token(m, "bf16")
    assert m.kv_bytes_per_token("fp8") == kv_bytes(32, 8, 128, 1) == kv_bytes_per_token("llama-3-8b", "fp8")
    assert m.kv_bytes_per_token_mha(0.5) == kv_bytes(32, 32, 128, 0.5)  # the naive count: query heads


def test_kv_blocks_from_budget_counts_whole_blocks():
    per_block = 16 * kv_bytes(2, 2, 8, 4)  # 16 tokens * (2 * 2 layers * 2 heads * 8 dims * 4 bytes) = 4096
    assert per_block == 4096
    assert kv_blocks_from_budget(10 * per_block + per_block - 1, kv_bytes(2, 2, 8, 4), 16) == 10
    assert kv_blocks_from_budget(per_block - 1, kv_bytes(2, 2, 8, 4), 16) == 0  # no block, never negative
    assert kv_blocks_from_budget(-5 * per_block, kv_bytes(2, 2, 8, 4), 16) == 0
    with pytest.raises(ValueError, match="must be positive"):
        kv_blocks_from_budget(per_block, 0, 16)


@pytest.mark.parametrize("key,expected", PUBLISHED_KV)
def test_kv_bytes_per_token_matches_published_configs(key, expected):
    assert MODELS[key].kv_bytes_per_token(dtype_bytes=2) == expected


@pytest.mark.parametrize("key", list(PUBLISHED_ARCH))
def test_architecture_matches_config_json(key):
    m = MODELS[key]
    assert (m.num_layers, m.hidden_size, m.num_heads, m.num_kv_heads, m.vocab_size, m.max_context) == (
        PUBLISHED_ARCH[key]
    )
    assert m.source  # every entry names the config it was copied from


@pytest.mark.parametrize("key", [k for k in CATALOG_KEYS if k != "demo"])
def test_published_parameter_count_agrees_with_the_architecture(key):
    # two independent facts (model card count vs config shapes) must agree; Qwen's qkv biases are the slack
    m = MODELS[key]
    assert estimate_params(m) == pytest.approx(m.num_params, rel=2e-3)


def test_attention_kinds_and_the_naive_calculator_bug():
    assert MODELS["llama-2-7b"].attention_kind == "MHA"
    assert MODELS["llama-3-8b"].attention_kind == "GQA"
    assert MODELS["mistral-7b"].sliding_window == 4096 and MODELS["qwen2.5-7b"].sliding_window is None
    m = MODELS["llama-3-8b"]
    assert m.kv_bytes_per_token_mha(2) == 4 * m.kv_bytes_per_token(2)  # 32 query heads / 8 KV heads
    assert m.with_kv_heads(1).attention_kind == "MQA"
    assert MODELS["mixtral-8x7b"].active_params == pytest.approx(12.9e9, rel=0.01)


def test_demo_model_reads_its_config_or_falls_back():
    demo = MODELS["demo"]
    path = Path(__file__).resolve().parents[3] / "models" / "demo" / "config.json"
    if path.is_file():
        cfg = json.loads(path.read_text())
        assert demo.num_layers == cfg["num_hidden_layers"]
        assert demo.num_kv_heads == cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    else:
        assert (demo.num_layers, demo.num_heads, demo.num_kv_heads) == (4, 4, 2)


def test_gpu_datasheet_numbers_and_gib():
    assert GPUS["a100-80gb"].memory_bytes == 80 * GiB  # "80 GB" of HBM is 80 GiB = 85.9e9 bytes
    assert GPUS["h100-sxm"].bandwidth_bytes_per_s == 3.35e12
    assert GPUS["h200"].bandwidth_bytes_per_s == 4.8e12
    assert GPUS["l4"].bandwidth_bytes_per_s == 300e9
    assert GPUS["rtx-3090"].bandwidth_bytes_per_s == 936e9
    assert GPUS["h100-sxm"].ridge_point == pytest.approx(295, rel=0.01)


# The device total CUDA reports (PyTorch's out-of-memory message, vLLM's logs), each from the public log it cites.
CUDA_TOTALS_GIB = {
    "a100-40gb": 39.50,
    "a100-80gb": 79.25,
    "h100-sxm": 79.11,
    "l4": 22.03,
    "rtx-4090": 23.64,
    "rtx-3090": 23.58,
}


def test_vllm_sizes_from_what_cuda_reports_not_from_nvidia_smi():
    for key, gib in CUDA_TOTALS_GIB.items():
        gpu = GPUS[key]
        assert gpu.total_bytes == int(gib * GiB) < gpu.memory_bytes, key  # below nvidia-smi's MiB figure
        assert f"{gib:.2f} GiB" in gpu.cuda_source or f"{gib:.2f}GiB" in gpu.cuda_source, key
    assert GPUS["h200"].cuda_memory_bytes is None and GPUS["h200"].total_bytes == GPUS["h200"].memory_bytes
    fp = serving_footprint("llama-3-8b", "l4", max_model_len=4096)
    assert fp.capacity_bytes == int(22.03 * GiB)  # the footprint multiplies CUDA's total, not 23034 MiB
    with pytest.raises(ValueError, match="at most memory_bytes"):
        replace(GPUS["l4"], cuda_memory_bytes=GPUS["l4"].memory_bytes + 1)


def test_config_json_from_transformers_round_trips():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(
        hidden_size=512,
        num_hidden_layers=6,
        num_attention_heads=8,
        num_key_value_heads=2,
        intermediate_size=1376,
        vocab_size=1000,
        max_position_embeddings=2048,
    )
    m = model_from_config(cfg.to_json_string(), name="mine")
    assert (m.num_layers, m.num_heads, m.num_kv_heads, m.head_dim, m.max_context) == (6, 8, 2, 64, 2048)
    assert m.kv_bytes_per_token(2) == 2 * 6 * 2 * 64 * 2
    torch_model = transformers.LlamaForCausalLM(cfg)
    assert m.num_params == sum(p.numel() for p in torch_model.parameters())


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(num_layers=4, hidden_size=512, num_heads=8, num_kv_heads=3), "not a multiple"),
        (dict(num_layers=0, hidden_size=512, num_heads=8), "num_layers"),
        (dict(num_layers=4, hidden_size=-512, num_heads=8), "hidden_size"),
        (dict(num_layers=4, hidden_size=500, num_heads=8), "not divisible"),
        (dict(num_layers=4, hidden_size=512, num_heads=8, num_kv_heads=0), "num_kv_heads"),
    ],
)
def test_bad_custom_models_are_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        custom_model("bad", **kwargs)


def test_bad_config_json_and_unknown_names_are_rejected():
    with pytest.raises(ValueError, match="not valid JSON"):
        model_from_config("{hidden_size: 4")
    with pytest.raises(ValueError, match="num_hidden_layers"):
        model_from_config('{"hidden_size": 64, "num_attention_heads": 4}')
    with pytest.raises(ValueError, match="not a multiple"):
        model_from_config(
            '{"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 3}'
        )
    with pytest.raises(ValueError, match="llama-3-8b"):  # the error lists the known names
        get_model("llama-9")
    with pytest.raises(ValueError, match="h100-sxm"):
        get_gpu("tpu-v5e")


def test_vllm_10517_kv_blocks():
    # "# GPU blocks: 1952": 3.81 GiB (log-rounded; 1952 blocks are 3.8125 GiB) / (16 tokens * 128 KiB)
    per_token = MODELS["llama-3.1-8b"].kv_bytes_per_token(2)
    assert per_token == 128 * KiB
    blocks = kv_blocks_from_budget(3.8125 * GiB, per_token, 16)
    assert blocks == 1952 and blocks * 16 == 31232
    assert 3.81 * GiB / per_token == pytest.approx(31232, rel=1e-3)
    assert round(31232 / 20000, 2) == 1.56  # "Maximum concurrency for 20000 tokens per request: 1.56x"


def test_vllm_10517_full_startup_arithmetic():
    # The 20k run profiled all 20,000 tokens at once (V0 below 32K); V1 would profile max_num_batched_tokens.
    fp = serving_footprint(
        "llama-3.1-8b",
        "rtx-3090",
        gpu_memory_utilization=0.9,
        max_model_len=20000,
        max_num_batched_tokens=20000,
        total_bytes=int(23.58 * GiB),
        block_size=16,  # that release's default (v0.34.0 made it 64)
    )
    assert fp.weights_bytes / GiB == pytest.approx(14.99, abs=0.05)  # "Loading model weights took 14.9888 GB"
    assert (fp.weights_bytes + fp.activation_bytes) / GiB == pytest.approx(17.06, abs=0.1)  # peak_torch_memory
    assert fp.overhead_bytes / GiB == pytest.approx(0.35, abs=0.005)  # non_torch_memory=0.35GiB
    assert fp.num_blocks == pytest.approx(1952, rel=0.02)
    assert fp.vllm_concurrency(20000) == pytest.approx(1.56, abs=0.03)
    assert fp.startup_error is None
    longer = serving_footprint(
        "llama-3.1-8b",
        "rtx-3090",
        gpu_memory_utilization=0.9,
        max_model_len=29000,
        max_num_batched_tokens=29000,
        total_bytes=int(23.58 * GiB),
        block_size=16,
    )
    assert longer.kv_token_capacity == pytest.approx(23648, rel=0.03)  # longer profile, less KV
    assert "max seq len (29000), (3.54 GiB KV cache is needed" in longer.startup_error  # V1's wording
    # v0.34.0 keeps one null block back from the check: the estimate is what the other blocks hold
    assert f"estimated maximum model length is {longer.kv_token_capacity - 16}." in longer.startup_error


def test_v1_profiles_the_token_budget_not_max_model_len():
    # V1 keeps chunked prefill on: the 29,000-token run of vllm#10517 profiles 2048 tokens and starts
    short, long = (serving_footprint("llama-3.1-8b", "rtx-3090", max_model_len=n) for n in (20000, 29000))
    assert short.max_num_batched_tokens == long.max_num_batched_tokens == 2048
    assert short.num_blocks == long.num_blocks and long.startup_error is None
    assert serving_footprint("llama-3-8b", "h100-sxm").max_num_batched_tokens == 8192  # >= 70 GiB, not A100
    assert serving_footprint("llama-3-8b", "a100-80gb").max_num_batched_tokens == 2048


def test_cuda_graphs_and_kv_cache_memory_bytes():
    base = serving_footprint("llama-3-8b", "l4", max_model_len=8192)
    graphs = serving_footprint("llama-3-8b", "l4", max_model_len=8192, cuda_graph_bytes=2 * GiB)
    assert base.kv_budget_bytes - graphs.kv_budget_bytes == 2 * GiB
    rows = {r["part"]: r["bytes"] for r in graphs.breakdown()}
    assert rows["CUDA graphs"] == 2 * GiB and sum(rows.values()) == pytest.approx(graphs.capacity_bytes)
    fixed = serving_footprint("llama-3-8b", "l4", max_model_len=8192, kv_cache_memory_bytes=3 * GiB)
    assert fixed.kv_budget_bytes == 3 * GiB and fixed.num_blocks == 3 * GiB // (64 * 128 * KiB)
    with pytest.raises(ValueError, match="must be >= 0"):
        serving_footprint("llama-3-8b", "l4", cuda_graph_bytes=-1)


def test_breakdown_adds_up_and_other_process_error():
    fp = serving_footprint("llama-3-8b", "a100-40gb", max_model_len=8192)
    assert sum(r["bytes"] for r in fp.breakdown()) == pytest.approx(fp.capacity_bytes)
    busy = serving_footprint("llama-3-8b", "a100-40gb", max_model_len=8192, other_process_bytes=8 * GiB)
    assert "less than desired GPU memory utilization" in busy.startup_error
    with pytest.raises(ValueError, match="gpu_memory_utilization"):
        serving_footprint("llama-3-8b", "a100-40gb", gpu_memory_utilization=1.5)


def test_tensor_parallel_splits_weights_and_kv_heads():
    m = MODELS["llama-3-70b"]
    assert weight_bytes(m, "bf16", 4) == weight_bytes(m, "bf16", 1) // 4
    assert kv_bytes_per_token(m, "bf16", 2) == m.kv_bytes_per_token(2) // 2
    assert kv_bytes_per_token(m, "bf16", 16) == m.kv_bytes_per_token(2) // 8  # KV heads replicate past 8
    m8 = MODELS["llama-3-8b"]
    table = 2 * m8.vocab_size * m8.hidden_size  # embedding + lm_head (untied): they stay in bf16
    assert weight_bytes(m8, "int4") == int((m8.num_params - table) * 0.5 + table * 2)
    assert weight_bytes(m8, "fp8") == m8.num_params - table + 2 * table
    assert weight_bytes(m8, "fp8") / GiB == pytest.approx(8.45, abs=0.01)  # not 7.48: 1.96 GiB stay bf16
    with pytest.raises(ValueError, match="tensor_parallel"):
        kv_bytes_per_token(m, "bf16", 3)
    one = serving_footprint(m, "h100-sxm", max_model_len=8192)
    four = serving_footprint(m, "h100-sxm", max_model_len=8192, tensor_parallel=4)
    assert one.num_blocks == 0 and four.max_concurrency(8192) > 10  # 70B does not fit one H100; on 4 it serves


@settings(max_examples=50, deadline=None)
@given(util=st.floats(0.5, 1.0), n=st.integers(1, 64), block=st.sampled_from([8, 16, 32]))
def test_max_context_and_max_concurrency_agree(util, n, block):
    fp = serving_footprint("llama-3-8b", "h100-sxm", gpu_memory_utilization=util, max_model_len=8192, block_size=block)
    ctx = fp.max_context(n)
    if ctx:
        assert fp.max_concurrency(ctx) >= n  # n sequences of that context really fit
    assert fp.max_concurrency(ctx + block) < n  # one block more each does not


def test_token_counts_must_be_whole_and_not_negative():
    per_token = kv_bytes_per_token("llama-3-8b")
    assert kv_cache_bytes("llama-3-8b", 0) == 0 and kv_cache_bytes("llama-3-8b", 10) == 10 * per_token
    assert kv_cache_bytes("llama-3-8b", np.int64(7)) == 7 * per_token  # numpy counts (dataframes, sliders) are fine
    for bad in (-5, 2.5, True, None):
        with pytest.raises(ValueError, match=rf"num_tokens={bad!r} must be a whole number of tokens >= 0"):
            kv_cache_bytes("llama-3-8b", bad)
    with pytest.raises(ValueError, match="num_batched_tokens=-1 must be a whole number of tokens >= 0"):
        activation_bytes("llama-3.1-8b", -1)
    with pytest.raises(ValueError, match="max_num_batched_tokens=0 must be a whole number of tokens >= 1"):
        kv_budget_bytes("llama-3.1-8b", 24 * GiB, 16 * GiB, max_num_batched_tokens=0)
    with pytest.raises(ValueError, match=r"max_num_batched_tokens=-3 must be .* >= 1 \(None picks vLLM's default\)"):
        serving_footprint("llama-3-8b", "h100-sxm", max_num_batched_tokens=-3)


def test_max_concurrency_of_none_is_max_model_len_and_zero_is_an_error():
    fp = serving_footprint("llama-3-8b", "h100-sxm", max_model_len=4096)
    assert fp.block_size == 64  # vLLM v0.34.0's default block (16 before)
    assert fp.max_concurrency() == fp.max_concurrency(None) == fp.max_concurrency(4096) == fp.num_blocks // 64
    assert fp.vllm_concurrency() == fp.vllm_concurrency(4096) == fp.kv_token_capacity / 4096
    assert fp.max_concurrency(1) == fp.num_blocks  # one token still takes a whole block
    for bad in (0, -16, 1.5, False):
        for method in (fp.max_concurrency, fp.vllm_concurrency):
            with pytest.raises(ValueError, match=rf"context_len={bad!r} must be .* >= 1 \(None means max_model_len\)"):
                method(bad)


def test_activation_bytes_per_token_matches_the_10517_slope():
    # 9,000 more profiled tokens cost 474 blocks * 2 MiB = 948 MiB of KV in the report
    slope = activation_bytes("llama-3.1-8b", 9000) / 2**20
    assert slope == pytest.approx(948, rel=0.05)


def test_decode_is_memory_bound_and_prefill_compute_bound():
    dec = roofline("llama-3-8b", "h100-sxm", "decode", batch_size=1, context_len=1024)
    assert dec.bound == "memory" and dec.memory_bound_factor > 100
    assert dec.intensity == pytest.approx(1.0, rel=0.1)  # ~1 FLOP/byte at batch 1 in bf16
    # decode moves every weight but the embedding table (one row per token) plus the KV cache once
    m = MODELS["llama-3-8b"]
    expected = (m.num_params - m.vocab_size * m.hidden_size) * 2 + 1024 * 131072
    assert dec.bytes == pytest.approx(expected, rel=0.02)
    pre = roofline("llama-3-8b", "h100-sxm", "prefill", batch_size=1, context_len=1024)
    assert pre.bound == "compute" and pre.intensity > GPUS["h100-sxm"].ridge_point
    rows = {r["op"]: r for r in roofline("llama-3-8b", "h100-sxm", "decode", batch_size=8).rows()}
    assert rows["mlp"]["intensity"] == pytest.approx(8, rel=0.05)  # batch FLOP/byte in bf16
    assert rows["attention"]["intensity"] == pytest.approx(4, rel=0.05)  # the GQA group size


def test_step_time_model_agrees_with_roofline():
    stm = StepTimeModel.for_model("llama-3-8b", "a100-80gb")
    dec = roofline("llama-3-8b", "a100-80gb", "decode", batch_size=16, context_len=512)
    assert stm(16, 16 * 512) == pytest.approx(dec.time_s, rel=0.05)
    assert stm(0, 0) == 0.0


CONFIG_VALUES = st.one_of(st.integers(-4, 4096), st.floats(allow_nan=True), st.text(max_size=3), st.none())


@settings(max_examples=200, deadline=None)
@given(
    cfg=st.fixed_dictionaries(
        {"num_hidden_layers": CONFIG_VALUES, "hidden_size": CONFIG_VALUES, "num_attention_heads": CONFIG_VALUES},
        optional={
            k: CONFIG_VALUES
            for k in (
                "num_key_value_heads",
                "head_dim",
                "intermediate_size",
                "vocab_size",
                "max_position_embeddings",
                "sliding_window",
                "num_local_experts",
                "num_experts_per_tok",
            )
        },
    )
)
def test_any_pasted_config_gives_a_model_or_a_clear_value_error(cfg):
    try:
        m = model_from_config(json.dumps(cfg))
    except ValueError as e:
        assert str(e)  # a message, never a bare traceback from deep inside
    else:
        assert m.kv_bytes_per_token(2) > 0 and m.num_heads % m.num_kv_heads == 0


@pytest.mark.parametrize("bad", [0, -2, float("nan"), float("inf")])
def test_kv_bytes_per_token_refuses_a_dtype_size_that_is_not_positive(bad):
    with pytest.raises(ValueError, match="dtype bytes must be a finite number > 0"):
        MODELS["llama-3-8b"].kv_bytes_per_token(dtype_bytes=bad)
    with pytest.raises(ValueError, match="dtype bytes must be a finite number > 0"):
        MODELS["llama-3-8b"].kv_bytes_per_token_mha(dtype_bytes=bad)
