"""The scheduler's memory rule, shared by the engine's `Scheduler` and the serving simulator's paged policy.

One rule, written once (vLLM V1's scheduler at v0.34.0, recompute preemption):
- running requests go first, oldest first; when the pool cannot give a running request its next blocks,
  the *newest* running request is preempted (`preempt_newest`: taken off the running list, then its blocks
  are freed and it is recomputed later) until it can;
- a step that had to preempt admits nobody (memory is tight);
- otherwise waiting requests (new ones and preempted ones alike) are admitted first-come-first-served while
  fewer than `max_num_seqs` run and the pool holds the blocks of the request's *whole* sequence, not only
  of its first chunk (`scheduler_reserve_full_isl`, on by default: a check, nothing is set aside), after its
  prefix-cache hit; both that check and the chunk's allocation must leave `watermark` of the pool's blocks
  free while anything runs. vLLM's default watermark is 0.0: no headroom, so by default an admission may
  take the last free block.
"""

from __future__ import annotations

from collections.abc import MutableSequence
from typing import TypeVar

T = TypeVar("T")


def watermark_blocks(watermark: float, num_blocks: int) -> int:
    """Blocks admission leaves free: int(watermark * num_blocks), rounded down as vLLM's `KVCacheManager` does."""
    if not 0.0 <= watermark < 1.0:
        raise ValueError(f"watermark={watermark} must be a fraction in [0, 1)")
    return int(watermark * num_blocks)


def may_admit(num_running: int, max_num_seqs: int, preempted_this_step: bool) -> bool:
    """Whether this step may admit another waiting request at all (a seat is free, nobody was preempted)."""
    return num_running < max_num_seqs and not preempted_this_step


def admission_headroom(num_running: int, num_watermark_blocks: int) -> int:
    """Free blocks an admission must leave: the watermark while anything runs, else none."""
    return num_watermark_blocks if num_running else 0


def fits(blocks_needed: int, free_blocks: int, headroom_blocks: int = 0) -> bool:
    """Whether `blocks_needed` can come out of `free_blocks` and still leave `headroom_blocks` free."""
    return blocks_needed + headroom_blocks <= free_blocks


def preempt_newest(running: MutableSequence[T]) -> T:
    """Take the request to preempt on a shortage off `running` and return it: the newest (the last admitted).

    Choosing and removing are one call, so the request a caller then frees is always the one that left the
    list; the caller frees its memory and requeues it.
    """
    if not running:
        raise ValueError("nothing is running, so there is no request to preempt")
    return running.pop()
