"""Scripted BlockAllocator / BlockManager scenarios with exact block ids and ref counts, and every error path."""

import pytest

from engine.core.block_allocator import BlockAllocator, OutOfBlocksError, compute_block_hash
from engine.core.block_manager import NOTHING_NEW, BlockManager, SlotAllocation
from engine.core.sequence import Sequence

BLOCK_SIZES = [1 << i for i in range(9)]


def toks(n: int, start: int = 0) -> list[int]:
    return list(range(start, start + n))


# ---- BlockAllocator -------------------------------------------------------------------------------


def test_fifo_order_and_ref_counts():
    alloc = BlockAllocator(4, 16)
    assert [alloc.allocate() for _ in range(3)] == [0, 1, 2]
    assert alloc.num_free_blocks == 1
    alloc.free(1)  # freed blocks go to the back of the queue
    assert alloc.allocate() == 3
    assert alloc.allocate() == 1
    alloc.incref(2)
    assert alloc.ref_count(2) == 2
    alloc.free(2)
    assert alloc.ref_count(2) == 1 and alloc.num_free_blocks == 0
    alloc.free(2)
    assert alloc.ref_count(2) == 0 and alloc.num_free_blocks == 1
    # the live views agree with the per-block queries, block by block
    assert list(alloc.ref_counts) == [alloc.ref_count(b) for b in range(4)] == [1, 1, 0, 1]
    assert list(alloc.block_hashes) == [None] * 4


def test_out_of_blocks_error():
    alloc = BlockAllocator(2, 8)
    alloc.allocate_blocks(2)
    with pytest.raises(OutOfBlocksError, match=r"asked for 1 but only 0 of 2 are free") as info:
        alloc.allocate()
    assert isinstance(info.value, RuntimeError)
    assert (info.value.requested, info.value.free, info.value.num_blocks) == (1, 0, 2)
    assert "preempt" in str(info.value)


def test_allocate_blocks_is_all_or_nothing():
    alloc = BlockAllocator(4, 8)
    alloc.allocate()
    with pytest.raises(OutOfBlocksError) as info:
        alloc.allocate_blocks(4)
    assert (info.value.requested, info.value.free) == (4, 3)
    assert alloc.num_free_blocks == 3
    assert alloc.allocate_blocks(3) == [1, 2, 3]
    assert alloc.allocate_blocks(0) == []
    with pytest.raises(ValueError, match="n must be >= 0"):
        alloc.allocate_blocks(-1)


@pytest.mark.parametrize("block_id", [5, -1, 100, "a", 1.0, None])
def test_bad_block_ids(block_id):
    alloc = BlockAllocator(5, 4)
    alloc.allocate_blocks(5)
    for op in (alloc.free, alloc.incref, alloc.ref_count):
        with pytest.raises(ValueError, match="block ids run from 0 to 4"):
            op(block_id)


@pytest.mark.parametrize("block_id", [True, False, 1.0, "1", None])
def test_non_int_block_ids_name_the_value_and_change_nothing(block_id):
    # True == 1 and indexes a list as 1: it must not free or incref block 1 behind the caller's back
    alloc = BlockAllocator(3, 4, enable_prefix_caching=True)
    alloc.allocate_blocks(3)
    kind = type(block_id).__name__
    for op, action in ((alloc.free, "free"), (alloc.incref, "incref"), (alloc.ref_count, "read the ref count of")):
        with pytest.raises(ValueError, match=rf"cannot {action} block {block_id!r}: a {kind} is not a block id"):
            op(block_id)
    with pytest.raises(ValueError, match=rf"cannot cache block {block_id!r}: a {kind} is not a block id"):
        alloc.cache_block(block_id, 123, toks(4))
    assert list(alloc.ref_counts) == [1, 1, 1] and alloc.num_cached_blocks == 0


def test_free_and_incref_of_unallocated_block():
    alloc = BlockAllocator(3, 4)
    b = alloc.allocate()
    alloc.free(b)
    with pytest.raises(ValueError, match=r"cannot free block 0: it is not allocated"):
        alloc.free(b)
    with pytest.raises(ValueError, match=r"cannot incref block 2: it is not allocated"):
        alloc.incref(2)
    assert alloc.num_free_blocks == 3


@pytest.mark.parametrize("block_size", BLOCK_SIZES)
def test_valid_block_sizes(block_size):
    assert BlockAllocator(1, block_size).block_size == block_size


@pytest.mark.parametrize("block_size", [0, 3, 12, 512, -16, 16.0, True, "16"])
def test_invalid_block_sizes(block_size):
    with pytest.raises(ValueError, match="power of two from 1 to 256"):
        BlockAllocator(4, block_size)


@pytest.mark.parametrize("num_blocks", [0, -1, 2.0, True, None])
def test_invalid_num_blocks(num_blocks):
    with pytest.raises(ValueError, match="num_blocks"):
        BlockAllocator(num_blocks, 16)


def test_prefix_cache_keeps_hash_and_evicts_lru():
    alloc = BlockAllocator(4, 2, enable_prefix_caching=True)
    keys = {}
    for b in alloc.allocate_blocks(3):  # blocks 0, 1, 2 cached; block 3 never used
        tokens = (10 * b, 10 * b + 1)
        keys[b] = (compute_block_hash(None, tokens), tokens)
        assert alloc.cache_block(b, *keys[b])
    for b in (1, 0, 2):  # LRU order of the free cached blocks: 1, 0, 2
        alloc.free(b)
    assert alloc.num_free_blocks == 4 and alloc.num_evictable_blocks == 3 and alloc.num_cached_blocks == 3
    assert alloc.lookup(*keys[0]) == 0 and alloc.block_hash(0) == keys[0][0]
    assert alloc.allocate() == 3  # an uncached block goes first
    assert alloc.allocate() == 1  # then the least recently freed cached one, losing its hash
    assert alloc.lookup(*keys[1]) is None and alloc.block_hash(1) is None
    assert list(alloc.block_hashes) == [keys[0][0], None, keys[2][0], None]
    alloc.incref(0)  # a hit revives a cached free block: it can no longer be evicted
    assert alloc.ref_count(0) == 1 and alloc.num_free_blocks == 1
    assert alloc.allocate() == 2
    with pytest.raises(OutOfBlocksError):
        alloc.allocate()
    alloc.free(0)
    assert alloc.lookup(*keys[0]) == 0  # still cached after its last reference went away


def test_lookup_verifies_tokens_on_hash_collision():
    alloc = BlockAllocator(2, 2, enable_prefix_caching=True)
    b = alloc.allocate()
    assert alloc.cache_block(b, 1234, [1, 2])
    assert alloc.lookup(1234, [1, 2]) == b
    assert alloc.lookup(1234, [1, 3]) is None  # same hash, different tokens: a collision, not a hit
    assert alloc.lookup(999, [1, 2]) is None


def test_real_cpython_hash_collision_is_caught():
    # hash(-1) == hash(-2) in CPython, so these two different blocks get the same chained hash.
    h = compute_block_hash(None, [-1, -1])
    assert h == compute_block_hash(None, [-2, -2])
    alloc = BlockAllocator(2, 2, enable_prefix_caching=True)
    a, b = alloc.allocate(), alloc.allocate()
    assert alloc.cache_block(a, h, [-1, -1])
    assert not alloc.cache_block(b, h, [-2, -2])  # the hash is taken: b stays uncached
    assert alloc.lookup(h, [-2, -2]) is None and alloc.lookup(h, [-1, -1]) == a
    bm = BlockManager(4, 2, enable_prefix_caching=True)
    first = Sequence(0, [-1, -1, 5], block_size=2)
    bm.allocate_sequence(first)
    first.num_computed_tokens = 3
    bm.free_sequence(first)
    assert bm.num_cached_prefix_tokens(Sequence(1, [-2, -2, 5], block_size=2)) == 0
    assert bm.num_cached_prefix_tokens(Sequence(2, [-1, -1, 5], block_size=2)) == 2


def test_cache_block_errors_and_duplicates():
    off = BlockAllocator(2, 2)
    with pytest.raises(ValueError, match="enable_prefix_caching=True"):
        off.cache_block(off.allocate(), 1, [0, 1])
    alloc = BlockAllocator(3, 2, enable_prefix_caching=True)
    a, b = alloc.allocate(), alloc.allocate()
    with pytest.raises(ValueError, match="only full blocks are cached"):
        alloc.cache_block(a, 1, [0])
    with pytest.raises(ValueError, match="cannot cache block 2: it is not allocated"):
        alloc.cache_block(2, 1, [0, 1])
    assert alloc.cache_block(a, 7, [0, 1])
    assert alloc.cache_block(a, 7, [0, 1])  # idempotent
    assert not alloc.cache_block(b, 7, [0, 1])  # same content computed twice: the first copy stays
    assert alloc.block_hash(b) is None
    with pytest.raises(ValueError, match="already cached under a different hash"):
        alloc.cache_block(a, 8, [0, 1])


def test_block_hash_is_chained():
    h0 = compute_block_hash(None, [1, 2])
    assert compute_block_hash(h0, [3, 4]) != compute_block_hash(compute_block_hash(None, [9, 9]), [3, 4])
    assert compute_block_hash(h0, (3, 4)) == compute_block_hash(h0, [3, 4])


# ---- BlockManager ---------------------------------------------------------------------------------


def compute(seq: Sequence, n: int | None = None) -> None:
    """What the model runner does after a step: the scheduled tokens now have K/V."""
    seq.num_computed_tokens = seq.num_tokens if n is None else n


def test_prefix_hit_reuses_full_blocks():
    bm = BlockManager(10, 4, enable_prefix_caching=True)
    a = Sequence(0, toks(10), block_size=4)
    assert bm.allocate_sequence(a) == 0 and a.block_table == [0, 1, 2]
    compute(a)
    bm.free_sequence(a)  # blocks 0, 1 are full and stay cached; block 2 (2 tokens) is plain free
    assert a.block_table == [] and bm.allocator.num_evictable_blocks == 2
    b = Sequence(1, toks(10) + [50, 51], block_size=4)
    assert bm.num_cached_prefix_tokens(b) == 8
    assert bm.can_allocate(b)
    assert bm.allocate_sequence(b) == 8
    assert b.block_table == [0, 1, 3]
    assert (b.num_cached_tokens, b.num_computed_tokens) == (8, 8)
    assert [bm.allocator.ref_count(x) for x in (0, 1, 2, 3)] == [1, 1, 0, 1]
    c = Sequence(2, toks(8), block_size=4)  # the whole prompt is cached, but its last token must be computed
    assert bm.allocate_sequence(c) == 4
    assert c.block_table == [0, 4]
    assert bm.allocator.ref_count(0) == 2


def test_prefix_published_while_running_and_chained_over_parents():
    bm = BlockManager(8, 2, enable_prefix_caching=True)
    a = Sequence(0, [1, 2, 3, 4, 5], block_size=2)
    bm.allocate_sequence(a)
    compute(a)
    a.append_token(6)
    bm.append_slots(a)  # publishes a's computed full blocks
    other = Sequence(1, [9, 9, 3, 4, 5], block_size=2)  # same second block after a different first one
    assert bm.num_cached_prefix_tokens(other) == 0
    twin = Sequence(2, [1, 2, 3, 4, 7], block_size=2)
    assert bm.allocate_sequence(twin) == 4 and twin.block_table[:2] == a.block_table[:2]


def test_eviction_order_across_sequences():
    bm = BlockManager(6, 2, enable_prefix_caching=True)
    a, b = Sequence(0, toks(4), block_size=2), Sequence(1, toks(4, 100), block_size=2)
    bm.allocate_sequence(a)
    bm.allocate_sequence(b)
    assert (a.block_table, b.block_table) == ([0, 1], [2, 3])
    compute(a)
    compute(b)
    bm.free_sequence(a)  # evictable LRU order: 1, 0 (tail first)
    bm.free_sequence(b)  # then 3, 2
    assert bm.allocator.num_evictable_blocks == 4
    c = Sequence(2, toks(12, 500), block_size=2)
    bm.allocate_sequence(c)
    assert c.block_table == [4, 5, 1, 0, 3, 2]
    assert bm.allocator.num_cached_blocks == 0


def test_can_allocate_counts_revived_cached_blocks():
    bm = BlockManager(3, 2, enable_prefix_caching=True)
    a = Sequence(0, toks(4), block_size=2)
    bm.allocate_sequence(a)
    compute(a)
    bm.free_sequence(a)  # both blocks cached and free; block 2 never used
    b = Sequence(1, toks(4) + [7, 8, 9], block_size=2)  # hits 2 blocks, needs 2 fresh: 4 > 3 free
    assert bm.num_cached_prefix_tokens(b) == 4
    assert not bm.can_allocate(b)
    with pytest.raises(OutOfBlocksError) as info:
        bm.allocate_sequence(b)
    assert (info.value.requested, info.value.free) == (4, 3)
    assert b.block_table == [] and bm.allocator.num_evictable_blocks == 2  # nothing changed
    assert bm.can_allocate(b, num_new_tokens=1)  # a 1-token chunk: 2 revived + 1 fresh
    assert not bm.can_allocate(b, num_new_tokens=1, watermark_blocks=1)
    assert bm.allocate_sequence(b, num_new_tokens=1) == 4 and b.block_table == [0, 1, 2]


def test_chunked_prefill_and_decode_growth():
    bm = BlockManager(8, 4)
    s = Sequence(0, toks(10), block_size=4)
    bm.allocate_sequence(s, num_new_tokens=3)
    assert s.block_table == [0]
    compute(s, 3)
    assert bm.can_allocate(s, 6)
    assert bm.allocate_slots(s, 6) == SlotAllocation(new_blocks=(1, 2))
    assert s.block_table == [0, 1, 2]
    compute(s, 9)
    assert bm.allocate_slots(s, 1) is NOTHING_NEW and s.block_table == [0, 1, 2]  # stays inside block 2
    compute(s)
    s.append_token(99)
    bm.append_slots(s)
    assert s.block_table == [0, 1, 2] and s.last_block_num_tokens == 3
    for _ in range(2):
        compute(s)
        s.append_token(1)
        bm.append_slots(s)
    assert s.block_table == [0, 1, 2, 3]


def test_fork_shares_blocks_and_copy_on_write():
    bm = BlockManager(8, 4)
    parent = Sequence(0, toks(6), block_size=4)
    bm.allocate_sequence(parent)
    compute(parent)
    child = Sequence(1, toks(6), block_size=4)
    bm.fork(parent, child)
    assert child.block_table == [0, 1] and child.num_computed_tokens == 6
    assert [bm.allocator.ref_count(b) for b in (0, 1)] == [2, 2]
    parent.append_token(7)
    child.append_token(8)
    assert bm.append_slots(parent) == [(1, 2)]  # partial shared block: copy its 2 tokens first
    assert parent.block_table == [0, 2] and bm.allocator.ref_count(1) == 1
    assert bm.append_slots(child) == []  # child is now the only owner of block 1
    assert child.block_table == [0, 1]
    info = {i.block_id: i for i in bm.snapshot()}
    assert info[0].owners == (0, 1) and info[0].ref_count == 2 and info[0].num_filled == 4
    assert info[1].owners == (1,) and info[2].owners == (0,)
    assert (info[1].num_filled, info[2].num_filled) == (3, 3)
    bm.free_sequence(parent)
    bm.free_sequence(child)
    assert bm.num_free_blocks == 8


def test_fork_on_block_boundary_needs_no_copy():
    bm = BlockManager(8, 4)
    parent = Sequence(0, toks(8), block_size=4)
    bm.allocate_sequence(parent)
    compute(parent)
    child = Sequence(1, toks(8), block_size=4)
    bm.fork(parent, child)
    for seq in (parent, child):
        seq.append_token(1)
        assert bm.append_slots(seq) == []
    assert (parent.block_table, child.block_table) == ([0, 1, 2], [0, 1, 3])


def test_fork_mid_prefill_replaces_uncomputed_shared_block_without_copy():
    bm = BlockManager(8, 4)
    parent = Sequence(0, toks(8), block_size=4)
    bm.allocate_sequence(parent)  # blocks [0, 1] allocated, only 4 tokens computed so far
    compute(parent, 4)
    child = Sequence(1, toks(8), block_size=4)
    bm.fork(parent, child)
    assert bm.append_slots(parent, 4) == [] and parent.block_table == [0, 2]
    assert child.block_table == [0, 1] and bm.allocator.ref_count(1) == 1


def test_cow_out_of_blocks_changes_nothing():
    bm = BlockManager(2, 4)
    parent = Sequence(0, toks(6), block_size=4)
    bm.allocate_sequence(parent)
    compute(parent)
    child = Sequence(1, toks(6), block_size=4)
    bm.fork(parent, child)
    parent.append_token(1)
    assert not bm.can_allocate(parent)
    assert bm.allocate_slots(parent) is None
    with pytest.raises(OutOfBlocksError, match="asked for 1 but only 0 of 2 are free"):
        bm.append_slots(parent)
    assert parent.block_table == [0, 1] and bm.allocator.ref_count(1) == 2


def test_usage_numbers():
    bm = BlockManager(10, 4)
    a, b = Sequence(0, toks(5), block_size=4), Sequence(1, toks(8), block_size=4)
    bm.allocate_sequence(a)
    bm.allocate_sequence(b)
    u = bm.usage(bytes_per_slot=100)
    assert (u.num_used_blocks, u.num_free_blocks, u.allocated_slots, u.used_slots) == (4, 6, 16, 13)
    assert u.internal_fragmentation_slots == 3 and u.internal_fragmentation_bytes == 300
    assert (u.allocated_bytes, u.used_bytes) == (1600, 1300)
    states = [i.state for i in bm.snapshot()]
    assert states == ["used"] * 4 + ["free"] * 6


def test_snapshot_shows_cached_free_blocks():
    bm = BlockManager(3, 2, enable_prefix_caching=True)
    a = Sequence(0, toks(3), block_size=2)
    bm.allocate_sequence(a)
    compute(a)
    bm.free_sequence(a)
    snap = bm.snapshot()
    assert [i.state for i in snap] == ["cached", "free", "free"]
    assert snap[0].num_filled == 2 and snap[0].block_hash == compute_block_hash(None, [0, 1])
    assert bm.usage().num_cached_free_blocks == 1 and bm.usage().allocated_slots == 0


def test_block_manager_errors():
    bm = BlockManager(4, 4)
    s = Sequence(0, toks(5), block_size=4)
    with pytest.raises(ValueError, match="holds no blocks; call allocate_sequence"):
        bm.append_slots(s)
    with pytest.raises(ValueError, match="never allocated or is already freed"):
        bm.free_sequence(s)
    with pytest.raises(ValueError, match=r"must be in 1\.\.5"):
        bm.allocate_sequence(s, num_new_tokens=6)
    with pytest.raises(ValueError, match=r"must be in 1\.\.5"):
        bm.allocate_sequence(s, num_new_tokens=0)
    with pytest.raises(ValueError, match=r"num_new_tokens=2\.0"):
        bm.can_allocate(s, num_new_tokens=2.0)
    bm.allocate_sequence(s)
    with pytest.raises(ValueError, match="already holds blocks"):
        bm.allocate_sequence(s)
    with pytest.raises(ValueError, match=r"must be in 1\.\.5 \(5 tokens, 0 computed\)"):
        bm.append_slots(s, 6)
    with pytest.raises(ValueError, match=r"num_new_tokens=1\.5"):
        bm.can_allocate(s, 1.5)
    with pytest.raises(ValueError, match="watermark_blocks=-1 must be an integer >= 0"):
        bm.allocate_slots(s, 1, watermark_blocks=-1)
    with pytest.raises(ValueError, match="another sequence with seq_id 0 holds blocks"):
        bm.allocate_slots(Sequence(0, toks(5), block_size=4))
    foreign = Sequence(3, toks(5), block_size=4)
    foreign.block_table = [1]  # blocks it never got from this manager
    with pytest.raises(ValueError, match="did not give it"):
        bm.allocate_slots(foreign)
    with pytest.raises(ValueError, match=r"num_new_tokens='1'"):
        bm.append_slots(s, "1")
    compute(s)
    with pytest.raises(ValueError, match=r"must be in 1\.\.0"):
        bm.append_slots(s)  # no new token appended yet
    with pytest.raises(AssertionError, match=r"\(8, 4\)"):  # an invariant: one config sizes both
        bm.allocate_sequence(Sequence(1, toks(3), block_size=8))
    with pytest.raises(ValueError, match="parent sequence 7 holds no blocks"):
        bm.fork(Sequence(7, toks(2), block_size=4), Sequence(8, toks(2), block_size=4))
    with pytest.raises(ValueError, match="must start with parent 0's 5 computed tokens"):
        bm.fork(s, Sequence(9, toks(5, 1), block_size=4))
    with pytest.raises(ValueError, match="child sequence 0 already holds blocks"):
        bm.fork(s, s)
    big = Sequence(2, toks(13), block_size=4)
    with pytest.raises(OutOfBlocksError, match="asked for 4 but only 2 of 4 are free"):
        bm.allocate_sequence(big)
    assert big.block_table == [] and bm.num_free_blocks == 2
    bm.free_sequence(s)
    with pytest.raises(ValueError, match="already freed"):
        bm.free_sequence(s)


def state(bm: BlockManager) -> tuple:
    """Everything a query must leave alone: pool, tables, counters, prefix-cache hashes and LRU order."""
    seqs = {i: (list(s.block_table), s.num_computed_tokens, s.num_cached_tokens) for i, s in bm.sequences.items()}
    alloc = bm.allocator
    lru = [b for b in range(bm.num_blocks) if alloc.is_evictable(b)]
    return bm.snapshot(), bm.num_free_blocks, alloc.num_cached_blocks, lru, bm.usage(), seqs


def test_allocate_slots_admits_with_prefix_hits_and_says_what_it_did():
    bm = BlockManager(10, 4, enable_prefix_caching=True)
    a = Sequence(0, toks(10), block_size=4)
    assert bm.allocate_slots(a) == SlotAllocation(new_blocks=(0, 1, 2))
    compute(a)
    bm.free_sequence(a)
    b = Sequence(1, toks(10) + [50, 51], block_size=4)
    got = bm.allocate_slots(b, 2)  # hit on 8 tokens, a 2-token chunk after them
    assert got == SlotAllocation(new_blocks=(3,), num_cached_tokens=8)
    assert b.block_table == [0, 1, 3] and (b.num_computed_tokens, b.num_cached_tokens) == (8, 8)
    compute(b, 10)
    assert bm.allocate_slots(b) is NOTHING_NEW  # None: up to its last token (10, 11 fit in block 3)


def test_queries_change_nothing():
    """can_allocate and num_cached_prefix_tokens, asked twice or asked and not followed, leave every table,
    the free count, the prefix cache and the usage numbers as they were (a can_* that frees or publishes fails)."""
    bm = BlockManager(6, 2, enable_prefix_caching=True, sliding_window=3)
    a = Sequence(0, toks(7), block_size=2)
    bm.allocate_sequence(a)
    compute(a)  # 3 full blocks computed but not yet published; blocks 0 and 1 are behind the window
    a.append_token(9)
    child = Sequence(1, a.token_ids, block_size=2)
    bm.fork(a, child)  # block 3 (partial) is shared: a's next write needs a copy
    waiting = Sequence(2, toks(7) + [5], block_size=2)
    before = state(bm)
    for _ in range(2):
        assert bm.can_allocate(a, 1)
        assert bm.can_allocate(child, 1, watermark_blocks=1)
        assert not bm.can_allocate(a, 1, watermark_blocks=3)
        assert bm.can_allocate(waiting, 1) and not bm.can_allocate(waiting)
        assert bm.num_cached_prefix_tokens(waiting) == 0
    assert state(bm) == before
    assert [b for b in a.block_table] == [0, 1, 2, 3] and bm.allocator.num_cached_blocks == 0


def test_a_failed_growth_changes_nothing_even_when_part_of_it_fits():
    # The parent's next 3 tokens need a copy of shared block 1 and one new block; one block is free.
    bm = BlockManager(3, 4)
    parent = Sequence(0, toks(6), block_size=4)
    bm.allocate_sequence(parent)
    compute(parent)
    bm.fork(parent, Sequence(1, toks(6), block_size=4))
    for t in (1, 2, 3):
        parent.append_token(t)
    before = state(bm)
    assert not bm.can_allocate(parent, 3)
    assert bm.allocate_slots(parent, 3) is None
    assert state(bm) == before and parent.block_table == [0, 1] and bm.allocator.ref_count(1) == 2
    got = bm.allocate_slots(parent, 2)  # positions 6, 7: the copy alone fits
    assert got == SlotAllocation(new_blocks=(2,), copies=((1, 2),))
    assert parent.block_table == [0, 2] and bm.allocator.ref_count(1) == 1


def test_a_failed_admission_changes_nothing_even_when_its_hits_would_fit():
    bm = BlockManager(3, 2, enable_prefix_caching=True)
    a = Sequence(0, toks(4), block_size=2)
    bm.allocate_sequence(a)
    compute(a)
    bm.free_sequence(a)  # blocks 0, 1 cached and free
    b = Sequence(1, toks(4) + [7, 8, 9], block_size=2)  # 2 revived hits + 2 fresh > 3 free
    before = state(bm)
    assert bm.allocate_slots(b) is None
    assert state(bm) == before and b.block_table == [] and b.num_computed_tokens == 0
    assert bm.allocate_slots(b, 1, watermark_blocks=1) is None  # 3 blocks fit, but not with 1 left free
    assert state(bm) == before
    assert bm.allocate_slots(b, 1) == SlotAllocation(new_blocks=(2,), num_cached_tokens=4)
