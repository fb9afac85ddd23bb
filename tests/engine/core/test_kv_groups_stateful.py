"""Hypothesis state machine: a hybrid model's KV-cache groups over one shared block pool.

A BlockManager with a full-attention group and one or more sliding-window groups (engine/core/kv_groups.py)
is driven like the scheduler and the model runner drive it: admissions (with prefix-cache hits), prompt
chunks, decodes, forks, frees and preemptions in random order. It simulates the K/V each group's layers
write, so a prefix hit that reused another group's block, or a block handed to two groups, shows up as
wrong cache content. After every operation: no block is owned by two groups, free + used = the pool, ref
counts equal owners, and a sliding group holds exactly the blocks its window still needs at its last
allocation, never more.
"""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from engine.core.block_manager import BlockManager
from engine.core.kv_groups import kv_cache_groups
from engine.core.sequence import Sequence
from engine.core.sliding_window import FREED, first_needed_block

PREFIXES = [[1, 2, 3, 4, 5, 6, 7, 8, 1, 2], [1, 2, 3, 4, 9, 9, 9, 9], [5, 6, 7, 8, 1, 2, 3, 4, 5]]
LAYER_WINDOWS = [(None, 3), (4, None), (None, 1, 1, 1), (None, None, 6, 6), (None, 2, 5)]


class GroupsMachine(RuleBasedStateMachine):
    @initialize(
        num_blocks=st.integers(2, 40),
        block_size=st.sampled_from([1, 2, 4]),
        caching=st.booleans(),
        layers=st.sampled_from(LAYER_WINDOWS),
    )
    def setup(self, num_blocks, block_size, caching, layers):
        self.groups = kv_cache_groups(layers)
        self.bm = BlockManager(num_blocks, block_size, enable_prefix_caching=caching, groups=self.groups)
        self.bs = block_size
        self.content = {}  # slot -> (group, token id, position) the group's layers wrote there
        self.scheduled = {}  # seq_id -> positions with slots
        self.start = {}  # seq_id -> num_computed_tokens at its last allocation (what the windows were cut at)
        self.waiting: list[Sequence] = []
        self.next_id = 0

    def _slot(self, table, p):
        return table[p // self.bs] * self.bs + p % self.bs

    def _allocate(self, seq, n):
        held = seq.seq_id in self.bm.sequences
        free_before = self.bm.num_free_blocks
        expected = self.bm.can_allocate(seq, n)
        got = self.bm.allocate_slots(seq, n, computed=None if held else self.bm.get_computed_blocks(seq))
        assert (got is not None) == expected
        if got is None:
            assert self.bm.num_free_blocks == free_before
            return None
        self.start[seq.seq_id] = seq.num_computed_tokens
        self.scheduled[seq.seq_id] = seq.num_computed_tokens + n
        return got

    @rule(data=st.data(), prefix=st.sampled_from(range(len(PREFIXES))), cut=st.integers(0, 10), extra=st.integers(0, 6))
    def admit(self, data, prefix, cut, extra):
        if self.waiting and data.draw(st.booleans()):
            seq = self.waiting.pop(data.draw(st.integers(0, len(self.waiting) - 1)))
        else:
            tokens = PREFIXES[prefix][:cut] + data.draw(st.lists(st.integers(0, 3), min_size=extra, max_size=extra))
            seq = Sequence(self.next_id, tokens or [0], block_size=self.bs)
            self.next_id += 1
        computed = self.bm.get_computed_blocks(seq)
        n = data.draw(st.integers(1, seq.num_tokens - computed.num_tokens))
        if self._allocate(seq, n) is None:
            assert seq.block_tables == [[]]
            self.waiting.append(seq)
            return
        assert len(seq.block_tables) == len(self.groups)

    @rule(data=st.data())
    def step(self, data):
        """Every group's layers write K/V for the scheduled positions; then they count as computed."""
        seqs = [s for s in self.bm.sequences.values() if self.scheduled[s.seq_id] > s.num_computed_tokens]
        if not seqs:
            return
        seq = data.draw(st.sampled_from(seqs))
        for g, table in enumerate(seq.block_tables):
            for p in range(seq.num_computed_tokens, self.scheduled[seq.seq_id]):
                assert self.bm.allocator.ref_count(table[p // self.bs]) == 1  # copy-on-write held
                self.content[self._slot(table, p)] = (g, seq.token_ids[p], p)
        seq.num_computed_tokens = self.scheduled[seq.seq_id]

    @rule(data=st.data(), token=st.integers(0, 3))
    def append(self, data, token):
        seqs = [s for s in self.bm.sequences.values() if self.scheduled[s.seq_id] == s.num_computed_tokens]
        if not seqs:
            return
        seq = data.draw(st.sampled_from(seqs))
        if seq.num_computed_tokens == seq.num_tokens:
            seq.append_token(token)
        n = data.draw(st.integers(1, seq.num_tokens - seq.num_computed_tokens))
        got = self._allocate(seq, n)
        if got is not None:
            for src, dst in got.copies:
                for off in range(self.bs):
                    if (src * self.bs + off) in self.content:
                        self.content[dst * self.bs + off] = self.content[src * self.bs + off]

    @rule(data=st.data())
    def fork(self, data):
        seqs = [s for s in self.bm.sequences.values() if self.scheduled[s.seq_id] == s.num_computed_tokens]
        if not seqs:
            return
        parent = data.draw(st.sampled_from(seqs))
        child = Sequence(self.next_id, parent.token_ids, block_size=self.bs)
        self.next_id += 1
        self.bm.fork(parent, child)
        assert child.block_tables == parent.block_tables
        self.scheduled[child.seq_id] = child.num_computed_tokens
        self.start[child.seq_id] = self.start[parent.seq_id]

    @rule(data=st.data(), preempt=st.booleans())
    def free(self, data, preempt):
        if not self.bm.sequences:
            return
        seq = data.draw(st.sampled_from(list(self.bm.sequences.values())))
        seq.num_computed_tokens = min(seq.num_computed_tokens, self.scheduled.pop(seq.seq_id))
        self.bm.free_sequence(seq)
        assert seq.block_tables == [[]]
        if preempt:
            seq.num_computed_tokens = 0
            self.waiting.append(seq)

    @invariant()
    def groups_share_the_pool_without_sharing_a_block(self):
        if not hasattr(self, "bm"):
            return
        alloc, n = self.bm.allocator, self.bm.num_blocks
        owner_group: dict[int, int] = {}
        owners = [0] * n
        for seq in self.bm.sequences.values():
            for g, table in enumerate(seq.block_tables):
                assert len(table) == -(-self.scheduled[seq.seq_id] // self.bs)  # every group covers the same tokens
                for b in table:
                    if b == FREED:
                        continue
                    assert owner_group.setdefault(b, g) == g  # no block owned by two groups
                    owners[b] += 1
        assert [alloc.ref_count(b) for b in range(n)] == owners
        assert alloc.num_free_blocks + sum(r > 0 for r in owners) == n  # free + used = pool

    @invariant()
    def sliding_groups_hold_only_their_window(self):
        if not hasattr(self, "bm"):
            return
        for seq in self.bm.sequences.values():
            for group, table in zip(self.groups, seq.block_tables, strict=True):
                first = first_needed_block(self.start[seq.seq_id], group.sliding_window, self.bs)
                # Entries before the window's first block were given back; every later one is held.
                assert table[:first] == [FREED] * first or group.sliding_window is None
                assert FREED not in table[first:]

    @invariant()
    def each_group_reads_its_own_tokens(self):
        if not hasattr(self, "bm"):
            return
        for seq in self.bm.sequences.values():
            for g, table in enumerate(seq.block_tables):
                for p in range(seq.num_computed_tokens):
                    if table[p // self.bs] != FREED:
                        assert self.content.get(self._slot(table, p)) == (g, seq.token_ids[p], p)
        alloc = self.bm.allocator
        for b in range(self.bm.num_blocks):
            if alloc.block_hash(b) is not None:  # a cached block holds one group's tokens, as it is found by
                groups = {self.content[b * self.bs + off][0] for off in range(self.bs)}
                assert len(groups) == 1


def test_growth_that_fits_only_with_the_windows_blocks_goes_ahead():
    """A full pool: the full group's next block must come from what the sliding group's window lets go
    (the plan counts those as free, so they are freed before any group allocates)."""
    bm = BlockManager(8, 1, groups=kv_cache_groups([None, 3]))
    seq = Sequence(0, [1, 2, 3, 4], block_size=1)
    assert bm.allocate_slots(seq) is not None and bm.num_free_blocks == 0  # 4 blocks in each group
    seq.num_computed_tokens = 4
    seq.append_token(5)
    got = bm.allocate_slots(seq, 1)  # position 4 sees 2..4: blocks 0 and 1 of the sliding group go back
    assert got is not None and got.num_freed_blocks == 2 and len(got.new_blocks) == 2
    full, sliding = seq.block_tables
    assert FREED not in full and len(full) == 5 and sliding[:2] == [FREED, FREED]
    assert bm.num_free_blocks == 0 and not set(full) & set(sliding)


TestGroupsMachine = GroupsMachine.TestCase
TestGroupsMachine.settings = settings(
    max_examples=150, stateful_step_count=50, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
