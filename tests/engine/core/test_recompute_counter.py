"""The scheduler's pressure counters: `num_recomputed_tokens` counts exactly the tokens a request computes a
second time after a preemption (not the ones a prefix-cache hit skips), and each StepTrace carries the running
totals an operator would scrape (preemptions, recomputed tokens). No model runs: sampled tokens are made up."""

from __future__ import annotations

from engine.core.block_manager import BlockManager
from engine.core.scheduler import Scheduler, SchedulerConfig, SchedulerOutput
from engine.core.sequence import Sequence
from engine.sampling_params import SamplingParams


def make(num_blocks: int, block_size: int = 4, budget: int = 64, prefix: bool = False) -> Scheduler:
    bm = BlockManager(num_blocks, block_size, enable_prefix_caching=prefix)
    return Scheduler(SchedulerConfig(8, budget, num_blocks * block_size, 0.0), bm)


def seq(seq_id: int, prompt: int, max_tokens: int, first: int = 1) -> Sequence:
    return Sequence(
        seq_id, list(range(first, first + prompt)), 4, SamplingParams(max_tokens=max_tokens, temperature=0.0)
    )


def step(sched: Scheduler) -> SchedulerOutput:
    out = sched.schedule()
    sampled = [7 if s.num_computed_tokens + s.num_new_tokens == s.seq.num_tokens else None for s in out.scheduled]
    sched.update(out, sampled)
    return out


def test_no_preemption_no_recompute():
    sched = make(num_blocks=16)
    for i in range(3):
        sched.add(seq(i, 5, 3))
    while sched.has_unfinished:
        step(sched)
    assert sched.num_preemptions == 0 and sched.num_recomputed_tokens == 0


def test_recomputed_tokens_are_what_the_victim_had_computed():
    # 4 blocks of 4: two 7-token prompts fill 2 blocks each; at position 8 the older one needs a third block
    # and the newer one (b) is preempted with 8 tokens computed (7 prompt + 1 decode).
    sched = make(num_blocks=4)
    a, b = seq(0, 7, 6), seq(1, 7, 6, first=50)
    sched.add(a)
    sched.add(b)
    computed_at_preemption = None
    while sched.has_unfinished:
        before = b.num_computed_tokens
        out = step(sched)
        if out.preempted and computed_at_preemption is None:
            computed_at_preemption = before
    assert sched.num_preemptions >= 1 and computed_at_preemption == 8
    assert sched.num_recomputed_tokens == computed_at_preemption * sched.num_preemptions == 8
    assert not sched._recompute_until  # nothing left over once everything finished


def test_recompute_in_chunks_counts_each_token_once():
    # a budget of 3 tokens: the victim's 8 tokens come back in chunks of at most 3; the total is still 8
    sched = make(num_blocks=4, budget=3)
    a, b = seq(0, 7, 6), seq(1, 7, 6, first=50)
    sched.add(a)
    sched.add(b)
    while sched.has_unfinished:
        step(sched)
    assert sched.num_preemptions >= 1
    assert 0 < sched.num_recomputed_tokens <= sched.num_preemptions * (7 + 6)


def test_prefix_cache_hits_are_not_recomputed():
    # with prefix caching, b's full blocks stay cached after its preemption if nobody reuses them: at its
    # readmission those tokens are hits, not computations, so fewer tokens are recomputed than it had
    plain, cached = make(num_blocks=5), make(num_blocks=5, prefix=True)
    for sched in (plain, cached):
        sched.add(seq(0, 8, 8))
        sched.add(seq(1, 8, 8, first=50))
        while sched.has_unfinished:
            step(sched)
    assert plain.num_preemptions >= 1 and cached.num_preemptions >= 1
    assert plain.num_recomputed_tokens > 0
    assert cached.num_recomputed_tokens < plain.num_recomputed_tokens


def test_abort_forgets_a_preempted_request():
    sched = make(num_blocks=4)
    a, b = seq(0, 7, 6), seq(1, 7, 6, first=50)
    sched.add(a)
    sched.add(b)
    while not sched.num_preemptions:
        step(sched)
    sched.abort(b.seq_id)
    assert not sched._recompute_until
