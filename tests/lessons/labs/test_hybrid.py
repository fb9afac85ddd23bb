"""lessons.labs.hybrid: the real engine's two KV-cache groups, step by step, against the block arithmetic."""

import pytest

from lessons.labs import hybrid


@pytest.fixture(scope="module")
def run():
    return hybrid.hybrid_run(16, 16)


def test_full_group_keeps_every_block_and_sliding_group_only_its_window(run):
    bs, w = 16, 16
    for s in run.steps:
        assert s.full_blocks == -(-s.context // bs)  # every block of the context (the newest token's included)
        # At most W - 1 positions before a step's first new token plus that step's 32 tokens, plus one block.
        assert s.sliding_blocks <= -(-(w - 1 + hybrid.CHUNK) // bs) + 1
        assert s.free_blocks == run.num_blocks - s.full_blocks - s.sliding_blocks  # one pool, nothing else in it
    last = run.steps[-1]
    assert last.context == hybrid.PROMPT_TOKENS + hybrid.NEW_TOKENS - 2  # the last step's trace lists it finished
    assert run.given_back == last.full_blocks - last.sliding_blocks > 0
    assert run.all_full_blocks == 2 * last.full_blocks
    assert str(run.given_back) in run.summary() and len(run.rows()) == len(run.steps)


def test_a_window_not_offered_is_refused_by_value():
    with pytest.raises(ValueError, match="window=5 is not offered"):
        hybrid.hybrid_run(16, 5)
