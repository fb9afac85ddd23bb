"""Sliding-window attention's memory rule: which blocks a sequence still needs, and how many it can hold.

With a window of W tokens (Mistral v0.1, Jiang et al., 2023, arXiv 2310.06825) the query at position p sees
keys p - W + 1 .. p only. A step whose first new token sits at position `num_computed` therefore never reads
a key before `num_computed - W + 1`, and neither does any later step: the blocks wholly before that position
go back to the allocator (vLLM V1's `SlidingWindowManager.remove_skipped_blocks`) and their block-table
entries become `FREED`. The kernels never read a table entry outside the window (the engine hands them 0).
So a sequence holds at most the blocks of W - 1 + (new tokens of one step) positions, whatever its length:
`engine.memory.window.kv_blocks_per_seq`, the memory model's count, re-exported here.
"""

from __future__ import annotations

from collections.abc import Callable

from engine.memory.window import kv_blocks_per_seq

__all__ = ["FREED", "first_needed_block", "free_outside_window", "kv_blocks_per_seq"]

FREED = -1  # block-table entry of a block dropped because it lies wholly outside the window


def first_needed_block(num_computed: int, sliding_window: int | None, block_size: int) -> int:
    """Index of the first logical block a query at position >= num_computed can still see (0 without a window)."""
    if sliding_window is None:
        return 0
    return max(0, num_computed - sliding_window + 1) // block_size


def free_outside_window(
    table: list[int], num_computed: int, sliding_window: int | None, block_size: int, free: Callable[[int], None]
) -> int:
    """Free (`free(block_id)`) and mark `FREED` the table's blocks no future query sees; returns how many.

    Freed entries are always a prefix of the table, so the scan walks back from the boundary to the first
    entry already freed: each block is visited once over the sequence's life.
    """
    stop = min(first_needed_block(num_computed, sliding_window, block_size), len(table))
    freed = 0
    for i in range(stop - 1, -1, -1):
        if table[i] == FREED:
            break
        free(table[i])
        table[i] = FREED
        freed += 1
    return freed
