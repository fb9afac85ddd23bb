"""Hypothesis state machines: thousands of random allocate / incref / free / admit / append / fork / free ops.

The BlockManager machine also simulates the K/V the model would write: every computed token's slot must hold
(token id, position) — so a prefix hit that reused the wrong block, a copy-on-write that forgot a copy, or an
eviction of a block still in use shows up as wrong cache content, not just as a wrong counter. It runs with
and without a sliding window, checks that `allocate_slots` succeeds exactly when `can_allocate` says so,
that a None changes nothing, that what it returns is what it did, and that queries change nothing.
"""

from collections import OrderedDict, deque

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from engine.core.block_allocator import BlockAllocator, OutOfBlocksError
from engine.core.block_manager import BlockManager, SlotAllocation
from engine.core.sequence import Sequence
from engine.core.sliding_window import FREED, first_needed_block

SETTINGS = settings(
    max_examples=120, stateful_step_count=50, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
PREFIXES = [[1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 4, 9, 9, 9, 9], [5, 6, 7, 8, 1, 2, 3, 4]]


class AllocatorMachine(RuleBasedStateMachine):
    """Raw BlockAllocator against a plain model of ref counts, FIFO free queue and LRU cached blocks."""

    @initialize(num_blocks=st.integers(1, 12), caching=st.booleans())
    def setup(self, num_blocks, caching):
        self.alloc = BlockAllocator(num_blocks, 2, enable_prefix_caching=caching)
        self.refs = [0] * num_blocks
        self.free_fifo = deque(range(num_blocks))
        self.lru = OrderedDict()  # cached blocks with ref 0, oldest first
        self.cached = {}  # block -> tokens
        self.counter = 0

    @rule()
    def allocate(self):
        if not self.free_fifo and not self.lru:
            try:
                self.alloc.allocate()
            except OutOfBlocksError as e:
                assert e.free == 0
                return
            raise AssertionError("allocate() on an empty pool must raise")
        b = self.alloc.allocate()
        expected = self.free_fifo.popleft() if self.free_fifo else self.lru.popitem(last=False)[0]
        assert b == expected
        self.cached.pop(b, None)
        self.refs[b] = 1

    @rule(data=st.data())
    def incref(self, data):
        b = data.draw(st.integers(0, len(self.refs) - 1))
        if self.refs[b] == 0 and b not in self.lru:
            try:
                self.alloc.incref(b)
            except ValueError:
                return
            raise AssertionError("incref of a free block must raise")
        self.alloc.incref(b)
        self.lru.pop(b, None)
        self.refs[b] += 1

    @rule(data=st.data())
    def free(self, data):
        b = data.draw(st.integers(-1, len(self.refs)))
        if not 0 <= b < len(self.refs) or self.refs[b] == 0:
            try:
                self.alloc.free(b)
            except ValueError:
                return
            raise AssertionError("free of a block that is not allocated must raise")
        self.alloc.free(b)
        self.refs[b] -= 1
        if self.refs[b] == 0:
            if b in self.cached:
                self.lru[b] = None
            else:
                self.free_fifo.append(b)

    @precondition(lambda self: self.alloc.enable_prefix_caching)
    @rule(data=st.data())
    def cache_and_lookup(self, data):
        used = [b for b, r in enumerate(self.refs) if r > 0 and b not in self.cached]
        if used:
            b = data.draw(st.sampled_from(used))
            tokens = (self.counter, self.counter + 1)
            self.counter += 1
            assert self.alloc.cache_block(b, hash(tokens), tokens)
            self.cached[b] = tokens
        for b, tokens in self.cached.items():
            assert self.alloc.lookup(hash(tokens), tokens) == b

    @invariant()
    def matches_model(self):
        if not hasattr(self, "alloc"):
            return
        assert [self.alloc.ref_count(b) for b in range(len(self.refs))] == self.refs
        assert self.alloc.num_free_blocks == len(self.free_fifo) + len(self.lru)
        assert self.alloc.num_free_blocks + sum(r > 0 for r in self.refs) == len(self.refs)
        assert self.alloc.num_cached_blocks == len(self.cached)


class ManagerMachine(RuleBasedStateMachine):
    """BlockManager driven like a scheduler + model runner, with a simulated K/V cache."""

    @initialize(
        num_blocks=st.integers(1, 24),
        block_size=st.sampled_from([1, 2, 4]),
        caching=st.booleans(),
        window=st.sampled_from([None, None, 1, 3, 6]),
    )
    def setup(self, num_blocks, block_size, caching, window):
        self.bm = BlockManager(num_blocks, block_size, enable_prefix_caching=caching, sliding_window=window)
        self.bs = block_size
        self.window = window
        self.content = {}  # slot -> (token id, position) the "model" wrote there
        self.scheduled = {}  # seq_id -> positions that have slots (computed + scheduled this step)
        self.waiting: list[Sequence] = []
        self.next_id = 0

    def _running(self, ready: bool = False) -> list[Sequence]:
        seqs = list(self.bm.sequences.values())
        return [s for s in seqs if self.scheduled[s.seq_id] == s.num_computed_tokens] if ready else seqs

    def _slot(self, seq: Sequence, p: int) -> int:
        return seq.block_table[p // self.bs] * self.bs + p % self.bs

    def _state(self):
        """Everything an allocation that returns None, or a query, must leave as it was."""
        alloc = self.bm.allocator
        seqs = {
            i: (list(s.block_table), s.num_computed_tokens, s.num_cached_tokens) for i, s in self.bm.sequences.items()
        }
        lru = [b for b in range(self.bm.num_blocks) if alloc.is_evictable(b)]
        return self.bm.num_free_blocks, alloc.num_cached_blocks, lru, self.bm.snapshot(), self.bm.usage(), seqs

    def _allocate(self, seq: Sequence, n: int) -> SlotAllocation | None:
        """allocate_slots, checked against can_allocate and against what it changed."""
        held = seq.seq_id in self.bm.sequences
        table = list(seq.block_table)
        before = self._state()
        expected = self.bm.can_allocate(seq, n)
        assert self._state() == before  # a query changes nothing
        got = self.bm.allocate_slots(seq, n)
        assert (got is not None) == expected  # the query and the allocation agree
        if got is None:
            assert self._state() == before and seq.block_table == table  # all or nothing
            return None
        refs = self.bm.allocator.ref_counts
        assert all(refs[b] == 1 and b in seq.block_table for b in got.new_blocks)  # fresh, ours alone
        assert len(set(got.new_blocks)) == len(got.new_blocks)
        for src, dst in got.copies:
            assert dst in got.new_blocks and src in table and src not in seq.block_table
        if held:  # the window's entries: the ones freed before plus the ones this call freed
            assert seq.block_table.count(FREED) == table.count(FREED) + got.num_freed_blocks
        else:
            assert got.num_freed_blocks == 0
        if held:
            assert got.num_cached_tokens == 0
            kept = [b for b in seq.block_table if b not in got.new_blocks and b != FREED]
            assert all(b in table for b in kept)  # growth never takes a block it was not given
        else:
            assert got.num_cached_tokens == seq.num_cached_tokens == seq.num_computed_tokens
        return got

    @rule(data=st.data(), prefix=st.sampled_from(range(len(PREFIXES))), cut=st.integers(0, 8), extra=st.integers(0, 6))
    def admit(self, data, prefix, cut, extra):
        if self.waiting and data.draw(st.booleans()):
            seq = self.waiting.pop(data.draw(st.integers(0, len(self.waiting) - 1)))  # a preempted one
        else:
            tokens = PREFIXES[prefix][:cut] + data.draw(st.lists(st.integers(0, 3), min_size=extra, max_size=extra))
            seq = Sequence(self.next_id, tokens or [0], block_size=self.bs)
            self.next_id += 1
        remaining = seq.num_tokens - self.bm.num_cached_prefix_tokens(seq)
        n = data.draw(st.integers(1, remaining))
        got = self._allocate(seq, n)
        if got is None:
            assert seq.block_table == []
            self.waiting.append(seq)
            return
        cached = got.num_cached_tokens
        assert cached % self.bs == 0 and cached < seq.num_tokens
        assert len(seq.block_table) == -(-(cached + n) // self.bs)
        self.scheduled[seq.seq_id] = cached + n

    @rule(data=st.data())
    def step(self, data):
        """The model writes K/V for every scheduled position, then the tokens count as computed."""
        seqs = [s for s in self._running() if self.scheduled[s.seq_id] > s.num_computed_tokens]
        if not seqs:
            return
        seq = data.draw(st.sampled_from(seqs))
        for p in range(seq.num_computed_tokens, self.scheduled[seq.seq_id]):
            # copy-on-write guarantee: nobody else can see the block this sequence writes into
            assert self.bm.allocator.ref_count(seq.block_table[p // self.bs]) == 1
            self.content[self._slot(seq, p)] = (seq.token_ids[p], p)
        seq.num_computed_tokens = self.scheduled[seq.seq_id]

    @rule(data=st.data(), token=st.integers(0, 3))
    def append(self, data, token):
        seqs = self._running(ready=True)
        if not seqs:
            return
        seq = data.draw(st.sampled_from(seqs))
        if seq.num_computed_tokens == seq.num_tokens:
            seq.append_token(token)  # decode: the token sampled last step
        n = data.draw(st.integers(1, seq.num_tokens - seq.num_computed_tokens))
        got = self._allocate(seq, n)
        if got is None:
            return
        for src, dst in got.copies:
            for off in range(self.bs):  # the runner's copy of block src into dst
                if (src * self.bs + off) in self.content:
                    self.content[dst * self.bs + off] = self.content[src * self.bs + off]
        self.scheduled[seq.seq_id] = seq.num_computed_tokens + n

    @rule(data=st.data())
    def query(self, data):
        """Ask about any sequence, held or waiting, and do nothing with the answer."""
        seqs = self._running() + self.waiting
        if not seqs:
            return
        seq = data.draw(st.sampled_from(seqs))
        held = seq.seq_id in self.bm.sequences
        left = seq.num_tokens - (seq.num_computed_tokens if held else self.bm.num_cached_prefix_tokens(seq))
        if left < 1:
            return
        before = self._state()
        n, watermark = data.draw(st.integers(1, left)), data.draw(st.integers(0, 3))
        answer = self.bm.can_allocate(seq, n, watermark_blocks=watermark)
        assert self.bm.can_allocate(seq, n, watermark_blocks=watermark) == answer
        self.bm.num_cached_prefix_tokens(seq)
        assert self._state() == before

    @rule(data=st.data())
    def fork(self, data):
        seqs = self._running(ready=True)
        if not seqs:
            return
        parent = data.draw(st.sampled_from(seqs))
        child = Sequence(self.next_id, parent.token_ids, block_size=self.bs)
        self.next_id += 1
        self.bm.fork(parent, child)
        assert child.block_table == parent.block_table
        self.scheduled[child.seq_id] = child.num_computed_tokens

    @rule(data=st.data(), preempt=st.booleans())
    def free(self, data, preempt):
        seqs = self._running()
        if not seqs:
            return
        seq = data.draw(st.sampled_from(seqs))
        seq.num_computed_tokens = min(seq.num_computed_tokens, self.scheduled[seq.seq_id])
        self.bm.free_sequence(seq)
        assert seq.block_table == []
        del self.scheduled[seq.seq_id]
        if preempt:  # recompute later, possibly from the prefix cache
            seq.num_computed_tokens = 0
            self.waiting.append(seq)

    @invariant()
    def pool_conserved_and_refs_match_owners(self):
        if not hasattr(self, "bm"):
            return
        alloc, n = self.bm.allocator, self.bm.num_blocks
        owners = [0] * n
        for seq in self.bm.sequences.values():
            held = [b for b in seq.block_table if b != FREED]
            assert len(set(held)) == len(held)  # no block twice in one table
            assert len(seq.block_table) == -(-self.scheduled[seq.seq_id] // self.bs)
            # Entries behind the window are a prefix of the table; every block a coming query sees is held.
            num_freed = len(seq.block_table) - len(held)
            assert seq.block_table[:num_freed] == [FREED] * num_freed
            assert num_freed <= first_needed_block(seq.num_computed_tokens, self.window, self.bs)
            for b in held:
                owners[b] += 1
        refs = [alloc.ref_count(b) for b in range(n)]
        assert refs == owners
        assert alloc.num_free_blocks + sum(r > 0 for r in refs) == n  # no block leaks
        snap = self.bm.snapshot()
        assert [len(i.owners) for i in snap] == owners
        usage = self.bm.usage()
        assert usage.allocated_slots == (n - alloc.num_free_blocks) * self.bs
        filled = {}  # block -> slots with a token, as the fullest of its owners sees it
        for seq in self.bm.sequences.values():
            for i, b in enumerate(seq.block_table):
                if b != FREED:
                    slots = min(self.bs, max(0, self.scheduled[seq.seq_id] - i * self.bs))
                    filled[b] = max(filled.get(b, 0), slots)
        assert usage.used_slots == sum(filled.values()) <= usage.allocated_slots
        assert all(info.num_filled == filled[info.block_id] for info in snap if info.ref_count > 0)

    @invariant()
    def cache_content_is_right(self):
        if not hasattr(self, "bm"):
            return
        for seq in self.bm.sequences.values():
            for p in range(seq.num_computed_tokens):
                if seq.block_table[p // self.bs] != FREED:
                    assert self.content.get(self._slot(seq, p)) == (seq.token_ids[p], p)
        alloc = self.bm.allocator
        for b in range(self.bm.num_blocks):
            if alloc.block_hash(b) is not None:  # a cached block holds exactly the tokens it is found by
                tokens = tuple(self.content[b * self.bs + off][0] for off in range(self.bs))
                assert alloc.lookup(alloc.block_hash(b), tokens) == b


TestAllocatorMachine = AllocatorMachine.TestCase
TestAllocatorMachine.settings = SETTINGS
TestManagerMachine = ManagerMachine.TestCase
TestManagerMachine.settings = SETTINGS
