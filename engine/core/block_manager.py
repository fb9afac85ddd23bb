"""Per-sequence block tables over a `BlockAllocator`: admission, growth, prefix hits, copy-on-write.

Follows PagedAttention (Kwon et al., SOSP 2023) as nano-vllm's `BlockManager` and vLLM V1's `KVCacheManager`
implement it: a sequence's `block_table` maps logical block i (tokens i*block_size .. (i+1)*block_size - 1)
to a physical block. One call gives a step what it needs: `allocate_slots(seq, num_new_tokens)` admits a
sequence that holds no blocks (reusing its cached prefix blocks) or grows one that does (copy-on-write of
the shared blocks it will write into, new blocks at the end), and returns a `SlotAllocation` saying what it
did, or None, having changed nothing, when the pool cannot give all of it. Queries (`can_allocate`,
`num_cached_prefix_tokens`, `snapshot`, `usage`) change nothing; `prefix_cache_queries` / `prefix_cache_hits`
count the tokens first admissions looked up and found (`prefix_cache_hit_rate`), as vLLM's metrics do, and
`prefix_cache_preempted_queries` / `_hits` the readmissions of preempted requests. `free_sequence` keeps
the hashes of a sequence's full computed blocks, so a preempted sequence readmitted before they are evicted
finds them again and recomputes only the rest (vLLM V1 at v0.34.0 does the same). The caller advances
seq.num_computed_tokens after the step; the manager sets it only at admission, to the prefix hit.
With a sliding window (engine/core/sliding_window.py) an allocation counts the blocks no query of the
sequence can see any more as free, and frees them (their table entries become `FREED`) only if it goes
ahead. Snapshots and usage numbers are engine/core/block_usage.py.

A model whose layers attend differently has several KV-cache groups (engine/core/kv_groups.py, vLLM V1's
hybrid KV-cache manager): each sequence then has a block table per group (`seq.block_tables`), all drawn
from this one pool, every block owned by one group. An allocation costs the sum over groups, so admission and
preemption count every group's blocks; a full group keeps all of them, a sliding one gives back what fell
out of its window. Prefix-cache keys carry the group (`group_key`); `get_computed_blocks` hashes the
prompt once and finds the longest hit every group has (a sliding group needs only its window's blocks), and
the scheduler passes it to `allocate_slots`, as vLLM's `get_computed_blocks` -> `allocate_slots` does.
"""

from __future__ import annotations

from collections.abc import Iterator
from collections.abc import Sequence as Seq
from dataclasses import dataclass

from engine.core.admission import fits
from engine.core.block_allocator import BlockAllocator, OutOfBlocksError, compute_block_hash
from engine.core.block_usage import BlockInfo, BlockUsage, pool_usage, snapshot_blocks
from engine.core.kv_groups import KVCacheGroup
from engine.core.sequence import Sequence
from engine.core.sliding_window import FREED, first_needed_block, kv_blocks_per_seq, skipped_blocks
from kernels.validate import check_int

__all__ = ["BlockManager", "ComputedBlocks", "SlotAllocation", "group_key"]

FullBlock = tuple[int, int, tuple[int, ...]]  # (index in the block table, chained hash, token ids)


def group_key(block_hash: int, group: int) -> int:
    """The prefix-cache key of a block of KV-cache group `group`: the same tokens are a different block in each
    group (vLLM keys its cache by (hash, group id)); group 0 keeps the plain chained hash."""
    return block_hash if group == 0 else hash((block_hash, -1 - group))


@dataclass(frozen=True, slots=True)
class SlotAllocation:
    """What one successful `BlockManager.allocate_slots` call did (vLLM V1 returns the new blocks alone)."""

    new_blocks: tuple[int, ...] = ()  # blocks taken from the pool, in table order (copy-on-write targets too)
    copies: tuple[tuple[int, int], ...] = ()  # (src, dst) blocks whose K/V must be copied before the step
    num_cached_tokens: int = 0  # admission: the sequence's leading tokens found in the prefix cache
    num_freed_blocks: int = 0  # blocks behind the sliding window given back to the pool


NOTHING_NEW = SlotAllocation()  # a decode that stays inside its last block: most steps, one shared answer


@dataclass(frozen=True, slots=True)
class ComputedBlocks:
    """A sequence's prefix-cache hit, looked up once per admission (vLLM V1's `get_computed_blocks`) and handed to
    `allocate_slots`, so the prompt's block hashes are computed once.

    num_tokens: leading tokens found (whole blocks); blocks[g]: the hit blocks group g keeps (those its window
    still needs), dropped[g]: the leading hit blocks behind its window; hashes: the chained hashes of the
    prompt's full blocks, reused when they are published; num_seq_tokens: the sequence's length at lookup."""

    num_tokens: int
    blocks: tuple[tuple[int, ...], ...]
    dropped: tuple[int, ...]
    hashes: tuple[int, ...]
    num_seq_tokens: int


@dataclass(slots=True)
class _Growth:
    """How a held sequence's next tokens get their slots (a plan: nothing is allocated yet)."""

    end: int  # positions covered once the step is written
    shared: list[list[int]]  # per group: table indices of shared blocks the step writes into (copy-on-write)
    grow: int  # blocks to append to every group's table
    skipped: list[list[int]]  # per group: table indices behind its window, freed if the allocation goes ahead
    gained: int  # free blocks those give back (the ones nobody else holds)

    @property
    def cost(self) -> int:
        return sum(map(len, self.shared)) + self.grow * len(self.shared)


@dataclass(slots=True)
class _Admission:
    """How a sequence that holds no blocks gets its first slots (a plan: nothing is allocated yet)."""

    num_new_tokens: int
    computed: ComputedBlocks
    fresh: int  # blocks to allocate after the hits, per group
    cost: int  # free blocks consumed: fresh ones in every group plus revived cached-free hits
    gained: int = 0


class BlockManager:
    """Block tables, prefix hits and copy-on-write for sequences over one BlockAllocator."""

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        enable_prefix_caching: bool = False,
        sliding_window: int | None = None,
        groups: Seq[KVCacheGroup] | None = None,
    ) -> None:
        """sliding_window: the model's attention window W when every layer has it (None: every query sees every
        earlier token); groups: the KV-cache groups of a model whose layers attend differently
        (engine/core/kv_groups.py), each with its own block table over this one pool (then no sliding_window)."""
        if sliding_window is not None:  # the loaded ModelConfig checked the engine's; a lesson passes its own
            check_int("sliding_window", sliding_window, hint="or None")
        if groups is not None and sliding_window is not None:
            raise ValueError("give sliding_window (one kind of layer) or groups (several kinds), not both")
        windows = (sliding_window,) if groups is None else tuple(g.sliding_window for g in groups)
        if not windows:
            raise ValueError("groups is empty; a model has at least one KV-cache group")
        for w in windows:
            if w is not None:
                check_int("sliding_window", w, hint="or None")
        self.allocator = BlockAllocator(num_blocks, block_size, enable_prefix_caching)
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.group_windows: tuple[int | None, ...] = windows  # one per KV-cache group
        self.sliding_window = sliding_window
        self.sequences: dict[int, Sequence] = {}  # sequences holding blocks
        self._num_slots: dict[int, int] = {}  # seq_id -> positions covered by its last allocation
        self._hashes: dict[int, list[int]] = {}  # seq_id -> chained hashes of its leading full blocks, computed once
        self._published: dict[int, int] = {}  # seq_id -> leading full blocks already offered to the prefix cache
        # Prefix-cache counters in tokens, as vLLM counts them (vllm:prefix_cache_queries / _hits): every first
        # admission with prefix caching on queries its tokens and hits the ones found in cached full blocks. A
        # preempted request's readmission is counted apart, as vLLM's `PrefixCacheStats.preempted_queries` /
        # `preempted_hits` are (they never reach those two metrics).
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0
        self.prefix_cache_preempted_queries = 0
        self.prefix_cache_preempted_hits = 0

    def __repr__(self) -> str:
        return f"BlockManager({self.allocator!r}, num_sequences={len(self.sequences)})"

    @property
    def num_groups(self) -> int:
        """KV-cache groups: block tables per sequence (1 unless the model mixes attention kinds)."""
        return len(self.group_windows)

    @property
    def num_free_blocks(self) -> int:
        """Blocks the allocator can hand out."""
        return self.allocator.num_free_blocks

    @property
    def prefix_cache_hit_rate(self) -> float:
        """Tokens found in the prefix cache over tokens looked up at admission (0.0 before any lookup)."""
        return self.prefix_cache_hits / self.prefix_cache_queries if self.prefix_cache_queries else 0.0

    def _is_held(self, seq: Sequence) -> bool:
        """True if `seq` holds blocks here (allocate_slots grows it), False if it holds none (admits it)."""
        held = self.sequences.get(seq.seq_id)
        if held is None:
            assert seq.block_size == self.block_size, (seq.block_size, self.block_size)  # both from one config
            if any(seq.block_tables):
                raise ValueError(
                    f"sequence {seq.seq_id} has block_table {seq.block_table} that this manager did not give it; "
                    f"admit a fresh Sequence (empty block_table)"
                )
            return False
        if held is not seq:
            raise ValueError(
                f"another sequence with seq_id {seq.seq_id} holds blocks here; give every request its own seq_id"
            )
        return True

    def _full_blocks(self, seq: Sequence, start: int, stop: int, parent: int | None) -> Iterator[FullBlock]:
        """(index, chained hash, token ids) of `seq`'s full blocks start..stop-1, chained on from `parent`."""
        bs, tokens = self.block_size, seq.token_ids
        for i in range(start, stop):
            chunk = tuple(tokens[i * bs : (i + 1) * bs])
            parent = compute_block_hash(parent, chunk)
            yield i, parent, chunk

    def get_computed_blocks(self, seq: Sequence) -> ComputedBlocks:
        """The prefix-cache hit admitting `seq` would use right now (a query: nothing changes); pass it to
        `allocate_slots` so its hashes are not computed again.

        Hashes the prompt's full blocks once (never the last token's block: it must be computed to give logits,
        as vLLM does). A full-attention group's hit is the longest run of cached blocks from the start; a sliding
        group's hit at length L needs only the blocks a query at position L still sees (vLLM's
        `SlidingWindowManager.find_longest_cache_hit`); the hit is the longest L every group has."""
        bs, n = self.block_size, seq.num_tokens
        if not self.allocator.enable_prefix_caching:
            return ComputedBlocks(0, ((),) * self.num_groups, (0,) * self.num_groups, (), n)
        found = list(self._full_blocks(seq, 0, (n - 1) // bs, None))
        lookup = self.allocator.lookup
        limit = len(found)
        for g, window in enumerate(self.group_windows):
            if window is None:  # full attention: the leading run of hits
                run = 0
                while run < limit and lookup(group_key(found[run][1], g), found[run][2]) is not None:
                    run += 1
                limit = run
        hit = limit
        for g, window in enumerate(self.group_windows):
            if window is not None:
                hit = self._sliding_hit(found, g, window, hit)
        blocks: list[tuple[int, ...]] = []
        dropped: list[int] = []
        for g, window in enumerate(self.group_windows):
            first = first_needed_block(hit * bs, window, bs)
            blocks.append(tuple(lookup(group_key(found[i][1], g), found[i][2]) for i in range(first, hit)))
            dropped.append(first)
        return ComputedBlocks(hit * bs, tuple(blocks), tuple(dropped), tuple(h for _, h, _ in found), n)

    def _sliding_hit(self, found: list[FullBlock], group: int, window: int, limit: int) -> int:
        """Longest hit of at most `limit` blocks for a sliding group: the blocks its window needs are cached."""
        lookup, bs = self.allocator.lookup, self.block_size
        for hit in range(limit, 0, -1):
            first = first_needed_block(hit * bs, window, bs)
            if all(
                lookup(group_key(found[i][1], group), found[i][2]) is not None for i in range(hit - 1, first - 1, -1)
            ):
                return hit
        return 0

    def num_cached_prefix_tokens(self, seq: Sequence) -> int:
        """Tokens admitting `seq` would take from the prefix cache right now (a query: nothing changes)."""
        return self.get_computed_blocks(seq).num_tokens

    def _plan_admission(self, seq: Sequence, num_new_tokens: int | None, computed: ComputedBlocks | None) -> _Admission:
        if computed is None or computed.num_seq_tokens != seq.num_tokens:
            computed = self.get_computed_blocks(seq)
        num_cached = computed.num_tokens
        remaining = seq.num_tokens - num_cached
        n = remaining if num_new_tokens is None else num_new_tokens
        if type(n) is not int or not 1 <= n <= remaining:
            raise ValueError(
                f"num_new_tokens={num_new_tokens!r} for sequence {seq.seq_id} must be in 1..{remaining} "
                f"({seq.num_tokens} tokens, {num_cached} cached)"
            )
        fresh = -(-(num_cached + n) // self.block_size) - num_cached // self.block_size
        refs = self.allocator.ref_counts
        # Hits a group's window no longer needs are left where they are, not revived; cached-free hits a group
        # keeps leave the free pool too.
        revived = sum(1 for kept in computed.blocks for b in kept if refs[b] == 0)
        return _Admission(n, computed, fresh, fresh * self.num_groups + revived)

    def _plan_growth(self, seq: Sequence, num_new_tokens: int | None) -> _Growth:
        start, num_tokens = seq.num_computed_tokens, len(seq.token_ids)
        n = num_tokens - start if num_new_tokens is None else num_new_tokens
        if type(n) is not int or n < 1 or start + n > num_tokens:
            raise ValueError(
                f"num_new_tokens={num_new_tokens!r} for sequence {seq.seq_id} must be in "
                f"1..{num_tokens - start} ({num_tokens} tokens, {start} computed)"
            )
        end, bs = start + n, self.block_size
        refs = self.allocator.ref_counts  # hot path (every decode step): index the live view directly
        last = -(-end // bs)  # blocks needed to cover positions 0..end-1
        size = len(seq.block_tables[0])
        grow = last - size if last > size else 0
        shared: list[list[int]] = []
        skipped: list[list[int]] = []
        gained = 0
        for table, window in zip(seq.block_tables, self.group_windows, strict=True):
            # A block this step writes into must be exclusively ours: shared ones are copied first.
            shared.append([i for i in range(start // bs, min(last, size)) if refs[table[i]] > 1])
            behind = [] if window is None else skipped_blocks(table, start, window, bs)
            skipped.append(behind)
            gained += sum(1 for i in behind if refs[table[i]] == 1)
        return _Growth(end, shared, grow, skipped, gained)

    def _plan(
        self, seq: Sequence, num_new_tokens: int | None, watermark_blocks: int, computed: ComputedBlocks | None = None
    ) -> _Admission | _Growth:
        if type(watermark_blocks) is not int or watermark_blocks < 0:
            raise ValueError(f"watermark_blocks={watermark_blocks!r} must be an integer >= 0 (blocks left free)")
        if self._is_held(seq):
            return self._plan_growth(seq, num_new_tokens)
        return self._plan_admission(seq, num_new_tokens, computed)

    def _full_sequence_cost(self, seq: Sequence, computed: ComputedBlocks, max_in_flight_tokens: int | None) -> int:
        """Free blocks admitting `seq`'s whole sequence would consume after its prefix-cache hit (vLLM V1's
        `full_sequence_must_fit` count, `get_num_blocks_to_allocate` over `request.num_tokens`).

        Per group: the blocks of all its tokens, a sliding group's capped at what its window and one step of
        `max_in_flight_tokens` new tokens can hold (`kv_blocks_per_seq`, vLLM's
        `max_admission_blocks_per_request`; None: no cap), less the hit's blocks; plus the cached-free hits
        that leave the free pool when revived."""
        bs, n, hit_blocks = self.block_size, seq.num_tokens, computed.num_tokens // self.block_size
        cost = sum(
            max(kv_blocks_per_seq(n, bs, window, max_in_flight_tokens) - hit_blocks, 0) for window in self.group_windows
        )
        refs = self.allocator.ref_counts
        return cost + sum(1 for kept in computed.blocks for b in kept if refs[b] == 0)

    def _fits(
        self,
        seq: Sequence,
        plan: _Admission | _Growth,
        watermark_blocks: int,
        full_sequence_must_fit: bool,
        max_in_flight_tokens: int | None,
    ) -> bool:
        if max_in_flight_tokens is not None and (type(max_in_flight_tokens) is not int or max_in_flight_tokens < 1):
            raise ValueError(
                f"max_in_flight_tokens={max_in_flight_tokens!r} must be a whole number of tokens >= 1 (the step's "
                "token budget), or None"
            )
        free = self.allocator.num_free_blocks + plan.gained
        if full_sequence_must_fit and isinstance(plan, _Admission):
            # An admission gate only: the whole sequence must fit now, but only the step's blocks are taken.
            if not fits(self._full_sequence_cost(seq, plan.computed, max_in_flight_tokens), free, watermark_blocks):
                return False
        return fits(plan.cost, free, watermark_blocks)

    def can_allocate(
        self,
        seq: Sequence,
        num_new_tokens: int | None = None,
        watermark_blocks: int = 0,
        full_sequence_must_fit: bool = False,
        max_in_flight_tokens: int | None = None,
    ) -> bool:
        """Whether `allocate_slots` with these arguments would succeed right now (a query: nothing changes)."""
        plan = self._plan(seq, num_new_tokens, watermark_blocks)
        return self._fits(seq, plan, watermark_blocks, full_sequence_must_fit, max_in_flight_tokens)

    def allocate_slots(
        self,
        seq: Sequence,
        num_new_tokens: int | None = None,
        watermark_blocks: int = 0,
        computed: ComputedBlocks | None = None,
        full_sequence_must_fit: bool = False,
        max_in_flight_tokens: int | None = None,
    ) -> SlotAllocation | None:
        """Give `seq`'s next `num_new_tokens` positions cache slots, in every KV-cache group, all of them or none.

        vLLM V1's `KVCacheManager.allocate_slots(request, num_new_tokens, num_new_computed_tokens,
        new_computed_blocks, ...) -> KVCacheBlocks | None` (vllm/v1/core/kv_cache_manager.py): one call that
        either allocates everything the step needs for the sequence or returns None. A sequence that holds no
        blocks is admitted: its prompt's leading full blocks found in the prefix cache are reused (their
        tokens count as computed: num_computed_tokens = the hit, and num_cached_tokens too unless it is a
        preempted request's readmission (vLLM reports the first admission's hit); `computed`, from
        `get_computed_blocks` just before, saves looking them up again), and num_new_tokens (None: the rest of
        its tokens) get fresh blocks. A sequence that holds blocks grows from its num_computed_tokens: shared
        blocks it writes into are replaced by copies (the (src, dst) pairs to copy before the step), and blocks
        are appended (None: up to its last token). The pool must keep `watermark_blocks` free afterwards (the
        scheduler's admission headroom); blocks behind a sliding window count as free and are given back only
        when the allocation goes ahead (vLLM frees them even when it returns None). Full computed blocks are
        published to the prefix cache first.

        full_sequence_must_fit (the scheduler passes its `scheduler_reserve_full_isl`, vLLM's argument of the
        same name): an admission also needs the blocks of the sequence's *whole* length (prompt, plus the
        tokens generated so far for a preempted request) after its prefix-cache hit, with the watermark on
        top, free right now; a check only, nothing is reserved, and a sequence that holds blocks skips it.
        `max_in_flight_tokens` (the step's token budget) caps a sliding group's share of that count.

        Returns None, having changed nothing, when the pool cannot give it all; bad arguments are a ValueError.
        """
        plan = self._plan(seq, num_new_tokens, watermark_blocks, computed)
        if not self._fits(seq, plan, watermark_blocks, full_sequence_must_fit, max_in_flight_tokens):
            return None
        if isinstance(plan, _Growth):
            return self._grow(seq, plan)
        return self._admit(seq, plan)

    def _admit(self, seq: Sequence, plan: _Admission) -> SlotAllocation:
        alloc, computed = self.allocator, plan.computed
        for kept in computed.blocks:  # revive hits before allocating, so eviction cannot take them
            for block_id in kept:
                alloc.incref(block_id)
        new: list[int] = []
        tables: list[list[int]] = []
        for kept, dropped in zip(computed.blocks, computed.dropped, strict=True):
            fresh = alloc.allocate_blocks(plan.fresh)
            tables.append([FREED] * dropped + list(kept) + fresh)
            new.extend(fresh)
        seq.block_tables = tables
        num_cached = computed.num_tokens
        seq.num_computed_tokens = num_cached
        if not seq.num_preemptions:  # what a request reports is its first admission's hit, as vLLM's prefill stats
            seq.num_cached_tokens = num_cached
        if alloc.enable_prefix_caching and seq.num_preemptions:  # a resumed request: vLLM counts it apart
            self.prefix_cache_preempted_queries += seq.num_tokens
            self.prefix_cache_preempted_hits += num_cached
        elif alloc.enable_prefix_caching:
            self.prefix_cache_queries += seq.num_tokens
            self.prefix_cache_hits += num_cached
        self.sequences[seq.seq_id] = seq
        self._hashes[seq.seq_id] = list(computed.hashes)
        self._published[seq.seq_id] = num_cached // self.block_size
        self._num_slots[seq.seq_id] = num_cached + plan.num_new_tokens
        return SlotAllocation(tuple(new), (), num_cached)

    def _grow(self, seq: Sequence, plan: _Growth) -> SlotAllocation:
        self.cache_computed_blocks(seq)  # before the window drops them, so they stay findable as a prefix
        alloc, num_computed = self.allocator, seq.num_computed_tokens
        new: list[int] = []
        copies: list[tuple[int, int]] = []
        num_freed = 0
        # Every group's window lets go first: the plan counted those blocks as free for all groups' growth.
        for table, skipped in zip(seq.block_tables, plan.skipped, strict=True):
            for i in skipped:
                alloc.free(table[i])
                table[i] = FREED
            num_freed += len(skipped)
        for table, shared in zip(seq.block_tables, plan.shared, strict=True):
            for i in shared:
                old, block_id = table[i], alloc.allocate()
                table[i] = block_id
                alloc.free(old)
                new.append(block_id)
                if i * self.block_size < num_computed:  # holds computed tokens: copy them over
                    copies.append((old, block_id))
            for _ in range(plan.grow):
                block_id = alloc.allocate()
                table.append(block_id)
                new.append(block_id)
        slots = self._num_slots
        if plan.end > slots[seq.seq_id]:
            slots[seq.seq_id] = plan.end
        if not new and not num_freed:
            return NOTHING_NEW
        return SlotAllocation(tuple(new), tuple(copies), 0, num_freed)

    def _out_of_blocks(self, seq: Sequence, num_new_tokens: int | None) -> OutOfBlocksError:
        plan = self._plan(seq, num_new_tokens, 0)
        return OutOfBlocksError(plan.cost, self.allocator.num_free_blocks + plan.gained, self.num_blocks)

    def allocate_sequence(self, seq: Sequence, num_new_tokens: int | None = None) -> int:
        """Admit `seq` (`allocate_slots` on a sequence holding no blocks); returns num_cached_tokens.

        For callers that draw a fixed scene and cannot wait (the lessons): OutOfBlocksError, with nothing
        changed, when the pool is too small. The scheduler calls `allocate_slots`.
        """
        if seq.seq_id in self.sequences:
            raise ValueError(
                f"sequence {seq.seq_id} already holds blocks {seq.block_table}; call free_sequence() before "
                f"allocating it again, or append_slots() to grow it"
            )
        got = self.allocate_slots(seq, num_new_tokens)
        if got is None:
            raise self._out_of_blocks(seq, num_new_tokens)
        return got.num_cached_tokens

    def append_slots(self, seq: Sequence, num_new_tokens: int = 1) -> list[tuple[int, int]]:
        """Grow `seq` (`allocate_slots` on a sequence holding blocks); returns the (src, dst) block copies.

        For callers that cannot wait (the lessons): OutOfBlocksError, with nothing changed, when the pool
        is too small. The scheduler calls `allocate_slots`.
        """
        if seq.seq_id not in self.sequences:
            raise ValueError(f"sequence {seq.seq_id} holds no blocks; call allocate_sequence() first")
        got = self.allocate_slots(seq, num_new_tokens)
        if got is None:
            raise self._out_of_blocks(seq, num_new_tokens)
        return list(got.copies)

    def fork(self, parent: Sequence, child: Sequence) -> None:
        """Make `child` share every block of `parent` (ref + 1 each); writes copy-on-write later."""
        if parent.seq_id not in self.sequences:
            raise ValueError(f"parent sequence {parent.seq_id} holds no blocks; allocate it before fork()")
        assert child.block_size == self.block_size, (child.block_size, self.block_size)
        if child.seq_id in self.sequences or any(child.block_tables):
            raise ValueError(f"child sequence {child.seq_id} already holds blocks; fork() into a new sequence")
        n = parent.num_computed_tokens
        if child.token_ids[:n] != parent.token_ids[:n]:
            raise ValueError(
                f"child sequence {child.seq_id} must start with parent {parent.seq_id}'s {n} computed tokens"
            )
        for table in parent.block_tables:
            for block_id in table:
                if block_id != FREED:
                    self.allocator.incref(block_id)
        child.block_tables = [list(table) for table in parent.block_tables]
        child.num_computed_tokens, child.num_cached_tokens = n, parent.num_cached_tokens
        self.sequences[child.seq_id] = child
        self._hashes[child.seq_id] = list(self._hashes[parent.seq_id])
        self._published[child.seq_id] = self._published[parent.seq_id]
        self._num_slots[child.seq_id] = min(self._num_slots[parent.seq_id], child.num_tokens)

    def free_sequence(self, seq: Sequence) -> None:
        """Release all of `seq`'s blocks (its full computed blocks stay in the prefix cache)."""
        if seq.seq_id not in self.sequences:
            raise ValueError(f"sequence {seq.seq_id} holds no blocks; it was never allocated or is already freed")
        self.cache_computed_blocks(seq)
        # Reverse order: the tail of a prefix is freed first, so LRU eviction takes it before the head.
        for table in seq.block_tables:
            for block_id in reversed(table):
                if block_id != FREED:
                    self.allocator.free(block_id)
        seq.block_tables = [[]]
        sid = seq.seq_id
        del self.sequences[sid], self._hashes[sid], self._published[sid], self._num_slots[sid]

    def cache_computed_blocks(self, seq: Sequence) -> None:
        """Publish `seq`'s full, computed blocks to the prefix cache, in every group that still holds them
        (no-op without prefix caching). Each block's chained hash is computed once per admission."""
        if not self.allocator.enable_prefix_caching or seq.seq_id not in self.sequences:
            return
        hashes, tables, bs = self._hashes[seq.seq_id], seq.block_tables, self.block_size
        num_full = min(seq.num_computed_tokens // bs, len(tables[0]))
        done = self._published[seq.seq_id]
        if num_full <= done:
            return
        if len(hashes) < num_full:  # blocks the lookup did not hash: generated tokens, the prompt's last block
            more = self._full_blocks(seq, len(hashes), num_full, hashes[-1] if hashes else None)
            hashes.extend(h for _, h, _ in more)
        tokens = seq.token_ids
        for i in range(done, num_full):
            chunk = tuple(tokens[i * bs : (i + 1) * bs])
            for g, table in enumerate(tables):
                if table[i] != FREED:
                    self.allocator.cache_block(table[i], group_key(hashes[i], g), chunk)
        self._published[seq.seq_id] = num_full

    def snapshot(self) -> list[BlockInfo]:
        """Every physical block in id order, with owners and filled slots."""
        return snapshot_blocks(self.allocator, self.sequences.values(), self._num_slots)

    def usage(self, bytes_per_slot: int = 0) -> BlockUsage:
        """Pool-wide allocated / used slots and internal fragmentation (bytes if bytes_per_slot given)."""
        return pool_usage(self.allocator, self.sequences.values(), self._num_slots, bytes_per_slot)


def slots_of(block_table: Seq[int], start: int, stop: int, block_size: int) -> list[int]:
    """Cache slots of a sequence's positions start..stop-1: block_table[p // bs] * bs + p % bs each.

    Built a block at a time (one `range` per block the positions touch, not one Python expression per token):
    a 2,048-token prompt chunk is 128 ranges at 16-token blocks."""
    if start >= stop:
        return []
    if stop - start == 1:  # a decode step's one token
        return [block_table[start // block_size] * block_size + start % block_size]
    slots: list[int] = []
    for b in range(start // block_size, (stop - 1) // block_size + 1):
        base = block_table[b] * block_size
        lo, hi = max(start, b * block_size), min(stop, (b + 1) * block_size)
        slots.extend(range(base + lo - b * block_size, base + hi - b * block_size))
    return slots
