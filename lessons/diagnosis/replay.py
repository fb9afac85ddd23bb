"""Running an incident: apply the fixes, redo vLLM's start-up memory arithmetic, replay the traffic, list what fails.

`run_outcome` applies a fix set to the incident's deployment, computes its memory (`engine.memory`), replays
the incident's trace through the simulator over the real block allocator (`lessons.sim.simulate`) and lists
every requirement still unmet; `symptoms` is what the on-call engineer sees of the deployment as it is.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from engine.memory.catalog import GPUS, MODELS
from engine.memory.footprint import ServingFootprint, serving_footprint
from engine.memory.roofline import StepTimeModel
from engine.memory.startup import cuda_graph_bytes, default_max_num_batched_tokens
from engine.memory.units import GiB
from lessons.diagnosis.logs import incident_logs
from lessons.diagnosis.scenarios import (
    AUTO_MAX_MODEL_LEN,
    MemoryPart,
    Outcome,
    Scenario,
    ServeConfig,
    Symptoms,
    Traffic,
    apply_fixes,
)
from lessons.sim.group_blocks import sim_pool
from lessons.sim.loop import SimConfig
from lessons.sim.metrics import SimSummary
from lessons.sim.simulate import simulate
from lessons.sim.traces import generate_trace


def footprint_for(scenario: Scenario, cfg: ServeConfig) -> ServingFootprint:
    """vLLM V1's start-up arithmetic for the config, CUDA graphs included (the static server: same bytes, no graphs)."""
    total = GPUS[cfg.gpu].total_bytes  # what CUDA reports: vLLM sizes from it (engine/memory/catalog.py)
    util, static = cfg.gpu_memory_utilization, cfg.policy == "static"
    if static:  # no utilization knob: it grows into whatever memory no other process holds
        util = (total - scenario.other_process_bytes) / total
    tokens = cfg.max_num_batched_tokens or default_max_num_batched_tokens(GPUS[cfg.gpu])
    try:
        graphs = (
            0
            if static
            else cuda_graph_bytes(MODELS[cfg.model], cfg.max_num_seqs, tokens, cfg.enforce_eager, GPUS[cfg.gpu])
        )
        return serving_footprint(
            cfg.model,
            cfg.gpu,
            weight_dtype="fp8" if cfg.quantization == "fp8" else "auto",  # "auto": the checkpoint as shipped
            kv_dtype="fp8" if cfg.kv_cache_dtype == "fp8" else "bf16",
            gpu_memory_utilization=util,
            max_model_len=cfg.context_len,
            max_num_batched_tokens=tokens,
            block_size=cfg.block_size,
            tensor_parallel=cfg.tensor_parallel_size,
            other_process_bytes=0 if static else scenario.other_process_bytes,
            cuda_graph_bytes=graphs,
            kv_cache_memory_bytes=cfg.kv_cache_memory_bytes or None,
            total_bytes=total,
        )
    except ValueError as e:  # e.g. tensor parallel degree that does not divide the heads
        raise ValueError(f"configuration rejected: {e}") from None


def _requirement_problems(scenario: Scenario, cfg: ServeConfig) -> list[str]:
    """What the team's constraints forbid before anything runs: GPUs, accepted models, promised context."""
    problems: list[str] = []
    if cfg.tensor_parallel_size > scenario.max_gpus:
        problems.append(
            f"tensor_parallel_size={cfg.tensor_parallel_size} needs {cfg.tensor_parallel_size} GPUs; "
            f"this team has {scenario.max_gpus}"
        )
    if scenario.allowed_models and cfg.model not in scenario.allowed_models:
        problems.append(
            f"{MODELS[cfg.model].name} is not an accepted replacement; the product team accepts "
            f"{', '.join(MODELS[m].name for m in scenario.allowed_models)}"
        )
    if cfg.context_len > cfg.checkpoint_max_context:
        problems.append(
            f"max_model_len={cfg.context_len} is above the {cfg.checkpoint_max_context} tokens {cfg.hf_repo}'s "
            f"config.json allows (max_position_embeddings): vLLM refuses to start"
        )
    need = scenario.traffic.required_context
    if cfg.context_len < need:
        problems.append(
            f"max_model_len={cfg.context_len} is below the {need} tokens the product "
            f"promises: long conversations would be cut off"
        )
    return problems


def _startup_error(cfg: ServeConfig, fp: ServingFootprint) -> str | None:
    """Why the server does not come up, or None: vLLM's own checks, or a static server that cannot even load."""
    if cfg.policy == "static" and fp.kv_budget_bytes <= 0:
        return (
            f"torch.OutOfMemoryError: CUDA out of memory while loading: weights and activations need "
            f"{(fp.weights_bytes + fp.activation_bytes + fp.overhead_bytes) / GiB:.2f} GiB"
        )
    if cfg.policy != "paged":
        return None
    used = fp.weights_bytes + fp.activation_bytes + fp.overhead_bytes + fp.cuda_graph_bytes + max(fp.kv_budget_bytes, 0)
    if (
        fp.startup_error is None and used > fp.capacity_bytes - fp.other_process_bytes
    ):  # --kv-cache-memory-bytes too big
        return (
            f"torch.OutOfMemoryError: CUDA out of memory while capturing CUDA graphs: weights, activations, "
            f"non-torch memory, graphs and the {fp.kv_budget_bytes / GiB:.2f} GiB KV cache need {used / GiB:.2f} GiB "
            f"of the {(fp.capacity_bytes - fp.other_process_bytes) / GiB:.2f} GiB free"
        )
    return fp.startup_error


def _service_problems(s: SimSummary, tr: Traffic) -> list[str]:
    """What went wrong while serving the replayed traffic: crashes, rejections, a missed queueing target."""
    problems: list[str] = []
    if s.num_oom:
        problems.append(
            f"{s.num_oom} of {tr.num_requests} requests crashed with CUDA out of memory (peak "
            f"{s.peak_concurrency} sequences held KV at once)"
        )
    if s.num_rejected:
        problems.append(f"{s.num_rejected} requests were rejected: they do not fit max_model_len or the KV cache")
    if s.p95_wait_s > tr.slo_p95_wait_s:
        problems.append(
            f"p95 wait for a slot is {s.p95_wait_s:.1f} s, above the {tr.slo_p95_wait_s:.0f} s target: "
            f"at most {s.peak_concurrency} sequences ran at once for {tr.request_rate:.1f} requests/s"
        )
    return problems


def auto_max_model_len(scenario: Scenario, cfg: ServeConfig) -> int:
    """The max_model_len vLLM's --max-model-len auto settles on: the checkpoint's context if its KV fits the pool
    (less the null block), else the longest that does (vLLM binary-searches it, `_auto_fit_max_model_len`).

    When no length fits, or the server fails for another reason (free memory), the checkpoint's context is kept
    and the start-up error stands.
    """
    longest = cfg.checkpoint_max_context

    def starts(length: int) -> bool:
        return _startup_error(cfg, footprint_for(scenario, replace(cfg, max_model_len=length))) is None

    if starts(longest) or not starts(1):
        return longest
    low, high = 1, longest  # starts(low), not starts(high)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if starts(mid) else (low, mid)
    return low


def run_outcome(scenario: Scenario, fixes: dict[str, Any] | None = None) -> Outcome:
    """Apply fixes, compute memory, replay the scenario's trace, and list every unmet requirement."""
    cfg = apply_fixes(scenario.config, fixes or {})
    if cfg.max_model_len == AUTO_MAX_MODEL_LEN:
        cfg = replace(cfg, max_model_len=auto_max_model_len(scenario, cfg))
    tr = scenario.traffic
    problems = _requirement_problems(scenario, cfg)
    fp = footprint_for(scenario, cfg)
    error = _startup_error(cfg, fp)
    if error:
        return Outcome(cfg, fp, error, None, (f"the server does not start: {error}", *problems))
    trace = generate_trace(tr.dataset, tr.num_requests, tr.request_rate, seed=tr.seed, max_len=tr.required_context)
    capacity, groups = sim_pool(fp, cfg.policy)  # a hybrid's paged server holds blocks per KV-cache group
    sim = SimConfig(
        cfg.policy,
        capacity,
        block_size=cfg.block_size,
        max_model_len=cfg.context_len,
        max_num_seqs=cfg.max_num_seqs,
        admission="unchecked" if cfg.policy == "static" else "fcfs",
        step_time=StepTimeModel.for_model(cfg.model, cfg.gpu, "bf16", fp.kv_dtype, cfg.tensor_parallel_size),
        groups=groups,
    )
    result = simulate(trace, sim)
    return Outcome(cfg, fp, None, result, tuple(problems + _service_problems(result.summary, tr)))


def _memory_parts(scenario: Scenario, before: Outcome) -> tuple[MemoryPart, ...]:
    """The GPU's memory by part as deployed; a static server shows what its sessions had reserved at the peak."""
    rows = before.footprint.breakdown()
    if before.config.policy != "static" or not before.summary:
        return tuple(MemoryPart(str(r["part"]), float(r["bytes"])) for r in rows)
    fp, peak = before.footprint, before.summary.peak_concurrency
    held = min(fp.kv_budget_bytes, peak * before.config.context_len * fp.kv_bytes_per_token)
    parts = [(r["part"], r["bytes"]) for r in rows[:3]]
    parts += [
        (f"KV reserved by {peak} sessions ({before.config.context_len} tokens each)", held),
        ("other processes", scenario.other_process_bytes),
    ]
    parts.append(("free", fp.capacity_bytes - sum(b for _, b in parts)))
    return tuple(MemoryPart(str(p), float(b)) for p, b in parts)


def symptoms(scenario: Scenario) -> Symptoms:
    """Memory breakdown, log lines and traffic numbers of the incident as deployed (no fixes)."""
    before = run_outcome(scenario)
    tr = scenario.traffic
    traffic: dict[str, float | int | str] = {
        "requests": tr.num_requests,
        "requests_per_s": tr.request_rate,
        "workload": tr.dataset,
        "required_context": tr.required_context,
        "p95_wait_target_s": tr.slo_p95_wait_s,
    }
    if before.summary:
        s = before.summary
        traffic.update(
            peak_concurrency=s.peak_concurrency,
            p95_wait_s=round(s.p95_wait_s, 2),
            tokens_per_s=round(s.tokens_per_s, 1),
            oom_events=s.num_oom,
            preemptions=s.num_preemptions,
        )
    return Symptoms(_memory_parts(scenario, before), incident_logs(scenario, before), traffic)
