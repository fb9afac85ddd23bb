"""The scheduler admits as vLLM V1 does at v0.34.0 (vllm/v1/core/sched/scheduler.py, kv_cache_manager.py):

- no watermark by default (`SchedulerConfig.watermark` 0.0), and a nonzero one rounds down
  (`int(watermark * num_blocks)`);
- `scheduler_reserve_full_isl` (on by default): a waiting request is admitted only if the blocks of its whole
  sequence fit now, after its prefix-cache hit, not only those of the chunk it computes this step; a check,
  not a reservation; a sliding group counts at most what its window and one step's tokens hold;
- after a preemption with prefix caching on, the victim's full blocks keep their hashes: its readmission finds
  those nobody evicted, and only the rest is recomputed (and counted as recomputed).

No model runs: sampled tokens are made up."""

from __future__ import annotations

import pytest

from engine.core.block_manager import BlockManager
from engine.core.scheduler import Scheduler, SchedulerConfig, SchedulerOutput
from engine.core.sequence import Sequence
from engine.sampling_params import SamplingParams

BS = 4


def make(num_blocks, budget=64, max_model_len=None, prefix=False, watermark=0.0, reserve_full_isl=True):
    bm = BlockManager(num_blocks, BS, enable_prefix_caching=prefix)
    cfg = SchedulerConfig(8, budget, max_model_len or num_blocks * BS, watermark, reserve_full_isl)
    return Scheduler(cfg, bm)


def seq(seq_id, prompt, max_tokens=4):
    ids = list(range(1, prompt + 1)) if isinstance(prompt, int) else list(prompt)
    return Sequence(seq_id, ids, BS, SamplingParams(max_tokens=max_tokens, temperature=0.0))


def step(sched: Scheduler) -> SchedulerOutput:
    out = sched.schedule()
    sampled = [7 if s.num_computed_tokens + s.num_new_tokens == s.seq.num_tokens else None for s in out.scheduled]
    sched.update(out, sampled)
    return out


def test_the_defaults_are_vllms():
    # vllm/config/scheduler.py at v0.34.0: watermark: float = 0.0, scheduler_reserve_full_isl: bool = True
    cfg = SchedulerConfig()
    assert cfg.watermark == 0.0 and cfg.scheduler_reserve_full_isl is True


def test_without_a_watermark_an_admission_takes_the_last_free_block():
    # 4 blocks: a's 8-token prompt takes 2 (nothing runs yet), b's takes the other 2 while a runs. Any
    # watermark of at least one block (the old 1 % rounded up) would keep b waiting.
    sched = make(4)
    sched.add(seq(0, 8))
    sched.add(seq(1, 8))
    out = step(sched)
    assert out.admitted == [0, 1] and sched.block_manager.num_free_blocks == 0


def test_a_watermark_rounds_down():
    # 150 blocks, watermark 1 %: int(1.5) = 1 block kept free. a holds 100 blocks, b needs 49: 100 + 49 + 1 = 150
    # fits; rounding up (2 blocks) would refuse b.
    sched = make(150, budget=1024, watermark=0.01)
    sched.add(seq(0, 400))
    sched.add(seq(1, 196))
    out = step(sched)
    assert out.admitted == [0, 1] and sched.block_manager.num_free_blocks == 1


def test_the_watermark_applies_only_while_something_runs():
    sched = make(4, watermark=0.5)  # 2 blocks kept free, but not for the first admission
    sched.add(seq(0, 16))
    assert step(sched).admitted == [0]


@pytest.mark.parametrize("reserve_full_isl", [True, False])
def test_admission_needs_the_whole_prompt_not_the_first_chunk(reserve_full_isl):
    # 4 blocks, a token budget of 12: a's 8-token prompt (2 blocks) leaves 4 tokens of budget for b, whose first
    # 4-token chunk needs 1 of the 2 free blocks; b's whole 12-token prompt needs 3. vLLM V1 (the default)
    # keeps b waiting; first-chunk admission lets it in, to be preempted or stalled a step later.
    sched = make(4, budget=12, reserve_full_isl=reserve_full_isl)
    a, b = seq(0, 8, max_tokens=1), seq(1, 12, max_tokens=1)
    sched.add(a)
    sched.add(b)
    out = step(sched)
    if not reserve_full_isl:
        assert out.admitted == [0, 1] and [s.num_new_tokens for s in out.scheduled] == [8, 4]
        return
    assert out.admitted == [0] and list(sched.waiting) == [b]
    assert a.is_finished  # its one token: its blocks are back
    out = step(sched)
    assert out.admitted == [1] and [s.num_new_tokens for s in out.scheduled] == [12]


def test_the_whole_prompt_check_reserves_nothing():
    # 8 blocks: b's whole 12-token prompt (3 blocks) fits beside a's 2, but only its first chunk's block is taken
    sched = make(8, budget=12)
    a, b = seq(0, 8, max_tokens=6), seq(1, 12, max_tokens=6)
    sched.add(a)
    sched.add(b)
    out = step(sched)
    assert out.admitted == [0, 1] and [s.num_new_tokens for s in out.scheduled] == [8, 4]
    assert len(b.block_table) == 1 and sched.block_manager.num_free_blocks == 8 - 2 - 1


def test_the_whole_prompt_check_counts_the_watermark_too():
    # vLLM: required = blocks of the whole sequence + watermark <= free. 8 blocks, watermark 25 % = 2 blocks:
    # b's 12 tokens (3 blocks) + 2 > the 8 - 4 = 4 free after a's 16-token prompt, though its chunk (1 + 2) fits.
    sched = make(8, budget=20, watermark=0.25)
    a, b = seq(0, 16, max_tokens=1), seq(1, 12, max_tokens=1)
    sched.add(a)
    sched.add(b)
    assert step(sched).admitted == [0]


def test_the_whole_prompt_check_counts_prefix_cache_hits():
    # 5 blocks, prefix caching on. a (9 tokens, 3 blocks) publishes its 2 full blocks; b starts with a's 8 tokens,
    # so its 12 tokens need 3 - 2 = 1 new block (the hits are held by a: taking them costs no free block).
    # Counting the hits as needed blocks would ask 3 of the 2 free and keep b waiting.
    sched = make(5, prefix=True)
    a = seq(0, 9, max_tokens=20)
    sched.add(a)
    step(sched)
    step(sched)  # a's next allocation publishes its full computed blocks
    b = seq(1, list(range(1, 9)) + [100, 101, 102, 103])
    sched.add(b)
    assert sched.block_manager.num_free_blocks == 2
    out = step(sched)
    assert out.admitted == [1] and b.num_cached_tokens == 8 and b.block_table[:2] == a.block_table[:2]


def test_a_resumed_request_must_fit_with_its_generated_tokens():
    # the check counts request.num_tokens: a preempted request's prompt plus what it had generated
    bm = BlockManager(4, BS)
    s = seq(0, 7)
    s.append_token(5)
    s.append_token(5)  # 9 tokens: 3 blocks, although the prompt's 7 need 2
    assert bm.can_allocate(s, 4) and bm.can_allocate(s, 4, full_sequence_must_fit=True)
    bm.allocate_sequence(seq(1, 4))  # 3 blocks left free ... then 2
    bm.allocate_sequence(seq(2, 4))
    assert bm.can_allocate(s, 4) and not bm.can_allocate(s, 4, full_sequence_must_fit=True)


def test_a_sliding_window_caps_the_whole_prompt_check():
    # window 8, 4-token blocks, 4 tokens a step: a sequence never holds more than
    # ceil((8 - 1 + 4) / 4) + 1 = 4 blocks (vLLM's SlidingWindowSpec.max_admission_blocks_per_request), so a
    # 40-token prompt (10 blocks) is admitted into 5 free blocks when the step's size is known.
    bm = BlockManager(5, BS, sliding_window=8)
    s = seq(0, 40)
    assert bm.can_allocate(s, 4, full_sequence_must_fit=True, max_in_flight_tokens=4)
    assert not bm.can_allocate(s, 4, full_sequence_must_fit=True)  # no step size: all 10 blocks
    bm.allocate_sequence(seq(1, 8))  # 2 blocks taken, 3 free < 4
    assert not bm.can_allocate(s, 4, full_sequence_must_fit=True, max_in_flight_tokens=4)


def test_a_preempted_request_recomputes_only_what_the_cache_lost():
    # 5 blocks, prefix caching on, two 8-token prompts growing to 16 tokens: b (newest) is preempted when a needs
    # its fourth block. b's freed full blocks keep their hashes; at readmission get_computed_blocks finds those
    # still cached (the same physical blocks), and only the rest is recomputed.
    sched = make(5, prefix=True)
    bm = sched.block_manager
    a, b = seq(0, 8, max_tokens=8), seq(1, [50 + i for i in range(8)], max_tokens=8)
    sched.add(a)
    sched.add(b)
    expected_recompute, hits, held = 0, [], {}
    computed_at_preemption = None
    while sched.has_unfinished:
        table, computed = list(b.block_table), b.num_computed_tokens
        out = sched.schedule()
        if 1 in out.preempted:
            computed_at_preemption, held = computed, dict(enumerate(table))
        if 1 in out.admitted and computed_at_preemption is not None:
            hit = next(s.num_computed_tokens for s in out.scheduled if s.seq is b)  # the readmission's hit
            assert b.num_cached_tokens == 0  # what b reports is its first admission's hit (vLLM's prefill stats)
            hits.append(hit)
            assert hit % BS == 0 and hit <= computed_at_preemption
            assert all(b.block_table[i] == held[i] for i in range(hit // BS))  # its own blocks, found again
            expected_recompute += computed_at_preemption - hit
            computed_at_preemption = None
        sampled = [7 if s.num_computed_tokens + s.num_new_tokens == s.seq.num_tokens else None for s in out.scheduled]
        sched.update(out, sampled)
    assert sched.num_preemptions >= 1 and hits and hits[0] > 0
    assert sched.num_recomputed_tokens == expected_recompute
    # the readmissions' lookups are counted apart from vllm:prefix_cache_queries, as vLLM's PrefixCacheStats does
    assert bm.prefix_cache_queries == 16 and bm.prefix_cache_hits == 0
    assert bm.prefix_cache_preempted_hits == sum(hits) > 0


def test_a_bad_step_size_is_named():
    bm = BlockManager(5, BS, sliding_window=8)
    with pytest.raises(ValueError, match="max_in_flight_tokens=0 must be a whole number of tokens >= 1"):
        bm.can_allocate(seq(0, 40), 4, full_sequence_must_fit=True, max_in_flight_tokens=0)
