"""Sliding-window attention in the memory model: the most KV blocks one sequence can hold at once.

A model with a window of W tokens (Mistral v0.1, Jiang et al., 2023, arXiv 2310.06825) never reads a key more
than W - 1 positions before a query, so the engine frees the blocks behind the window
(engine/core/sliding_window.py) and a sequence's KV is capped near its window, whatever its length. vLLM V1
counts the same cap (`SlidingWindowSpec.max_memory_usage_bytes`). Re-exported by engine/memory/footprint.py.
"""

from __future__ import annotations

from numbers import Integral


def kv_blocks_per_seq(
    context_len: int, block_size: int = 16, sliding_window: int | None = None, max_num_batched_tokens: int | None = None
) -> int:
    """Most KV blocks one sequence of context_len tokens holds at once (vLLM V1's per-layer-type max usage).

    Full attention keeps every token: ceil(context_len / block_size). A sliding window of W tokens keeps only
    the W - 1 positions before a step's first new token plus that step's new tokens (at most
    max_num_batched_tokens; None: the whole context), never more than the context, plus one block because
    that span need not start on a block boundary; the engine frees the rest (engine/core/sliding_window.py).
    """
    if isinstance(context_len, bool) or not isinstance(context_len, Integral) or context_len < 1:
        raise ValueError(f"context_len={context_len!r} must be a whole number of tokens >= 1")
    full = -(-int(context_len) // block_size)
    if sliding_window is None:
        return full
    step = context_len if max_num_batched_tokens is None else max_num_batched_tokens
    return min(full, -(-min(sliding_window - 1 + step, context_len) // block_size) + 1)
