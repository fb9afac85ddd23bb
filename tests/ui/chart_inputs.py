"""Typed chart inputs for the chart tests: the labs' own dataclasses, with only the fields a test cares about set."""

from __future__ import annotations

from lessons.labs.bandwidth import SweepPoint
from lessons.labs.fragmentation import PolicyShare
from lessons.labs.paged import BlockSizeRow
from lessons.labs.paged_kernel import vllm_accepts
from lessons.labs.pressure import GpuPoint, RunPoint, StepRow, Traffic


def size_row(block_size: int, **fields: object) -> BlockSizeRow:
    """One block size of a sweep; vLLM's verdict follows the block size unless `fields` sets it."""
    base: dict[str, object] = {
        "block_size": block_size,
        "vllm_accepts": vllm_accepts(block_size),
        "internal_waste_pct": 0.0,
        "utilization_pct": 100.0,
        "entries_per_sequence": 1.0,
        "table_width": 1,
        "table_bytes": 4,
        "peak_running": 1,
        "kernel_cost": 1.0,
        "tokens_per_s_free": 1.0,
        "tokens_per_s": 1.0,
    }
    return BlockSizeRow(**(base | fields))  # type: ignore[arg-type]


def sweep_point(batch: int, tokens_per_s: float, *, fits: bool) -> SweepPoint:
    """One batch of the decode sweep with its tokens/s and whether its KV fits (the rest: plausible numbers)."""
    return SweepPoint(
        batch, fits, batch * 2**20, float(batch), 4.0, batch * 2e6, batch * 2e6 + 16e9, tokens_per_s, "memory"
    )


def step_row(step: int, *, kv_usage: float, running: int, waiting: int, preemptions: int) -> StepRow:
    """One engine step of a run as the dashboard draws it (timings and token counts: plausible numbers)."""
    return StepRow(step, 10.0 * step, running, waiting, kv_usage, preemptions, 16 * preemptions, 48, running, 10.0)


def run_point(traffic: Traffic | None = None, **fields: object) -> RunPoint:
    """One run of a sweep; `fields` sets the numbers a test draws (the rest: plausible numbers)."""
    base: dict[str, object] = {
        "traffic": traffic or Traffic(),
        "preemptions": 0,
        "recomputed_tokens": 0,
        "peak_kv_usage": 0.5,
        "peak_running": 4,
        "peak_waiting": 0,
        "ttft_p50_ms": 1.0,
        "ttft_p95_ms": 2.0,
        "ttft_p50_steps": 1.0,
        "ttft_p95_steps": 2.0,
        "tpot_p50_ms": 1.0,
        "tpot_p95_ms": 2.0,
        "itl_p95_ms": 2.0,
        "max_step_tokens": 64,
        "stall_ms": 5.0,
        "binding": "neither",
        "steps": 40,
    }
    return RunPoint(**(base | fields))  # type: ignore[arg-type]


def gpu_point(rate: float, *, preemptions: int, p95_wait_s: float, peak_kv_usage: float) -> GpuPoint:
    """One simulated request rate (peaks and tokens/s: plausible numbers)."""
    return GpuPoint(rate, preemptions, 32, 4, peak_kv_usage, p95_wait_s, 100.0 * rate)


def policy_share(server: str, stored: float, reserved: float, internal: float, external: float) -> PolicyShare:
    """One server's shares of held KV slots, in % (what it achieved: plausible numbers)."""
    return PolicyShare("paged", server, stored, 96.3, reserved, internal, external, 8, 1000.0, 0.5)
