"""The log lines an incident's server prints: PyTorch's OOM message, or vLLM V1's start-up and metrics lines.

The formats follow PyTorch's `torch.OutOfMemoryError` text and vLLM v0.34.0's start-up lines in the order it
prints them: "Model loading took X GiB memory and N seconds" (vllm/v1/worker/gpu/model_runner.py); "Available KV
cache memory" and the CUDA graph profiling notice, which still says "default since v0.21.0" although the default
changed in v0.20.0 (vllm/v1/worker/gpu_worker.py); "GPU KV cache size: N tokens, Maximum concurrency for L tokens
per request" (vllm/v1/core/kv_cache_utils.py); and its periodic metrics line ("Avg prompt throughput", "Avg
generation throughput", "Running", "Waiting", "Preemptions" when there were any, "GPU KV cache usage", "Prefix
cache hit rate"; vllm/v1/metrics/loggers.py). Older releases also printed "Profiling CUDA graph memory" and
"Estimated CUDA graph memory" lines (gpustack/runner#251, LMCache/LMCache#3430); v0.34.0 does not. Every number
comes from the memory model and the simulator's outcome, not from a template. The loading time is the weights read
at `LOAD_BYTES_PER_S`, an assumption (a local NVMe copy of the checkpoint); nothing in the incident depends on it.
"""

from __future__ import annotations

from engine.memory.catalog import MODELS
from engine.memory.startup import format_gib
from engine.memory.units import GiB
from lessons.diagnosis.scenarios import Outcome, Scenario

LOAD_BYTES_PER_S = 2 * GiB  # the checkpoint read from a local NVMe drive: an assumption, for the loading line only
LOG_STATS_INTERVAL_S = 10.0  # vLLM's VLLM_LOG_STATS_INTERVAL default (vllm/envs.py): the metrics line's window


def _static_logs(scenario: Scenario, outcome: Outcome) -> list[str]:
    """A home-grown server on transformers' static cache: the model loads, then one layer's cache tensor OOMs.

    transformers' StaticCache allocates each layer's K and V as its own [batch, kv_heads, max_len, head_dim]
    tensor, so the failing allocation is one of those (16 MiB for Llama-3-8B at 8192 tokens), not a session's
    whole 1 GiB; the total is the capacity PyTorch reports, below nvidia-smi's figure.
    """
    fp, cfg = outcome.footprint, outcome.config
    m = MODELS[cfg.model]
    total = fp.capacity_bytes / GiB
    lines = [f"INFO  model loaded: {m.name}, weights {fp.weights_bytes / GiB:.2f} GiB"]
    s = outcome.summary
    if s and s.num_oom:
        # the next session allocates its 2 * layers tensors one by one until less than one tensor's worth is free
        tensor = cfg.context_len * m.num_kv_heads * m.head_dim * 2
        held = (
            fp.weights_bytes + fp.activation_bytes + fp.overhead_bytes + s.peak_concurrency * tensor * 2 * m.num_layers
        )
        free = max(fp.capacity_bytes - held, 0) % tensor
        in_use, torch_gib = total - free / GiB, (fp.capacity_bytes - free - fp.overhead_bytes) / GiB
        lines += [
            f"INFO  active sessions: {s.peak_concurrency}",
            f"ERROR torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {tensor / 2**20:.2f} MiB. GPU 0 "
            f"has a total capacity of {total:.2f} GiB of which {free / 2**20:.2f} MiB is free. "
            f"Including non-PyTorch memory, this process has {in_use:.2f} GiB memory in use. Of the allocated "
            f"memory {torch_gib:.2f} GiB is allocated by PyTorch. If reserved but unallocated memory is large "
            f"try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.",
            f"ERROR {s.num_oom} of {scenario.traffic.num_requests} chat requests failed (HTTP 500)",
        ]
    return lines


def _serving_logs(outcome: Outcome) -> list[str]:
    """vLLM V1 while serving: its periodic metrics lines, one per 10 s interval, at the longest queue and (when
    there were any) at the most preemptions, in time order.

    Each line counts its interval as vLLM's `LoggingStatLogger` does between two lines: prompt tokens are the
    prefills admitted in it (a request preempted by recompute prefills its prompt and generated tokens again),
    generation tokens the decode steps' tokens, preemptions the requests preempted; running, waiting and the KV
    cache usage are the scheduler's state at the interval's last step.
    """
    if not (outcome.result and outcome.summary):
        return []
    result = outcome.result
    intervals: dict[int, dict[str, float]] = {}
    for r in result.to_rows():
        k = int((r["time_s"] + r["step_s"]) // LOG_STATS_INTERVAL_S)
        acc = intervals.setdefault(k, {"generated": 0.0, "prompt": 0.0, "preempted": 0.0})
        acc["generated"] += r["generated"]
        acc.update(running=r["running"], waiting=r["waiting"], free=r["free"])
    for e in result.events:
        acc = intervals.get(int(e.time_s // LOG_STATS_INTERVAL_S))
        if acc is None:
            continue
        if e.kind == "admit":
            acc["prompt"] += int(e.detail.split()[0])
        elif e.kind == "preempt":
            acc["preempted"] += 1
    shown = {max(intervals, key=lambda k: intervals[k]["waiting"])}
    busiest = max(intervals, key=lambda k: intervals[k]["preempted"])
    if intervals[busiest]["preempted"]:
        shown.add(busiest)
    return [_metrics_line(intervals[k], result.capacity_tokens) for k in sorted(shown)]


def _metrics_line(acc: dict[str, float], capacity_tokens: int) -> str:
    """One periodic metrics line in vllm/v1/metrics/loggers.py's format ("Preemptions" only when there were any)."""
    parts = [
        f"Avg prompt throughput: {acc['prompt'] / LOG_STATS_INTERVAL_S:.1f} tokens/s",
        f"Avg generation throughput: {acc['generated'] / LOG_STATS_INTERVAL_S:.1f} tokens/s",
        f"Running: {int(acc['running'])} reqs",
        f"Waiting: {int(acc['waiting'])} reqs",
    ]
    if acc["preempted"]:
        parts.append(f"Preemptions: {int(acc['preempted'])}")
    used = 100 * (1 - acc["free"] / capacity_tokens)
    parts += [f"GPU KV cache usage: {used:.1f}%", "Prefix cache hit rate: 0.0%"]
    return "INFO  [loggers.py] Engine 000: " + ", ".join(parts)


def incident_logs(scenario: Scenario, outcome: Outcome) -> list[str]:
    """Log lines a server would print for this outcome (PyTorch OOM or vLLM start-up / metrics lines)."""
    fp, cfg = outcome.footprint, outcome.config
    if cfg.policy == "static":
        return _static_logs(scenario, outcome)
    lines: list[str] = []
    if scenario.other_process_bytes:
        lines.append(
            f"nvidia-smi: embed_server.py {scenario.other_process_bytes // 2**20} MiB; "
            f"total {fp.gpu.memory_bytes // 2**20} MiB"  # nvidia-smi's figure; vLLM's errors show CUDA's total
        )
    if outcome.startup_error and "Free memory" in outcome.startup_error:
        return [*lines, f"ERROR {outcome.startup_error}"]
    lines.append(
        f"INFO  [model_runner.py] Model loading took {format_gib(fp.weights_bytes)} GiB memory and "
        f"{fp.weights_bytes / LOAD_BYTES_PER_S:.6f} seconds"
    )
    if fp.num_blocks > 0:
        lines.append(f"INFO  [gpu_worker.py] Available KV cache memory: {format_gib(max(fp.kv_budget_bytes, 0))} GiB")
    if fp.cuda_graph_bytes:
        share, util = fp.cuda_graph_bytes / fp.capacity_bytes, cfg.gpu_memory_utilization
        equivalent, suggested = round(util - share, 4), min(round(util + share, 4), 1.0)  # as gpu_worker.py rounds
        lines.append(
            f"INFO  [gpu_worker.py] CUDA graph memory profiling is enabled (default since v0.21.0). The current "
            f"--gpu-memory-utilization={util:.4f} is equivalent to --gpu-memory-utilization={equivalent:.4f} without "
            f"CUDA graph memory profiling. To maintain the same effective KV cache size as before, increase "
            f"--gpu-memory-utilization to {suggested:.4f}. To disable, set VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0."
        )
    if fp.num_blocks > 0 and not outcome.startup_error:  # V1 checks max_model_len before it reports the pool
        lines.append(
            f"INFO  [kv_cache_utils.py] GPU KV cache size: {fp.kv_token_capacity:,} tokens, Maximum concurrency for "
            f"{cfg.context_len:,} tokens per request: {fp.vllm_concurrency():.2f}x"
        )
    if outcome.startup_error:
        return [*lines, f"ERROR {outcome.startup_error}"]
    return lines + _serving_logs(outcome)
