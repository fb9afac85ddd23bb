"""The prefix chain is hashed once per admission (vLLM V1: `get_computed_blocks` -> `allocate_slots`).

`compute_block_hash` is counted while a scheduler admits and runs requests with prefix caching on: every full
block a request ever publishes is hashed exactly once per admission, also when its prompt is found in the
cache (the lookup's hashes are handed to the allocation and reused when the blocks are published).
"""

from __future__ import annotations

import pytest

from engine.core import block_manager
from engine.core.block_manager import BlockManager
from engine.core.kv_groups import kv_cache_groups
from engine.core.scheduler import Scheduler, SchedulerConfig
from engine.core.sequence import Sequence
from engine.sampling_params import SamplingParams

BS = 4


@pytest.fixture
def hash_calls(monkeypatch):
    calls: list[tuple[int, ...]] = []
    real = block_manager.compute_block_hash

    def counting(parent, token_ids):
        calls.append(tuple(token_ids))
        return real(parent, token_ids)

    monkeypatch.setattr(block_manager, "compute_block_hash", counting)
    return calls


def _run(sched: Scheduler, seq: Sequence) -> None:
    sched.add(seq)
    while sched.has_unfinished:
        out = sched.schedule()
        sched.update(out, [7 if s.samples else None for s in out.scheduled])


@pytest.mark.parametrize("groups", [None, kv_cache_groups([None, 8])], ids=["one group", "full + sliding"])
def test_each_block_is_hashed_once_per_admission(hash_calls, groups):
    bm = BlockManager(64, BS, enable_prefix_caching=True, groups=groups)
    sched = Scheduler(SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=64, max_model_len=256), bm)
    prompt = list(range(1, 38))  # 37 tokens: 9 full blocks before the last token's block
    params = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)
    _run(sched, Sequence(0, prompt, BS, params))
    published = (37 + 6 - 1) // BS  # full blocks with computed K/V when it finished (the last token has none)
    assert len(hash_calls) == published  # a cold cache: each block hashed once, at lookup or when published
    hash_calls.clear()
    _run(sched, Sequence(1, prompt, BS, params))  # the same prompt again: 9 blocks found in the cache
    assert bm.prefix_cache_hits == 9 * BS
    assert len(hash_calls) == published  # once each: the hit is not hashed again by allocate_slots
    assert len(set(hash_calls[:9])) == 9  # and the lookup hashed the prompt's 9 full blocks, in order
