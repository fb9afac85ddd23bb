"""The lesson-6 incident "CUDA graphs eat the headroom": vLLM V1 profiles its CUDA graphs and the KV cache shrinks.

Since v0.20.0 vLLM estimates the memory of the CUDA graphs it will capture before it sizes the KV cache (vLLM PR
#38284 made the estimate of PR #30515 the default and raised the default gpu_memory_utilization from 0.9 to 0.92
to pay for it; the notice vLLM prints still says "default since v0.21.0"). A launch command that pins the old 0.9
keeps 0.9 of the card and now also pays for the graphs: the estimate comes off the KV budget (releases before
v0.34.0 logged it as "Estimated CUDA graph memory: X GiB total"; v0.34.0's notice gives it as a share of the card,
"--gpu-memory-utilization=0.9000 is equivalent to --gpu-memory-utilization=U without CUDA graph memory
profiling"). With an 8B model at 32K context on a 24 GB L4
that is the difference between a pool that holds one request and one that does not. The start-up log says how
to get the old layout back: "To maintain the same effective KV cache size as before, increase
--gpu-memory-utilization to U" (gpustack/runner#251); raising the utilization to the log's value (0.93 is the
page's nearest setting above it) keeps the graphs and restores the pool. Other fixes: --enforce-eager (no graphs,
slower decode), fewer --max-num-seqs (fewer graph sizes), --kv-cache-memory-bytes (size the KV explicitly,
within what the card really has), or fp8 KV. Numbers in the explanations come from the grader's memory model
(`replay.footprint_for`).
"""

from __future__ import annotations

import math
import random
from dataclasses import replace

from engine.memory.startup import PRE_V020_GPU_MEMORY_UTILIZATION
from engine.memory.units import GiB
from lessons.diagnosis.replay import footprint_for
from lessons.diagnosis.scenarios import FIX_PARAMS, Diagnosis, Scenario, ServeConfig, Traffic

SEVEN_B_CLASS = ("llama-2-7b", "llama-3-8b", "llama-3.1-8b", "mistral-7b", "qwen2.5-7b")


def suggested_utilization(scenario: Scenario) -> float:
    """The --gpu-memory-utilization the start-up log suggests to keep the old KV size (its 4 decimals, at most 1)."""
    fp, util = footprint_for(scenario, scenario.config), scenario.config.gpu_memory_utilization
    return min(round(util + fp.cuda_graph_bytes / fp.capacity_bytes, 4), 1.0)  # vLLM caps it at 1.0


def offered_utilization(suggested: float) -> float:
    """The page's nearest utilization at or above the log's suggestion (its slider offers FIX_PARAMS' values)."""
    above = [u for u in FIX_PARAMS["gpu_memory_utilization"] if u >= suggested]
    return min(above) if above else 1.0


def cuda_graphs(rng: random.Random | None, seed: int | None) -> Scenario:
    """Llama-3.1-8B at 32K context on one L4: the CUDA graph estimate leaves less KV than one request needs."""
    rate = round(1.0 if rng is None else rng.uniform(0.8, 1.2), 2)
    cfg = ServeConfig(
        "llama-3.1-8b",
        "l4",
        "meta-llama/Llama-3.1-8B-Instruct",
        max_model_len=32768,
        gpu_memory_utilization=PRE_V020_GPU_MEMORY_UTILIZATION,
    )
    sc = Scenario(
        id="cuda-graphs",
        title="The upgrade that ate the headroom",
        story=(
            "A contract-review assistant serves Llama-3.1-8B-Instruct with vLLM on one L4 (24 GB) at "
            "--max-model-len 32768: contracts arrive whole. Its launch command pins --gpu-memory-utilization "
            "0.9, the default of the vLLM release it was written for. After an upgrade to a current vLLM the "
            f"unchanged command no longer starts. Nothing else changed; about {rate:g} requests per second are "
            "waiting."
        ),
        config=cfg,
        traffic=Traffic("sharegpt", 200, rate, required_context=32768, slo_p95_wait_s=15.0, seed=seed or 0),
        diagnoses=(),
        reference_fix={},
        hint="Find the line that was not in the old log: what does it suggest, and what does it cost the KV cache?",
        max_gpus=1,
        allowed_models=("llama-3.1-8b",),
        seed=seed,
    )
    fix = {"gpu_memory_utilization": offered_utilization(suggested_utilization(sc))}
    return replace(sc, diagnoses=_diagnoses(sc), reference_fix=fix)


def _diagnoses(sc: Scenario) -> tuple[Diagnosis, ...]:
    fp, need = footprint_for(sc, sc.config), sc.traffic.required_context
    eager = footprint_for(sc, replace(sc.config, enforce_eager=True))
    suggested = suggested_utilization(sc)
    restored = footprint_for(sc, replace(sc.config, gpu_memory_utilization=offered_utilization(suggested)))
    graphs_mib = math.ceil(fp.cuda_graph_bytes / 2**20)
    return (
        Diagnosis(
            "cuda-graphs",
            "vLLM now counts its CUDA graphs at start-up, and they come off the KV cache",
            True,
            f"The estimate ({fp.cuda_graph_bytes / GiB:.2f} GiB, about {graphs_mib} MiB, for "
            f"{fp.model.num_layers} layers and every captured batch size) leaves "
            f"{max(fp.kv_budget_bytes, 0) / GiB:.2f} GiB = {fp.kv_token_capacity:,} tokens of KV, less than one "
            f"{need:,}-token request ({need * fp.kv_bytes_per_token / GiB:.2f} GiB). The old release captured the "
            f"same graphs after sizing the KV cache, inside the {1 - sc.config.gpu_memory_utilization:.0%} it "
            f"left free, and gave the KV cache {eager.kv_budget_bytes / GiB:.2f} GiB. The log suggests "
            f"--gpu-memory-utilization {suggested:.4f}, which restores that pool with the graphs kept; "
            f"{offered_utilization(suggested):g}, the nearest setting here, gives "
            f"{restored.kv_budget_bytes / GiB:.2f} GiB = {restored.kv_token_capacity:,} tokens. --enforce-eager "
            f"also restores it, by dropping the graphs (slower decode).",
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
            f"With chunked prefill on (the default), V1 profiles max_num_batched_tokens ({fp.max_num_batched_tokens}) "
            f"tokens whatever max_model_len is: {fp.activation_bytes / GiB:.2f} GiB of activations. Only "
            f"--no-enable-chunked-prefill would raise the budget to the 32K max length.",
        ),
        Diagnosis(
            "memory-leak",
            "The new vLLM version leaks memory",
            False,
            "It fails at start-up, before any request, in vLLM's own capacity check.",
        ),
    )
