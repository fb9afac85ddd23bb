"""Plotly builders for the paged-memory pages (4, 5, 6, 8): block tables, pools, block-size sweeps, waste by policy.

The pictures follow PagedAttention's figures (Kwon et al., SOSP 2023, Fig. 6-8): a per-sequence block table
maps logical blocks to physical ones, and the physical pool shows who owns each block and how full it is.
Every cell carries text (block id, owner, fill, reference count), so colour is never the only signal; pages
pair each figure with a caption and a table (`ui.chart_view.show_chart`). No Streamlit here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go

from lessons.diagnosis.scenarios import MemoryPart
from lessons.labs.fragmentation import PolicyShare
from lessons.labs.hybrid_engine import HybridRun
from lessons.labs.paged import BlockSizeRow
from lessons.labs.paged_kernel import VllmAccepts
from lessons.labs.pool import BlockState, PoolBlock
from ui.charts import DASHES, INK, MARKS, OUTLINE, PALETTE, PATTERNS, labelled_grid, layout, legend_key, log_x_marker
from ui.inert import LONG, plotly_text

# Block states in the pool picture -> heatmap value and colour (light to dark in greyscale); the cell says the word.
STATE_VALUES: dict[BlockState, float] = {
    BlockState.FREE: 0.0,
    BlockState.CACHED: 0.35,
    BlockState.USED: 0.7,
    BlockState.SHARED: 1.0,
}
STATE_COLORS: dict[BlockState, str] = {
    BlockState.FREE: "#FFFFFF",
    BlockState.CACHED: "#F0E442",
    BlockState.USED: PALETTE[5],
    BlockState.SHARED: PALETTE[3],
}
_POOL_SCALE = [[STATE_VALUES[s], c] for s, c in STATE_COLORS.items()]


def block_table_picture(
    tables: Mapping[str, Sequence[int]],
    fills: Mapping[str, Sequence[int]],
    block_size: int,
    title: str,
    max_cols: int = 24,
) -> go.Figure:
    """Rows = sequences, columns = logical blocks; each cell names its physical block and its fill."""
    if block_size < 1:
        raise ValueError(f"block_size must be positive, got {block_size}")
    if set(tables) != set(fills):
        raise ValueError("block_table_picture: tables and fills must name the same sequences")
    names = list(tables)
    if not names:
        raise ValueError("block_table_picture: no sequences to draw; give at least one block table")
    width = max(1, min(max_cols, max(len(t) for t in tables.values())))
    values: list[list[float | None]] = []
    text: list[list[str]] = []
    for name in names:
        table, fill = list(tables[name]), list(fills[name])
        if len(table) != len(fill):
            raise ValueError(f"sequence {name!r}: {len(table)} blocks but {len(fill)} fill counts")
        row_v: list[float | None] = [None] * width
        row_t = [""] * width
        for i, (block, n) in enumerate(zip(table[:width], fill[:width], strict=True)):
            row_v[i] = n / block_size
            row_t[i] = f"→ {plotly_text(block)}<br>{n}/{block_size}"
        values.append(row_v)
        text.append(row_t)
    more = max(len(t) for t in tables.values()) - width
    suffix = f" (first {width} logical blocks; {more} more not drawn)" if more > 0 else ""
    fig = labelled_grid(
        values,
        text,
        title + suffix,
        xlabels=[f"logical {i}" for i in range(width)],
        ylabels=[plotly_text(n) for n in names],  # sequence names may come from a learner's run: shown as typed
        colorscale="Blues",
    )
    fig.update_traces(zmin=0, zmax=1, hovertemplate="%{y}, %{x}: physical block %{text}<extra></extra>")
    return fig


def block_pool_grid(blocks: Sequence[PoolBlock], block_size: int, title: str, columns: int = 16) -> go.Figure:
    """The physical pool, `columns` blocks per row: state, owners, fill and reference count in every cell.

    `blocks`: lessons.labs.pool.PoolBlock values, in id order. The state is written in every cell and a legend
    names each state's colour (light to dark in greyscale: free, cached, used, shared).
    """
    if columns < 1:
        raise ValueError(f"columns must be positive, got {columns}")
    if not blocks:
        raise ValueError("block_pool_grid: the pool is empty; give at least one block")
    values: list[list[float | None]] = []
    text: list[list[str]] = []
    for start in range(0, len(blocks), columns):
        row_v: list[float | None] = [None] * columns
        row_t = [""] * columns
        for j, b in enumerate(blocks[start : start + columns]):
            row_v[j] = STATE_VALUES[b.state]
            owners = plotly_text("+".join(b.owners), LONG) or "—"
            refs = f" ×{b.ref_count}" if b.ref_count > 1 else ""
            row_t[j] = f"#{b.block_id} {b.state.value}{refs}<br>{owners} {b.filled}/{block_size}"
        values.append(row_v)
        text.append(row_t)
    ylabels = [f"blocks {s}–{min(s + columns, len(blocks)) - 1}" for s in range(0, len(blocks), columns)]
    fig = labelled_grid(values, text, title, xlabels=[str(c) for c in range(columns)], ylabels=ylabels)
    fig.update_traces(colorscale=_POOL_SCALE, zmin=0, zmax=1, textfont={"size": 10}, selector={"type": "heatmap"})
    fig.update_xaxes(showticklabels=False)
    legend_key(fig, [(s.value, c) for s, c in STATE_COLORS.items()])
    return fig.update_layout(height=fig.layout.height + 40)


def _sizes(points: Sequence[BlockSizeRow], chosen: int, what: str) -> list[int]:
    """The sweep's block sizes; ValueError when it is empty or does not hold `chosen`."""
    if not points:
        raise ValueError(f"{what}: no block sizes; sweep at least one")
    sizes = [p.block_size for p in points]
    if chosen not in sizes:
        raise ValueError(f"chosen block size {chosen} is not in the sweep {sizes}")
    return sizes


def block_size_sweep(
    points: Sequence[BlockSizeRow], chosen: int, title: str = "Block size: waste vs block-table length"
) -> go.Figure:
    """Internal waste (%) on the left axis and block-table entries per sequence on the right, per block size.

    `points`: the sweep's `BlockSizeRow`s (lessons.labs.paged.BlockSizeSweep.points), ascending; `chosen` is marked.
    """
    sizes = _sizes(points, chosen, "block_size_sweep")
    fig = go.Figure()
    fig.add_scatter(
        name="internal waste % (left)",
        x=sizes,
        y=[p.internal_waste_pct for p in points],
        mode="lines+markers",
        line={"color": MARKS[1], "dash": DASHES[0]},
        marker={"symbol": "circle", "size": 8},
    )
    fig.add_scatter(
        name="block-table entries per sequence (right)",
        x=sizes,
        y=[p.entries_per_sequence for p in points],
        mode="lines+markers",
        yaxis="y2",
        line={"color": MARKS[0], "dash": DASHES[1]},
        marker={"symbol": "square", "size": 8},
    )
    log_x_marker(fig, chosen, f"chosen: {chosen}", INK, "left")
    ticks = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000]
    fig.update_layout(
        xaxis={"type": "log", "tickvals": sizes, "ticktext": [str(s) for s in sizes]},
        yaxis2={
            "overlaying": "y",
            "side": "right",
            "type": "log",
            "title": "entries per sequence (log)",
            "tickvals": ticks,
            "ticktext": [f"{v:,}" for v in ticks],
            "showgrid": False,
        },
    )
    return layout(fig, title, "block size (tokens, log scale)", "internal waste (% of allocated slots)", height=400)


def _peak(points: Sequence[BlockSizeRow]) -> int:
    """The index of the most tokens/s, the smaller block size on a tie (as `block_size_throughput` labels it)."""
    return max(range(len(points)), key=lambda i: (points[i].tokens_per_s, -i))


def block_size_sweep_summary(points: Sequence[BlockSizeRow], chosen: int) -> str:
    """`block_size_sweep`'s chart in one sentence (its text alternative): the chosen size against both ends."""
    sizes = _sizes(points, chosen, "block_size_sweep_summary")
    r, small, large = points[sizes.index(chosen)], points[0], points[-1]
    return (
        f"{chosen}-token blocks waste {r.internal_waste_pct:.2f}% of the allocated KV slots with "
        f"{r.entries_per_sequence:,.1f} block-table entries per sequence; {small.block_size}-token blocks "
        f"waste {small.internal_waste_pct:.2f}% with {small.entries_per_sequence:,.1f}, "
        f"{large.block_size}-token blocks {large.internal_waste_pct:.2f}% with "
        f"{large.entries_per_sequence:,.1f}."
    )


def block_size_throughput_summary(points: Sequence[BlockSizeRow], chosen: int) -> str:
    """`block_size_throughput`'s chart in one sentence: the chosen size's tokens/s against the peak's."""
    sizes = _sizes(points, chosen, "block_size_throughput_summary")
    r, peak = points[sizes.index(chosen)], points[_peak(points)]
    return (
        f"{chosen}-token blocks give {r.tokens_per_s:,.0f} tokens/s "
        f"({100 * r.tokens_per_s / peak.tokens_per_s:.1f}% of the peak); the peak is "
        f"{peak.tokens_per_s:,.0f} tokens/s at {peak.block_size}-token blocks."
    )


def memory_breakdown(parts: Sequence[MemoryPart], title: str) -> go.Figure:
    """One horizontal stacked bar of a GPU's memory by part (GiB), each part labelled in its segment.

    `parts`: lessons.diagnosis Symptoms.memory or own_log.memory_parts (a negative part is drawn as 0)."""
    if not parts:
        raise ValueError("memory_breakdown: no parts")
    fig = go.Figure()
    for i, p in enumerate(parts):
        gib = p.gib
        part = plotly_text(p.part)  # parts are the course's words; escaped all the same
        fig.add_bar(
            name=part,
            y=["GPU memory"],
            x=[max(gib, 0.0)],
            orientation="h",
            text=[f"{part}: {gib:,.1f} GiB"],
            textposition="inside",
            marker={
                "color": PALETTE[i % len(PALETTE)],
                "pattern": {"shape": PATTERNS[i % len(PATTERNS)]},
                "line": OUTLINE,
            },
        )
    fig.update_yaxes(visible=False)
    layout(fig, title, "GiB", "", height=330)
    # legend under the bar: its entries are long (e.g. "KV reserved by 7 sessions") and would cover the title
    return fig.update_layout(barmode="stack", legend={"orientation": "h", "yanchor": "top", "y": -0.35, "x": 0})


def block_tables_summary(
    tables: Mapping[str, Sequence[int]], fills: Mapping[str, Sequence[int]], block_size: int
) -> str:
    """`block_table_picture` in one sentence (its text alternative): blocks and tokens per sequence."""
    if not tables:
        raise ValueError("block_tables_summary: no sequences")
    each = ", ".join(f"{name} {len(tables[name])} ({sum(fills[name])} tokens)" for name in tables)
    total = sum(len(t) for t in tables.values())
    return f"{len(tables)} sequence(s) map {total} logical blocks of {block_size} tokens to physical ones: {each}."


def pool_summary(blocks: Sequence[PoolBlock]) -> str:
    """`block_pool_grid` in one sentence: how many physical blocks are in each state (shared: more than one owner)."""
    order = (BlockState.USED, BlockState.SHARED, BlockState.CACHED, BlockState.FREE)
    counts = ", ".join(f"{sum(b.state is s for b in blocks)} {s.value}" for s in order)
    return f"Of {len(blocks)} physical blocks: {counts}."


def memory_summary(parts: Sequence[MemoryPart]) -> str:
    """`memory_breakdown`'s chart in one sentence (its text alternative): the total and every part, in GiB.

    Page 7 draws it for an incident and for a learner's pasted log; the parts are the course's words."""
    if not parts:
        raise ValueError("memory_summary: no parts")
    drawn = [(p.part, max(p.gib, 0.0)) for p in parts]
    total = sum(g for _, g in drawn)
    return f"{total:,.1f} GiB of GPU memory in all: " + ", ".join(f"{p} {g:,.1f} GiB" for p, g in drawn) + "."


def with_marker(fig: go.Figure, x: float, label: str) -> go.Figure:
    """Add a dotted vertical marker with a text label (e.g. the scheduler step being inspected)."""
    fig.add_vline(x=x, line={"color": INK, "dash": "dot"}, annotation_text=plotly_text(label))
    return fig


def block_size_throughput(
    points: Sequence[BlockSizeRow], chosen: int, title: str = "Tokens/s by block size"
) -> go.Figure:
    """Bars of tokens/s per block size (the peak labelled, sizes vLLM's FlashAttention refuses dotted) and the
    measured kernel cost vs its best block size on the right axis.

    `points`: the sweep's `BlockSizeRow`s (lessons.labs.paged.BlockSizeSweep.points), ascending; `chosen` is marked.
    """
    sizes = [str(s) for s in _sizes(points, chosen, "block_size_throughput")]
    tps = [p.tokens_per_s for p in points]
    peak = _peak(points)
    refused = [p.vllm_accepts is not VllmAccepts.YES for p in points]
    fig = go.Figure()
    fig.add_bar(
        name="tokens/s (left)",
        x=sizes,
        y=tps,
        text=[f"{v:,.0f}" + (" ← peak" if i == peak else "") for i, v in enumerate(tps)],
        textposition="outside",
        cliponaxis=False,
        marker={
            "color": [PALETTE[1] if i == peak else PALETTE[0] for i in range(len(points))],
            "pattern": {"shape": ["." if r else "" for r in refused]},
            "line": OUTLINE,
        },
    )
    fig.add_scatter(
        name="kernel cost vs best block size (right)",
        x=sizes,
        y=[p.kernel_cost for p in points],
        mode="lines+markers",
        yaxis="y2",
        line={"color": MARKS[1], "dash": DASHES[1]},
        marker={"symbol": "diamond"},
    )
    fig.add_annotation(x=str(chosen), y=1.0, yref="paper", text=f"chosen: {chosen}", showarrow=False, yanchor="bottom")
    low = min(tps)
    fig.update_layout(
        xaxis={"type": "category"},  # one evenly spaced bar per block size, not a linear 1 … 256 axis
        uniformtext={"minsize": 11, "mode": "show"},  # the narrow bars' labels stay readable
        yaxis={"range": [0.9 * low, 1.04 * max(tps)]},
        yaxis2={"overlaying": "y", "side": "right", "title": "kernel time / fastest", "showgrid": False},
    )
    return layout(fig, title, "block size (tokens)", "tokens/s (simulated, kernel cost charged)", height=420)


def hybrid_groups(run: HybridRun, title: str = "Blocks each KV-cache group holds, step by step") -> go.Figure:
    """Lines over the request's length: the full group's blocks, the sliding group's and the pool's free ones
    (lessons.labs.hybrid_engine.HybridRun, traced on the real engine)."""
    x = [s.context for s in run.steps]
    fig = go.Figure()
    series = (
        ("full-attention group (keeps every block)", [s.full_blocks for s in run.steps], "circle"),
        (f"sliding group (window {run.window})", [s.sliding_blocks for s in run.steps], "square"),
        ("free blocks in the shared pool", [s.free_blocks for s in run.steps], "diamond"),
    )
    for i, (name, y, symbol) in enumerate(series):
        fig.add_scatter(
            name=name,
            x=x,
            y=y,
            mode="lines+markers",
            line={"color": MARKS[i], "dash": DASHES[i]},
            marker={"symbol": symbol},
        )
    return layout(fig, title, "tokens in the cache", f"blocks ({run.block_size} tokens each)")


def waste_by_policy(shares: Sequence[PolicyShare], title: str = "Where held KV memory goes, by policy") -> go.Figure:
    """One horizontal stacked bar per server: stored / reserved / internal / external % of held KV slots.

    `shares`: lessons.labs.fragmentation.FragmentationReport.shares(), one per server.
    """
    if not shares:
        raise ValueError("waste_by_policy: no servers")
    names = [s.server for s in shares]
    fig = go.Figure()
    parts = (
        ("stored", [s.stored_pct for s in shares]),
        ("reserved", [s.reserved_pct for s in shares]),
        ("internal", [s.internal_pct for s in shares]),
        ("external", [s.external_pct for s in shares]),
    )
    for i, (part, values) in enumerate(parts):
        fig.add_bar(
            name=part,
            y=names,
            x=values,
            orientation="h",
            text=[f"{v:.1f}%" if v >= 4 else "" for v in values],
            textposition="inside",
            marker={"color": PALETTE[i], "pattern": {"shape": PATTERNS[i], "fgopacity": 0.45}, "line": OUTLINE},
            insidetextfont={"color": "#000000" if i else "#FFFFFF"},
        )
    fig.update_yaxes(autorange="reversed")
    layout(fig, title, "% of held KV slots (step average)", "", height=340)
    return fig.update_layout(barmode="stack", margin={"l": 230}, legend={"traceorder": "normal"})


__all__ = [
    "STATE_VALUES",
    "block_pool_grid",
    "block_size_sweep",
    "block_size_sweep_summary",
    "block_size_throughput",
    "block_size_throughput_summary",
    "block_table_picture",
    "block_tables_summary",
    "hybrid_groups",
    "memory_breakdown",
    "memory_summary",
    "pool_summary",
    "waste_by_policy",
    "with_marker",
]
