"""The log lines an incident's server prints: PyTorch's OOM message, or vLLM's start-up and metrics lines.

The formats imitate PyTorch's `torch.OutOfMemoryError` text and vLLM's start-up (memory profiling, "# GPU
blocks", maximum concurrency), preemption and metrics logs; every number in them comes from the memory model
and the simulator's outcome, not from a template.
"""

from __future__ import annotations

from engine.memory.catalog import MODELS, GiB
from lessons.diagnosis.scenarios import Outcome, Scenario


def _static_logs(scenario: Scenario, outcome: Outcome) -> list[str]:
    """A home-grown static-reservation server: the model loads, then a session's reservation OOMs."""
    fp, cfg = outcome.footprint, outcome.config
    total = fp.capacity_bytes / GiB
    lines = [f"INFO  model loaded: {MODELS[cfg.model].name}, weights {fp.weights_bytes / GiB:.2f} GiB"]
    s = outcome.summary
    if s and s.num_oom:
        reserve = cfg.context_len * fp.kv_bytes_per_token / GiB
        torch_gib = (fp.weights_bytes + fp.activation_bytes) / GiB + s.peak_concurrency * reserve
        in_use = torch_gib + fp.overhead_bytes / GiB
        lines += [
            f"INFO  active sessions: {s.peak_concurrency}",
            f"ERROR torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {reserve:.2f} GiB. GPU 0 "
            f"has a total capacity of {total:.2f} GiB of which {max(total - in_use, 0) * 1024:.2f} MiB is free. "
            f"Including non-PyTorch memory, this process has {in_use:.2f} GiB memory in use. Of the allocated "
            f"memory {torch_gib:.2f} GiB is allocated by PyTorch. If reserved but unallocated memory is large "
            f"try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.",
            f"ERROR {s.num_oom} of {scenario.traffic.num_requests} chat requests failed (HTTP 500)",
        ]
    return lines


def _serving_logs(outcome: Outcome) -> list[str]:
    """vLLM while serving: a preemption warning when it recomputed, and the metrics line at the longest queue."""
    s, lines = outcome.summary, []
    if s and s.num_preemptions:
        lines.append(
            "WARNING Sequence group 57 is preempted by PreemptionMode.RECOMPUTE mode because there is not "
            "enough KV cache space. This can affect the end-to-end performance. Increase "
            f"gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
            f"total_num_cumulative_preemption={s.num_preemptions}"
        )
    if outcome.result:
        rows = outcome.result.to_rows()
        worst = max(rows, key=lambda r: r["waiting"])
        used = 100 * (1 - worst["free"] / outcome.result.capacity_tokens)
        lines.append(
            f"INFO  Avg generation throughput: {s.tokens_per_s:.1f} tokens/s, Running: "
            f"{int(worst['running'])} reqs, Swapped: 0 reqs, Pending: {int(worst['waiting'])} reqs, "
            f"GPU KV cache usage: {used:.1f}%, CPU KV cache usage: 0.0%."
        )
    return lines


def incident_logs(scenario: Scenario, outcome: Outcome) -> list[str]:
    """Log lines a server would print for this outcome (PyTorch OOM or vLLM start-up / metrics lines)."""
    fp, cfg = outcome.footprint, outcome.config
    if cfg.policy == "static":
        return _static_logs(scenario, outcome)
    lines: list[str] = []
    if scenario.other_process_bytes:
        lines.append(
            f"nvidia-smi: embed_server.py {scenario.other_process_bytes // 2**20} MiB; "
            f"total {fp.capacity_bytes // 2**20} MiB"
        )
    if outcome.startup_error and "Free memory" in outcome.startup_error:
        return [*lines, f"ERROR {outcome.startup_error}"]
    lines += [
        f"INFO  Loading model weights took {fp.weights_bytes / GiB:.4f} GB",
        f"INFO  Memory profiling takes: weights {fp.weights_bytes / GiB:.2f}GiB; PyTorch activation peak memory "
        f"{fp.activation_bytes / GiB:.2f}GiB; non-torch memory {fp.overhead_bytes / GiB:.2f}GiB; the rest of the "
        f"memory reserved for KV Cache is {max(fp.kv_budget_bytes, 0) / GiB:.2f}GiB.",
        f"INFO  # GPU blocks: {fp.num_blocks}, # CPU blocks: 2048",
        f"INFO  Maximum concurrency for {cfg.context_len} tokens per request: {fp.vllm_concurrency():.2f}x",
    ]
    if outcome.startup_error:
        return [*lines, f"ERROR {outcome.startup_error}"]
    return lines + _serving_logs(outcome)
