"""Charts that speak: every course chart has a one-sentence summary beside it and an accessible name.

`ui.chart_view.show_chart` writes the summary under the chart ("**In short:** ...") and puts the chart's title and
the summary into plotly's `alt` (Streamlit's accessible name for the chart). The page tests run each lesson
page in AppTest at its defaults; the unit tests check that the sentences say the numbers the charts draw.
"""

from __future__ import annotations

import re

import plotly.graph_objects as go
import pytest

from engine.memory.units import GiB
from lessons.diagnosis.scenarios import MemoryPart
from lessons.labs import bandwidth, fragmentation, gqa, packing
from lessons.labs.pool import BlockState, PoolBlock
from tests.app.conftest import make_app_test
from tests.ui.chart_inputs import size_row
from ui import charts_memory
from ui.chart_view import SUMMARY_LEAD, chart_alt

CHART_PAGES = ("bandwidth", "gqa", "packing", "fragmentation", "paged", "pressure", "diagnosis", "playground")
LEAD = f"**{SUMMARY_LEAD}** "


def numbers(text: str) -> list[float]:
    """Every number in a sentence, in order ("1,607 tokens (73%)" -> [1607.0, 73.0])."""
    return [float(n.replace(",", "")) for n in re.findall(r"-?\d[\d,]*(?:\.\d+)?", text)]


@pytest.mark.parametrize("page_id", CHART_PAGES)
def test_every_chart_has_a_summary_and_an_accessible_name(page_id):
    at = make_app_test(page_id, timeout=180).run()
    if page_id == "playground":  # its charts appear once the engine has run
        at.button(key="pg_generate").click().run()
    assert not at.exception, at.exception
    charts = at.get("plotly_chart")
    summaries = [m.value.removeprefix(LEAD) for m in at.markdown if m.value.startswith(LEAD)]
    assert len(charts) > 0
    assert len(summaries) == len(charts), f"{page_id}: {len(charts)} charts but {len(summaries)} summaries"
    for chart, summary in zip(charts, summaries, strict=True):
        assert summary.strip() and summary.endswith(".")
        assert chart.proto.alt.endswith(summary), (chart.proto.alt, summary)
        assert len(chart.proto.alt) > len(summary), "the accessible name starts with the chart's title"


def test_chart_alt_is_plain_text_title_then_summary():
    fig = go.Figure().update_layout(title="Block tables <br>of <b>A</b> &amp; B")
    assert chart_alt(fig, "Two sequences.") == "Block tables of A & B. Two sequences."
    assert chart_alt(go.Figure(), "Only this.") == "Only this."
    assert chart_alt(go.Figure()) != ""  # never an empty name


def test_waste_summary_says_each_policys_waste():
    rep = fragmentation.static_report("llama-2-13b", "a100-40gb", 2048, "sharegpt", 60, 8.0)
    said = rep.waste_summary()
    for key in ("paged", "Max", "Pow2", "Oracle"):
        waste = round(100 - rep.share(key).stored_pct, 1)
        assert re.search(rf"{key} {waste}%", said), (key, waste, said)
    assert said.index("paged") < said.index("static Max")  # the lesson's number first


def test_area_summary_says_the_busiest_step():
    rep = fragmentation.static_report("llama-2-13b", "a100-40gb", 2048, "sharegpt", 60, 8.0)
    said = numbers(rep.area_summary())
    assert [rep.peak.running, rep.peak.held, rep.capacity_tokens, rep.peak.stored] == said[1:5]


def test_bandwidth_summaries_add_up():
    lesson = bandwidth.lesson("llama-3-8b", "h100-sxm", 4, 4096)
    total, kv, pct, weights, batch = numbers(lesson.bytes_summary())
    ops = lesson.bytes_per_op()
    assert total == pytest.approx(sum(o.mb_per_token for o in ops), abs=0.5)
    assert kv == pytest.approx(next(o.mb_per_token for o in ops if o.op == "attention"), abs=0.5)
    assert weights == pytest.approx(total - kv, abs=1) and batch == 4
    assert "decode at batch 4" in lesson.roofline_summary() and "bandwidth-bound" in lesson.roofline_summary()
    sweep = bandwidth.batch_sweep("llama-3-8b", "h100-sxm", 4096)
    best = [p for p in sweep.points if p.fits][-1]
    assert f"at batch {best.batch:,}, the largest batch that fits" in sweep.summary()


def test_gqa_summary_compares_the_chosen_group_count():
    table = gqa.kv_by_groups("llama-3-8b", context_len=8192, users=1)
    assert "4× less than MHA" in table.summary(8)
    assert "the most of any group count" in table.summary(32)
    assert "MQA (G = 1) would take" not in table.summary(1)
    with pytest.raises(ValueError, match="not one of"):
        table.summary(3)
    assert "4 per KV head" in gqa.head_sharing_summary(32, 8)


def test_packing_summaries():
    lengths = packing.parse_lengths(packing.DEFAULT_LENGTHS)
    stats = packing.padding_stats(lengths, True)
    assert numbers(stats.summary())[:4] == [stats.num_requests, stats.longest, stats.padded_slots, stats.real_tokens]
    small = packing.visibility([2, 2], causal=True)  # two causal 2x2 triangles: 6 of 16 pairs visible
    assert small.visible_pct == pytest.approx(37.5)
    assert "38% of the query-key pairs" in small.summary() and "drawn" not in small.summary()
    assert "full squares" in packing.visibility([2, 2], causal=False).summary()


def test_pool_and_table_summaries_count_what_the_pictures_draw():
    blocks = [
        PoolBlock(0, BlockState.SHARED, 2, ("A", "B"), 4),
        PoolBlock(1, BlockState.USED, 1, ("A",), 3),
        PoolBlock(2, BlockState.CACHED, 0, (), 4),
        PoolBlock(3, BlockState.FREE, 0, (), 0),
        PoolBlock(4, BlockState.FREE, 0, (), 0),
    ]
    assert charts_memory.pool_summary(blocks) == "Of 5 physical blocks: 1 used, 1 shared, 1 cached, 2 free."
    said = charts_memory.block_tables_summary({"A": [0, 1], "B": [0]}, {"A": [4, 3], "B": [4]}, 4)
    assert said.startswith("2 sequence(s) map 3 logical blocks of 4 tokens") and "A 2 (7 tokens)" in said


def test_block_size_summaries_name_the_chosen_size_and_the_peak():
    rows = [
        size_row(bs, internal_waste_pct=waste, entries_per_sequence=entries, tokens_per_s=tps)
        for bs, waste, entries, tps in ((8, 0.9, 60.0, 900.0), (16, 1.7, 30.0, 1000.0), (32, 3.5, 15.0, 950.0))
    ]
    assert charts_memory.block_size_sweep_summary(rows, 32) == (
        "32-token blocks waste 3.50% of the allocated KV slots with 15.0 block-table entries per sequence; "
        "8-token blocks waste 0.90% with 60.0, 32-token blocks 3.50% with 15.0."
    )
    said = charts_memory.block_size_throughput_summary(rows, 8)
    assert "900 tokens/s (90.0% of the peak)" in said and "1,000 tokens/s at 16-token blocks" in said
    with pytest.raises(ValueError, match="not in the sweep"):
        charts_memory.block_size_sweep_summary(rows, 64)


def test_memory_summary_totals_the_parts():
    rows = [MemoryPart("weights", 15.0 * GiB), MemoryPart("KV cache", 4.5 * GiB), MemoryPart("free", 0.5 * GiB)]
    assert charts_memory.memory_summary(rows) == (
        "20.0 GiB of GPU memory in all: weights 15.0 GiB, KV cache 4.5 GiB, free 0.5 GiB."
    )
