"""Sliding-window attention's memory rule: which blocks a sequence still needs, and how many it can hold.

With a window of W tokens (Mistral v0.1, Jiang et al., 2023, arXiv 2310.06825) the query at position p sees
keys p - W + 1 .. p only. A step whose first new token sits at position `num_computed` therefore never reads
a key before `num_computed - W + 1`, and neither does any later step: the blocks wholly before that position
can go back to the allocator, their block-table entries becoming `FREED`. `skipped_blocks` names them; the
block manager frees them inside an allocation that goes ahead (vLLM V1's
`SlidingWindowManager.remove_skipped_blocks`), never in a query. The kernels never read a table entry
outside the window (the engine hands them 0). So a sequence holds at most the blocks of W - 1 + (new tokens
of one step) positions, whatever its length: `kv_blocks_per_seq`, the count the scheduler, the runner and
the memory model (engine/memory/footprint.py) size the cache with (vLLM V1's
`SlidingWindowSpec.max_memory_usage_bytes`).
"""

from __future__ import annotations

from kernels.validate import check_int

__all__ = ["FREED", "first_needed_block", "kv_blocks_per_seq", "skipped_blocks"]

FREED = -1  # block-table entry of a block dropped because it lies wholly outside the window


def first_needed_block(num_computed: int, sliding_window: int | None, block_size: int) -> int:
    """Index of the first logical block a query at position >= num_computed can still see (0 without a window)."""
    if sliding_window is None:
        return 0
    return max(0, num_computed - sliding_window + 1) // block_size


def skipped_blocks(table: list[int], num_computed: int, sliding_window: int | None, block_size: int) -> list[int]:
    """Indices of the table entries no query at position >= num_computed sees and not yet `FREED`, newest first.

    A pure query: the block manager counts these as free when it plans an allocation and frees them only when
    the allocation goes ahead. Freed entries are always a prefix of the table, so the scan walks back from
    the window's start to the first entry already freed: each block is visited once over the sequence's life.
    """
    stop = min(first_needed_block(num_computed, sliding_window, block_size), len(table))
    found: list[int] = []
    for i in range(stop - 1, -1, -1):
        if table[i] == FREED:
            break
        found.append(i)
    return found


def kv_blocks_per_seq(
    context_len: int, block_size: int = 16, sliding_window: int | None = None, max_num_batched_tokens: int | None = None
) -> int:
    """Most KV blocks one sequence of context_len tokens holds at once (vLLM V1's per-layer-type max usage).

    Full attention keeps every token: ceil(context_len / block_size). A sliding window of W tokens keeps only
    the W - 1 positions before a step's first new token plus that step's new tokens (at most
    max_num_batched_tokens; None: the whole context), never more than the context, plus one block because
    that span need not start on a block boundary; the rest is freed as the sequence moves on.
    """
    context_len = check_int("context_len", context_len, kind="a whole number of tokens")
    full = -(-context_len // block_size)
    if sliding_window is None:
        return full
    step = context_len if max_num_batched_tokens is None else max_num_batched_tokens
    return min(full, -(-min(sliding_window - 1 + step, context_len) // block_size) + 1)
