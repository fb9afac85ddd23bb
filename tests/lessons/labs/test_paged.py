"""lessons/labs/paged.py: the block-size sweep, block tables and sharing, checked against the trace and allocator."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.memory.catalog import MODELS
from lessons.labs import paged as lab
from lessons.labs import paged_kernel
from lessons.labs.paged_kernel import BLOCK_SIZES
from lessons.labs.pool import BlockState
from lessons.sim.traces import generate_trace


@pytest.fixture(scope="module")
def swept():
    return lab.sweep(1024, num_requests=60)


def test_sweep_waste_falls_and_tables_grow_as_blocks_shrink(swept):
    rows = swept.points
    assert [r.block_size for r in rows] == list(BLOCK_SIZES) and swept.max_model_len == 1024
    waste = [r.internal_waste_pct for r in rows]
    entries = [r.entries_per_sequence for r in rows]
    assert waste[0] == 0.0  # one-token blocks are never partly empty
    assert all(a <= b for a, b in zip(waste, waste[1:], strict=False)) and waste[-1] > 5
    assert all(a > b for a, b in zip(entries, entries[1:], strict=False))
    trace = generate_trace("sharegpt", 60, 8.0, seed=0, max_len=1024)
    finals = [min(r.prompt_len + r.output_len, 1024) for r in trace]
    for r in rows:  # independent count: ceil(length / block size) per request, averaged
        bs = r.block_size
        assert r.entries_per_sequence == pytest.approx(sum((n + bs - 1) // bs for n in finals) / len(finals))
        assert r.table_width == -(-1024 // bs) and r.table_bytes == 4 * (-(-1024 // bs))
        assert r.utilization_pct + r.internal_waste_pct == pytest.approx(100.0)  # paged: no reserved / external
        assert r.vllm_accepts == paged_kernel.vllm_accepts(bs)
        assert r.max_idle_per_sequence == bs - 1  # a last block holds at least one token
    assert swept.row(16).block_size == 16
    with pytest.raises(ValueError, match="block size 3"):
        swept.row(3)
    with pytest.raises(ValueError, match="max context 1000"):
        lab.sweep(1000)


def test_sweep_rows_keep_the_table_columns(swept):
    rows = swept.rows()
    assert list(rows[0]) == [
        "block size",
        "vLLM accepts",
        "internal waste %",
        "utilization %",
        "entries per sequence",
        "table width (max entries)",
        "table bytes per sequence",
        "peak running",
        "kernel cost vs best",
        "tokens/s, free kernel",
        "tokens/s",
    ]
    for row, r in zip(rows, swept.points, strict=True):
        assert row["block size"] == r.block_size and row["internal waste %"] == r.internal_waste_pct
        assert (row["table width (max entries)"], row["tokens/s"]) == (r.table_width, r.tokens_per_s)
        assert row["vLLM accepts"] == r.vllm_accepts.value and type(row["vLLM accepts"]) is str  # a plain table cell
        assert row["kernel cost vs best"] == r.kernel_cost


@settings(max_examples=9, deadline=None)
@given(st.sampled_from(BLOCK_SIZES))
def test_allocator_picture_is_consistent_with_the_pool(bs):
    pic = lab.allocator_picture(bs, decode_rounds=min(bs, 8))
    assert set(pic.tables) == {"A", "C", "D"}
    owner_of = {b.block_id: b for b in pic.blocks}
    assert [b.block_id for b in pic.blocks] == list(range(pic.num_blocks))  # every block, in id order
    seen = [blk for table in pic.tables.values() for blk in table]
    assert len(seen) == len(set(seen))  # no physical block is in two tables (nothing shared here)
    for name, table in pic.tables.items():
        for blk, fill in zip(table, pic.fills[name], strict=True):
            assert owner_of[blk].state is BlockState.USED and owner_of[blk].owners == (name,)
            assert owner_of[blk].filled == fill
        fills = pic.fills[name]
        assert all(f == bs for f in fills[:-1]) and 1 <= fills[-1] <= bs  # only the last block is partial
    assert pic.used_slots == sum(sum(f) for f in pic.fills.values())
    assert pic.allocated_slots == bs * len(seen)
    assert pic.allocated_slots - pic.used_slots <= 3 * (bs - 1)  # at most bs - 1 idle slots per sequence
    assert "freed" in pic.notes[1]
    assert [r["physical block"] for r in pic.table_rows() if r["sequence"] == "A"] == pic.tables["A"]
    assert (
        pic.idle_slots == pic.allocated_slots - pic.used_slots == sum(bs * len(f) - sum(f) for f in pic.fills.values())
    )
    assert pic.num_blocks == len(pic.blocks)
    assert pic.block_rows() == [b.row() for b in pic.blocks] and pic.block_rows()[0]["state"] in set(BlockState)
    with pytest.raises(ValueError, match="block_size=3 is not supported"):
        lab.allocator_picture(3)


def test_tight_pool_makes_d_reuse_a_block_b_freed():
    pic = lab.allocator_picture(16)
    assert "that B freed" in pic.notes[1]
    assert sum(1 for b in pic.blocks if b.state is BlockState.FREE) <= 3


@pytest.mark.parametrize("bs", [2, 16, 256])
def test_fork_then_copy_on_write_then_prefix_hit(bs):
    stages = lab.sharing_demo(bs)
    assert len(stages) == 5
    a1 = stages[0].picture.tables["A"]
    fork = stages[1].picture
    assert fork.tables["B"] == fork.tables["A"] == a1
    forked = [b for b in fork.blocks if b.block_id in a1]
    assert all(b.ref_count == 2 and b.state is BlockState.SHARED and b.owners == ("A", "B") for b in forked)
    cow = stages[2]
    (src, dst) = cow.copies[0]
    assert len(cow.copies) == 1 and src == a1[-1]  # only the shared, partial last block is copied
    assert cow.picture.tables["A"] == [*a1[:-1], dst] and cow.picture.tables["B"] == a1
    assert stages[3].copies == [] and stages[3].picture.tables["B"] == a1  # B now owns the old block alone
    hit = stages[4].picture.tables["C"]
    assert hit[:2] == a1[:2]
    assert str(2 * bs) in stages[4].title  # two full prompt blocks come from the prefix cache
    refs = {b.block_id: b.ref_count for b in stages[4].picture.blocks}
    assert refs[a1[0]] == refs[a1[1]] == 3
    row = stages[2].row()
    assert row["copy-on-write copies (src→dst)"] == f"{src}→{dst}"
    assert [s.label for s in stages] == [s.title.split(":")[0] for s in stages]
    assert stages[2].label == "3. A writes a token" and stages[1].label.startswith("2. B is forked")


def test_one_token_blocks_never_need_a_copy():
    stages = lab.sharing_demo(1)
    assert all(s.copies == [] for s in stages)
    a = stages[2].picture.tables["A"]
    assert len(a) == 4 and a[:3] == stages[1].picture.tables["B"]  # A's new token went to a fresh block


def test_vllm_verdicts_follow_the_gpu_backends_multiple_of_16():
    # v0.34.0: FlashAttention, Triton, ROCM_ATTN, ROCM_AITER_UNIFIED_ATTN return [MultipleOf(16)]; FlashInfer [16, 32,
    # 64]; ROCM_AITER_FA [16, 32]. supports_block_size takes a --block-size divisible by one of them: multiples of 16.
    kernel_sizes = {
        "FLASH_ATTN": 16,
        "TRITON_ATTN": 16,
        "ROCM_ATTN": 16,
        "FLASHINFER": (16, 32, 64),
        "AITER_FA": (16, 32),
    }

    def supported(bs, sizes):
        return any(bs % s == 0 for s in (sizes if isinstance(sizes, tuple) else (sizes,)))

    verdicts = {bs: paged_kernel.vllm_accepts(bs) for bs in BLOCK_SIZES}
    assert set(verdicts.values()) == set(paged_kernel.VllmAccepts)  # v0.34.0's config takes any positive size
    for bs, verdict in verdicts.items():
        every = all(supported(bs, sizes) for sizes in kernel_sizes.values())
        assert (verdict is paged_kernel.VllmAccepts.YES) == every, bs
    refused = paged_kernel.VllmAccepts.NOT_ON_A_GPU_BACKEND
    assert [bs for bs, v in verdicts.items() if v is refused] == [1, 2, 4, 8]
    assert [v.value for v in paged_kernel.VllmAccepts] == ["yes", "not on a GPU backend"]  # the page's words


@pytest.mark.parametrize("bs", [1, 16, 256])
def test_kernel_inputs_scatter_every_block_of_the_pool_once(bs):
    q, k, v, tables, lens = paged_kernel.kernel_inputs(bs, num_seqs=3, context=100)
    per_seq = -(-100 // bs)
    assert tables.shape == (3, per_seq) and tables.dtype == torch.int32
    assert sorted(tables.flatten().tolist()) == list(range(3 * per_seq))  # a permutation of the pool
    assert k.shape == v.shape == (3 * per_seq, bs, MODELS["demo"].num_kv_heads, MODELS["demo"].head_dim)
    assert q.shape == (3, MODELS["demo"].num_heads, MODELS["demo"].head_dim) and lens.tolist() == [100] * 3
    if bs == 1:
        assert tables.flatten().tolist() != list(range(3 * per_seq))  # shuffled, not laid out in order


def test_kernel_cost_slows_the_kv_reads_and_moves_the_peak():
    free = lab.sweep(1024, num_requests=40)
    assert all(r.kernel_cost == 1.0 and r.tokens_per_s == r.tokens_per_s_free for r in free.points)
    slow_small = {bs: (3.0 if bs < 8 else 1.0) for bs in BLOCK_SIZES}
    charged = lab.sweep(1024, num_requests=40, kernel=slow_small)
    for a, b in zip(free.points, charged.points, strict=True):
        assert a.internal_waste_pct == b.internal_waste_pct and a.tokens_per_s == b.tokens_per_s_free
        assert b.kernel_cost == slow_small[b.block_size]
        if b.block_size < 8:
            assert b.tokens_per_s < b.tokens_per_s_free  # each step reads its KV 3x slower
        else:
            assert b.tokens_per_s == b.tokens_per_s_free
    assert charged.peak().block_size >= 8
    assert charged.peak(charged=False) == max(charged.points, key=lambda r: (r.tokens_per_s_free, -r.block_size))


def test_peak_is_the_most_tokens_per_s_and_the_smaller_block_on_a_tie():
    def point(bs: int, tps: float, free: float) -> lab.BlockSizeRow:
        return lab.BlockSizeRow(bs, "yes", 0.0, 100.0, 1.0, 1, 4, 1, 1.0, free, tps)

    tie = lab.BlockSizeSweep(512, (point(4, 2.0, 1.0), point(8, 2.0, 5.0), point(16, 1.0, 5.0)))
    assert tie.peak().block_size == 4  # 4 and 8 tie at 2.0 tokens/s: the smaller block size
    assert tie.peak(charged=False).block_size == 8  # without the kernel's cost 8 and 16 tie at 5.0


def test_claims_report_the_peak_of_the_charged_sweep(monkeypatch):
    ns = {bs: 10 + 8 / bs for bs in BLOCK_SIZES}  # a per-token and a per-block cost, as the fit assumes
    rows = [{"block size": bs, "kernel cost vs best": t / ns[256], "ns per cached token": t} for bs, t in ns.items()]
    monkeypatch.setattr(lab, "kernel_costs", lambda: rows)
    monkeypatch.setattr(lab, "DEFAULT_MAX_CONTEXT", 512)
    entry = lab.claims()["paged"]
    assert entry["kernel_cost_vs_best"] == {bs: round(t / ns[256], 3) for bs, t in ns.items()}
    assert entry["kernel_cost_fitted"][1] == pytest.approx(18 / (10 + 8 / 256), abs=1e-3)
    assert entry["page_says_cpu_cannot_show_it"] is False and entry["smallest_block_cost_fitted"] > 1.5
    assert entry["holds"] is (entry["peak_block_size"] >= 8)
    assert entry["peak_block_size"] >= 8 and entry["tokens_per_s"][1] < entry["tokens_per_s"][16]


def _fit(per_block_ns: float) -> lab.KernelFit:
    ns = {bs: 400 + per_block_ns / bs for bs in BLOCK_SIZES}
    best = min(ns.values())
    rows = [{"block size": bs, "ns per cached token": t, "kernel cost vs best": t / best} for bs, t in ns.items()]
    return lab.fit_kernel(rows)


def _sweep_of(tokens_per_s: dict[int, float]) -> lab.BlockSizeSweep:
    point = lambda bs, tps: lab.BlockSizeRow(bs, "yes", 0.0, 100.0, 1.0, 1, 4, 1, 1.0, tps, tps)  # noqa: E731
    return lab.BlockSizeSweep(512, tuple(point(bs, t) for bs, t in tokens_per_s.items()))


def test_a_peak_below_8_is_said_with_the_cost_measured_and_where_the_effect_shows():
    flat = _fit(20.0)  # 1.05x at one-token blocks
    assert flat.smallest_block_cost == pytest.approx(420 / (400 + 20 / 256), abs=1e-6)
    tie = _sweep_of({1: 985.0, 2: 998.0, 4: 1000.0, 8: 995.0, 16: 990.5, 32: 980.0})
    note = flat.note(tie)
    assert note is not None and "1.05×" in note and "Fig. 18b" in note and "GPU" in note
    assert "peak lands at 4-token blocks" in note and "block sizes 2–16 all stay within 1%" in note
    assert flat.note(_sweep_of({1: 990.0, 4: 995.0, 8: 1000.0, 16: 999.0})) is None  # the peak is at 8: no note


@pytest.mark.parametrize(
    ("tokens_per_s", "holds"),
    [
        ({1: 990.0, 4: 1000.0, 8: 996.0, 16: 990.0}, True),  # 4 wins by 0.4%: a tie, and the page says why
        ({1: 990.0, 4: 1000.0, 8: 985.0, 16: 980.0}, False),  # 4 wins by 1.5%: the lesson would be taught wrong
        ({1: 990.0, 4: 995.0, 8: 1000.0, 16: 999.0}, True),  # the peak is at 8
    ],
)
def test_claims_hold_at_a_peak_from_8_or_a_tie_the_page_explains(monkeypatch, tokens_per_s, holds):
    monkeypatch.setattr(lab, "measure_kernel", lambda: _fit(20.0))
    monkeypatch.setattr(lab, "sweep", lambda *a, **k: _sweep_of(tokens_per_s))
    entry = lab.claims()["paged"]
    assert entry["holds"] is holds
    assert entry["page_says_cpu_cannot_show_it"] is (entry["peak_block_size"] < 8)


def test_window_rows_cap_a_windowed_model_near_its_window():
    blocks = lab.window_blocks(16, "mistral-7b", (2048, 8192, 32768))
    assert (blocks.window, blocks.model_name, blocks.contexts) == (4096, "Mistral-7B", (2048, 8192, 32768))
    assert blocks.full == (128, 512, 2048)  # ceil(n / 16)
    assert blocks.windowed[0] == 128  # shorter than the window: nothing to free
    assert blocks.windowed[1] == blocks.windowed[2] == 4096 // 16 + 1  # capped: the window plus one partial block
    rows = blocks.rows()
    assert rows[0] == {"context (tokens)": 2048, "blocks, full attention": 128, "blocks, window 4,096": 128}
    assert [r["blocks, window 4,096"] for r in rows] == list(blocks.windowed)


def test_window_rows_refuse_a_model_without_a_window():
    with pytest.raises(ValueError, match="no sliding window"):
        lab.window_blocks(16, "llama-3-8b")


def test_kernel_fit_keeps_the_timings_and_adds_the_fitted_cost(monkeypatch):
    timings = [{"block size": bs, "ns per cached token": 10 + 4 / bs, "kernel cost vs best": 1.0} for bs in BLOCK_SIZES]
    fit = lab.fit_kernel(timings)
    assert fit.timings == tuple(timings) and fit.fitted == paged_kernel.fitted_costs(timings)
    rows = fit.rows()
    assert [r["block size"] for r in rows] == list(BLOCK_SIZES)
    for r, t in zip(rows, timings, strict=True):
        assert {k: r[k] for k in t} == t  # the measured columns, unchanged
        bs = t["block size"]
        assert r["kernel cost, fitted"] == pytest.approx((10 + 4 / bs) / (10 + 4 / 256))
    assert (fit.seqs, fit.context) == (paged_kernel.KERNEL_SEQS, paged_kernel.KERNEL_CONTEXT)
    monkeypatch.setattr(lab, "kernel_costs", lambda: timings)
    assert lab.measure_kernel() == fit


def test_fitted_costs_recover_a_per_block_cost_and_ignore_one_noisy_point():
    # t = 10 + 4 / bs ns per token, exactly: the fit returns it relative to the cheapest (largest) block size
    rows = [{"block size": bs, "ns per cached token": 10 + 4 / bs} for bs in BLOCK_SIZES]
    fit = paged_kernel.fitted_costs(rows)
    for bs in BLOCK_SIZES:
        assert fit[bs] == pytest.approx((10 + 4 / bs) / (10 + 4 / 256))
    assert all(fit[a] >= fit[b] for a, b in zip(BLOCK_SIZES, BLOCK_SIZES[1:], strict=False))  # monotone
    # one block size timed 15% fast by noise does not make it the cheapest
    noisy = [
        dict(r, **{"ns per cached token": r["ns per cached token"] * (0.85 if r["block size"] == 4 else 1)})
        for r in rows
    ]
    assert paged_kernel.fitted_costs(noisy)[4] > paged_kernel.fitted_costs(noisy)[16]


def test_fitted_costs_are_flat_when_no_per_block_cost_shows():
    rows = [{"block size": bs, "ns per cached token": 10 - 1 / bs} for bs in (1, 16, 256)]  # small blocks faster
    assert set(paged_kernel.fitted_costs(rows).values()) == {1.0}
    with pytest.raises(ValueError, match=">= 2 block sizes"):
        paged_kernel.fitted_costs(rows[:1])
