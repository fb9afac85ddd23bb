"""The sliding window's memory rule in the block manager: exact blocks freed, their ids back in the pool.

Window W: a step whose first new token sits at position c never reads keys before c - W + 1, so blocks
wholly before that go back to the allocator and their table entries become FREED. Checked by hand-computed
block ids, against the allocator's own free count, through fork / free / prefix caching, and against the
memory model's per-sequence cap (`kv_blocks_per_seq`, vLLM V1's max usage of a sliding-window layer).
"""

import pytest

from engine.core.block_manager import BlockManager, SlotAllocation
from engine.core.sequence import Sequence
from engine.core.sliding_window import FREED, first_needed_block, kv_blocks_per_seq, skipped_blocks


def decode_to(bm: BlockManager, seq: Sequence, num_tokens: int) -> int:
    """Run decodes (as the scheduler does) until seq has num_tokens computed; returns peak blocks held."""
    peak = 0
    while seq.num_computed_tokens < num_tokens:
        if seq.num_computed_tokens == seq.num_tokens:
            seq.append_token(7)
        assert bm.allocate_slots(seq, 1) is not None
        seq.num_computed_tokens += 1
        peak = max(peak, sum(1 for b in seq.block_table if b != FREED))
    return peak


def test_first_needed_block_is_the_window_start():
    assert first_needed_block(10, None, 4) == 0
    # Query at position 10 with W = 4 sees keys 7..10: block 1 (positions 4..7) is still needed.
    assert first_needed_block(10, 4, 4) == 1
    assert first_needed_block(11, 4, 4) == 2  # keys 8..11: blocks 0 and 1 are behind the window
    assert first_needed_block(3, 8, 4) == 0


def test_skipped_blocks_names_each_block_once_and_changes_nothing():
    table = [5, 6, 7, 8]
    assert skipped_blocks(table, 11, 4, 4) == [1, 0]  # keys 8..11: blocks 0 and 1, newest first
    assert table == [5, 6, 7, 8]  # a query: the table is untouched
    assert skipped_blocks(table, 10, 4, 4) == [0] and skipped_blocks(table, 11, None, 4) == []
    table[:2] = [FREED, FREED]  # what the block manager does when the allocation goes ahead
    assert skipped_blocks(table, 11, 4, 4) == []  # nothing twice
    assert skipped_blocks(table, 15, 4, 4) == [2]
    assert skipped_blocks(table, 99, 4, 4) == [3, 2]  # never past the table's end


def test_decode_frees_blocks_back_to_the_allocator():
    bm = BlockManager(16, 4, sliding_window=6)
    seq = Sequence(0, list(range(10)), block_size=4)
    bm.allocate_sequence(seq)  # 10 tokens in blocks 0, 1, 2
    seq.num_computed_tokens = 10
    assert seq.block_table == [0, 1, 2] and bm.num_free_blocks == 13
    # Next token at position 10 sees keys 5..10: block 0 (0..3) is behind the window.
    seq.append_token(7)
    assert bm.allocate_slots(seq, 1) == SlotAllocation(num_freed_blocks=1)
    assert seq.block_table == [FREED, 1, 2] and bm.num_free_blocks == 14
    assert bm.allocator.ref_count(0) == 0
    peak = decode_to(bm, seq, 60)
    assert peak <= kv_blocks_per_seq(60, 4, 6, 1) == 3  # ceil((W - 1 + 1) / 4) + 1
    held = [b for b in seq.block_table if b != FREED]
    assert len(seq.block_table) == 15 and len(held) <= 3
    assert bm.num_free_blocks == 16 - len(held)  # every freed block is really free
    assert bm.usage().num_used_blocks == len(held)
    assert sum(1 for b in bm.snapshot() if b.owners == (0,)) == len(held)
    bm.free_sequence(seq)
    assert bm.num_free_blocks == 16


def test_without_a_window_nothing_is_freed():
    bm = BlockManager(16, 4)
    seq = Sequence(0, list(range(10)), block_size=4)
    bm.allocate_sequence(seq)
    seq.num_computed_tokens = 10
    assert decode_to(bm, seq, 40) == 10 and FREED not in seq.block_table


def test_window_smaller_than_a_block():
    bm = BlockManager(8, 16, sliding_window=3)
    seq = Sequence(0, list(range(40)), block_size=16)
    bm.allocate_sequence(seq)
    seq.num_computed_tokens = 40  # keys 38..40 for the next query: blocks 0 and 1 are behind the window
    seq.append_token(7)
    bm.append_slots(seq, 1)
    assert seq.block_table == [FREED, FREED, 2] and bm.num_free_blocks == 7
    assert decode_to(bm, seq, 120) <= kv_blocks_per_seq(120, 16, 3, 1) == 2


def test_chunked_prefill_frees_behind_each_chunk():
    bm = BlockManager(32, 4, sliding_window=8)
    seq = Sequence(0, list(range(40)), block_size=4)
    bm.allocate_sequence(seq, 12)
    seq.num_computed_tokens = 12
    assert bm.allocate_slots(seq, 12).num_freed_blocks == 1  # chunk 12..23 sees keys from 5 on: block 0 goes
    assert seq.block_table[:2] == [FREED, 1] and len(seq.block_table) == 6
    seq.num_computed_tokens = 24
    assert bm.allocate_slots(seq, 12).num_freed_blocks == 3  # chunk 24..35 sees keys from 17 on: blocks 1..3 go
    assert seq.block_table[:5] == [FREED] * 4 + [4]
    assert sum(1 for b in seq.block_table if b != FREED) <= kv_blocks_per_seq(40, 4, 8, 12)


def state(bm: BlockManager) -> tuple:
    """Everything a query must leave alone: pool, tables, counters, prefix-cache hashes and LRU order."""
    seqs = {i: (list(s.block_table), s.num_computed_tokens, s.num_cached_tokens) for i, s in bm.sequences.items()}
    return bm.snapshot(), bm.num_free_blocks, bm.allocator.num_cached_blocks, bm.usage(), seqs


def test_allocation_counts_the_blocks_the_window_frees_and_the_query_frees_none():
    bm = BlockManager(3, 4, sliding_window=4)
    seq = Sequence(0, list(range(12)), block_size=4)
    bm.allocate_sequence(seq)
    seq.num_computed_tokens = 12
    seq.append_token(1)
    assert bm.num_free_blocks == 0
    before = state(bm)
    assert bm.can_allocate(seq, 1)  # position 12 sees 9..12: blocks 0 and 1 count as free, one is needed
    assert bm.can_allocate(seq, 1)
    assert state(bm) == before and seq.block_table == [0, 1, 2]  # the query freed nothing
    assert bm.allocate_slots(seq, 1) == SlotAllocation(new_blocks=(1,), num_freed_blocks=2)
    assert seq.block_table == [FREED, FREED, 2, 1] and bm.num_free_blocks == 1  # freed back to front


def test_a_failed_allocation_frees_nothing_behind_the_window():
    # Chunk 12..19 sees keys from 5 on: block 0 would go, but the chunk needs 2 new blocks and only 1 would be free.
    bm = BlockManager(3, 4, enable_prefix_caching=True, sliding_window=8)
    seq = Sequence(0, list(range(20)), block_size=4)
    bm.allocate_sequence(seq, 12)
    seq.num_computed_tokens = 12
    before = state(bm)
    assert not bm.can_allocate(seq, 8)
    assert bm.allocate_slots(seq, 8) is None
    assert state(bm) == before and seq.block_table == [0, 1, 2]
    assert bm.allocator.num_cached_blocks == 0  # not even published: a failed allocation changes nothing
    assert bm.allocate_slots(seq, 4) == SlotAllocation(new_blocks=(0,), num_freed_blocks=1)  # 12..15 fits
    # Blocks 0..2 were published, then 0 was freed behind the window and evicted again for the new block.
    assert seq.block_table == [FREED, 1, 2, 0] and bm.allocator.num_cached_blocks == 2


def test_admission_leaves_prefix_hits_behind_the_window_in_the_cache():
    bm = BlockManager(8, 4, enable_prefix_caching=True, sliding_window=4)
    first = Sequence(0, list(range(13)), block_size=4)
    bm.allocate_sequence(first)
    first.num_computed_tokens = 13
    bm.free_sequence(first)  # blocks 0, 1, 2 full and cached
    again = Sequence(1, list(range(13)) + [50], block_size=4)
    # Hit on 12 tokens; the first new token (12) sees keys 9..12: hits 0 and 1 are never revived.
    got = bm.allocate_slots(again)
    assert got == SlotAllocation(new_blocks=(4,), num_cached_tokens=12)
    assert again.block_table == [FREED, FREED, 2, 4] and again.num_computed_tokens == 12
    assert [bm.allocator.ref_count(b) for b in range(5)] == [0, 0, 1, 0, 1]
    assert bm.allocator.num_evictable_blocks == 2 and bm.num_free_blocks == 6


def test_fork_and_prefix_caching_skip_freed_entries():
    bm = BlockManager(16, 4, enable_prefix_caching=True, sliding_window=4)
    seq = Sequence(0, list(range(12)), block_size=4)
    bm.allocate_sequence(seq)
    seq.num_computed_tokens = 12
    seq.append_token(99)
    bm.append_slots(seq, 1)
    assert seq.block_table[:2] == [FREED, FREED]
    # Freed full blocks were published first: they stay in the prefix cache as free, evictable blocks.
    assert bm.allocator.num_evictable_blocks == 2
    child = Sequence(1, seq.token_ids[:12], block_size=4)
    bm.fork(seq, child)
    assert child.block_table[:2] == [FREED, FREED] and bm.allocator.ref_count(2) == 2
    bm.free_sequence(child)
    bm.free_sequence(seq)
    assert bm.num_free_blocks == 16
    again = Sequence(2, list(range(12)) + [5], block_size=4)
    assert bm.num_cached_prefix_tokens(again) == 12  # the freed blocks still hold the right K/V


@pytest.mark.parametrize(
    "args, expected",
    [
        ((100, 16), 7),  # full attention: ceil(100 / 16)
        ((100, 16, 8, 1), 2),  # window 8, one decode token: ceil(8 / 16) + 1
        ((4096, 16, 1024, 2048), 193),  # window 1024 + 2048-token steps: ceil(3071 / 16) + 1
        ((40, 16, 1024, 2048), 3),  # never more than the context itself
    ],
)
def test_kv_blocks_per_seq(args, expected):
    assert kv_blocks_per_seq(*args) == expected


def test_bad_window_is_a_value_error():
    with pytest.raises(ValueError, match="sliding_window=0 must be an integer >= 1"):
        BlockManager(4, 4, sliding_window=0)
