"""Lesson 1's figures (memory bandwidth): the roofline of decode and prefill, and the decode batch sweep.

Williams, Waterman and Patterson, "Roofline: an insightful visual performance model", CACM 2009. No Streamlit here.
"""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from lessons.labs.bandwidth import RooflinePoint, SweepPoint
from ui.charts import INK, MARKS, layout, log_x_marker


def roofline(
    peak_flops: float,
    bandwidth: float,
    points: Sequence[RooflinePoint],
    title: str = "Roofline",
) -> go.Figure:
    """Log-log roofline: attainable FLOP/s = min(peak, intensity × bandwidth), with labelled points.

    `points`: lessons.labs.bandwidth.BandwidthLesson.points (name, FLOP per byte, attainable FLOP/s).
    """
    if peak_flops <= 0 or bandwidth <= 0:
        raise ValueError(f"roofline needs positive peak FLOP/s and bandwidth, got {peak_flops} and {bandwidth}")
    ridge = peak_flops / bandwidth
    xs_pts = [p.intensity for p in points if p.intensity > 0]
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
            name=p.name,
            x=[p.intensity],
            y=[p.flops],
            mode="markers+text",
            text=[p.name],
            textposition="top center",
            marker={"size": 13, "color": MARKS[i % len(MARKS)], "symbol": symbols[i % len(symbols)]},
        )
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    return layout(fig, title, "arithmetic intensity (FLOP per byte moved)", "attainable FLOP/s", height=420)


def batch_sweep(points: Sequence[SweepPoint], max_batch: int, title: str = "Decode throughput vs batch") -> go.Figure:
    """Decode tokens/s per batch (log-log): batches that fit in memory as a solid line, the ones that do not as
    grey crosses labelled "does not fit", and a dotted line at the largest batch that fits.

    `points`: lessons.labs.bandwidth.BatchSweep.points (batch, tokens/s and whether its KV fits), ascending.
    """
    if not points:
        raise ValueError("batch_sweep: no batches; sweep at least one")
    fit = [p for p in points if p.fits]
    over = [p for p in points if not p.fits]
    fig = go.Figure()
    fig.add_scatter(
        name="fits in GPU memory",
        x=[p.batch for p in fit],
        y=[p.tokens_per_s for p in fit],
        mode="lines+markers",
        line={"color": MARKS[0]},
        marker={"symbol": "circle", "size": 9},
    )
    fig.add_scatter(
        name="does not fit (KV over the budget)",
        x=[p.batch for p in over],
        y=[p.tokens_per_s for p in over],
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
