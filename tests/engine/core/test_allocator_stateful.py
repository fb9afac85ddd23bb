"""Hypothesis state machines: thousands of random allocate / incref / free / admit / append / fork / free ops.

The BlockManager machine also simulates the K/V the model would write: every computed token's slot must hold
(token id, position) — so a prefix hit that reused the wrong block, a copy-on-write that forgot a copy, or an
eviction of a block still in use shows up as wrong cache content, not just as a wrong counter.
"""

from collections import OrderedDict, deque

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from engine.core.block_allocator import BlockAllocator, OutOfBlocksError
from engine.core.block_manager import BlockManager
from engine.core.sequence import Sequence

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

    @initialize(num_blocks=st.integers(1, 24), block_size=st.sampled_from([1, 2, 4]), caching=st.booleans())
    def setup(self, num_blocks, block_size, caching):
        self.bm = BlockManager(num_blocks, block_size, enable_prefix_caching=caching)
        self.bs = block_size
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
        return (self.bm.num_free_blocks, {i: list(s.block_table) for i, s in self.bm.sequences.items()})

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
        before = self._state()
        if self.bm.can_allocate(seq, n):
            cached = self.bm.allocate_sequence(seq, n)
            assert cached % self.bs == 0 and cached < seq.num_tokens
            assert seq.num_computed_tokens == seq.num_cached_tokens == cached
            self.scheduled[seq.seq_id] = cached + n
        else:
            try:
                self.bm.allocate_sequence(seq, n)
            except OutOfBlocksError:
                assert self._state() == before and seq.block_table == []
                self.waiting.append(seq)
                return
            raise AssertionError("allocate_sequence must raise when can_allocate is False")

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
        before = self._state()
        if self.bm.can_append(seq, n):
            for src, dst in self.bm.append_slots(seq, n):
                for off in range(self.bs):  # PagedKVCache.copy_blocks
                    if (src * self.bs + off) in self.content:
                        self.content[dst * self.bs + off] = self.content[src * self.bs + off]
            self.scheduled[seq.seq_id] = seq.num_computed_tokens + n
        else:
            try:
                self.bm.append_slots(seq, n)
            except OutOfBlocksError:
                assert self._state() == before
                return
            raise AssertionError("append_slots must raise when can_append is False")

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
            assert len(set(seq.block_table)) == len(seq.block_table)  # no block twice in one table
            assert len(seq.block_table) == -(-self.scheduled[seq.seq_id] // self.bs)
            for b in seq.block_table:
                owners[b] += 1
        refs = [alloc.ref_count(b) for b in range(n)]
        assert refs == owners
        assert alloc.num_free_blocks + sum(r > 0 for r in refs) == n
        snap = self.bm.snapshot()
        assert [len(i.owners) for i in snap] == owners
        usage = self.bm.usage()
        assert usage.allocated_slots == (n - alloc.num_free_blocks) * self.bs
        filled = {}  # block -> slots with a token, as the fullest of its owners sees it
        for seq in self.bm.sequences.values():
            for i, b in enumerate(seq.block_table):
                filled[b] = max(filled.get(b, 0), min(self.bs, max(0, self.scheduled[seq.seq_id] - i * self.bs)))
        assert usage.used_slots == sum(filled.values()) <= usage.allocated_slots
        assert all(info.num_filled == filled[info.block_id] for info in snap if info.ref_count > 0)

    @invariant()
    def cache_content_is_right(self):
        if not hasattr(self, "bm"):
            return
        for seq in self.bm.sequences.values():
            for p in range(seq.num_computed_tokens):
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
