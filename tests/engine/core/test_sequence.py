"""Sequence state (tokens, counters, blocks) and the paged layout's internal fragmentation."""

import pytest

from engine.core.block_manager import BlockManager
from engine.core.sequence import Sequence, SequenceStatus


def test_paged_internal_fragmentation_is_only_each_last_block_tail():
    lens = [5, 17, 33, 2]
    paged = BlockManager(64, 16)
    for i, n in enumerate(lens):
        paged.allocate_sequence(Sequence(i, range(n), block_size=16))
    p = paged.usage()
    assert p.used_slots == sum(lens)
    assert p.internal_fragmentation_slots == sum(-n % 16 for n in lens) == 11 + 15 + 15 + 14


# ---- Sequence -------------------------------------------------------------------------------------


def test_sequence_state():
    s = Sequence(7, [3, 4, 5, 6, 7], block_size=4, arrival_time=1.5)
    assert (s.num_tokens, len(s), s.num_blocks, s.last_block_num_tokens) == (5, 5, 2, 1)
    assert s.status is SequenceStatus.WAITING and not s.is_finished and s.finish_reason is None
    s.append_token(8)
    s.append_token(9)
    assert s.prompt_token_ids == [3, 4, 5, 6, 7] and s.completion_token_ids == [8, 9]
    assert (s.num_completion_tokens, s.last_token, s.last_block_num_tokens) == (2, 9, 3)
    assert s.block_token_ids(1) == [7, 8, 9]
    s.append_token(1)
    assert (s.num_blocks, s.last_block_num_tokens) == (2, 4)
    s.status = SequenceStatus.FINISHED
    assert s.is_finished and "FINISHED" in repr(s)
    with pytest.raises(ValueError, match="out of range"):
        s.block_token_ids(2)
    # Invariants behind the engine's boundary (LLM._encode and EngineConfig refuse these with a ValueError).
    with pytest.raises(AssertionError, match="empty prompt"):
        Sequence(0, [])
    with pytest.raises(AssertionError, match="block_size=5"):
        Sequence(0, [1], block_size=5)
