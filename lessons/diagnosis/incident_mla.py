"""The lesson-7 incident "Eight GPUs, one latent": DeepSeek-R1 on 8 × H20 at tensor parallel 8 does not start.

DeepSeek-R1 shares DeepSeek-V3's architecture and config.json (the catalog's ``deepseek-v3``): multi-head latent
attention caches one latent of ``kv_lora_rank + qk_rope_head_dim`` = 576 values per token and layer, 61 × 576 × 2
= 70,272 bytes per token in bf16. Tensor parallelism splits the weights over the 8 GPUs but not the latent: vLLM's
`ModelConfig.get_num_kv_heads` returns 1 for MLA whatever the TP size (vllm/config/model.py), so every GPU holds
every token's whole latent, and the pool holds what *one* GPU's KV memory holds. The team sized the cache as if
the 8 GPUs' KV memory added up. With the checkpoint's default max_model_len of 163,840 (its
max_position_embeddings) vLLM's start-up check refuses: one such request needs more KV than each GPU has. Fixes:
a --max-model-len the product really needs, or fp8 KV (the latent in half the bytes). Raising
gpu_memory_utilization to 0.95 is not enough. Numbers in the explanations come from the grader's memory model
(`replay.footprint_for`).
"""

from __future__ import annotations

import random
from dataclasses import replace

from engine.memory.catalog import MODELS
from engine.memory.units import GiB, KiB
from lessons.diagnosis.replay import footprint_for
from lessons.diagnosis.scenarios import Diagnosis, Scenario, ServeConfig, Traffic

NUM_GPUS = 8


def mla_tp(rng: random.Random | None, seed: int | None) -> Scenario:
    """DeepSeek-R1 on 8 × H20 at TP 8 with the default max_model_len: the MLA cache does not shrink with TP."""
    need = 32768 if rng is None else rng.choice((16384, 32768))
    rate = round(0.5 if rng is None else rng.uniform(0.4, 0.6), 2)
    cfg = ServeConfig("deepseek-v3", "h20", "deepseek-ai/DeepSeek-R1", tensor_parallel_size=NUM_GPUS)
    sc = Scenario(
        id="mla-tp",
        title="Eight GPUs, one latent",
        story=(
            f"A team moves its reasoning assistant to DeepSeek-R1 (DeepSeek-V3's architecture and config.json) on "
            f"one server of {NUM_GPUS} H20s (96 GB each), tensor parallel {NUM_GPUS}, the fp8 checkpoint as "
            "shipped. Their sizing sheet says: the weights split 8 ways leave about {kv:.1f} GiB of KV on each "
            "GPU, 8 GPUs make {total:.0f} GiB, so even the model's full {longest:,}-token context fits many times "
            "over. They start vLLM without --max-model-len and it exits during start-up. Their prompts and answers "
            f"need at most {need:,} tokens; about {rate:g} requests per second are waiting."
        ),
        config=cfg,
        traffic=Traffic("sharegpt", 200, rate, required_context=need, slo_p95_wait_s=10.0, seed=seed or 0),
        diagnoses=(),
        reference_fix={"max_model_len": need},
        hint="MLA caches one latent per token. Which GPUs hold it under tensor parallelism: one of them, or all?",
        max_gpus=NUM_GPUS,
        allowed_models=("deepseek-v3",),
        seed=seed,
    )
    kv = footprint_for(sc, cfg).kv_budget_bytes / GiB
    story = sc.story.format(kv=kv, total=NUM_GPUS * kv, longest=cfg.context_len)
    return replace(sc, story=story, diagnoses=_diagnoses(sc))


def _diagnoses(sc: Scenario) -> tuple[Diagnosis, ...]:
    """The incident's explanations, with the pool the grader computes on each GPU and at 0.95 utilization."""
    fp = footprint_for(sc, sc.config)
    more = footprint_for(sc, replace(sc.config, gpu_memory_utilization=0.95))
    longest = sc.config.context_len
    needed = longest * fp.kv_bytes_per_token
    per_token = fp.kv_bytes_per_token
    m = MODELS[sc.config.model]
    naive = 2 * m.num_layers * m.num_kv_heads * (m.hidden_size // m.num_heads) * 2  # reading num_key_value_heads
    return (
        Diagnosis(
            "latent-replicated",
            f"Each of the {NUM_GPUS} GPUs stores every token's whole MLA latent: the KV pool is one GPU's, not "
            f"{NUM_GPUS} GPUs' added up",
            True,
            f"The latent ({per_token:,} bytes = {per_token / KiB:.1f} KiB per token) has no heads to split, so vLLM "
            f"keeps all of it on every GPU (get_num_kv_heads returns 1 for MLA). Each GPU has "
            f"{fp.kv_budget_bytes / GiB:.2f} GiB for KV after {fp.weights_bytes / GiB:.1f} GiB of weights: the pool "
            f"holds {fp.kv_token_capacity:,} tokens, and one {longest:,}-token request needs "
            f"{needed / GiB:.2f} GiB on every GPU. The sheet's 8 x {fp.kv_budget_bytes / GiB:.1f} GiB never exists.",
        ),
        Diagnosis(
            "kv-heads",
            f"Each token caches K and V for the config's {m.num_kv_heads} KV heads (num_key_value_heads)",
            False,
            f"That reading gives {naive / KiB:,.0f} KiB per token, {naive / per_token:.0f}x too much: MLA caches "
            f"the 576-value latent ({per_token / KiB:.1f} KiB) and rebuilds the heads from it.",
        ),
        Diagnosis(
            "weights-too-big",
            "DeepSeek-R1's weights do not fit on 8 H20s",
            False,
            f"The fp8 weights take {fp.weights_bytes / GiB:.1f} GiB per GPU and load; vLLM stops later, at its "
            "check that one request of max_model_len fits the KV cache.",
        ),
        Diagnosis(
            "utilization",
            "gpu_memory_utilization is too low: 0.95 would give the KV cache enough room",
            False,
            f"0.95 leaves {more.kv_budget_bytes / GiB:.2f} GiB per GPU, still less than the {needed / GiB:.2f} GiB "
            f"one {longest:,}-token request needs.",
        ),
    )
