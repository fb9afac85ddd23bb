"""The physical KV pool as pages 5 and 8 draw it: one `PoolBlock` per block, its `BlockState` a closed set.

Built from `engine.core.block_manager.BlockManager.snapshot()` (engine/core/block_usage.py's `BlockInfo`): a
referenced block is "used", a free one whose prefix is still cached "cached", the rest "free"; a used block that
more than one sequence's table holds is drawn as "shared" (PagedAttention's copy-on-write and V1's prefix
sharing). ui.charts_memory.block_pool_grid reads the fields; `row()` is the pool table's. No Streamlit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum

from engine.core.block_usage import BlockInfo


class BlockState(StrEnum):
    """What a physical block holds, as drawn (a str enum: its value is the page's word for it)."""

    FREE = "free"
    CACHED = "cached"  # free, but its full prefix is still in the cache: a later request may hit it
    USED = "used"  # in exactly one sequence's block table
    SHARED = "shared"  # in more than one (reference count > 1)


@dataclass(frozen=True, slots=True)
class PoolBlock:
    """One physical block: its state, reference count, the sequences that own it and its filled slots."""

    block_id: int
    state: BlockState
    ref_count: int
    owners: tuple[str, ...]  # names of the sequences whose tables hold it
    filled: int  # slots holding a token (block_size for a cached free block)

    def row(self) -> dict[str, object]:
        """The pool table's row: block_id, state, ref_count, owners ("A+B"), filled."""
        return {
            "block_id": self.block_id,
            "state": self.state.value,
            "ref_count": self.ref_count,
            "owners": "+".join(self.owners),
            "filled": self.filled,
        }


def block_state(info: BlockInfo) -> BlockState:
    """The drawn state of an engine block: the engine's "used" / "cached" / "free", "shared" when refs > 1."""
    if info.ref_count > 1:
        return BlockState.SHARED
    return BlockState(info.state)  # a word the engine adds later is a ValueError here, not a wrong picture


def pool_blocks(snapshot: Iterable[BlockInfo], name: Callable[[int], str]) -> tuple[PoolBlock, ...]:
    """Every block of a BlockManager snapshot, its owners named by `name(seq_id)`."""
    return tuple(
        PoolBlock(b.block_id, block_state(b), b.ref_count, tuple(name(o) for o in b.owners), b.num_filled)
        for b in snapshot
    )


__all__ = ["BlockState", "PoolBlock", "block_state", "pool_blocks"]
