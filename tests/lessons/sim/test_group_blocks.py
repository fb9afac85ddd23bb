"""A hybrid model in the simulator: blocks per KV-cache group over one pool, as the engine's BlockManager holds them.

The paged policy for a model with full and sliding-window layers decides step by step as the engine's Scheduler
over BlockManager(groups=...) does; every step the pool is conserved (free + held = num_blocks), the memory terms
add up to the pool's slots and *stored* counts each group's live tokens; a sliding group never holds more than its
window's blocks; at one budget a hybrid serves more requests at once than the same model with every layer full.
The pool is the memory model's num_blocks, and dense runs are unchanged (pinned to the numbers before groups).
"""

from dataclasses import replace

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from engine.core.block_manager import BlockManager
from engine.core.kv_groups import blocks_per_seq, group_size, kv_cache_groups
from engine.core.scheduler import Scheduler, SchedulerConfig
from engine.core.sequence import Sequence
from engine.core.sliding_window import FREED, kv_blocks_per_seq
from engine.memory import kv_pool
from engine.memory.catalog import MODELS
from engine.memory.footprint import serving_footprint
from engine.memory.layers import FullAttention
from engine.sampling_params import SamplingParams
from lessons.sim.group_blocks import GroupBlocks, engine_groups, sim_pool
from lessons.sim.loop import ServingLoop, SimConfig
from lessons.sim.policies import PagedBlocks
from lessons.sim.simulate import make_policy, simulate, simulate_model
from lessons.sim.traces import generate_trace, replay_trace
from tests.lessons.sim.decisions import MAX_LEN, sim_decisions

LAYER_WINDOWS = [(None, 8), (8, None, 8), (None, 4, 4, 12), (None, None, 16, 16)]


# -- the engine's scheduler, step by step ------------------------------------------------------------------------


def engine_decisions(lens, groups, num_blocks, block_size, max_num_seqs, watermark):
    """(admitted, preempted, blocks in use) per step of the engine's Scheduler over BlockManager(groups=...), up to its
    first re-admission, and whether it stopped there."""
    config = SchedulerConfig(
        max_num_seqs=max_num_seqs, max_num_batched_tokens=100_000, max_model_len=MAX_LEN + 1, watermark=watermark
    )
    sched = Scheduler(config, BlockManager(num_blocks, block_size, groups=groups))
    for i, (prompt, output) in enumerate(lens):
        params = SamplingParams(max_tokens=output + 1, ignore_eos=True)  # computes prompt + output tokens
        sched.add(Sequence(i, [1] * prompt, block_size, sampling_params=params))
    steps, preempted = [], set()
    while sched.has_unfinished:
        out = sched.schedule()
        if preempted & set(out.admitted):
            return steps, True  # recompute re-prefills the sampled token too in the engine, not in the simulator
        preempted |= set(out.preempted)
        steps.append((sorted(out.admitted), sorted(out.preempted), num_blocks - sched.block_manager.num_free_blocks))
        sched.update(out, [1] * len(sched.running))
    return steps, False


@settings(max_examples=60, deadline=None)
@given(
    lens=st.lists(st.tuples(st.integers(1, 24), st.integers(1, 36)), min_size=1, max_size=10),
    layers=st.sampled_from(LAYER_WINDOWS),
    block_size=st.sampled_from([1, 2, 4]),
    extra=st.integers(0, 30),
    max_num_seqs=st.integers(1, 8),
    watermark=st.sampled_from([0.0, 0.01, 0.1]),
)
@example([(15, 34), (17, 36), (20, 35), (24, 25)], (None, 8), 2, 0, 8, 0.0)
def test_group_policy_decides_as_the_engine_scheduler(lens, layers, block_size, extra, max_num_seqs, watermark):
    groups = kv_cache_groups(layers)
    num_blocks = blocks_per_seq(groups, MAX_LEN + 1, block_size, MAX_LEN) + extra  # max_model_len fits the pool
    ours, we_readmitted, _ = sim_decisions(lens, num_blocks, block_size, max_num_seqs, watermark, groups)
    theirs, they_readmitted = engine_decisions(lens, groups, num_blocks, block_size, max_num_seqs, watermark)
    n = min(len(ours), len(theirs))
    assert ours[:n] == theirs[:n]  # admissions, preemptions and blocks in use, step by step
    assert len(ours) == len(theirs) or (we_readmitted if len(ours) < len(theirs) else they_readmitted)


def test_the_comparison_covers_windows_and_preemption():
    groups = kv_cache_groups((None, 8))
    lens = [(15, 34), (17, 36), (20, 35), (24, 25)]  # the example above: 66 blocks of 2, eight seats
    num_blocks = blocks_per_seq(groups, MAX_LEN + 1, 2, MAX_LEN)
    ours, _, _ = sim_decisions(lens, num_blocks, 2, 8, 0.0, groups)
    theirs, _ = engine_decisions(lens, groups, num_blocks, 2, 8, 0.0)
    assert num_blocks == 66 and len(ours) == len(theirs) > 30 and ours == theirs
    assert [i for i, (_, preempted, _) in enumerate(ours) if preempted] == [2, 18]  # compared past two preemptions
    cfg = SimConfig("paged", num_blocks * 2, block_size=2, max_model_len=MAX_LEN, watermark=0.0, groups=groups)
    policy = make_policy(cfg)
    ServingLoop(replay_trace([(0.0, p, o) for p, o in lens]), cfg, policy).run()
    assert policy.num_gave_back > 0  # the window gave blocks back while requests ran


# -- invariants every step ---------------------------------------------------------------------------------------


class Checked(GroupBlocks):
    """GroupBlocks that checks the engine's tables at every step's memory terms."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.loop = None
        self.checked = 0
        self.max_sliding = 0

    def terms(self, stored, head):
        terms = super().terms(stored, head)
        bm, bs, step = self.block_manager, self.block_size, self.loop.step
        held = 0
        live = 0
        for req in self.loop.running:
            n = req.ctx + step - req.admit_step  # tokens the request holds after this step
            for group, table in zip(self.groups, req.handle.block_tables, strict=True):
                blocks = sum(1 for b in table if b != FREED)
                held += blocks
                live += n - bs * table.count(FREED)  # tokens in the blocks the group still holds
                assert len(table) == -(-n // bs)  # every group covers every token written
                if group.sliding_window is not None:
                    window = group.sliding_window
                    # the prompt's blocks at admission, then the window's: never more than the engine's bound
                    limit = -(-n // bs) if step == req.admit_step else kv_blocks_per_seq(n, bs, window, 1)
                    assert blocks <= limit, (req.index, n, blocks, limit)
                    self.max_sliding = max(self.max_sliding, blocks if step > req.admit_step else 0)
        assert bm.num_free_blocks + held == bm.num_blocks  # the pool is conserved
        assert stored == live  # stored counts each group's live tokens
        assert stored + sum(terms) == bm.num_blocks * bs  # the five terms add up to the pool's slots
        assert terms[0] == terms[2] == 0 and terms[1] >= 0
        self.checked += 1
        return terms


@pytest.mark.parametrize(("layers", "block_size"), [((None, 16), 4), ((16, 16, None, 16), 8), ((None, 5, 9), 4)])
def test_every_step_conserves_the_pool_and_keeps_windows(layers, block_size):
    groups = kv_cache_groups(layers)
    num_blocks = 200  # the longest prompt (255 tokens) fits in all three groups of (None, 5, 9) at once
    cfg = SimConfig(
        "paged", num_blocks * block_size, block_size=block_size, max_model_len=256, max_num_seqs=16, groups=groups
    )
    trace = generate_trace("sharegpt", 40, 50.0, seed=3, max_len=256)
    policy = make_policy(cfg)
    checked = Checked(num_blocks, block_size, groups, cfg.watermark)
    assert type(policy) is GroupBlocks and policy.block_manager.group_windows == checked.block_manager.group_windows
    loop = ServingLoop(trace, cfg, checked)
    checked.loop = loop
    res = loop.run()
    assert checked.checked == len(res.steps) and res.summary.num_finished == 40
    assert res.summary.num_preemptions > 0  # the pool was under pressure
    windows = [g.sliding_window for g in groups if g.sliding_window]
    # the most blocks a window's span can touch, reached: W tokens straddling block boundaries
    assert checked.max_sliding == max(-(-(w - 1) // block_size) + 1 for w in windows)


# -- concurrency at one budget -----------------------------------------------------------------------------------


def all_full(model):
    """The same model with every layer full attention (its sliding layers' heads and head_dim kept)."""
    return replace(model, layers=tuple(FullAttention(k.num_kv_heads, k.head_dim) for k in model.layer_kinds))


@pytest.mark.parametrize(("name", "gib"), [("gpt-oss-120b", 1), ("gemma-3-27b", 4)])
def test_a_hybrid_serves_more_requests_than_every_layer_full(name, gib):
    spec = MODELS[name]
    trace = replay_trace([(0.1 * i, 500, 3000) for i in range(32)])  # requests far longer than the windows
    runs = {}
    for label, model in (("hybrid", spec), ("full", all_full(spec))):
        fp = serving_footprint(model, "h200", max_model_len=4096, kv_cache_memory_bytes=gib * 2**30)  # one budget
        runs[label] = simulate_model(trace, model, "h200", max_model_len=4096, footprint=fp)
    hybrid, full = runs["hybrid"], runs["full"]
    assert make_policy(full.config).block_manager.num_groups == 1
    mean_running = {k: sum(r.columns["running"]) / len(r.steps) for k, r in runs.items()}
    # the sliding groups' blocks come back as requests grow: more of them run at once, fewer are preempted
    assert mean_running["hybrid"] > 1.4 * mean_running["full"]
    assert hybrid.summary.num_preemptions < full.summary.num_preemptions
    assert hybrid.summary.tokens_per_s > 1.4 * full.summary.tokens_per_s


def test_a_window_that_gives_blocks_back_serves_more_than_one_that_never_does():
    # the same trace and pool, with the window's frees and without (a window wider than any request)
    trace = replay_trace([(0.0, 40, 200)] * 12)
    runs = {}
    for label, windows in (("window", (None, 16)), ("no frees", (None, 4096))):
        cfg = SimConfig("paged", 200 * 8, block_size=8, max_model_len=256, groups=kv_cache_groups(windows))
        runs[label] = simulate(trace, cfg)
    mean_running = {k: sum(r.columns["running"]) / len(r.steps) for k, r in runs.items()}
    assert mean_running["window"] > 1.4 * mean_running["no frees"]
    assert runs["window"].summary.num_preemptions < runs["no frees"].summary.num_preemptions


# -- the pool the simulator uses ---------------------------------------------------------------------------------


def test_engine_groups_match_the_memory_model():
    hybrids = {name for name, spec in MODELS.items() if engine_groups(spec)}
    assert hybrids == {"gpt-oss-20b", "gpt-oss-120b", "gemma-3-27b"}
    for name in hybrids:
        spec = MODELS[name]
        ours, theirs = engine_groups(spec), kv_pool.kv_groups(spec)
        assert len(ours) == len(theirs) and group_size(ours) == max(g.slots for g in theirs)
        windows = [getattr(g.kind, "window", None) for g in theirs]
        assert sorted(ours, key=repr) == sorted(ours, key=repr)
        assert sorted((g.sliding_window or 0) for g in ours) == sorted(w or 0 for w in windows)
        assert kv_pool.attention_block_size(spec, 16) == 16  # full + sliding pages need no larger block
    # every layer in exactly one group, laid out as vLLM's `layers[i::num_groups]`
    gemma = engine_groups("gemma-3-27b")
    assert sorted(layer for g in gemma for layer in g.layers) == list(range(62))
    assert [len(g.layers) for g in gemma] == [9, 9, 9, 9, 8, 8, 10]
    for name in ("llama-3-8b", "mistral-7b", "deepseek-v3", "llama-4-scout", "qwen3-next-80b-a3b"):
        assert engine_groups(name) == ()


@pytest.mark.parametrize(("name", "gpu"), [("gpt-oss-20b", "h100-sxm"), ("gemma-3-27b", "h200")])
def test_the_simulated_pool_is_the_memory_models_num_blocks(name, gpu):
    fp = serving_footprint(name, gpu, max_model_len=4096)
    capacity, groups = sim_pool(fp)
    assert capacity == fp.num_blocks * fp.block_size and groups == engine_groups(name)
    assert fp.num_blocks == fp.kv_budget_bytes // fp.pool_block_bytes
    res = simulate_model(generate_trace("sharegpt", 20, 5.0, seed=0, max_len=4096), name, gpu, footprint=fp)
    assert res.capacity_tokens == capacity
    policy = make_policy(res.config)
    assert policy.block_manager.num_blocks == fp.num_blocks and policy.block_manager.num_groups == len(groups)
    # a static server for the hybrid keeps vLLM's token capacity, one slot per token
    assert sim_pool(fp, "static") == (fp.kv_token_capacity, ())


@pytest.mark.parametrize("max_model_len", [2048, 2000, 4097])
def test_an_mla_pool_is_its_blocks_of_latents(max_model_len):
    fp = serving_footprint("deepseek-v3", "h200", max_model_len=max_model_len, tensor_parallel=8)
    assert len(kv_pool.kv_groups(fp.model)) == 1 and fp.per_kind
    assert sim_pool(fp) == sim_pool(fp, "static") == (fp.num_blocks * fp.block_size, ())
    # vLLM's log line counts whole max_model_len requests: the same only when max_model_len is whole blocks
    assert (fp.kv_token_capacity == fp.num_blocks * fp.block_size) == (max_model_len % fp.block_size == 0)


def test_chunked_and_state_models_keep_the_reported_token_capacity():
    for name in ("llama-4-scout", "qwen3-next-80b-a3b"):
        fp = serving_footprint(name, "h200", max_model_len=2048, tensor_parallel=8)
        assert sim_pool(fp) == (fp.kv_token_capacity, ())


# -- configs and dense runs --------------------------------------------------------------------------------------


def test_configs_with_groups_pick_the_group_policy():
    groups = kv_cache_groups((None, 8))
    policy = make_policy(SimConfig("paged", 320, block_size=16, groups=groups))
    assert type(policy) is GroupBlocks and policy.block_manager.num_blocks == 20
    assert type(make_policy(SimConfig("paged", 320, block_size=16))) is PagedBlocks
    with pytest.raises(ValueError, match="two or more with policy 'paged', got 2 with policy 'static'"):
        SimConfig("static", 320, groups=groups)
    with pytest.raises(ValueError, match="got 1 with policy 'paged'"):
        SimConfig("paged", 320, groups=kv_cache_groups((8, 8)))
    with pytest.raises(ValueError, match="two or more KV-cache groups"):
        GroupBlocks(20, 16, kv_cache_groups((8,)), None)


def test_a_request_whose_groups_never_fit_is_rejected_naming_them():
    groups = kv_cache_groups((None, 4))  # a 90-token prompt: 23 blocks of 4 in each group at admission, 46 > 26
    res = simulate(replay_trace([(0.0, 90, 10)]), SimConfig("paged", 26 * 4, block_size=4, groups=groups))
    (event,) = [e for e in res.events if e.kind == "reject"]
    assert event.detail == "needs 46 blocks over 2 KV-cache groups, the pool has 26"
    assert res.summary.num_rejected == 1


def test_dense_runs_are_unchanged():
    # Llama-2-13B on an A100 40GB at lesson 6's sweep settings, pinned to the numbers of the one-table paged policy
    # (16-token blocks; vLLM V1's admission: no watermark. Under v0's 1% watermark the same run had 234 preemptions)
    trace = generate_trace("sharegpt", 300, 16.0, seed=0, max_len=2048)
    res = simulate_model(
        trace, "llama-2-13b", "a100-40gb", "paged", max_model_len=2048, gpu_memory_utilization=0.92, block_size=16
    )
    s = res.summary
    assert (res.capacity_tokens, s.peak_concurrency, s.num_preemptions, s.generated_tokens) == (15060, 57, 408, 94511)
    assert (len(res.steps), sum(r[2] for r in res.steps), sum(r[4] for r in res.steps)) == (3244, 38823521, 714159)
    assert s.p95_wait_s == pytest.approx(41.53814110329045, rel=1e-12)
    assert s.avg_waste == pytest.approx(0.017577039149924825, rel=1e-12)
    mistral = simulate_model(trace, "mistral-7b", "a100-40gb", max_model_len=2048, gpu_memory_utilization=0.92)
    assert (mistral.capacity_tokens, mistral.summary.peak_concurrency) == (182533, 68)
