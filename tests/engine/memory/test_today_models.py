"""Today's models in the memory model: KV per token and per request derived here from their published config.json.

Each config below is the model repo's config.json trimmed to the fields used (repo named per dict). Expected values
are computed in the tests from those fields with vLLM V1's formulas (vllm/v1/kv_cache_interface.py: a full
attention page is block * 2 * kv_heads * head_dim * bytes; MLA one latent of kv_lora_rank + qk_rope_head_dim;
a sliding layer keeps cdiv(min(window - 1 + in flight, tokens), block) + 1 blocks), never from the code's constants.
"""

from __future__ import annotations

import json

import pytest

from engine.memory import MODELS, kv_bytes_per_token, kv_request_bytes, model_from_config

# deepseek-ai/DeepSeek-V3 config.json (trimmed)
DEEPSEEK_V3 = {
    "model_type": "deepseek_v3",
    "vocab_size": 129280,
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 61,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "n_shared_experts": 1,
    "n_routed_experts": 256,
    "kv_lora_rank": 512,
    "q_lora_rank": 1536,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "qk_nope_head_dim": 128,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 3,
    "max_position_embeddings": 163840,
    "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]},
}
# moonshotai/Kimi-K2-Instruct config.json (trimmed): the deepseek_v3 architecture
KIMI_K2 = {
    **DEEPSEEK_V3,
    "model_type": "kimi_k2",
    "vocab_size": 163840,
    "num_attention_heads": 64,
    "num_key_value_heads": 64,
    "n_routed_experts": 384,
    "first_k_dense_replace": 1,
}
# openai/gpt-oss-120b config.json (trimmed)
GPT_OSS_120B = {
    "model_type": "gpt_oss",
    "num_hidden_layers": 36,
    "hidden_size": 2880,
    "intermediate_size": 2880,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "sliding_window": 128,
    "layer_types": ["sliding_attention", "full_attention"] * 18,
    "num_local_experts": 128,
    "num_experts_per_tok": 4,
    "experts_per_token": 4,
    "vocab_size": 201088,
    "quantization_config": {"quant_method": "mxfp4"},
}
# openai/gpt-oss-20b config.json (trimmed)
GPT_OSS_20B = {
    **GPT_OSS_120B,
    "num_hidden_layers": 24,
    "layer_types": ["sliding_attention", "full_attention"] * 12,
    "num_local_experts": 32,
}
# google/gemma-3-27b-it config.json (trimmed): no layer_types; transformers' sliding_window_pattern default is 6
GEMMA_3_27B = {
    "model_type": "gemma3",
    "text_config": {
        "model_type": "gemma3_text",
        "head_dim": 128,
        "hidden_size": 5376,
        "intermediate_size": 21504,
        "num_attention_heads": 32,
        "num_hidden_layers": 62,
        "num_key_value_heads": 16,
        "sliding_window": 1024,
        "vocab_size": 262208,  # left out of the published file: transformers' Gemma3TextConfig default
    },
}
# Qwen/Qwen3-Next-80B-A3B-Instruct config.json (trimmed)
QWEN3_NEXT = {
    "model_type": "qwen3_next",
    "num_hidden_layers": 48,
    "hidden_size": 2048,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "full_attention_interval": 4,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
    "linear_value_head_dim": 128,
    "num_experts": 512,
    "num_experts_per_tok": 10,
    "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512,
    "intermediate_size": 5120,
    "vocab_size": 151936,
}
# meta-llama/Llama-4-Scout-17B-16E-Instruct config.json (trimmed)
LLAMA_4_SCOUT = {
    "model_type": "llama4",
    "text_config": {
        "model_type": "llama4_text",
        "attention_chunk_size": 8192,
        "head_dim": 128,
        "hidden_size": 5120,
        "intermediate_size": 8192,
        "intermediate_size_mlp": 16384,
        "num_attention_heads": 40,
        "num_hidden_layers": 48,
        "num_key_value_heads": 8,
        "num_local_experts": 16,
        "num_experts_per_tok": 1,
        "vocab_size": 202048,
    },
}
# Qwen/Qwen3-8B and Qwen/Qwen3-235B-A22B config.json (trimmed)
QWEN3_8B = {
    "model_type": "qwen3",
    "num_hidden_layers": 36,
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 12288,
    "use_sliding_window": False,
    "sliding_window": None,
    "vocab_size": 151936,
}
QWEN3_235B = {
    "model_type": "qwen3_moe",
    "num_hidden_layers": 94,
    "hidden_size": 4096,
    "num_attention_heads": 64,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "moe_intermediate_size": 1536,
    "intermediate_size": 12288,
    "use_sliding_window": False,
    "vocab_size": 151936,
}


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def mla_bytes(cfg: dict, dtype_bytes: int) -> int:
    return cfg["num_hidden_layers"] * (cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"]) * dtype_bytes


def full_layer_bytes(cfg: dict, dtype_bytes: int = 2) -> int:
    return 2 * cfg["num_key_value_heads"] * cfg["head_dim"] * dtype_bytes


@pytest.mark.parametrize("cfg", [DEEPSEEK_V3, KIMI_K2], ids=["deepseek-v3", "kimi-k2"])
def test_mla_caches_one_latent_per_token_and_layer(cfg):
    m = model_from_config(cfg)
    assert m.attention_kind == "MLA"
    assert kv_bytes_per_token(m, "bf16") == mla_bytes(cfg, 2) == 70_272
    assert kv_bytes_per_token(m, "fp8") == mla_bytes(cfg, 1) == 35_136
    assert kv_bytes_per_token(m, "bf16", tensor_parallel=8) == 70_272  # the latent is not split over TP ranks
    trap = (
        2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * (cfg["hidden_size"] // cfg["num_attention_heads"])
    )
    assert m.kv_bytes_per_token_mha(2) == trap * 2  # what reading num_key_value_heads would say
    assert trap * 2 > 20 * 70_272


def test_deepseek_v3_config_no_longer_trips_on_its_experts():
    m = model_from_config(json.dumps(DEEPSEEK_V3), name="mine")
    assert (m.num_experts, m.experts_per_token) == (256, 8)
    assert m.num_dense_layers == 3 and m.moe_intermediate_size == 2048
    assert m.shared_expert_intermediate_size == 2048
    assert m.weight_format == "fp8_block"


@pytest.mark.parametrize("cfg,name", [(GPT_OSS_120B, "120b"), (GPT_OSS_20B, "20b")])
def test_gpt_oss_charges_only_its_full_layers_per_further_token(cfg, name):
    m = model_from_config(cfg)
    full = cfg["layer_types"].count("full_attention")
    assert full == cfg["num_hidden_layers"] // 2
    per_layer = full_layer_bytes(cfg)
    assert kv_bytes_per_token(m) == full * per_layer
    if name == "120b":
        assert kv_bytes_per_token(m) == 36_864
        assert cfg["num_hidden_layers"] * per_layer == 73_728  # the all-layers formula, twice too much
    # long context: each further token adds exactly the full layers' bytes, in whole blocks
    a, b = kv_request_bytes(m, 64 * 1024), kv_request_bytes(m, 64 * 1024 + 16)
    assert b - a == 16 * full * per_layer


def test_gpt_oss_request_bytes_follow_vllms_sliding_window_rule():
    cfg, block, in_flight = GPT_OSS_120B, 16, 2048
    m = model_from_config(cfg)
    n = 32 * 1024
    per_layer_page = block * full_layer_bytes(cfg)
    full_blocks = cdiv(n, block)
    sliding_blocks = cdiv(min(cfg["sliding_window"] - 1 + in_flight, n), block) + 1
    # 18 full layers and 18 sliding layers: two groups of 18 sharing one pool, a block = 18 pages
    expected = (full_blocks + sliding_blocks) * 18 * per_layer_page
    assert kv_request_bytes(m, n, block_size=block, in_flight_tokens=in_flight) == expected
    naive = n * cfg["num_hidden_layers"] * full_layer_bytes(cfg)
    assert expected < 0.6 * naive
    # a short request: a sliding layer never holds more blocks than the request's own
    assert kv_request_bytes(m, 10) == 2 * 18 * per_layer_page


@pytest.mark.parametrize("cfg", [GEMMA_3_27B, {**GEMMA_3_27B, "text_config": {**GEMMA_3_27B["text_config"]}}])
def test_gemma_3_27b_keeps_ten_global_layers(cfg):
    text = cfg["text_config"]
    m = model_from_config(cfg)
    full = sum(1 for i in range(text["num_hidden_layers"]) if (i + 1) % 6 == 0)
    assert full == 10
    assert kv_bytes_per_token(m) == full * full_layer_bytes(text) == 81_920


def test_gemma_3_request_pays_for_vllms_padded_sliding_groups():
    text, n, block, in_flight = GEMMA_3_27B["text_config"], 32 * 1024, 16, 2048
    m = model_from_config(GEMMA_3_27B)
    sliding_groups = cdiv(52, 10)  # 52 sliding layers in groups of 10 (the 10 global layers): the last one padded
    sliding = cdiv(min(text["sliding_window"] - 1 + in_flight, n), block) + 1
    expected = (cdiv(n, block) + sliding_groups * sliding) * 10 * block * full_layer_bytes(text)
    assert kv_request_bytes(m, n) == expected


def test_gemma_3_layer_types_and_the_older_pattern_field_agree():
    text = GEMMA_3_27B["text_config"]
    types = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(62)]
    with_types = model_from_config({"text_config": {**text, "layer_types": types}})
    with_pattern = model_from_config({"model_type": "gemma3", "text_config": {**text, "sliding_window_pattern": 6}})
    assert with_types.layer_kinds == with_pattern.layer_kinds == MODELS["gemma-3-27b"].layer_kinds


def test_qwen3_next_charges_twelve_full_layers_plus_a_fixed_state():
    cfg = QWEN3_NEXT
    m = model_from_config(cfg)
    full = len(range(3, 48, 4))
    assert full == 12
    assert kv_bytes_per_token(m) == full * full_layer_bytes(cfg) == 24_576
    # Gated DeltaNet state as vLLM sizes it (mamba_utils.gated_delta_net_state_shape), bf16
    conv_dim = 2 * 16 * 128 + 32 * 128
    state = (conv_dim * (cfg["linear_conv_kernel_dim"] - 1) + 32 * 128 * 128) * 2
    assert state == 1_097_728
    # vLLM raises the attention block so one page holds a state: 16 * cdiv(state, 16 * 2048) = 544 tokens
    block = 16 * cdiv(state, 16 * full_layer_bytes(cfg))
    assert block == 544
    page = block * full_layer_bytes(cfg)
    n = 32 * 1024
    # 12 full layers (one group) + 36 linear layers (three groups of 12), each block id = 12 pages
    expected = (cdiv(n, block) + 3) * 12 * page
    assert kv_request_bytes(m, n) == expected
    assert kv_request_bytes(m, n + block) - kv_request_bytes(m, n) == block * 24_576


def test_llama_4_scout_chunks_three_layers_of_four():
    text = LLAMA_4_SCOUT["text_config"]
    m = model_from_config(LLAMA_4_SCOUT)
    kinds = [k.kind for k in m.layer_kinds]
    assert kinds == ["chunked_attention", "chunked_attention", "chunked_attention", "full_attention"] * 12
    assert kv_bytes_per_token(m) == 12 * full_layer_bytes(text) == 49_152
    n, block, in_flight = 32 * 1024, 16, 2048
    chunked = cdiv(min(text["attention_chunk_size"] + in_flight, n), block)
    expected = (cdiv(n, block) + 3 * chunked) * 12 * block * full_layer_bytes(text)
    assert kv_request_bytes(m, n) == expected


@pytest.mark.parametrize("cfg", [QWEN3_8B, QWEN3_235B], ids=["qwen3-8b", "qwen3-235b-a22b"])
def test_qwen3_dense_attention_is_the_gqa_formula(cfg):
    m = model_from_config(cfg)
    assert kv_bytes_per_token(m) == cfg["num_hidden_layers"] * full_layer_bytes(cfg)
    assert kv_request_bytes(m, 1000) == cdiv(1000, 16) * 16 * kv_bytes_per_token(m)


@pytest.mark.parametrize(
    "key,cfg",
    [
        ("deepseek-v3", DEEPSEEK_V3),
        ("kimi-k2", KIMI_K2),
        ("gpt-oss-20b", GPT_OSS_20B),
        ("gpt-oss-120b", GPT_OSS_120B),
        ("gemma-3-27b", GEMMA_3_27B),
        ("qwen3-8b", QWEN3_8B),
        ("qwen3-235b-a22b", QWEN3_235B),
        ("qwen3-next-80b-a3b", QWEN3_NEXT),
        ("llama-4-scout", LLAMA_4_SCOUT),
    ],
)
def test_catalog_entries_read_the_same_as_their_configs(key, cfg):
    entry, pasted = MODELS[key], model_from_config(cfg)
    assert entry.layer_kinds == pasted.layer_kinds
    assert kv_bytes_per_token(entry) == kv_bytes_per_token(pasted)
    assert "/" in entry.source  # the Hugging Face repo the config comes from
    for n in (0, 1, 4097, 32 * 1024):
        assert kv_request_bytes(key, n) == kv_request_bytes(pasted, n)


def test_dense_models_keep_their_numbers():
    assert MODELS["llama-3-8b"].kv_bytes_per_token(dtype_bytes=2) == 131072
    assert kv_bytes_per_token("llama-3-70b", "bf16", 8) == 2 * 80 * 1 * 128 * 2
    assert kv_request_bytes("llama-3-8b", 100) == cdiv(100, 16) * 16 * 131072
    assert MODELS["llama-3-8b"].attention_kind == "GQA" and MODELS["llama-2-7b"].attention_kind == "MHA"


@pytest.mark.parametrize("bad", [-1, 2.5, "100", None, True, float("nan")])
def test_bad_request_lengths_name_the_value(bad):
    with pytest.raises(ValueError, match=f"num_tokens={bad!r}".replace("(", r"\(").replace(")", r"\)")):
        kv_request_bytes("gpt-oss-120b", bad)


@pytest.mark.parametrize(
    "cfg,field",
    [
        ({k: v for k, v in DEEPSEEK_V3.items() if k != "kv_lora_rank"}, "kv_lora_rank"),
        ({**GPT_OSS_120B, "layer_types": ["full_attention"] * 35}, "layer_types"),
        ({**GPT_OSS_120B, "layer_types": ["sliding_attention", "global"] * 18}, "layer_types"),
        ({**GPT_OSS_120B, "sliding_window": 0}, "sliding_window"),
        ({**GPT_OSS_120B, "sliding_window": -128}, "sliding_window"),
        ({**QWEN3_NEXT, "linear_num_value_heads": None}, "linear_num_value_heads"),
        ({"text_config": {**LLAMA_4_SCOUT["text_config"], "attention_chunk_size": 0}}, "attention_chunk_size"),
        ({**DEEPSEEK_V3, "quantization_config": {"quant_method": "awq"}}, "quant_method"),
    ],
)
def test_a_broken_config_names_the_field(cfg, field):
    with pytest.raises(ValueError, match=field):
        model_from_config(cfg)


# Model cards' parameter counts (total, active), and how much of the embeddings each card's "active" leaves out:
# OpenAI's gpt-oss table counts the unembedding but not the embedding table; Qwen's "A3B"/"A22B" neither.
PUBLISHED_PARAMS = [
    (DEEPSEEK_V3, 671e9, 37e9),  # DeepSeek-V3 technical report (main model, without the 14B MTP module)
    (KIMI_K2, 1.0e12, 32e9),  # Kimi K2 model card: "1 trillion total parameters, 32 billion activated"
    (GPT_OSS_120B, 116.83e9, 5.13e9),  # gpt-oss model card, table 1
    (GPT_OSS_20B, 20.91e9, 3.61e9),
    (QWEN3_235B, 235e9, 22e9),
    (QWEN3_NEXT, 80e9, 3e9),
    (LLAMA_4_SCOUT, 109e9, 17e9),  # Meta's card: 109B total (vision encoder included), 17B active
    ({**GEMMA_3_27B}, 27e9, None),
    (QWEN3_8B, 8.2e9, None),
]


@pytest.mark.parametrize("cfg,total,active", PUBLISHED_PARAMS)
def test_parameter_counts_match_the_model_cards(cfg, total, active):
    """Within 3 % of the card's total; the card's active count lies between ours with and without embeddings."""
    m = model_from_config(cfg)
    assert m.num_params == pytest.approx(total, rel=0.03)
    if active is None:
        assert m.active_params == m.num_params
        return
    text = cfg.get("text_config", cfg)
    tables = text["vocab_size"] * text["hidden_size"] * 2
    assert m.active_params - tables <= active * 1.06 and active <= m.active_params * 1.02


def test_deepseek_v3_active_parameters_from_its_config():
    c = DEEPSEEK_V3
    m = model_from_config(c)
    expert = 3 * c["hidden_size"] * c["moe_intermediate_size"]
    moe_layers = c["num_hidden_layers"] - c["first_k_dense_replace"]
    idle = (c["n_routed_experts"] - c["num_experts_per_tok"]) * expert * moe_layers
    assert m.num_params - m.active_params == idle


def test_weights_as_shipped_count_their_format_and_scales():
    from engine.memory.footprint import weight_bytes

    ds = model_from_config(DEEPSEEK_V3)
    # fp8 everywhere but embeddings, router and norms (bf16); one fp32 scale per 128x128 tile
    tables = 2 * DEEPSEEK_V3["vocab_size"] * DEEPSEEK_V3["hidden_size"]
    assert weight_bytes(ds, "auto") == pytest.approx(ds.num_params - tables + 2 * tables, rel=0.002)
    assert weight_bytes(ds, "auto") > ds.num_params  # scales and bf16 tables on top of one byte each
    oss = model_from_config(GPT_OSS_120B)
    c = GPT_OSS_120B
    experts = 3 * c["hidden_size"] * c["intermediate_size"] * c["num_local_experts"] * c["num_hidden_layers"]
    expected = experts * (4 + 8 / 32) / 8 + (oss.num_params - experts) * 2  # MXFP4: 4 bits + an 8-bit scale per 32
    assert weight_bytes(oss, "auto") == pytest.approx(expected, rel=1e-9)
    assert weight_bytes(oss, "auto") / 1e9 == pytest.approx(65.2, abs=0.5)  # the repo's safetensors: ~65 GB
    assert weight_bytes("llama-3-8b", "auto") == weight_bytes("llama-3-8b", "bf16")  # bf16 checkpoints unchanged


def test_tensor_parallel_replicates_the_mla_latent_on_every_gpu():
    from engine.memory.parallel import kv_head_replicas, kv_heads_per_gpu

    m = model_from_config(DEEPSEEK_V3)
    for tp in (1, 2, 8, 16):
        assert kv_heads_per_gpu(m, tp) == 1 and kv_head_replicas(m, tp) == tp
        assert kv_bytes_per_token(m, "bf16", tp) == mla_bytes(DEEPSEEK_V3, 2)
    gqa = model_from_config(GPT_OSS_120B)
    assert kv_heads_per_gpu(gqa, 8) == 1 and kv_bytes_per_token(gqa, "bf16", 8) * 8 == kv_bytes_per_token(gqa)


def test_the_hybrid_pool_and_its_concurrency_line_follow_vllms_groups():
    from engine.memory import serving_footprint

    cfg = GPT_OSS_120B
    fp = serving_footprint(
        model_from_config(cfg), "h100-sxm", max_model_len=32768, max_num_batched_tokens=2048, block_size=16
    )
    page = 16 * full_layer_bytes(cfg)
    assert fp.pool_block_bytes == 18 * page  # the larger group: 18 layers
    assert fp.num_blocks == fp.kv_budget_bytes // (18 * page)
    per_request = cdiv(32768, 16) + cdiv(min(128 - 1 + 2048, 32768), 16) + 1  # full group + sliding group
    assert fp.vllm_concurrency() == pytest.approx(fp.num_blocks / per_request)
    assert fp.max_concurrency() == fp.num_blocks // per_request
    assert fp.kv_token_capacity == int(fp.num_blocks / per_request * 32768)
    # the all-full formula would hold about half the requests
    assert fp.vllm_concurrency() > 1.8 * fp.kv_budget_bytes / (32768 * 36 * full_layer_bytes(cfg))
    assert fp.max_context(fp.max_concurrency()) >= 32768


def test_a_hybrid_too_long_for_its_pool_gets_vllms_startup_error():
    from engine.memory import serving_footprint

    fp = serving_footprint(
        model_from_config(GPT_OSS_120B), "h100-sxm", max_model_len=131072, kv_cache_memory_bytes=1 << 30
    )
    assert fp.startup_error is not None and "max seq len (131072)" in fp.startup_error


@pytest.mark.parametrize(
    "key,board_gb,bandwidth_tb_s",
    [("b200", 180, 8.0), ("h20", 96, 4.0), ("mi300x", 192, 5.3), ("rtx-5090", 32, 1.792)],
)
def test_todays_gpus_carry_their_datasheet_numbers(key, board_gb, bandwidth_tb_s):
    from engine.memory import GPUS

    g = GPUS[key]
    assert g.memory_bytes / 1e9 == pytest.approx(board_gb, rel=0.08)  # nvidia-smi's MiB vs the datasheet's GB
    assert g.bandwidth_bytes_per_s == pytest.approx(bandwidth_tb_s * 1e12)
    assert g.total_bytes <= g.memory_bytes
    if g.cuda_memory_bytes is None:
        assert g.cuda_source == ""  # no public log found: the board's figure stands in
    else:
        assert "#" in g.cuda_source and "GiB" in g.cuda_source


def test_decode_reads_only_the_chosen_experts_and_the_kv_in_view():
    from engine.memory.roofline import kv_read_bytes, roofline

    c = DEEPSEEK_V3
    m = model_from_config(c)
    ops = {o.name: o for o in roofline(m, "h200", "decode", 1, 4096).ops}
    h, moe_layers = c["hidden_size"], c["num_hidden_layers"] - c["first_k_dense_replace"]
    per_token = 3 * h * (c["first_k_dense_replace"] * c["intermediate_size"])
    per_token += 3 * h * c["moe_intermediate_size"] * (c["n_shared_experts"] + c["num_experts_per_tok"]) * moe_layers
    assert ops["mlp"].flops == 2 * per_token
    # gpt-oss: the sliding layers read their 128-token window, the full layers the whole context
    g = GPT_OSS_120B
    per_layer = full_layer_bytes(g)
    assert kv_read_bytes(model_from_config(g), 4096) == 18 * per_layer * 4096 + 18 * per_layer * 128
    assert kv_read_bytes("llama-3-8b", 4096) == 4096 * 131072


def test_a_hybrids_startup_error_estimates_the_longest_length_that_fits():
    from engine.memory import serving_footprint

    cfg = GPT_OSS_120B
    fp = serving_footprint(
        model_from_config(cfg), "h100-sxm", max_model_len=131072, kv_cache_memory_bytes=1 << 30, block_size=16
    )
    usable = fp.num_blocks - 1
    # the longest n whose full-group blocks plus the sliding group's cap fit the usable blocks
    sliding = cdiv(min(128 - 1 + fp.max_num_batched_tokens, 131072), 16) + 1
    longest = (usable - sliding) * 16
    assert f"estimated maximum model length is {longest}." in fp.startup_error
