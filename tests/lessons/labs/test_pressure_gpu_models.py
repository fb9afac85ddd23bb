"""Lesson 6's GPU-scale sweep for today's models (issues 33, 34): a hybrid and an MLA model's simulated pool is the
memory model's num_blocks blocks (a hybrid's shared by its KV-cache groups, an MLA model's holding a latent per
token, vLLM's reported token capacity at this max_model_len), the requests it holds at once as vLLM allocates them
(engine.memory.kv_request_bytes) fit its budget, and a model whose weights do not fit the GPU at TP 1 is a ValueError
naming the model, its weights and the GPU."""

import json

import pytest

from engine.memory import kv_pool, kv_request_bytes, published
from engine.memory.catalog import GPUS, MODELS
from engine.memory.footprint import serving_footprint
from lessons.labs import own_config
from lessons.labs import pressure as lab

LEN = lab.GPU_MAX_MODEL_LEN


def small_mla():
    """DeepSeek-V3's published config with 8 layers and 8 routed experts: still MLA, small enough for one GPU."""
    cfg = published.deepseek_v3()
    cfg.update(num_hidden_layers=8, n_routed_experts=8, num_experts_per_tok=2, first_k_dense_replace=1)
    cfg.pop("quantization_config", None)
    return own_config.read_config(json.dumps(cfg)).spec


def check_capacity(model, gpu):
    sim = lab.gpu_sweep(gpu, model)
    spec = MODELS[model] if isinstance(model, str) else model
    fp = serving_footprint(
        spec, gpu, weight_dtype="bf16", max_model_len=LEN, gpu_memory_utilization=lab.GPU_UTILIZATION
    )
    assert sim.capacity_tokens == fp.num_blocks * fp.block_size > LEN  # the pool's slots
    per_request = kv_request_bytes(spec, LEN)
    # the pool holds num_blocks // (blocks per LEN-token request) whole requests, and their KV fits the budget
    fit = fp.num_blocks // kv_pool.blocks_per_request(spec, LEN)
    assert fit >= 1 and fit * per_request <= fp.kv_budget_bytes
    assert [p.rate for p in sim.points] == list(lab.GPU_RATES)
    assert spec.name in sim.summary() and GPUS[gpu].name in sim.summary()
    return sim, fp, per_request


def test_a_hybrid_model_sweeps_at_its_per_kind_capacity():
    spec = MODELS["gemma-3-27b"]
    assert len(set(spec.layer_kinds)) > 1  # sliding-window and full layers
    sim, fp, per_request = check_capacity("gemma-3-27b", "h100-sxm")
    # its windowed layers add blocks to each request beyond the full layers' per-token bytes
    assert per_request >= LEN * fp.kv_bytes_per_token
    assert sim.model_name == spec.name
    # seven groups (six sliding, one full) share the pool: the caption says slots, not tokens
    assert sim.kv_groups == 7 and "KV slots shared by 7 KV-cache groups" in sim.pool()


def test_an_mla_model_sweeps_at_its_latent_capacity():
    spec = small_mla()
    assert spec.attention_kind == "MLA"
    sim, fp, per_request = check_capacity(spec, "a100-80gb")
    assert per_request >= LEN * 8 * 576 * 2  # one latent of 576 values per token and layer, bf16
    assert sim.capacity_tokens == fp.kv_token_capacity and sim.kv_groups == 1  # LEN is whole blocks
    assert sim.pool() == f"{sim.capacity_tokens:,} KV tokens"


def test_a_model_that_does_not_fit_names_model_weights_and_gpu():
    with pytest.raises(ValueError) as err:
        lab.gpu_sweep("h100-sxm", "deepseek-v3")
    text = str(err.value)
    assert "DeepSeek-V3" in text and GPUS["h100-sxm"].name in text and "GB" in text
    assert "bigger GPU" in text and "smaller model" in text


def test_the_default_is_unchanged():
    assert lab.gpu_sweep(lab.GPU_DEFAULT) == lab.gpu_sweep(lab.GPU_DEFAULT, lab.GPU_MODEL)
