"""Scheduler tests: scripted scenarios (budget, chunking, watermark, preemption order, prefix hits) and
hypothesis properties over random arrivals: every request finishes exactly once, the block pool is whole at
the end, and no step exceeds its token budget or sequence limit. No model runs: sampled tokens are made up.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.core.block_manager import BlockManager
from engine.core.scheduler import Scheduler, SchedulerConfig, SchedulerOutput
from engine.core.sequence import Sequence, SequenceStatus
from engine.sampling_params import SamplingParams


def make(
    num_blocks: int = 16,
    block_size: int = 4,
    max_num_seqs: int = 8,
    budget: int = 64,
    max_model_len: int | None = None,
    prefix: bool = False,
    watermark: float = 0.0,
    reserve_full_isl: bool = True,
) -> Scheduler:
    bm = BlockManager(num_blocks, block_size, enable_prefix_caching=prefix)
    cfg = SchedulerConfig(max_num_seqs, budget, max_model_len or num_blocks * block_size, watermark, reserve_full_isl)
    return Scheduler(cfg, bm)


def seq(seq_id: int, prompt: list[int] | int, max_tokens: int = 4, block_size: int = 4, **kw) -> Sequence:
    ids = list(range(1, prompt + 1)) if isinstance(prompt, int) else prompt
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, **kw)
    return Sequence(seq_id, ids, block_size, params)


def fake_tokens(out: SchedulerOutput) -> list[int | None]:
    """Token 7 for every sequence that reached its end this step, None for partial chunks."""
    return [7 if s.num_computed_tokens + s.num_new_tokens == s.seq.num_tokens else None for s in out.scheduled]


def ids(out: SchedulerOutput) -> list[int]:
    return [s.seq.seq_id for s in out.scheduled]


def new_tokens(out: SchedulerOutput) -> list[int]:
    return [s.num_new_tokens for s in out.scheduled]


def computed(out: SchedulerOutput) -> list[int]:
    return [s.num_computed_tokens for s in out.scheduled]


def step(sched: Scheduler) -> tuple[SchedulerOutput, list[Sequence]]:
    out = sched.schedule()
    return out, sched.update(out, fake_tokens(out))


def test_decode_and_prefill_share_the_token_budget():
    sched = make(budget=10)
    a, b = seq(0, 6), seq(1, 9)
    sched.add(a)
    sched.add(b)
    out, _ = step(sched)
    # a's whole prompt (6) then a 4-token chunk of b: 10 tokens, the budget exactly.
    assert ids(out) == [0, 1]
    assert new_tokens(out) == [6, 4] and computed(out) == [0, 0]
    assert a.num_completion_tokens == 1 and b.num_completion_tokens == 0 and b.num_computed_tokens == 4
    out, _ = step(sched)
    # running first: a decodes one token, b's remaining 5 prompt tokens follow.
    assert new_tokens(out) == [1, 5] and computed(out) == [6, 4]
    assert b.num_completion_tokens == 1


def test_long_prompt_is_chunked_and_finishes():
    sched = make(num_blocks=32, budget=8)
    s = seq(0, 30, max_tokens=3)
    sched.add(s)
    chunks = []
    while sched.has_unfinished:
        out, _ = step(sched)
        chunks.append(out.scheduled[0].num_new_tokens)
    assert chunks == [8, 8, 8, 6, 1, 1]
    assert s.finish_reason == "length" and s.num_completion_tokens == 3
    assert sched.block_manager.num_free_blocks == 32


def test_max_num_seqs_limits_admission():
    sched = make(max_num_seqs=2)
    for i in range(3):
        sched.add(seq(i, 3))
    out, _ = step(sched)
    assert ids(out) == [0, 1] and [s.seq_id for s in sched.waiting] == [2]


def test_admission_waits_for_free_blocks_and_watermark():
    # 10 blocks of 4; watermark 0.2 keeps 2 blocks free while something runs.
    sched = make(num_blocks=10, watermark=0.2)
    sched.add(seq(0, 20, max_tokens=2))  # 5 blocks, admitted without the watermark (nothing running)
    sched.add(seq(1, 12, max_tokens=2))  # 3 blocks: 5 + 3 + 2 watermark = 10 fits
    sched.add(seq(2, 4, max_tokens=2))  # 1 more block would eat the watermark
    out, _ = step(sched)
    assert out.admitted == [0, 1]
    assert [s.seq_id for s in sched.waiting] == [2]


def test_preemption_evicts_the_newest_and_requeues_it_first():
    # 4 blocks of 4 = 16 slots; two 7-token prompts fill 2 blocks each; decode soon needs a fifth block.
    sched = make(num_blocks=4, max_model_len=16)
    a, b = seq(0, 7, max_tokens=6), seq(1, 7, max_tokens=6)
    sched.add(a)
    sched.add(b)
    step(sched)  # both prefilled (7 computed, 8 tokens): 2 blocks each, pool empty
    out, _ = step(sched)  # position 7 still fits in each second block
    assert new_tokens(out) == [1, 1] and not out.preempted
    out, _ = step(sched)  # a needs a third block for position 8: b (newest) is preempted
    assert out.preempted == [1] and ids(out) == [0]
    assert b.status is SequenceStatus.PREEMPTED and b.num_computed_tokens == 0 and b.block_table == []
    assert list(sched.waiting) == [b] and sched.running == [a]
    assert b.num_preemptions == 1 and a.num_preemptions == 0 and sched.num_preemptions == 1
    assert b.num_tokens == 9  # generated tokens are kept and recomputed later
    while sched.has_unfinished:
        step(sched)
    assert a.num_completion_tokens == 6 and b.num_completion_tokens == 6
    assert sched.block_manager.num_free_blocks == 4


def test_preemption_frees_exactly_the_request_it_takes_off_running():
    # 6 blocks of 4, three 7-token prompts of 2 blocks each: the pool is full. At position 8 the oldest needs a
    # third block: the newest (c) alone is preempted, and its two blocks go to a's and b's third blocks.
    sched = make(num_blocks=6, max_model_len=24)
    a, b, c = (seq(i, 7, max_tokens=8) for i in range(3))
    for s in (a, b, c):
        sched.add(s)
    step(sched)
    step(sched)
    out, _ = step(sched)
    assert out.preempted == [2] and ids(out) == [0, 1]
    assert sched.running == [a, b] and list(sched.waiting) == [c]  # the one it took off running ...
    assert c.block_table == [] and c.seq_id not in sched.block_manager.sequences  # ... is the one it freed
    assert [len(s.block_table) for s in (a, b)] == [3, 3] and sched.block_manager.num_free_blocks == 0
    assert all(sched.block_manager.allocator.ref_count(x) == 1 for s in (a, b) for x in s.block_table)


def test_preempted_request_goes_back_ahead_of_older_waiting_ones():
    # max_num_seqs=2 keeps c waiting; when b is preempted it must be first in line again, before c.
    sched = make(num_blocks=4, max_num_seqs=2, max_model_len=16)
    a, b, c = seq(0, 7, max_tokens=6), seq(1, 7, max_tokens=6), seq(2, 3, max_tokens=2)
    for s in (a, b, c):
        sched.add(s)
    out, _ = step(sched)
    assert out.admitted == [0, 1] and list(sched.waiting) == [c]
    step(sched)
    out, _ = step(sched)  # a needs a third block: b is preempted
    assert out.preempted == [1]
    assert list(sched.waiting) == [b, c]  # the front of the queue, not behind c
    admitted = []
    while sched.has_unfinished:
        out, _ = step(sched)
        admitted += out.admitted
    assert admitted == [1, 2]  # b is re-admitted before c, although c alone would have fit sooner


@pytest.mark.parametrize("reserve_full_isl", [False, True])
def test_a_step_that_preempts_admits_nobody(reserve_full_isl):
    # A token budget of 2 leaves 1 token for an admission after a's decode, and b's first 1-token chunk needs
    # only the 1 block b's preemption just freed: it fits, yet memory is tight, so it waits for the next step.
    # That rule shows only with first-chunk admission (scheduler_reserve_full_isl off): b's whole sequence,
    # 9 tokens = 3 blocks, does not fit in that 1 free block, so by default b waits until a finishes.
    sched = make(num_blocks=4, budget=2, max_model_len=16, reserve_full_isl=reserve_full_isl)
    a, b = seq(0, 7, max_tokens=6), seq(1, 7, max_tokens=6)
    sched.add(a)
    sched.add(b)
    out = SchedulerOutput()
    while not out.preempted:
        assert sched.has_unfinished
        out, _ = step(sched)
    assert out.preempted == [1] and ids(out) == [0] and out.num_batched_tokens == 1
    bm = sched.block_manager
    assert bm.can_allocate(b, 1)  # the head of the queue's first chunk would fit right now ...
    assert not bm.can_allocate(b, 1, full_sequence_must_fit=True)  # ... its whole sequence would not
    assert out.admitted == [] and list(sched.waiting) == [b]
    out, _ = step(sched)
    if not reserve_full_isl:
        assert out.admitted == [1]  # admitted one step later
        return
    assert out.admitted == [] and a.is_finished  # a's last decode: its blocks come back after the step
    out, _ = step(sched)
    assert out.admitted == [1]  # admitted one step later than with first-chunk admission


def test_preempting_itself_when_alone_cannot_happen_within_max_model_len():
    # A request that exactly fills the cache finishes at max_model_len instead of preempting itself.
    sched = make(num_blocks=2, max_model_len=8)
    s = seq(0, 5, max_tokens=100)
    sched.add(s)
    while sched.has_unfinished:
        out, _ = step(sched)
        assert not out.preempted
    assert s.finish_reason == "length" and s.num_tokens == 8


def test_prefix_cache_hit_skips_computed_tokens():
    sched = make(prefix=True)
    prompt = list(range(10, 23))  # 13 tokens: 3 full blocks of 4 + 1
    first = seq(0, prompt, max_tokens=1)
    sched.add(first)
    while sched.has_unfinished:
        step(sched)
    second = seq(1, prompt + [99], max_tokens=1)
    sched.add(second)
    out, _ = step(sched)
    assert computed(out) == [12] and new_tokens(out) == [2]
    assert second.num_cached_tokens == 12


def test_stop_tokens_and_eos():
    sched = make()
    a = seq(0, 3, max_tokens=10, stop_token_ids=[7])
    b = seq(1, 3, max_tokens=10, ignore_eos=True)
    c = seq(2, 3, max_tokens=10)
    for s in (a, b, c):
        sched.add(s)
    out = sched.schedule()
    finished = sched.update(out, [7, 7, 7], eos_token_ids=(7,))
    assert [s.seq_id for s in finished] == [0, 2]
    assert a.finish_reason == "stop" and c.finish_reason == "stop" and b.finish_reason is None


def test_what_the_boundary_checked_is_an_invariant_here():
    # LLM.add_request / generate refuse a too-long prompt or a missing SamplingParams with a ValueError
    # (tests/engine/test_llm.py), and EngineConfig the limits (tests/engine/test_config.py); past that boundary
    # the scheduler asserts them.
    sched = make(num_blocks=4, max_model_len=10)
    with pytest.raises(AssertionError, match=r"\(11, 10\)"):
        sched.add(seq(0, 11))
    with pytest.raises(AssertionError):
        sched.add(Sequence(1, [1, 2], 4, None))
    with pytest.raises(AssertionError):
        SchedulerConfig(max_num_batched_tokens=0)
    with pytest.raises(AssertionError):
        SchedulerConfig(watermark=1.5)


def test_abort_frees_blocks():
    sched = make(num_blocks=8)
    sched.add(seq(0, 9))
    sched.add(seq(1, 3))
    step(sched)
    assert sched.abort(0).finish_reason == "abort"
    assert sched.abort(5) is None
    assert [s.seq_id for s in sched.running] == [1]
    sched.abort(1)
    assert sched.block_manager.num_free_blocks == 8 and not sched.has_unfinished


def test_abort_after_schedule_before_update_frees_the_step_and_publishes_nothing_unwritten():
    """A step that raised between schedule() and update(): its slots are freed and, with prefix caching, only
    blocks an earlier completed step wrote get a hash (none of the failed step's, whose K/V may be garbage)."""
    sched = make(num_blocks=16, prefix=True, budget=8)
    a, b = seq(0, 13), seq(1, list(range(1, 10)))  # b shares a's first two blocks
    sched.add(a)
    step(sched)  # a's first 8 tokens computed: blocks 0 and 1 full and written
    sched.add(b)
    out = sched.schedule()  # a's last 5 tokens (blocks 2, 3 allocated); b admitted on a prefix hit of 8
    assert ids(out) == [0, 1] and len(a.block_table) == 4 and b.num_cached_tokens == 8
    # ... the model raises here: update() never runs, blocks 2 and 3 hold no K/V ...
    assert sched.abort(0) is a and a.finish_reason == "abort" and a.block_table == []
    assert [s.seq_id for s in sched.finish_requests([1, 1, 99])] == [1]  # duplicates and unknown ids skipped
    bm = sched.block_manager
    assert bm.allocator.num_cached_blocks == 2  # the two blocks the completed step wrote; not block 2
    assert bm.num_free_blocks == 16 and all(count == 0 for count in bm.allocator.ref_counts)
    assert not sched.has_unfinished and b.status is SequenceStatus.FINISHED
    assert bm.num_cached_prefix_tokens(seq(2, 13)) == 8  # a later request with a's prompt hits only those


def test_abort_of_a_preempted_request_takes_it_off_the_waiting_queue():
    sched = make(num_blocks=4, budget=64)
    a, b = seq(0, 6, max_tokens=8), seq(1, 6, max_tokens=8)
    sched.add(a)
    sched.add(b)
    for _ in range(4):
        step(sched)
        if sched.num_preemptions:
            break
    assert sched.num_preemptions and b.status is SequenceStatus.PREEMPTED and sched.waiting[0] is b
    assert sched.abort(1) is b and not sched.waiting and b.block_table == []
    sched.abort(0)
    assert sched.block_manager.num_free_blocks == 4 and not sched.has_unfinished


# ---- properties ------------------------------------------------------------------------------------------

request = st.tuples(
    st.integers(0, 12),  # arrival step
    st.integers(0, 3),  # shared-prefix family (prefix caching has something to hit)
    st.integers(1, 40),  # prompt length
    st.integers(1, 12),  # max_tokens
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    requests=st.lists(request, min_size=1, max_size=14),
    block_size=st.sampled_from([1, 2, 4, 8, 16]),
    num_blocks=st.integers(3, 24),
    max_num_seqs=st.integers(1, 6),
    budget=st.integers(1, 48),
    prefix=st.booleans(),
    watermark=st.sampled_from([0.0, 0.01, 0.1]),
)
def test_random_workloads_finish_exactly_once(
    requests, block_size, num_blocks, max_num_seqs, budget, prefix, watermark
):
    max_model_len = min(num_blocks * block_size, 48)
    sched = make(num_blocks, block_size, max_num_seqs, budget, max_model_len, prefix, watermark)
    bm = sched.block_manager
    seqs = []
    for i, (arrival, family, length, max_tokens) in enumerate(sorted(requests)):
        prompt = [100 * family + j for j in range(min(length, max_model_len))]
        seqs.append((arrival, seq(i, prompt, max_tokens, block_size)))
    finished_ids: list[int] = []
    pending = list(seqs)
    step_no = 0
    # Generous bound: each step computes >= 1 token; preemption may recompute, so allow slack.
    total_tokens = sum(s.num_tokens + s.sampling_params.max_tokens for _, s in seqs)
    while pending or sched.has_unfinished:
        while pending and pending[0][0] <= step_no:
            sched.add(pending.pop(0)[1])
        step_no += 1
        assert step_no < 50 * total_tokens + 100, "scheduler stopped making progress"
        out = sched.schedule()
        if out.is_empty:
            assert not sched.has_unfinished  # idle only when there is no work
            continue
        scheduled_ids = ids(out)
        assert len(scheduled_ids) == len(set(scheduled_ids)), "a sequence was scheduled twice in one step"
        assert 1 <= out.num_batched_tokens <= budget
        assert len(sched.running) <= max_num_seqs
        assert all(n >= 1 for n in new_tokens(out))
        for part in out.scheduled:
            s, n, c = part.seq, part.num_new_tokens, part.num_computed_tokens
            assert s.status is SequenceStatus.RUNNING and c == s.num_computed_tokens
            assert len(s.block_table) * block_size >= c + n  # slots exist for every new token
        # Ref counts equal the number of running owners; every block is free xor owned.
        owners: dict[int, int] = {}
        for s in sched.running:
            for b in s.block_table:
                owners[b] = owners.get(b, 0) + 1
        assert all(bm.allocator.ref_count(b) == k for b, k in owners.items())
        assert bm.num_free_blocks + len(owners) == num_blocks
        # Every live request is in exactly one place.
        where = [s.seq_id for s in sched.waiting] + [s.seq_id for s in sched.running]
        assert len(where) == len(set(where))
        assert not set(where) & set(finished_ids)
        if out.preempted:  # a preempting step admits nobody; the victims are first in line, oldest first
            assert not out.admitted
            assert [s.seq_id for s in sched.waiting][: len(out.preempted)] == out.preempted[::-1]
        finished_ids += [s.seq_id for s in sched.update(out, fake_tokens(out))]
    assert sorted(finished_ids) == list(range(len(seqs)))
    assert bm.num_free_blocks == num_blocks and not bm.sequences
    for _, s in seqs:
        assert s.is_finished and s.finish_reason == "length"
        expected = min(s.sampling_params.max_tokens, max_model_len - s.num_prompt_tokens)
        assert s.num_completion_tokens == max(1, expected)
