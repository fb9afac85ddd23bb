"""ui/charts_memory.py: block-table, pool, sweep and memory-breakdown figures carry their data as text."""

import pytest

from engine.memory.units import GiB
from lessons.diagnosis.scenarios import MemoryPart
from lessons.labs.paged_kernel import VllmAccepts
from lessons.labs.pool import BlockState, PoolBlock
from tests.ui.chart_inputs import policy_share, size_row
from ui import charts_memory as cm


def test_block_table_picture_names_physical_blocks_and_fills():
    fig = cm.block_table_picture({"A": [7, 2, 9], "B": [4]}, {"A": [4, 4, 1], "B": [3]}, 4, "tables")
    (heat,) = fig.data
    assert list(heat.text[0]) == ["→ 7<br>4/4", "→ 2<br>4/4", "→ 9<br>1/4"]
    assert list(heat.text[1]) == ["→ 4<br>3/4", "", ""]  # shorter tables leave empty cells
    assert list(heat.z[0]) == [1.0, 1.0, 0.25] and heat.z[1][1] is None
    assert list(heat.y) == ["A", "B"]


def test_block_table_picture_caps_columns_and_says_so():
    fig = cm.block_table_picture({"A": list(range(40))}, {"A": [1] * 40}, 1, "wide", max_cols=10)
    assert len(fig.data[0].z[0]) == 10 and "30 more not drawn" in fig.layout.title.text


@pytest.mark.parametrize(
    ("tables", "fills", "match"),
    [({}, {}, "no sequences"), ({"A": [1]}, {"B": [1]}, "same sequences"), ({"A": [1, 2]}, {"A": [1]}, "2 blocks")],
)
def test_block_table_picture_rejects_bad_input(tables, fills, match):
    with pytest.raises(ValueError, match=match):
        cm.block_table_picture(tables, fills, 4, "t")


def test_block_pool_grid_marks_shared_blocks_in_words():
    blocks = [
        PoolBlock(0, BlockState.SHARED, 2, ("A", "B"), 4),
        PoolBlock(1, BlockState.USED, 1, ("A",), 2),
        PoolBlock(2, BlockState.CACHED, 0, (), 4),
        PoolBlock(3, BlockState.FREE, 0, (), 0),
        PoolBlock(4, BlockState.FREE, 0, (), 0),
    ]
    fig = cm.block_pool_grid(blocks, 4, "pool", columns=3)
    heat = fig.data[0]
    assert len(heat.z) == 2  # 5 blocks, 3 per row
    assert heat.text[0][0] == "#0 shared ×2<br>A+B 4/4" and heat.text[0][1] == "#1 used<br>A 2/4"
    assert heat.text[0][2] == "#2 cached<br>— 4/4" and heat.text[1][0].startswith("#3 free")
    assert heat.z[0][0] == cm.STATE_VALUES[BlockState.SHARED] and heat.z[1][2] is None
    assert list(heat.z[0]) == [1.0, 0.7, 0.35] and list(heat.z[1][:2]) == [0.0, 0.0]
    assert [t.name for t in fig.data[1:]] == ["free", "cached", "used", "shared"]  # the legend names each colour
    with pytest.raises(ValueError, match="empty"):
        cm.block_pool_grid([], 4, "pool")


def test_block_size_sweep_has_two_axes_and_marks_the_choice():
    rows = [size_row(b, internal_waste_pct=b / 10, entries_per_sequence=512 / b) for b in (1, 16, 256)]
    fig = cm.block_size_sweep(rows, 16)
    waste, entries = fig.data
    assert list(waste.x) == [1, 16, 256] and list(waste.y) == [0.1, 1.6, 25.6]
    assert list(entries.y) == [512.0, 32.0, 2.0] and entries.yaxis == "y2"
    assert any("chosen: 16" in a.text for a in fig.layout.annotations)
    with pytest.raises(ValueError, match="not in the sweep"):
        cm.block_size_sweep(rows, 32)
    with pytest.raises(ValueError, match="no block sizes"):
        cm.block_size_sweep([], 16)


def test_memory_breakdown_labels_each_part():
    rows = [MemoryPart("weights", 15.0 * GiB), MemoryPart("KV cache", 5.5 * GiB), MemoryPart("over capacity", -GiB)]
    fig = cm.memory_breakdown(rows, "gpu")
    assert [t.name for t in fig.data] == ["weights", "KV cache", "over capacity"]
    assert [list(t.x) for t in fig.data] == [[15.0], [5.5], [0.0]]  # an oversold part is not drawn below zero
    assert fig.data[1].text[0] == "KV cache: 5.5 GiB" and fig.layout.barmode == "stack"
    with pytest.raises(ValueError, match="no parts"):
        cm.memory_breakdown([], "gpu")


def test_block_size_throughput_labels_the_peak_and_dots_what_vllm_refuses():
    rows = [
        size_row(bs, tokens_per_s=tps, kernel_cost=cost)
        for bs, tps, cost in ((2, 90.0, 1.4), (8, 95.0, 1.1), (16, 100.0, 1.0), (256, 80.0, 1.0))
    ]
    bars, cost = cm.block_size_throughput(rows, 16).data
    assert list(bars.x) == ["2", "8", "16", "256"] and list(cost.y) == [1.4, 1.1, 1.0, 1.0]
    assert list(bars.y) == [90.0, 95.0, 100.0, 80.0]
    assert "peak" in bars.text[2] and not any("peak" in t for i, t in enumerate(bars.text) if i != 2)
    assert list(bars.marker.pattern.shape) == [".", ".", "", ""]  # 2 and 8: not a multiple of 16
    assert list(bars.marker.color) == [cm.PALETTE[0], cm.PALETTE[0], cm.PALETTE[1], cm.PALETTE[0]]
    # the pattern follows the verdict the row carries, not the block size
    (bars, _) = cm.block_size_throughput([size_row(16, vllm_accepts=VllmAccepts.NOT_ON_A_GPU_BACKEND)], 16).data
    assert list(bars.marker.pattern.shape) == ["."]
    with pytest.raises(ValueError, match="chosen block size 4"):
        cm.block_size_throughput(rows, 4)


def test_waste_by_policy_stacks_the_four_shares_per_server():
    rows = [policy_share("static Max", 20.0, 10.0, 65.0, 5.0), policy_share("paged", 98.0, 0.0, 2.0, 0.0)]
    fig = cm.waste_by_policy(rows)
    assert [t.name for t in fig.data] == ["stored", "reserved", "internal", "external"]
    assert [list(t.x) for t in fig.data] == [[20.0, 98.0], [10.0, 0.0], [65.0, 2.0], [5.0, 0.0]]
    assert list(fig.data[2].text) == ["65.0%", ""]  # a share under 4% has no room for its label
    assert list(fig.data[0].y) == ["static Max", "paged"] and fig.layout.barmode == "stack"
    with pytest.raises(ValueError, match="no servers"):
        cm.waste_by_policy([])


def test_names_and_owners_from_a_run_are_shown_as_typed_not_as_plotly_markup():
    evil = "<a href='https://evil.example'>x</a><img src=x><br><b>b</b>"
    table = cm.block_table_picture({evil: [3]}, {evil: [2]}, 4, "t")
    assert all("<a" not in str(y) and "&lt;a href=" in str(y) for y in table.data[0].y)
    pool = cm.block_pool_grid([PoolBlock(0, BlockState.USED, 1, (evil,), 2)], 4, "pool")
    cell = pool.data[0].text[0][0]
    assert "&lt;a href=" in cell and "<a" not in cell and cell.count("<br>") == 1  # only the builder's own break
    bar = cm.memory_breakdown([MemoryPart(evil, GiB)], "mem")
    assert "<" not in bar.data[0].name and "<" not in bar.data[0].text[0]
    marked = cm.with_marker(bar, 0.5, evil)
    assert all("<a" not in a.text for a in marked.layout.annotations)
