"""Grading a learner's answer to an incident: their diagnosis against the right ones, and their fixes re-run.

`grade` checks the picked diagnoses, re-runs the incident with the fixes (lessons.diagnosis.replay) and
explains with numbers why it is or is not resolved and what the fix costs (context, accuracy risk, GPUs,
throughput). No Streamlit here.
"""

from __future__ import annotations

from typing import Any

from engine.memory.catalog import MODELS
from engine.memory.parallel import kv_head_replicas, kv_heads_per_gpu
from engine.memory.specs import ModelSpec
from engine.memory.units import GiB
from lessons.diagnosis.replay import run_outcome
from lessons.diagnosis.scenarios import AUTO_MAX_MODEL_LEN, Grade, Outcome, Scenario, vllm_command


def tp_kv_note(model: ModelSpec, before_tp: int, after_tp: int) -> str:
    """What a wider tensor-parallel split does to each GPU's KV per token: thins it, or no longer (copied heads)."""
    a, b = kv_heads_per_gpu(model, before_tp), kv_heads_per_gpu(model, after_tp)  # both TP sizes checked
    if model.is_mla:
        return (
            f"{model.name} uses MLA: it caches one latent per token and layer, and every GPU holds all of it, so "
            f"at TP {after_tp} KV per token per GPU stays the same and only the weight memory freed grows the pool"
        )
    if b < a:
        return (
            f"{model.name}'s {model.num_kv_heads} KV heads split {a} -> {b} per GPU, so each GPU stores {a // b}x "
            "less KV per token"
        )
    return (
        f"{model.name} has only {model.num_kv_heads} KV heads, so at TP {after_tp} each GPU still keeps {b} "
        f"(each head copied on {kv_head_replicas(model, after_tp)} GPUs): KV per token per GPU stays the same and "
        "only the weight memory freed grows the pool"
    )


def _costs(before: Outcome, after: Outcome) -> list[str]:
    """What the fix gives up, in numbers."""
    b, a = before.config, after.config
    costs: list[str] = []
    if a.context_len < b.context_len:
        costs.append(f"max context shrinks from {b.context_len} to {a.context_len} tokens")
    if a.kv_cache_dtype == "fp8" and b.kv_cache_dtype != "fp8":
        costs.append(
            f"fp8 KV halves bytes per token ({before.footprint.kv_bytes_per_token // 1024} -> "
            f"{after.footprint.kv_bytes_per_token // 1024} KiB) at a small accuracy risk: re-run evals"
        )
    if a.enforce_eager and not b.enforce_eager:
        costs.append(
            f"--enforce-eager: no CUDA graphs ({before.footprint.cuda_graph_bytes / GiB:.2f} GiB back for "
            f"KV), but each decode step launches its kernels one by one: slower at small batches"
        )
    if a.quantization == "fp8" and b.quantization != "fp8":
        costs.append(
            f"fp8 weights ({before.footprint.weights_bytes / GiB:.1f} -> "
            f"{after.footprint.weights_bytes / GiB:.1f} GiB) at an accuracy risk: re-run evals"
        )
    if a.max_num_batched_tokens and a.max_num_batched_tokens < (b.max_num_batched_tokens or 2048):
        costs.append(f"--max-num-batched-tokens {a.max_num_batched_tokens}: long prompts prefill in more chunks")
    if a.kv_cache_memory_bytes and not b.kv_cache_memory_bytes:
        costs.append("--kv-cache-memory-bytes bypasses vLLM's own sizing: keep it within what the card really has")
    if a.tensor_parallel_size > b.tensor_parallel_size:
        costs.append(
            f"{a.tensor_parallel_size} GPUs instead of {b.tensor_parallel_size}: "
            f"{a.tensor_parallel_size // b.tensor_parallel_size}x the hardware, plus all-reduces per layer and "
            f"NCCL buffers on every GPU; {tp_kv_note(MODELS[a.model], b.tensor_parallel_size, a.tensor_parallel_size)}"
        )
    if a.model != b.model:
        costs.append(
            f"serves {MODELS[a.model].name} instead of {MODELS[b.model].name} (KV "
            f"{before.footprint.kv_bytes_per_token // 1024} -> {after.footprint.kv_bytes_per_token // 1024}"
            f" KiB/token): answers change, re-run evals"
        )
    if a.max_num_seqs < b.max_num_seqs:
        costs.append(f"at most {a.max_num_seqs} sequences at once (was {b.max_num_seqs})")
    if a.block_size != b.block_size and a.policy == "paged":
        costs.append(
            f"block size {a.block_size}: up to {a.block_size - 1} idle slots per sequence, "
            f"block tables {b.block_size / a.block_size:.1f}x as long"
        )
    if a.gpu_memory_utilization < b.gpu_memory_utilization and a.policy == "paged":
        lost = (b.gpu_memory_utilization - a.gpu_memory_utilization) * after.footprint.capacity_bytes / GiB
        costs.append(
            f"gpu_memory_utilization {b.gpu_memory_utilization:g} -> {a.gpu_memory_utilization:g}: "
            f"{lost:.1f} GiB less for vLLM, all of it KV cache ({after.footprint.num_blocks} blocks left)"
        )
    if after.footprint.num_blocks < before.footprint.num_blocks and before.startup_error is None:
        costs.append(f"KV pool shrinks from {before.footprint.num_blocks} to {after.footprint.num_blocks} blocks")
    if before.summary and after.summary:
        costs.append(
            f"throughput {before.summary.tokens_per_s:.0f} -> {after.summary.tokens_per_s:.0f} tokens/s; "
            f"mean latency {before.summary.mean_latency_s:.1f} -> {after.summary.mean_latency_s:.1f} s"
        )
    return costs


def _auto_note(fixes: dict[str, Any], after: Outcome) -> list[str]:
    """What --max-model-len auto settled on (vLLM logs it at start-up and warns below 8,192 tokens)."""
    if fixes.get("max_model_len") != AUTO_MAX_MODEL_LEN:
        return []
    n = after.config.context_len
    return [
        f"--max-model-len auto settled on {n:,} tokens at start-up: a longer request is rejected, and the length "
        f"moves whenever the memory left for the KV cache does"
    ]


def grade(scenario: Scenario, diagnosis_ids: list[str] | tuple[str, ...], fixes: dict[str, Any]) -> Grade:
    """Grade a diagnosis and re-run the incident with the fixes; explain, with numbers, the verdict and cost."""
    by_id = {d.id: d for d in scenario.diagnoses}
    unknown = [d for d in diagnosis_ids if d not in by_id]
    if unknown:
        raise ValueError(f"unknown diagnosis ids {unknown}; choose among {list(by_id)}")
    right = {d.id for d in scenario.diagnoses if d.correct}
    chosen = set(diagnosis_ids)
    feedback = [f"{'Right' if by_id[i].correct else 'Not this'}: {by_id[i].explanation}" for i in diagnosis_ids]
    feedback += [f"Missed: {by_id[i].explanation}" for i in sorted(right - chosen)]
    before, after = run_outcome(scenario), run_outcome(scenario, fixes)
    fp = after.footprint
    need = scenario.traffic.required_context
    room = fp.max_concurrency(need)
    lines = [
        f"{MODELS[after.config.model].name} on {fp.gpu.name} (x{after.config.tensor_parallel_size}): weights "
        f"{fp.weights_bytes / GiB:.2f} GiB, KV {fp.kv_bytes_per_token / 1024:.0f} KiB/token, KV pool "
        f"{max(fp.kv_budget_bytes, 0) / GiB:.2f} GiB = {max(fp.kv_budget_bytes, 0) // fp.kv_bytes_per_token} "
        f"tokens: room for {room} full-length ({need}-token) sequence{'s' * (room != 1)} at once"
    ]
    if after.summary:
        s = after.summary
        lines.append(
            f"Replayed {scenario.traffic.num_requests} requests: {s.num_finished} finished, {s.num_oom} OOM, "
            f"peak {s.peak_concurrency} running, p95 wait {s.p95_wait_s:.1f} s, KV waste "
            f"{100 * s.avg_waste:.1f}%, {s.tokens_per_s:.0f} tokens/s"
        )
    lines += [f"Still wrong: {p}" for p in after.problems] or ["Resolved: every requirement is met."]
    return Grade(
        after.resolved,
        bool(chosen) and chosen <= right,
        feedback,
        lines,
        _auto_note(fixes, after) + _costs(before, after),
        vllm_command(scenario, fixes),
        before,
        after,
        dict(fixes),
    )
