"""The lesson-6 incident "CUDA graphs eat the headroom": vLLM V1 profiles its CUDA graphs and the KV cache shrinks.

Since CUDA graph memory profiling became vLLM's default (its log: "CUDA graph memory profiling is enabled
(default since v0.21.0)", gpustack/runner#251), the graphs' estimate ("Estimated CUDA graph memory: X GiB total")
comes off the KV budget at start-up. On a 24 GB card with an 8B model that is the difference between a 32K
context that fits and one that does not. Fixes: --enforce-eager (no graphs), fewer --max-num-seqs (fewer graph
sizes), a higher --gpu-memory-utilization (the log itself suggests the value), --kv-cache-memory-bytes (size the
KV explicitly, within what the card really has), or fp8 KV. Numbers in the explanations come from the grader's
memory model (`replay.footprint_for`).
"""

from __future__ import annotations

import random
from dataclasses import replace

from engine.memory.units import GiB
from lessons.diagnosis.replay import footprint_for
from lessons.diagnosis.scenarios import Diagnosis, Scenario, ServeConfig, Traffic

SEVEN_B_CLASS = ("llama-2-7b", "llama-3-8b", "llama-3.1-8b", "mistral-7b", "qwen2.5-7b")


def cuda_graphs(rng: random.Random | None, seed: int | None) -> Scenario:
    """Llama-3.1-8B at 32K context on one L4: the CUDA graph estimate leaves less KV than one request needs."""
    rate = round(1.0 if rng is None else rng.uniform(0.8, 1.2), 2)
    cfg = ServeConfig("llama-3.1-8b", "l4", "meta-llama/Llama-3.1-8B-Instruct", max_model_len=32768)
    sc = Scenario(
        id="cuda-graphs",
        title="The upgrade that ate the headroom",
        story=(
            "A contract-review assistant serves Llama-3.1-8B-Instruct with vLLM on one L4 (24 GB) at "
            "--max-model-len 32768: contracts arrive whole. After a routine vLLM upgrade the unchanged launch "
            f"command no longer starts. Nothing else changed; about {rate:g} requests per second are waiting."
        ),
        config=cfg,
        traffic=Traffic("sharegpt", 200, rate, required_context=32768, slo_p95_wait_s=15.0, seed=seed or 0),
        diagnoses=(),
        reference_fix={"enforce_eager": True},
        hint="Find the line that was not in the old log, and subtract its GiB from the KV cache.",
        max_gpus=1,
        allowed_models=("llama-3.1-8b",),
        seed=seed,
    )
    return replace(sc, diagnoses=_diagnoses(sc))


def _diagnoses(sc: Scenario) -> tuple[Diagnosis, ...]:
    fp, need = footprint_for(sc, sc.config), sc.traffic.required_context
    eager = footprint_for(sc, replace(sc.config, enforce_eager=True))
    return (
        Diagnosis(
            "cuda-graphs",
            "vLLM now counts its CUDA graphs at start-up, and they come off the KV cache",
            True,
            f"The estimate ({fp.cuda_graph_bytes / GiB:.2f} GiB for {fp.model.num_layers} layers and every "
            f"captured batch size) leaves {max(fp.kv_budget_bytes, 0) / GiB:.2f} GiB = {fp.kv_token_capacity:,} "
            f"tokens of KV, less than one {need:,}-token request ({need * fp.kv_bytes_per_token / GiB:.2f} GiB). "
            f"Without graphs (--enforce-eager) the pool is {eager.kv_budget_bytes / GiB:.2f} GiB = "
            f"{eager.kv_token_capacity:,} tokens.",
        ),
        Diagnosis(
            "weights-too-big",
            "Llama-3.1-8B does not fit an L4",
            False,
            f"The weights ({fp.weights_bytes / GiB:.2f} GiB) load; the log goes on to size the KV cache.",
        ),
        Diagnosis(
            "activation-peak",
            "The 32K max length raises the profiled activation peak",
            False,
            f"V1 profiles max_num_batched_tokens ({fp.max_num_batched_tokens}) tokens whatever max_model_len "
            f"is: {fp.activation_bytes / GiB:.2f} GiB of activations.",
        ),
        Diagnosis(
            "memory-leak",
            "The new vLLM version leaks memory",
            False,
            "It fails at start-up, before any request, in vLLM's own capacity check.",
        ),
    )
