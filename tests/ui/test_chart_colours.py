"""Colour is never the only signal: every figure of ui/charts*.py names each colour it uses, its series differ in
more than colour (greyscale, colour-vision deficiencies), and its lines and marks keep 3:1 on both themes.

Read off the figure objects, no browser: a colour is *named* when a trace of that colour is in the legend or
writes a text label on every mark (a heatmap: on every drawn cell), or when a legend entry of that colour
exists; a shape's colour (reference lines) is named the same way or by an annotation of its own.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import plotly.graph_objects as go
import pytest

from engine.memory.units import GiB
from lessons.diagnosis.scenarios import MemoryPart
from lessons.labs.bandwidth import RooflinePoint
from lessons.labs.pool import BlockState, PoolBlock
from lessons.labs.pressure import Traffic
from tests.ui.chart_inputs import gpu_point, policy_share, run_point, size_row, step_row, sweep_point
from ui import charts, charts_attention, charts_bandwidth, charts_memory, charts_pressure

LIGHT_BG, DARK_BG = "#FFFFFF", "#171614"  # Streamlit 1.67's light and dark backgrounds


def hex_of(value: object) -> str | None:
    """'#abc' / '#aabbcc' / 'rgb(1, 2, 3)' as '#AABBCC'; None for anything that is not a colour string."""
    if not isinstance(value, str):
        return None
    if m := re.fullmatch(r"#([0-9a-fA-F]{3})", value):
        return "#" + "".join(c * 2 for c in m.group(1)).upper()
    if re.fullmatch(r"#[0-9a-fA-F]{6}", value):
        return value.upper()
    if m := re.fullmatch(r"rgba?\((\d+),\s*(\d+),\s*(\d+).*\)", value):
        return "#" + "".join(f"{int(v):02X}" for v in m.groups())
    return None


def luminance(color: str) -> float:
    channels = [int(color[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    r, g, b = (c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: str, b: str) -> float:
    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def flat(value: object) -> list:
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in flat(v)]
    return [value]


def get(d: dict, *path: str) -> object:
    for p in path:
        if not isinstance(d, dict) or p not in d:
            return None
        d = d[p]
    return d


def colours(t: dict) -> set[str]:
    """Every colour a trace draws with (fills, lines, outlines, a heatmap's colour scale)."""
    found = [get(t, "marker", "color"), get(t, "line", "color"), get(t, "marker", "line", "color"), t.get("fillcolor")]
    if t["type"] == "heatmap":
        found += [c for _, c in t.get("colorscale") or ()]
    return {h for v in found for x in flat(v) if (h := hex_of(x))}


def legend_only(t: dict) -> bool:
    """A legend key: a trace with no data of its own (x=[None]) that only names a colour."""
    return all(v is None for v in flat(t.get("x", [0])))


def labelled(t: dict) -> bool:
    """The trace writes a label on every mark (a heatmap: on every cell that has a value)."""
    if t.get("text") is None:
        return False
    if t["type"] == "heatmap":
        cells = [(z, s) for zr, sr in zip(t["z"], t["text"], strict=True) for z, s in zip(zr, sr, strict=True)]
        return all(str(s).strip() for z, s in cells if z is not None)
    texts = flat(t["text"])
    return bool(texts) and all(str(s).strip() for s in texts)


def in_legend(fig: go.Figure, t: dict) -> bool:
    shown = [x for x in fig.to_plotly_json()["data"] if x.get("showlegend", True) is not False and x.get("name")]
    legend_on = fig.layout.showlegend is True or (fig.layout.showlegend is None and len(shown) > 1)
    return legend_on and t.get("showlegend", True) is not False and bool(t.get("name"))


def non_colour_cue(t: dict) -> tuple:
    """What tells a legend entry apart without its colour: kind, mode, dash, marker shape, pattern, stacking."""
    pattern = get(t, "marker", "pattern", "shape") or get(t, "fillpattern", "shape") or ""
    symbol = get(t, "marker", "symbol") or ""
    return (
        t["type"],
        t.get("mode"),
        get(t, "line", "dash"),
        str(flat(symbol)[0]),
        str(flat(pattern)[0]),
        t.get("stackgroup") is not None,
    )


def figures() -> Iterator[tuple[str, go.Figure]]:
    """One figure of every builder, at inputs that draw everything it can draw."""
    yield "bar", charts.bar(["G=1", "G=8", "G=32"], [1.0, 8.0, 32.0], "KV", "GiB", highlight=1)
    series = {"stored": [1, 2, 3], "reserved": [3, 2, 1], "internal": [1, 1, 1], "external": [0, 1, 0], "free": [5] * 3}
    yield "stacked_area", charts.stacked_area([0, 1, 2], series, "slots")
    yield "lines", charts.lines([1, 2, 3], {"running": [1, 2, 2], "waiting": [0, 1, 0], "blocks": [2, 4, 6]}, "t")
    yield "labelled_grid", charts.labelled_grid([[0.5, 1.0]], [["→ 3<br>8/16", "→ 4<br>16/16"]], "grid")
    yield "kv_by_groups", charts_attention.kv_by_groups([1, 2, 4, 8], [1, 2, 4, 8], 4, "KV", "GiB")
    yield "head_sharing GQA", charts_attention.head_sharing(32, 8)
    yield "head_sharing MHA", charts_attention.head_sharing(32, 32)
    small = [[i >= j for j in range(6)] for i in range(6)]
    yield "mask_heatmap small", charts_attention.mask_heatmap(small, [3, 3], "mask")
    big = [[(i // 20 == j // 20) and i >= j for j in range(40)] for i in range(40)]
    yield "mask_heatmap big", charts_attention.mask_heatmap(big, [20, 20], "mask")
    yield "padding_vs_packed", charts_attention.padding_vs_packed(1607, 6000)
    yield "gqa_times", charts_attention.gqa_times(["decode", "prefill"], [1.0, 2.0], [2.0, 2.0], "times")
    yield (
        "packing_sweep",
        charts_attention.packing_sweep([0, 40, 80], [3, 2, 1], [1, 2, 3], 40.0, "sweep", "SDPA", 73.0),
    )
    points = [RooflinePoint("decode", 1.2, 4e12), RooflinePoint("prefill", 2000, 9e14)]
    yield "roofline", charts_bandwidth.roofline(9.9e14, 3.35e12, points)
    rows = [sweep_point(b, 100.0 * b, fits=b <= 16) for b in (1, 4, 16, 64)]
    yield "batch_sweep", charts_bandwidth.batch_sweep(rows, 16)
    tables, fills = {"A": [3, 7, 1], "B": [2]}, {"A": [16, 16, 5], "B": [9]}
    yield "block_table_picture", charts_memory.block_table_picture(tables, fills, 16, "tables")
    blocks = [
        PoolBlock(i, s, r, o, f)
        for i, (s, r, o, f) in enumerate(
            [
                (BlockState.SHARED, 2, ("A", "B"), 16),
                (BlockState.USED, 1, ("A",), 5),
                (BlockState.CACHED, 0, (), 16),
                (BlockState.FREE, 0, (), 0),
            ]
        )
    ]
    yield "block_pool_grid", charts_memory.block_pool_grid(blocks, 16, "pool", columns=4)
    sweep = [size_row(b, internal_waste_pct=b / 10, entries_per_sequence=512 / b) for b in (1, 8, 16, 32, 256)]
    yield "block_size_sweep", charts_memory.block_size_sweep(sweep, 16)
    tps = [size_row(b, tokens_per_s=t, kernel_cost=c) for b, t, c in [(1, 900, 1.1), (8, 990, 1.0), (16, 1000, 1.0)]]
    yield "block_size_throughput", charts_memory.block_size_throughput(tps, 16)
    parts = ["weights", "activations", "CUDA context", "CUDA graphs", "KV cache", "rest", "held back"]  # the most drawn
    yield (
        "memory_breakdown",
        charts_memory.memory_breakdown([MemoryPart(p, (1.0 + i) * GiB) for i, p in enumerate(parts)], "mem"),
    )
    waste = [policy_share(s, 20.0, 30.0, 40.0, 10.0) for s in "ab"]
    yield "waste_by_policy", charts_memory.waste_by_policy(waste)
    yield "with_marker", charts_memory.with_marker(charts.lines([1, 2], {"running": [1, 2]}, "t"), 2, "step 2")
    steps = [step_row(i, kv_usage=i / 10, running=i, waiting=3 - i, preemptions=i // 2) for i in (1, 2, 3)]
    names = {"kv_usage": "vllm:kv_cache_usage_perc", "running": "vllm:num_requests_running"}
    names |= {"waiting": "vllm:num_requests_waiting", "preemptions": "vllm:num_preemptions_total"}
    yield "pressure dashboard", charts_pressure.dashboard(steps, names, "run")
    rates = [
        run_point(Traffic(rate=r), preemptions=p, ttft_p50_steps=1.0, ttft_p95_steps=3.0)
        for r, p in ((0.1, 0), (0.3, 2))
    ]
    yield "pressure traffic_sweep", charts_pressure.traffic_sweep(rates, "traffic")
    budgets = [run_point(Traffic(budget=b), ttft_p50_ms=100.0 / b, stall_ms=b / 4, tpot_p50_ms=10.0) for b in (16, 256)]
    yield "pressure budget_trade", charts_pressure.budget_trade(budgets, "budget")
    sim = [gpu_point(r, preemptions=p, p95_wait_s=r / 2, peak_kv_usage=0.5 + r / 100) for r, p in ((1, 0), (8, 40))]
    yield "pressure gpu_sweep", charts_pressure.gpu_sweep(sim, "gpu")


FIGURES = dict(figures())


@pytest.mark.parametrize("name", FIGURES)
def test_legend_or_labels_name_every_colour(name):
    fig = FIGURES[name]
    traces = fig.to_plotly_json()["data"]
    named = set()
    for t in traces:
        if in_legend(fig, t) or labelled(t) or legend_only(t):
            named |= colours(t)
    data = [t for t in traces if not legend_only(t)]
    if len(data) == 1:
        named |= colours(data[0])  # one series: its colour says nothing the axis titles do not
    unnamed = {}
    for i, t in enumerate(traces):
        if not (in_legend(fig, t) or labelled(t) or legend_only(t)):
            if missing := colours(t) - named:
                unnamed[f"trace {i} ({t['type']})"] = missing
    shapes = [s for s in fig.layout.shapes if s.line.color]
    loose = [s.line.color for s in shapes if hex_of(s.line.color) not in named]
    assert not (loose and len(fig.layout.annotations) < len(shapes)), f"{name}: lines of {loose} name nothing"
    assert not unnamed, f"{name}: colours no legend entry or label names: {unnamed}"


@pytest.mark.parametrize("name", FIGURES)
def test_legend_entries_differ_in_more_than_colour(name):
    fig = FIGURES[name]
    entries = [t for t in fig.to_plotly_json()["data"] if in_legend(fig, t) and not legend_only(t)]
    cues = [non_colour_cue(t) for t in entries]
    assert len(set(cues)) == len(cues), f"{name}: entries told apart only by colour: {[t['name'] for t in entries]}"


@pytest.mark.parametrize("name", FIGURES)
def test_lines_and_marks_keep_3_to_1_on_both_themes(name):
    weak = []
    for s in FIGURES[name].layout.shapes:
        if (c := hex_of(s.line.color)) and min(contrast(c, LIGHT_BG), contrast(c, DARK_BG)) < 3:
            weak.append(("reference line", c))
    for t in FIGURES[name].to_plotly_json()["data"]:
        if t["type"] == "heatmap":
            continue  # every cell carries its words or the legend names it; xgap/ygap separate the cells
        outline = hex_of(get(t, "marker", "line", "color")) or (
            hex_of(get(t, "line", "color")) if t.get("fill") or t.get("stackgroup") else None
        )
        if outline:  # a filled mark: its edge must stand out, whatever its fill
            checked = {outline}
        else:
            checked = {h for x in flat(get(t, "marker", "color")) + flat(get(t, "line", "color")) if (h := hex_of(x))}
        weak += [
            (t.get("name") or t["type"], c) for c in checked if min(contrast(c, LIGHT_BG), contrast(c, DARK_BG)) < 3
        ]
    assert not weak, f"{name}: marks under 3:1 on the light or the dark background: {weak}"


def test_the_checks_catch_a_colour_only_figure():
    # two unnamed lines told apart only by colour, one too pale for a white background
    fig = go.Figure([go.Scatter(x=[0, 1], y=[0, 1], line={"color": "#F0E442"}), go.Scatter(x=[0, 1], y=[1, 0])])
    fig.data[1].line.color = "#0072B2"
    FIGURES["bad"] = fig
    try:
        with pytest.raises(AssertionError, match="colours no legend entry"):
            test_legend_or_labels_name_every_colour("bad")
        with pytest.raises(AssertionError, match="under 3:1"):
            test_lines_and_marks_keep_3_to_1_on_both_themes("bad")
        fig.update_traces(name="same", showlegend=True)
        with pytest.raises(AssertionError, match="only by colour"):
            test_legend_entries_differ_in_more_than_colour("bad")
    finally:
        del FIGURES["bad"]
