"""Serving simulator: hand-computed replays, invariants over random traces, the vLLM paper's waste gap, speed."""

import math
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import engine.core.block_manager as block_manager_mod
from engine.core.admission import watermark_blocks
from engine.core.block_allocator import BlockAllocator
from lessons.sim.loop import SimConfig
from lessons.sim.metrics import COLUMNS, summarize
from lessons.sim.simulate import simulate, simulate_model
from lessons.sim.traces import DATASETS, generate_trace, replay_trace, trace_stats

MEMORY_PARTS = ("stored", "reserved", "internal", "external", "free")


def check_invariants(result, trace, cfg):
    """Memory never over capacity, parts add up, every request accounted for, paged waste < 1 block each,
    an oracle reservation never has internal waste."""
    rows = result.to_rows()
    for row in rows:
        assert all(row[p] >= 0 for p in MEMORY_PARTS), row
        assert sum(row[p] for p in MEMORY_PARTS) == cfg.capacity_tokens, row
        if cfg.policy == "paged":
            assert row["internal"] <= row["running"] * (cfg.block_size - 1), row
            assert row["reserved"] == 0 and row["external"] == 0
        elif cfg.reservation == "oracle":
            assert row["internal"] == 0, row  # it reserves exactly the final length
        assert row["running"] <= cfg.max_num_seqs
    statuses = [o.status for o in result.requests]
    assert len(statuses) == len(trace) and "unfinished" not in statuses
    assert sorted(o.request_id for o in result.requests) == sorted(r.request_id for r in trace)
    if cfg.admission == "fcfs":
        assert "oom" not in statuses
    by_id = {r.request_id: r for r in trace}
    for o in result.requests:
        if o.status == "finished":
            r = by_id[o.request_id]
            assert o.generated == min(r.prompt_len + r.output_len, cfg.max_model_len) - r.prompt_len
    if rows:
        assert rows[-1]["stored"] >= 0
    if cfg.policy == "paged" and cfg.admission == "fcfs":
        # an admission made while something else ran left the watermark free (growth and finishes come
        # before and after admission in a step, so the row's free slots are what the last admission left)
        wm = watermark_blocks(cfg.watermark, cfg.capacity_tokens // cfg.block_size)
        admits = Counter(e.step for e in result.events if e.kind == "admit")
        for row in rows:
            if admits[row["step"]] and row["running"] > 1:
                assert row["free"] // cfg.block_size >= wm, row


def test_paged_replay_by_hand():
    trace = replay_trace([(0.0, 10, 10)])
    res = simulate(trace, SimConfig("paged", capacity_tokens=64, block_size=16))
    rows = res.to_rows()
    # step 1 prefills 10 tokens into one block; step s >= 2 holds 10 + (s - 1) tokens
    assert (rows[0]["stored"], rows[0]["internal"], rows[0]["free"]) == (10, 6, 48)
    assert (rows[6]["stored"], rows[6]["internal"]) == (16, 0)  # block 1 exactly full
    assert (rows[7]["stored"], rows[7]["internal"], rows[7]["free"]) == (17, 15, 32)  # second block taken
    assert len(rows) == 11 and rows[-1]["stored"] == 20
    assert res.requests[0].status == "finished" and res.summary.generated_tokens == 10
    assert [e.kind for e in res.events] == ["admit", "finish"]


def test_static_reservation_terms_by_hand():
    trace = replay_trace([(0.0, 10, 10)])
    res = simulate(trace, SimConfig("static", capacity_tokens=64, max_model_len=32))
    first, last = res.to_rows()[0], res.to_rows()[-1]
    # reserves 32 slots: 10 stored, 10 reserved for future tokens, 12 never used (internal)
    assert (first["stored"], first["reserved"], first["internal"], first["free"]) == (10, 10, 12, 32)
    assert (last["stored"], last["reserved"], last["internal"]) == (20, 0, 12)


def test_static_external_fragmentation_appears_as_a_gap():
    # oracle reservations: A [0,40) B [40,60) C [60,100); D (30 slots) waits; B ends -> 20-slot gap D cannot use
    trace = replay_trace([(0, 10, 30), (0, 10, 10), (0, 10, 30), (0, 10, 20)])
    cfg = SimConfig("static", capacity_tokens=100, max_model_len=64, reservation="oracle")
    res = simulate(trace, cfg)
    rows = res.to_rows()
    assert rows[11]["external"] == 20 and rows[11]["waiting"] == 1  # step 12: B's slots free but too small
    assert rows[0]["external"] == 0  # the arena is full: nothing free at all yet
    admit_d = [e for e in res.events if e.kind == "admit" and e.request_id == 3]
    assert admit_d[0].step == 32  # after A and C finish at step 31
    check_invariants(res, trace, cfg)


def test_waste_is_reserved_internal_and_external_over_held():
    # COLUMNS: step, time_s, stored, reserved, internal, external, free, running, waiting, finished, generated, step_s
    steps = [
        (1, 0.00, 10, 10, 0, 20, 60, 1, 1, 0, 0, 0.02),  # held 40: waste 30/40, of it external 20/40
        (2, 0.02, 20, 0, 20, 0, 60, 1, 0, 0, 1, 0.02),  # held 40: waste 20/40, all internal
        (3, 0.04, 0, 0, 0, 0, 100, 0, 0, 1, 0, 0.02),  # nothing runs: not averaged
    ]
    s = summarize(SimConfig("static", 100), steps, [], [], clock=0.06, wall_s=0.0).summary
    assert s.avg_waste == pytest.approx((30 / 40 + 20 / 40) / 2)
    assert (s.avg_reserved, s.avg_internal, s.avg_external) == pytest.approx((10 / 80, 20 / 80, 20 / 80))


def test_simulated_waste_includes_external_fragmentation():
    trace = replay_trace([(0, 10, 30), (0, 10, 10), (0, 10, 30), (0, 10, 20)])  # the gap case above
    res = simulate(trace, SimConfig("static", capacity_tokens=100, max_model_len=64, reservation="oracle"))
    busy = [r for r in res.to_rows() if r["running"]]
    wasted = [
        (r["reserved"] + r["internal"] + r["external"]) / (r["stored"] + r["reserved"] + r["internal"] + r["external"])
        for r in busy
    ]
    assert res.summary.avg_external > 0
    assert res.summary.avg_waste == pytest.approx(sum(wasted) / len(busy))


def test_paged_uses_the_real_block_allocator(monkeypatch):
    calls = {"allocate": 0, "free": 0}

    class Counting(BlockAllocator):
        def allocate(self):
            calls["allocate"] += 1
            return super().allocate()

        def free(self, block_id):
            calls["free"] += 1
            super().free(block_id)

    monkeypatch.setattr(block_manager_mod, "BlockAllocator", Counting)
    trace = replay_trace([(0, 10, 30), (0, 5, 3)])
    simulate(trace, SimConfig("paged", capacity_tokens=256, block_size=8))
    # request 0: 40 tokens -> 5 blocks, 2 for the prompt (allocate_blocks) and 3 at crossings; request 1: 1
    assert calls["allocate"] >= 3 and calls["free"] == 5 + 1


@settings(max_examples=150, deadline=None)
@given(
    lens=st.lists(st.tuples(st.floats(0, 5), st.integers(1, 200), st.integers(1, 200)), min_size=1, max_size=30),
    policy=st.sampled_from(["static", "paged"]),
    reservation=st.sampled_from(["max_model_len", "oracle", "pow2"]),
    capacity=st.integers(64, 2000),
    block=st.sampled_from([1, 4, 16, 32]),
    seqs=st.integers(1, 16),
    admission=st.sampled_from(["fcfs", "unchecked"]),
)
def test_invariants_on_random_traces(lens, policy, reservation, capacity, block, seqs, admission):
    trace = replay_trace(lens)
    cfg = SimConfig(
        policy,
        capacity,
        block_size=block,
        max_model_len=256,
        max_num_seqs=seqs,
        reservation=reservation,
        admission=admission,
    )
    check_invariants(simulate(trace, cfg), trace, cfg)


def test_preemption_under_pressure_still_finishes_everything():
    trace = generate_trace("sharegpt", 60, seed=3, max_len=1024)
    cfg = SimConfig("paged", capacity_tokens=2048, block_size=16, max_model_len=1024)
    res = simulate(trace, cfg)
    assert res.summary.num_preemptions > 0 and res.summary.num_finished == 60
    check_invariants(res, trace, cfg)


def test_unchecked_admission_ooms_and_rejections():
    trace = replay_trace([(0, 10, 10)] * 5 + [(0, 300, 5)])
    res = simulate(trace, SimConfig("static", 100, max_model_len=40, admission="unchecked"))
    kinds = [e.kind for e in res.events]
    assert kinds.count("oom") == 3 and kinds.count("reject") == 1  # 2 fit 40-slot reservations; prompt too long
    with pytest.raises(ValueError, match="policy"):
        SimConfig("lazy", 100)
    with pytest.raises(ValueError, match="capacity_tokens"):
        SimConfig("paged", 0)


def test_paper_waste_gap_on_sharegpt():
    trace = generate_trace("sharegpt", 300, seed=0)
    # the paper's setting: 16-token blocks (vLLM's default then; 64 since v0.34.0)
    paged = simulate_model(trace, "llama-2-13b", "a100-40gb", "paged", max_model_len=2048, block_size=16)
    static = simulate_model(trace, "llama-2-13b", "a100-40gb", "static", max_model_len=2048, block_size=16)
    assert paged.summary.avg_waste <= 0.04  # vLLM: under 4%
    assert static.summary.avg_waste >= 0.5  # vLLM paper Fig. 2: Orca (Max) 20.4% of slots hold tokens
    parts = static.summary.avg_reserved + static.summary.avg_internal + static.summary.avg_external
    # with the queue full, the gap is what is left after whole 2048-slot reservations: capacity mod 2048
    gap = (static.capacity_tokens % 2048) / static.capacity_tokens
    assert 0 < static.summary.avg_external <= gap + 1e-9 and static.summary.avg_waste == pytest.approx(parts)
    assert paged.summary.peak_concurrency > 2 * static.summary.peak_concurrency
    assert paged.summary.tokens_per_s > static.summary.tokens_per_s
    assert paged.summary.generated_tokens == static.summary.generated_tokens
    assert set(paged.columns) == set(COLUMNS)


def test_thousand_requests_on_80gb_all_finish():
    # speed is the benchmarks' business (bench/), never a timed assertion here
    trace = generate_trace("sharegpt", 1000, seed=1)
    for policy in ("static", "paged"):
        res = simulate_model(trace, "llama-3-8b", "a100-80gb", policy)
        assert res.summary.num_finished == 1000 and res.summary.generated_tokens == sum(r.output_len for r in trace)


def test_traces_are_seeded_and_follow_the_paper_means():
    assert generate_trace("alpaca", 50, seed=7) == generate_trace("alpaca", 50, seed=7)
    assert generate_trace("alpaca", 50, seed=7) != generate_trace("alpaca", 50, seed=8)
    big = 10**6  # no length filter: the sample means must be the published ones
    share = trace_stats(generate_trace("sharegpt", 20000, seed=0, max_len=big))
    alp = trace_stats(generate_trace("alpaca", 20000, seed=0, max_len=big))
    assert share["prompt_mean"] == pytest.approx(DATASETS["sharegpt"].prompt_mean, rel=0.05)
    assert share["output_mean"] == pytest.approx(DATASETS["sharegpt"].output_mean, rel=0.05)
    assert share["prompt_mean"] / alp["prompt_mean"] == pytest.approx(8.4, rel=0.07)
    assert share["output_mean"] / alp["output_mean"] == pytest.approx(5.8, rel=0.07)
    assert all(r.prompt_len + r.output_len <= 2048 for r in generate_trace("sharegpt", 500, seed=0))
    poisson = generate_trace("alpaca", 4000, request_rate=10.0, seed=0)
    assert poisson[-1].arrival_s / 4000 == pytest.approx(0.1, rel=0.06)  # mean gap 1 / rate
    assert math.isclose(generate_trace("alpaca", 5)[-1].arrival_s, 0.0)  # rate inf: all at once


def test_bad_trace_inputs_are_rejected():
    with pytest.raises(ValueError, match="unknown dataset"):
        generate_trace("wikipedia")
    with pytest.raises(ValueError, match="request_rate"):
        generate_trace(request_rate=0)
    with pytest.raises(ValueError, match="output_len"):
        replay_trace([(0.0, 10, 0)])
    with pytest.raises(ValueError, match="lacks"):
        replay_trace([{"arrival_s": 0, "prompt_len": 3}])


def test_rows_can_be_thinned_for_charts():
    res = simulate(generate_trace("alpaca", 200, seed=0), SimConfig("static", 4096, max_model_len=512))
    full = res.to_rows()
    thin = res.to_rows(max_points=50)
    assert len(thin) <= 50 and thin[0] == full[0] and thin[-1] == full[-1]
    assert res.sampled(None) is res.columns


def test_step_time_comes_from_the_roofline():
    from engine.memory.roofline import StepTimeModel

    trace = replay_trace([(0.0, 100, 5)] * 4)
    stm = StepTimeModel.for_model("llama-3-8b", "h100-sxm")
    res = simulate(trace, SimConfig("paged", 4096, step_time=stm))
    rows = res.to_rows()
    assert rows[1]["step_s"] == pytest.approx(stm(4, 400))  # 4 sequences decoding over 400 cached tokens
    assert rows[1]["generated"] == 4
    assert res.summary.duration_s == pytest.approx(sum(r["step_s"] for r in rows))


def test_kv_read_factor_charges_only_the_kv_reads():
    from engine.memory.roofline import StepTimeModel

    base = StepTimeModel(
        weight_bytes=100.0,
        kv_bytes_per_token=10.0,
        flops_per_token=0.0,
        attn_flops_per_pair=0.0,
        peak_flops=1.0,
        bandwidth=1.0,
    )
    slow = StepTimeModel(100.0, 10.0, 0.0, 0.0, 1.0, 1.0, kv_read_factor=2.0)
    assert base(4, 50) == 100 + 10 * 50 and slow(4, 50) == 100 + 2 * 10 * 50  # weights are read at full speed
    assert slow(0, 0, prefill_tokens=5) == base(0, 0, prefill_tokens=5) == 100 + 10 * 5  # KV writes are not reads
    with pytest.raises(ValueError, match="kv_read_factor"):
        StepTimeModel(1.0, 1.0, 0.0, 0.0, 1.0, 1.0, kv_read_factor=0.0)
    trace = generate_trace("sharegpt", 40, seed=0)
    fast = simulate_model(trace, "llama-2-13b", "a100-40gb", "paged", max_model_len=2048).summary
    charged = simulate_model(trace, "llama-2-13b", "a100-40gb", "paged", max_model_len=2048, kv_read_factor=3.0)
    assert charged.summary.duration_s > fast.duration_s and charged.summary.generated_tokens == fast.generated_tokens


def test_a_hybrid_model_holds_its_pool_per_kv_cache_group():
    from engine.memory import serving_footprint

    trace = generate_trace("sharegpt", 50, seed=3)
    n = 65536
    fp = serving_footprint("gpt-oss-120b", "h100-sxm", max_model_len=n, block_size=16)
    res = simulate_model(trace, "gpt-oss-120b", "h100-sxm", "paged", max_model_len=n, footprint=fp)
    # the paged server: the pool's blocks (each one page of 18 layers: the largest group's) in 2 groups' tables
    assert fp.pool_block_bytes == 16 * 18 * (2 * 8 * 64 * 2)
    assert res.extra["capacity_tokens"] == fp.num_blocks * 16 and len(res.config.groups) == 2
    assert res.summary.num_finished == 50
    # a static server keeps vLLM's figure: pool blocks / (full blocks + sliding blocks) per n-token request, times n
    static = simulate_model(trace, "gpt-oss-120b", "h100-sxm", "static", max_model_len=n, footprint=fp)
    per_request = n // 16 + (-(-min(128 - 1 + fp.max_num_batched_tokens, n) // 16) + 1)
    assert static.extra["capacity_tokens"] == int(fp.num_blocks / per_request * n) and static.config.groups == ()
    # the all-36-layers formula would give the budget over 73,728 bytes per token: far less at long context
    assert static.extra["capacity_tokens"] > 1.5 * fp.kv_budget_bytes // (2 * 36 * 8 * 64 * 2)
