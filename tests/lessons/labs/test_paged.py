"""lessons/labs/paged.py: the block-size sweep, block tables and sharing, checked against the trace and allocator."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.memory.catalog import MODELS
from engine.sim.traces import generate_trace
from lessons.labs import paged as lab


@pytest.fixture(scope="module")
def rows():
    return lab.sweep(1024, num_requests=60)


def test_sweep_waste_falls_and_tables_grow_as_blocks_shrink(rows):
    assert [r["block size"] for r in rows] == list(lab.BLOCK_SIZES)
    waste = [r["internal waste %"] for r in rows]
    entries = [r["entries per sequence"] for r in rows]
    assert waste[0] == 0.0  # one-token blocks are never partly empty
    assert all(a <= b for a, b in zip(waste, waste[1:], strict=False)) and waste[-1] > 5
    assert all(a > b for a, b in zip(entries, entries[1:], strict=False))
    trace = generate_trace("sharegpt", 60, 8.0, seed=0, max_len=1024)
    finals = [min(r.prompt_len + r.output_len, 1024) for r in trace]
    for r in rows:  # independent count: ceil(length / block size) per request, averaged
        bs = r["block size"]
        assert r["entries per sequence"] == pytest.approx(sum((n + bs - 1) // bs for n in finals) / len(finals))
        assert r["table width (max entries)"] == -(-1024 // bs) and r["table bytes per sequence"] == 4 * (
            -(-1024 // bs)
        )
        assert r["utilization %"] + r["internal waste %"] == pytest.approx(100.0)  # paged: no reserved / external
    assert lab.sweep_row(rows, 16)["block size"] == 16
    with pytest.raises(ValueError, match="block size 3"):
        lab.sweep_row(rows, 3)
    with pytest.raises(ValueError, match="max context 1000"):
        lab.sweep(1000)


@settings(max_examples=9, deadline=None)
@given(st.sampled_from(lab.BLOCK_SIZES))
def test_allocator_picture_is_consistent_with_the_pool(bs):
    pic = lab.allocator_picture(bs, decode_rounds=min(bs, 8))
    assert set(pic.tables) == {"A", "C", "D"}
    owner_of = {b["block_id"]: b for b in pic.blocks}
    seen = [blk for table in pic.tables.values() for blk in table]
    assert len(seen) == len(set(seen))  # no physical block is in two tables (nothing shared here)
    for name, table in pic.tables.items():
        for blk, fill in zip(table, pic.fills[name], strict=True):
            assert owner_of[blk]["state"] == "used" and owner_of[blk]["owners"] == name
            assert owner_of[blk]["filled"] == fill
        fills = pic.fills[name]
        assert all(f == bs for f in fills[:-1]) and 1 <= fills[-1] <= bs  # only the last block is partial
    assert pic.used_slots == sum(sum(f) for f in pic.fills.values())
    assert pic.allocated_slots == bs * len(seen)
    assert pic.allocated_slots - pic.used_slots <= 3 * (bs - 1)  # at most bs - 1 idle slots per sequence
    assert "freed" in pic.notes[1]
    assert [r["physical block"] for r in pic.table_rows() if r["sequence"] == "A"] == pic.tables["A"]
    with pytest.raises(ValueError, match="block_size=3 is not supported"):
        lab.allocator_picture(3)


def test_tight_pool_makes_d_reuse_a_block_b_freed():
    pic = lab.allocator_picture(16)
    assert "that B freed" in pic.notes[1]
    assert sum(1 for b in pic.blocks if b["state"] == "free") <= 3


@pytest.mark.parametrize("bs", [2, 16, 256])
def test_fork_then_copy_on_write_then_prefix_hit(bs):
    stages = lab.sharing_demo(bs)
    assert len(stages) == 5
    a1 = stages[0].picture.tables["A"]
    fork = stages[1].picture
    assert fork.tables["B"] == fork.tables["A"] == a1
    assert all(b["ref_count"] == 2 for b in fork.blocks if b["block_id"] in a1)
    cow = stages[2]
    (src, dst) = cow.copies[0]
    assert len(cow.copies) == 1 and src == a1[-1]  # only the shared, partial last block is copied
    assert cow.picture.tables["A"] == [*a1[:-1], dst] and cow.picture.tables["B"] == a1
    assert stages[3].copies == [] and stages[3].picture.tables["B"] == a1  # B now owns the old block alone
    hit = stages[4].picture.tables["C"]
    assert hit[:2] == a1[:2]
    assert str(2 * bs) in stages[4].title  # two full prompt blocks come from the prefix cache
    refs = {b["block_id"]: b["ref_count"] for b in stages[4].picture.blocks}
    assert refs[a1[0]] == refs[a1[1]] == 3
    row = stages[2].row()
    assert row["copy-on-write copies (src→dst)"] == f"{src}→{dst}"


def test_one_token_blocks_never_need_a_copy():
    stages = lab.sharing_demo(1)
    assert all(s.copies == [] for s in stages)
    a = stages[2].picture.tables["A"]
    assert len(a) == 4 and a[:3] == stages[1].picture.tables["B"]  # A's new token went to a fresh block


def test_vllm_verdicts_follow_its_block_size_literal():
    verdicts = {bs: lab.vllm_accepts(bs) for bs in lab.BLOCK_SIZES}
    assert [bs for bs, v in verdicts.items() if v == "no"] == [2, 4]
    assert [bs for bs, v in verdicts.items() if v == "not on FlashAttention"] == [1, 8]
    assert all(verdicts[bs] == "yes" for bs in (16, 32, 64, 128, 256))


@pytest.mark.parametrize("bs", [1, 16, 256])
def test_kernel_inputs_scatter_every_block_of_the_pool_once(bs):
    q, k, v, tables, lens = lab.kernel_inputs(bs, num_seqs=3, context=100)
    per_seq = -(-100 // bs)
    assert tables.shape == (3, per_seq) and tables.dtype == torch.int32
    assert sorted(tables.flatten().tolist()) == list(range(3 * per_seq))  # a permutation of the pool
    assert k.shape == v.shape == (3 * per_seq, bs, MODELS["demo"].num_kv_heads, MODELS["demo"].head_dim)
    assert q.shape == (3, MODELS["demo"].num_heads, MODELS["demo"].head_dim) and lens.tolist() == [100] * 3
    if bs == 1:
        assert tables.flatten().tolist() != list(range(3 * per_seq))  # shuffled, not laid out in order


def test_kernel_cost_slows_the_kv_reads_and_moves_the_peak():
    free = lab.sweep(1024, num_requests=40)
    assert all(r["kernel cost vs best"] == 1.0 and r["tokens/s"] == r["tokens/s, free kernel"] for r in free)
    slow_small = {bs: (3.0 if bs < 8 else 1.0) for bs in lab.BLOCK_SIZES}
    charged = lab.sweep(1024, num_requests=40, kernel=slow_small)
    for a, b in zip(free, charged, strict=True):
        assert a["internal waste %"] == b["internal waste %"] and a["tokens/s"] == b["tokens/s, free kernel"]
        assert b["kernel cost vs best"] == slow_small[b["block size"]]
        if b["block size"] < 8:
            assert b["tokens/s"] < b["tokens/s, free kernel"]  # each step reads its KV 3x slower
        else:
            assert b["tokens/s"] == b["tokens/s, free kernel"]
    assert int(lab.peak_row(charged)["block size"]) >= 8
    assert lab.peak_row([{"block size": 4, "tokens/s": 2.0}, {"block size": 8, "tokens/s": 2.0}])["block size"] == 4


def test_claims_report_the_peak_of_the_charged_sweep(monkeypatch):
    ns = {bs: 10 + 8 / bs for bs in lab.BLOCK_SIZES}  # a per-token and a per-block cost, as the fit assumes
    rows = [{"block size": bs, "kernel cost vs best": t / ns[256], "ns per cached token": t} for bs, t in ns.items()]
    monkeypatch.setattr(lab, "kernel_costs", lambda: rows)
    monkeypatch.setattr(lab, "DEFAULT_MAX_CONTEXT", 512)
    entry = lab.claims()["paged"]
    assert entry["kernel_cost_vs_best"] == {bs: round(t / ns[256], 3) for bs, t in ns.items()}
    assert entry["kernel_cost_fitted"][1] == pytest.approx(18 / (10 + 8 / 256), abs=1e-3)
    assert entry["holds"] is (entry["peak_block_size"] >= 8)
    assert entry["peak_block_size"] >= 8 and entry["tokens_per_s"][1] < entry["tokens_per_s"][16]


def test_window_rows_cap_a_windowed_model_near_its_window():
    rows = lab.window_rows(16, "mistral-7b", (2048, 8192, 32768))
    window = "blocks, window 4,096"
    assert [r["blocks, full attention"] for r in rows] == [128, 512, 2048]  # ceil(n / 16)
    assert rows[0][window] == 128  # shorter than the window: nothing to free
    assert rows[1][window] == rows[2][window] == 4096 // 16 + 1  # capped: the window plus one partial block


def test_window_rows_refuse_a_model_without_a_window():
    with pytest.raises(ValueError, match="no sliding window"):
        lab.window_rows(16, "llama-3-8b")


def test_fitted_costs_recover_a_per_block_cost_and_ignore_one_noisy_point():
    # t = 10 + 4 / bs ns per token, exactly: the fit returns it relative to the cheapest (largest) block size
    rows = [{"block size": bs, "ns per cached token": 10 + 4 / bs} for bs in lab.BLOCK_SIZES]
    fit = lab.fitted_costs(rows)
    for bs in lab.BLOCK_SIZES:
        assert fit[bs] == pytest.approx((10 + 4 / bs) / (10 + 4 / 256))
    assert all(fit[a] >= fit[b] for a, b in zip(lab.BLOCK_SIZES, lab.BLOCK_SIZES[1:], strict=False))  # monotone
    # one block size timed 15% fast by noise does not make it the cheapest
    noisy = [
        dict(r, **{"ns per cached token": r["ns per cached token"] * (0.85 if r["block size"] == 4 else 1)})
        for r in rows
    ]
    assert lab.fitted_costs(noisy)[4] > lab.fitted_costs(noisy)[16]


def test_fitted_costs_are_flat_when_no_per_block_cost_shows():
    rows = [{"block size": bs, "ns per cached token": 10 - 1 / bs} for bs in (1, 16, 256)]  # small blocks faster
    assert set(lab.fitted_costs(rows).values()) == {1.0}
    with pytest.raises(ValueError, match=">= 2 block sizes"):
        lab.fitted_costs(rows[:1])
