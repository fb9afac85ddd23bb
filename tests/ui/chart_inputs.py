"""Typed chart inputs for the chart tests: the labs' own dataclasses, with only the fields a test cares about set."""

from __future__ import annotations

from lessons.labs.bandwidth import SweepPoint
from lessons.labs.paged import BlockSizeRow
from lessons.labs.paged_kernel import vllm_accepts


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
