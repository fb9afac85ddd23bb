"""Serving policies: the first-fit arena, the three static reservations by hand, and paged = the engine's scheduler."""

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import lessons.sim.policies as policies_mod
from engine.core.block_manager import BlockManager
from engine.core.scheduler import Scheduler, SchedulerConfig
from engine.core.sequence import Sequence
from engine.sampling_params import SamplingParams
from lessons.sim.arena import FirstFitArena
from lessons.sim.loop import SimConfig
from lessons.sim.policies import MaxReservation, OracleReservation, PagedBlocks, Pow2Reservation
from lessons.sim.simulate import make_policy, simulate
from lessons.sim.traces import replay_trace
from tests.lessons.sim.decisions import MAX_LEN, sim_decisions


def test_first_fit_arena_places_releases_and_counts_gaps():
    arena = FirstFitArena(100)
    assert [arena.reserve(n) for n in (30, 20, 30)] == [0, 30, 50]
    arena.release(30, 20)  # a 20-slot gap at 30, another of 20 at the end
    assert list(arena.gaps()) == [0, 20, 20]
    assert arena.external(25) == 40 and arena.external(20) == 0
    assert arena.reserve(25) is None  # 40 slots free, but no 25 of them adjacent
    assert arena.reserve(15) == 30  # first fit: the lowest gap that holds it
    assert arena.external(10) == 5 and arena.reserved == 75
    with pytest.raises(ValueError, match="no reservation of 20 slots starts at slot 30"):
        arena.release(30, 20)
    with pytest.raises(ValueError, match="capacity=0"):
        FirstFitArena(0)


@pytest.mark.parametrize(
    ("policy", "final", "size"),
    [
        (MaxReservation, 20, 64),
        (Pow2Reservation, 20, 32),
        (Pow2Reservation, 32, 32),
        (Pow2Reservation, 50, 64),
        (OracleReservation, 20, 20),
    ],
)
def test_static_reservation_sizes(policy, final, size):
    assert policy(1000, max_model_len=64).reservation_size(final) == size


@pytest.mark.parametrize(("reservation", "internal"), [("max_model_len", 44), ("pow2", 12), ("oracle", 0)])
def test_static_terms_by_hand(reservation, internal):
    trace = replay_trace([(0.0, 10, 10)])
    rows = simulate(trace, SimConfig("static", 100, max_model_len=64, reservation=reservation)).to_rows()
    # 20 final tokens: 10 stored, 10 reserved for what it will generate; the rest of its region never used
    assert (rows[0]["stored"], rows[0]["reserved"], rows[0]["internal"]) == (10, 10, internal)
    assert rows[0]["free"] == 100 - 20 - internal
    assert (rows[-1]["stored"], rows[-1]["reserved"]) == (20, 0)


@pytest.mark.parametrize(
    ("reservation", "capacity", "max_len", "lens", "max_num_seqs", "external", "free"),
    [
        # oracle: A [0,40) B [40,60); C (40 slots) waits for a seat; the free run [60,100) holds it: not external
        ("oracle", 100, 64, [(0, 10, 30), (0, 10, 10), (0, 10, 30)], 2, 0, 40),
        # max_model_len 40: A [0,40) B [40,80); C ends with 10 tokens but reserves 40, so the 20-slot gap is external
        ("max_model_len", 100, 40, [(0, 10, 10), (0, 10, 10), (0, 5, 5)], 3, 20, 0),
        # the same with 120 slots: C's 40 fit the 40-slot gap; it waits only for a seat
        ("max_model_len", 120, 40, [(0, 10, 10), (0, 10, 10), (0, 5, 5)], 2, 0, 40),
    ],
)
def test_static_external_counts_only_gaps_the_head_cannot_use(
    reservation, capacity, max_len, lens, max_num_seqs, external, free
):
    cfg = SimConfig("static", capacity, max_model_len=max_len, max_num_seqs=max_num_seqs, reservation=reservation)
    first = simulate(replay_trace(lens), cfg).to_rows()[0]
    assert (first["running"], first["waiting"]) == (2, 1)  # A and B run, C is the head of the queue
    assert (first["external"], first["free"]) == (external, free)


def test_paged_admission_keeps_the_watermark_free():
    # 10 blocks of 16, watermark 0.2 = 2 blocks. A takes 5 (nothing runs: no watermark), B 3 (2 stay free);
    # C needs 1 of those 2 but would eat the watermark, so it waits. Without the watermark it is admitted at once.
    trace = replay_trace([(0, 80, 8), (0, 48, 8), (0, 16, 8)])
    for watermark, admitted in ((0.2, [0, 1]), (0.0, [0, 1, 2])):
        res = simulate(trace, SimConfig("paged", 160, block_size=16, max_model_len=128, watermark=watermark))
        assert sorted(e.request_id for e in res.events if e.kind == "admit" and e.step == 1) == admitted
        assert res.to_rows()[0]["free"] == 16 * (10 - 5 - 3 - (len(admitted) == 3))
        assert res.summary.num_finished == 3


def test_paged_preempted_request_is_readmitted_first():
    # The scheduler's test_preempted_request_goes_back_ahead_of_older_waiting_ones, in the simulator: 4 blocks of 4,
    # two seats; B is preempted at step 3 and goes back ahead of C, although C (1 block) would fit first.
    cfg = SimConfig("paged", 16, block_size=4, max_model_len=16, max_num_seqs=2, watermark=0.0)
    res = simulate(replay_trace([(0, 7, 6), (0, 7, 6), (0, 3, 2)]), cfg)
    assert [(e.step, e.request_id) for e in res.events if e.kind == "preempt"][0] == (3, 1)
    assert [e.request_id for e in res.events if e.kind == "admit"][:4] == [0, 1, 1, 2]
    assert res.summary.num_finished == 3


def test_configs_pick_their_policy():
    assert isinstance(make_policy(SimConfig("paged", 256)), PagedBlocks)
    kinds = {r: type(make_policy(SimConfig("static", 256, reservation=r))) for r in ("max_model_len", "pow2", "oracle")}
    assert kinds == {"max_model_len": MaxReservation, "pow2": Pow2Reservation, "oracle": OracleReservation}
    assert make_policy(SimConfig("paged", 1000)).watermark_blocks == 0  # vLLM V1's default watermark, 0.0
    # a watermark rounds down as vLLM's KVCacheManager does: int(0.05 * 62 blocks) = 3, not 4
    assert make_policy(SimConfig("paged", 1000, watermark=0.05)).watermark_blocks == 3
    assert make_policy(SimConfig("paged", 1000, admission="unchecked")).watermark_blocks == 0
    with pytest.raises(ValueError, match="capacity_tokens=8 holds no whole 16-token block"):
        SimConfig("paged", 8)
    with pytest.raises(ValueError, match="reservation"):
        SimConfig("static", 100, reservation="pow3")


def test_paged_admits_and_frees_through_the_block_manager(monkeypatch):
    calls = {"allocate_slots": 0, "free_sequence": 0}

    class Counting(BlockManager):
        def allocate_slots(self, seq, num_new_tokens=None, watermark_blocks=0):
            calls["allocate_slots"] += 1
            return super().allocate_slots(seq, num_new_tokens, watermark_blocks)

        def free_sequence(self, seq):
            calls["free_sequence"] += 1
            super().free_sequence(seq)

    monkeypatch.setattr(policies_mod, "BlockManager", Counting)
    res = simulate(replay_trace([(0, 10, 30), (0, 5, 3)]), SimConfig("paged", capacity_tokens=256, block_size=8))
    assert calls == {"allocate_slots": 2, "free_sequence": 2} and res.summary.num_finished == 2


def engine_decisions(lens, num_blocks, block_size, max_num_seqs, watermark):
    """(admitted, preempted, blocks in use) per step of the engine's Scheduler up to its first re-admission, and
    whether it stopped there."""
    config = SchedulerConfig(
        max_num_seqs=max_num_seqs, max_num_batched_tokens=100_000, max_model_len=MAX_LEN + 1, watermark=watermark
    )
    sched = Scheduler(config, BlockManager(num_blocks, block_size))
    for i, (prompt, output) in enumerate(lens):
        # the simulator's request ends holding prompt + output tokens; the engine's with max_tokens = output + 1
        # has computed as many when it stops (the last sampled token's K/V is never written)
        params = SamplingParams(max_tokens=output + 1, ignore_eos=True)
        sched.add(Sequence(i, [1] * prompt, block_size, sampling_params=params))
    steps, preempted = [], set()
    while sched.has_unfinished:
        out = sched.schedule()
        if preempted & set(out.admitted):
            return steps, True  # recompute: the engine re-prefills the token it sampled before too, the simulator not
        preempted |= set(out.preempted)
        steps.append((sorted(out.admitted), sorted(out.preempted), num_blocks - sched.block_manager.num_free_blocks))
        sched.update(out, [1] * len(sched.running))  # with this token budget every running sequence was scheduled
    return steps, False


@settings(max_examples=80, deadline=None)
@given(
    lens=st.lists(st.tuples(st.integers(1, 20), st.integers(1, 30)), min_size=1, max_size=12),
    block_size=st.sampled_from([1, 2, 4, 8]),
    num_blocks=st.integers(8, 40),
    max_num_seqs=st.integers(1, 8),
    watermark=st.sampled_from([0.0, 0.01, 0.1, 0.2]),
)
@example([(20, 5), (10, 13), (14, 27), (3, 1), (20, 7), (11, 6), (8, 8), (15, 13), (19, 28), (14, 2)], 4, 30, 7, 0.2)
def test_paged_policy_decides_as_the_engine_scheduler(lens, block_size, num_blocks, max_num_seqs, watermark):
    num_blocks = max(num_blocks, -(-(MAX_LEN + 1) // block_size))  # the Scheduler wants max_model_len to fit
    ours, we_readmitted, _ = sim_decisions(lens, num_blocks, block_size, max_num_seqs, watermark)
    theirs, they_readmitted = engine_decisions(lens, num_blocks, block_size, max_num_seqs, watermark)
    n = min(len(ours), len(theirs))
    assert ours[:n] == theirs[:n]  # step by step, until either side re-admits a preempted request
    assert len(ours) == len(theirs) or (we_readmitted if len(ours) < len(theirs) else they_readmitted)


def test_the_comparison_covers_watermark_admission_and_preemption():
    lens = [(20, 5), (10, 13), (14, 27), (3, 1), (20, 7), (11, 6), (8, 8), (15, 13), (19, 28), (14, 2)]
    ours, _, num_preemptions = sim_decisions(lens, 30, 4, 7, 0.2)
    assert num_preemptions > 0 and any(preempted for _, preempted, _ in ours)
    # a step that preempts admits nobody, and the watermark keeps int(0.2 * 30) = 6 blocks from admissions
    assert all(not admitted for admitted, preempted, _ in ours if preempted)
    assert ours[0][2] <= 30 - 6
