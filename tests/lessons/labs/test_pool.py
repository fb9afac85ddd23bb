"""lessons/labs/pool.py: the pool picture's blocks and their drawn state, read off a real BlockManager."""

import pytest

from engine.core.block_manager import BlockManager
from engine.core.block_usage import BlockInfo
from engine.core.sequence import Sequence
from lessons.labs.pool import BlockState, PoolBlock, block_state, pool_blocks


def test_a_forked_prefix_is_shared_a_released_prefix_cached_the_rest_free():
    bm = BlockManager(6, 4, enable_prefix_caching=True)
    a, b = Sequence(0, range(1, 10), 4), Sequence(1, range(1, 10), 4)  # 9 tokens: two full blocks and one more
    bm.allocate_sequence(a)
    a.num_computed_tokens = 9
    bm.fork(a, b)
    blocks = pool_blocks(bm.snapshot(), "AB".__getitem__)
    held = set(a.block_table)
    assert [p.block_id for p in blocks] == list(range(6))
    for p in blocks:
        if p.block_id in held:
            assert (p.state, p.ref_count, p.owners) == (BlockState.SHARED, 2, ("A", "B"))
        else:
            assert (p.state, p.ref_count, p.owners) == (BlockState.FREE, 0, ())
    table = list(a.block_table)
    bm.free_sequence(b)
    bm.free_sequence(a)  # its two full blocks stay in the prefix cache, the partial one is free
    states = {p.block_id: p.state for p in pool_blocks(bm.snapshot(), str)}
    assert [states[i] for i in table[:2]] == [BlockState.CACHED, BlockState.CACHED]
    assert list(states.values()).count(BlockState.FREE) == 4


def test_one_owner_is_used_and_the_rows_are_the_pool_table():
    info = BlockInfo(3, 1, (7,), 2, None)
    assert block_state(info) is BlockState.USED
    (p,) = pool_blocks([info], lambda o: f"r{o}")
    assert p == PoolBlock(3, BlockState.USED, 1, ("r7",), 2)
    shared = PoolBlock(4, BlockState.SHARED, 2, ("r0", "r1"), 4)
    assert [p.row(), shared.row()] == [
        {"block_id": 3, "state": "used", "ref_count": 1, "owners": "r7", "filled": 2},
        {"block_id": 4, "state": "shared", "ref_count": 2, "owners": "r0+r1", "filled": 4},
    ]
    assert all(type(b.row()["state"]) is str for b in (p, shared))  # plain table cells


def test_a_state_the_engine_does_not_name_is_refused():
    class Odd(BlockInfo):
        __slots__ = ()

        @property
        def state(self) -> str:
            return "lost"

    with pytest.raises(ValueError, match="lost"):
        block_state(Odd(0, 1, (0,), 1, None))
