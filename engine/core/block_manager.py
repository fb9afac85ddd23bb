"""Per-sequence block tables over a `BlockAllocator`: admission, growth, prefix hits, copy-on-write.

Follows PagedAttention (Kwon et al., SOSP 2023) as nano-vllm's `BlockManager` and vLLM v1's `KVCacheManager`
implement it: a sequence's `block_table` maps logical block i (tokens i*block_size .. (i+1)*block_size - 1)
to a physical block (`engine.core.kv_cache.slots_of` gives its cache slots). Query / mutate pairs:
`can_allocate` / `allocate_sequence` (admit, reusing cached prefix blocks), `can_append` / `append_slots`
(returns the copy-on-write (src, dst) block copies to make first); a mutation that cannot fit raises
OutOfBlocksError and changes nothing. The caller advances seq.num_computed_tokens; the manager never does.
With a sliding window (engine/core/sliding_window.py) admission and growth first free the blocks no query
of the sequence can see any more; their table entries become `FREED`. Snapshots and usage numbers are
engine/core/block_usage.py.
"""

from __future__ import annotations

from collections.abc import Iterator

from engine.core.admission import fits
from engine.core.block_allocator import BlockAllocator, OutOfBlocksError, compute_block_hash
from engine.core.block_usage import BlockInfo, BlockUsage, pool_usage, snapshot_blocks
from engine.core.sequence import Sequence
from engine.core.sliding_window import FREED, free_outside_window

__all__ = ["BlockInfo", "BlockManager", "BlockUsage", "FREED"]

FullBlock = tuple[int, int, tuple[int, ...]]  # (index in the block table, chained hash, token ids)


class BlockManager:
    """Block tables, prefix hits and copy-on-write for sequences over one BlockAllocator."""

    def __init__(
        self, num_blocks: int, block_size: int, enable_prefix_caching: bool = False, sliding_window: int | None = None
    ) -> None:
        """sliding_window: the model's attention window W (None: every query sees every earlier token)."""
        if sliding_window is not None and (
            isinstance(sliding_window, bool) or not isinstance(sliding_window, int) or sliding_window < 1
        ):
            raise ValueError(f"sliding_window={sliding_window!r} must be an integer >= 1 or None")
        self.allocator = BlockAllocator(num_blocks, block_size, enable_prefix_caching)
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.sliding_window = sliding_window
        self.sequences: dict[int, Sequence] = {}  # sequences holding blocks
        self._num_slots: dict[int, int] = {}  # seq_id -> positions covered by its last allocation
        self._hashes: dict[int, list[int]] = {}  # seq_id -> chained hashes of its leading published blocks

    def __repr__(self) -> str:
        return f"BlockManager({self.allocator!r}, num_sequences={len(self.sequences)})"

    @property
    def num_free_blocks(self) -> int:
        """Blocks the allocator can hand out."""
        return self.allocator.num_free_blocks

    def _check_seq(self, seq: Sequence) -> None:
        if seq.block_size != self.block_size:
            raise ValueError(
                f"sequence {seq.seq_id} has block_size={seq.block_size} but the cache uses {self.block_size}; "
                f"create the Sequence with block_size={self.block_size}"
            )

    def _prefix_hits(self, seq: Sequence) -> tuple[list[int], list[int]]:
        """Cached blocks matching the prompt's leading full blocks, and their hashes."""
        if not self.allocator.enable_prefix_caching:
            return [], []
        blocks: list[int] = []
        hashes: list[int] = []
        # Never the whole sequence: the last token must be computed to produce logits (as vLLM does).
        for _, block_hash, chunk in self._full_blocks(seq, 0, (seq.num_tokens - 1) // self.block_size, None):
            block_id = self.allocator.lookup(block_hash, chunk)
            if block_id is None:
                break
            blocks.append(block_id)
            hashes.append(block_hash)
        return blocks, hashes

    def _full_blocks(self, seq: Sequence, start: int, stop: int, parent: int | None) -> Iterator[FullBlock]:
        """(index, chained hash, token ids) of `seq`'s full blocks start..stop-1, chained on from `parent`."""
        bs, tokens = self.block_size, seq.token_ids
        for i in range(start, stop):
            chunk = tuple(tokens[i * bs : (i + 1) * bs])
            parent = compute_block_hash(parent, chunk)
            yield i, parent, chunk

    def num_cached_prefix_tokens(self, seq: Sequence) -> int:
        """Tokens `allocate_sequence(seq)` would take from the prefix cache right now."""
        self._check_seq(seq)
        return len(self._prefix_hits(seq)[0]) * self.block_size

    def _admission_cost(self, seq: Sequence, num_new_tokens: int | None) -> tuple[list[int], list[int], int, int, int]:
        """(hit blocks, hit hashes, fresh blocks needed, free blocks consumed, new tokens) to admit `seq`."""
        self._check_seq(seq)
        if seq.seq_id in self.sequences or seq.block_table:
            raise ValueError(
                f"sequence {seq.seq_id} already holds blocks {seq.block_table}; call free_sequence() before "
                f"allocating it again, or append_slots() to grow it"
            )
        blocks, hashes = self._prefix_hits(seq)
        num_cached = len(blocks) * self.block_size
        remaining = seq.num_tokens - num_cached
        n = remaining if num_new_tokens is None else num_new_tokens
        if type(n) is not int or not 1 <= n <= remaining:
            raise ValueError(
                f"num_new_tokens={num_new_tokens!r} for sequence {seq.seq_id} must be in 1..{remaining} "
                f"({seq.num_tokens} tokens, {num_cached} cached)"
            )
        fresh = -(-(num_cached + n) // self.block_size) - len(blocks)
        refs = self.allocator.ref_counts
        revived = sum(1 for b in blocks if refs[b] == 0)  # cached-free hits leave the free pool too
        return blocks, hashes, fresh, fresh + revived, n

    def can_allocate(self, seq: Sequence, num_new_tokens: int | None = None, watermark_blocks: int = 0) -> bool:
        """Whether `allocate_sequence` would succeed and still leave `watermark_blocks` free."""
        return fits(self._admission_cost(seq, num_new_tokens)[3], self.allocator.num_free_blocks, watermark_blocks)

    def _append_plan(self, seq: Sequence, num_new_tokens: int) -> tuple[list[int], int]:
        """(indices of shared blocks to copy-on-write, new blocks to append) to write the next tokens."""
        if seq.seq_id not in self.sequences:
            raise ValueError(f"sequence {seq.seq_id} holds no blocks; call allocate_sequence() first")
        start, num_tokens = seq.num_computed_tokens, len(seq.token_ids)
        if type(num_new_tokens) is not int or num_new_tokens < 1 or start + num_new_tokens > num_tokens:
            raise ValueError(
                f"num_new_tokens={num_new_tokens!r} for sequence {seq.seq_id} must be in "
                f"1..{num_tokens - start} ({num_tokens} tokens, {start} computed)"
            )
        end, bs, table = start + num_new_tokens, self.block_size, seq.block_table
        refs = self.allocator.ref_counts  # hot path (every decode step): index the live view directly
        last = -(-end // bs)  # blocks needed to cover positions 0..end-1
        # A block this step writes into must be exclusively ours: shared ones are copied first.
        shared = [i for i in range(start // bs, min(last, len(table))) if refs[table[i]] > 1]
        return shared, last - len(table) if last > len(table) else 0

    def can_append(self, seq: Sequence, num_new_tokens: int = 1) -> bool:
        """Whether `append_slots(seq, num_new_tokens)` would find enough free blocks.

        With a sliding window it first frees the blocks no coming query of `seq` sees (as append_slots would):
        they count as free, and dropping them changes nothing the sequence can read.
        """
        shared, grow = self._append_plan(seq, num_new_tokens)
        self._free_outside_window(seq)
        return len(shared) + grow <= self.allocator.num_free_blocks

    def allocate_sequence(self, seq: Sequence, num_new_tokens: int | None = None) -> int:
        """Admit `seq`: reuse its cached prefix, allocate the rest; returns num_cached_tokens."""
        blocks, hashes, fresh, cost, n = self._admission_cost(seq, num_new_tokens)
        alloc = self.allocator
        if cost > alloc.num_free_blocks:
            raise OutOfBlocksError(cost, alloc.num_free_blocks, alloc.num_blocks)
        for block_id in blocks:  # revive hits before allocating, so eviction cannot take them
            alloc.incref(block_id)
        seq.block_table = blocks + alloc.allocate_blocks(fresh)
        num_cached = len(blocks) * self.block_size
        seq.num_cached_tokens = seq.num_computed_tokens = num_cached
        self.sequences[seq.seq_id] = seq
        self._hashes[seq.seq_id] = hashes
        self._num_slots[seq.seq_id] = num_cached + n
        self._free_outside_window(seq)  # cached prefix blocks the first new token cannot see
        return num_cached

    def _free_outside_window(self, seq: Sequence) -> int:
        """Return the blocks wholly outside every coming query's window to the allocator (sliding window only).

        Full computed blocks are published first, so a block the window drops stays findable as a prefix."""
        if self.sliding_window is None:
            return 0
        self.cache_computed_blocks(seq)
        return free_outside_window(
            seq.block_table, seq.num_computed_tokens, self.sliding_window, self.block_size, self.allocator.free
        )

    def append_slots(self, seq: Sequence, num_new_tokens: int = 1) -> list[tuple[int, int]]:
        """Give the next `num_new_tokens` positions cache slots; returns (src, dst) block copies to perform."""
        self.cache_computed_blocks(seq)
        shared, grow = self._append_plan(seq, num_new_tokens)
        alloc, table = self.allocator, seq.block_table
        self._free_outside_window(seq)
        if len(shared) + grow > alloc.num_free_blocks:
            raise OutOfBlocksError(len(shared) + grow, alloc.num_free_blocks, alloc.num_blocks)
        copies: list[tuple[int, int]] = []
        for i in shared:
            old, new = table[i], alloc.allocate()
            table[i] = new
            alloc.free(old)
            if i * self.block_size < seq.num_computed_tokens:  # holds computed tokens: copy them over
                copies.append((old, new))
        for _ in range(grow):
            table.append(alloc.allocate())
        end = seq.num_computed_tokens + num_new_tokens
        self._num_slots[seq.seq_id] = max(self._num_slots[seq.seq_id], end)
        return copies

    def fork(self, parent: Sequence, child: Sequence) -> None:
        """Make `child` share every block of `parent` (ref + 1 each); writes copy-on-write later."""
        if parent.seq_id not in self.sequences:
            raise ValueError(f"parent sequence {parent.seq_id} holds no blocks; allocate it before fork()")
        self._check_seq(child)
        if child.seq_id in self.sequences or child.block_table:
            raise ValueError(f"child sequence {child.seq_id} already holds blocks; fork() into a new sequence")
        n = parent.num_computed_tokens
        if child.token_ids[:n] != parent.token_ids[:n]:
            raise ValueError(
                f"child sequence {child.seq_id} must start with parent {parent.seq_id}'s {n} computed tokens"
            )
        for block_id in parent.block_table:
            if block_id != FREED:
                self.allocator.incref(block_id)
        child.block_table = list(parent.block_table)
        child.num_computed_tokens, child.num_cached_tokens = n, parent.num_cached_tokens
        self.sequences[child.seq_id] = child
        self._hashes[child.seq_id] = list(self._hashes[parent.seq_id])
        self._num_slots[child.seq_id] = min(self._num_slots[parent.seq_id], child.num_tokens)

    def free_sequence(self, seq: Sequence) -> None:
        """Release all of `seq`'s blocks (its full computed blocks stay in the prefix cache)."""
        if seq.seq_id not in self.sequences:
            raise ValueError(f"sequence {seq.seq_id} holds no blocks; it was never allocated or is already freed")
        self.cache_computed_blocks(seq)
        # Reverse order: the tail of a prefix is freed first, so LRU eviction takes it before the head.
        for block_id in reversed(seq.block_table):
            if block_id != FREED:
                self.allocator.free(block_id)
        seq.block_table = []
        del self.sequences[seq.seq_id], self._hashes[seq.seq_id], self._num_slots[seq.seq_id]

    def cache_computed_blocks(self, seq: Sequence) -> None:
        """Publish `seq`'s full, computed blocks to the prefix cache (no-op without prefix caching)."""
        if not self.allocator.enable_prefix_caching or seq.seq_id not in self.sequences:
            return
        hashes, table = self._hashes[seq.seq_id], seq.block_table
        num_full = min(seq.num_computed_tokens // self.block_size, len(table))
        if num_full <= len(hashes):
            return
        for i, block_hash, chunk in self._full_blocks(seq, len(hashes), num_full, hashes[-1] if hashes else None):
            self.allocator.cache_block(table[i], block_hash, chunk)
            hashes.append(block_hash)

    def snapshot(self) -> list[BlockInfo]:
        """Every physical block in id order, with owners and filled slots."""
        return snapshot_blocks(self.allocator, self.sequences.values(), self._num_slots)

    def usage(self, bytes_per_slot: int = 0) -> BlockUsage:
        """Pool-wide allocated / used slots and internal fragmentation (bytes if bytes_per_slot given)."""
        return pool_usage(self.allocator, self.sequences.values(), self._num_slots, bytes_per_slot)
