"""Lesson 1's figures (memory bandwidth): the roofline of decode and prefill, and the decode batch sweep.

Williams, Waterman and Patterson, "Roofline: an insightful visual performance model", CACM 2009. No Streamlit here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go

from ui.charts import INK, MARKS, layout, log_x_marker


def roofline(
    peak_flops: float,
    bandwidth: float,
    points: Sequence[Mapping[str, float | str]],
    title: str = "Roofline",
) -> go.Figure:
    """Log-log roofline: attainable FLOP/s = min(peak, intensity × bandwidth), with labelled points.

    `points`: dicts with "name", "intensity" (FLOP/byte) and "flops" (attainable FLOP/s at that intensity).
    """
    if peak_flops <= 0 or bandwidth <= 0:
        raise ValueError(f"roofline needs positive peak FLOP/s and bandwidth, got {peak_flops} and {bandwidth}")
    ridge = peak_flops / bandwidth
    xs_pts = [float(p["intensity"]) for p in points if float(p["intensity"]) > 0]
    lo = min([ridge / 100, *xs_pts]) / 2
    hi = max([ridge * 100, *xs_pts]) * 2
    xs = [lo, ridge, hi]
    fig = go.Figure()
    fig.add_scatter(
        name="attainable (roof)",
        x=xs,
        y=[min(peak_flops, x * bandwidth) for x in xs],
        mode="lines",
        line={"color": INK, "width": 2},
    )
    fig.add_scatter(
        name=f"ridge point ({ridge:,.0f} FLOP/byte)",
        x=[ridge, ridge],
        y=[peak_flops / 1e3, peak_flops],
        mode="lines",
        line={"color": INK, "dash": "dot"},
    )
    symbols = ("circle", "diamond", "square", "triangle-up", "x")
    for i, p in enumerate(points):
        fig.add_scatter(
            name=str(p["name"]),
            x=[float(p["intensity"])],
            y=[float(p["flops"])],
            mode="markers+text",
            text=[str(p["name"])],
            textposition="top center",
            marker={"size": 13, "color": MARKS[i % len(MARKS)], "symbol": symbols[i % len(symbols)]},
        )
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    return layout(fig, title, "arithmetic intensity (FLOP per byte moved)", "attainable FLOP/s", height=420)


def batch_sweep(
    rows: Sequence[Mapping[str, object]], max_batch: int, title: str = "Decode throughput vs batch"
) -> go.Figure:
    """Decode tokens/s per batch (log-log): batches that fit in memory as a solid line, the ones that do not as
    grey crosses labelled "does not fit", and a dotted line at the largest batch that fits.

    `rows`: dicts with "batch", "tokens per s" and "fits in memory" ("yes" / "no").
    """
    if not rows:
        raise ValueError("batch_sweep: no rows; sweep at least one batch")
    fit = [r for r in rows if r["fits in memory"] == "yes"]
    over = [r for r in rows if r["fits in memory"] != "yes"]
    fig = go.Figure()
    fig.add_scatter(
        name="fits in GPU memory",
        x=[r["batch"] for r in fit],
        y=[r["tokens per s"] for r in fit],
        mode="lines+markers",
        line={"color": MARKS[0]},
        marker={"symbol": "circle", "size": 9},
    )
    fig.add_scatter(
        name="does not fit (KV over the budget)",
        x=[r["batch"] for r in over],
        y=[r["tokens per s"] for r in over],
        mode="markers+text",
        text=["does not fit"] * len(over),
        textposition="bottom center",
        marker={"symbol": "x", "size": 12, "color": INK},
    )
    if max_batch >= 1:
        log_x_marker(fig, max_batch, f"largest batch that fits: {max_batch:,}", MARKS[1], "right")
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    return layout(fig, title, "batch (sequences decoding together)", "decode tokens/s (roofline bound)", height=400)
