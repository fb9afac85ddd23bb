"""What the block pool holds, as the lessons draw it: per-block records and pool-wide usage numbers.

`BlockManager.snapshot()` and `.usage()` (engine/core/block_manager.py) return these; the playground and the
paged-attention lesson draw them. A block's filled slots come from each owner's covered positions; a
shared block counts once, as its fullest owner sees it; a model with several KV-cache groups
(engine/core/kv_groups.py) has a table per group, and each group's blocks count. A block-table entry
`FREED` (a block a sliding window dropped, engine/core/sliding_window.py) owns nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from engine.core.block_allocator import BlockAllocator
from engine.core.sequence import Sequence
from engine.core.sliding_window import FREED


@dataclass(slots=True)  # not frozen: frozen dataclasses build ~6x slower, and snapshot() makes one per block
class BlockInfo:
    """One physical block as the lessons draw it (a read-only record)."""

    block_id: int
    ref_count: int
    owners: tuple[int, ...]  # seq_ids whose block table holds this block
    num_filled: int  # slots holding (or being written with) a token; block_size for a cached free block
    block_hash: int | None  # prefix-cache hash, None when not cached

    @property
    def state(self) -> str:
        """ "used" (referenced), "cached" (free but reusable prefix) or "free"."""
        if self.ref_count > 0:
            return "used"
        return "cached" if self.block_hash is not None else "free"


@dataclass(frozen=True, slots=True)
class BlockUsage:
    """Pool-wide numbers: what is allocated, what holds tokens, and the internal waste in between."""

    num_blocks: int
    block_size: int
    num_used_blocks: int  # ref count > 0
    num_free_blocks: int  # includes cached blocks nobody references
    num_cached_free_blocks: int
    allocated_slots: int  # num_used_blocks * block_size
    used_slots: int  # slots holding a token (a shared block counts once)
    bytes_per_slot: int = 0

    @property
    def internal_fragmentation_slots(self) -> int:
        """Allocated slots holding no token (the tail of each sequence's last block)."""
        return self.allocated_slots - self.used_slots

    @property
    def internal_fragmentation_bytes(self) -> int:
        """Internal fragmentation in bytes (0 unless bytes_per_slot was given)."""
        return self.internal_fragmentation_slots * self.bytes_per_slot

    @property
    def allocated_bytes(self) -> int:
        """Allocated slots in bytes."""
        return self.allocated_slots * self.bytes_per_slot

    @property
    def used_bytes(self) -> int:
        """Used slots in bytes."""
        return self.used_slots * self.bytes_per_slot


def filled_slots(
    seqs: Iterable[Sequence], num_slots: Mapping[int, int], block_size: int
) -> tuple[dict[int, list[int]], dict[int, int]]:
    """owners and filled-slot count of every referenced block (a shared block: max over owners).

    num_slots[seq_id]: positions covered by that sequence's last allocation.
    """
    owners: dict[int, list[int]] = {}
    filled: dict[int, int] = {}
    bs = block_size
    for seq in seqs:
        n = num_slots[seq.seq_id]
        full = n // bs  # blocks before this index are full; the one at it holds n % bs slots
        for i, block_id in ((i, b) for table in seq.block_tables for i, b in enumerate(table)):
            if block_id == FREED:
                continue
            f = bs if i < full else (n - full * bs if i == full else 0)
            seen = owners.get(block_id)
            if seen is None:
                owners[block_id] = [seq.seq_id]
                filled[block_id] = f
            else:  # shared: count its slots once, as the fullest owner sees them
                seen.append(seq.seq_id)
                if f > filled[block_id]:
                    filled[block_id] = f
    return owners, filled


def snapshot_blocks(alloc: BlockAllocator, seqs: Iterable[Sequence], num_slots: Mapping[int, int]) -> list[BlockInfo]:
    """Every physical block in id order, with owners and filled slots."""
    owners, filled = filled_slots(seqs, num_slots, alloc.block_size)
    bs, refs, hashes = alloc.block_size, alloc.ref_counts, alloc.block_hashes
    # A cached free block still holds a full block of tokens; a plain free one holds none.
    return [
        BlockInfo(b, refs[b], tuple(owners.get(b, ())), filled.get(b, 0 if h is None else bs), h)
        for b, h in enumerate(hashes)
    ]


def pool_usage(
    alloc: BlockAllocator, seqs: Iterable[Sequence], num_slots: Mapping[int, int], bytes_per_slot: int = 0
) -> BlockUsage:
    """Pool-wide allocated / used slots and internal fragmentation (bytes if bytes_per_slot given)."""
    used_blocks = alloc.num_blocks - alloc.num_free_blocks
    return BlockUsage(
        num_blocks=alloc.num_blocks,
        block_size=alloc.block_size,
        num_used_blocks=used_blocks,
        num_free_blocks=alloc.num_free_blocks,
        num_cached_free_blocks=alloc.num_evictable_blocks,
        allocated_slots=used_blocks * alloc.block_size,
        used_slots=sum(filled_slots(seqs, num_slots, alloc.block_size)[1].values()),
        bytes_per_slot=bytes_per_slot,
    )
