"""The roofline figure of lesson 1 (memory bandwidth): decode and prefill against a GPU's compute and bandwidth roofs.

Williams, Waterman and Patterson, "Roofline: an insightful visual performance model", CACM 2009. No Streamlit here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go

from ui.charts import PALETTE, layout


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
        line={"color": PALETTE[7], "width": 2},
    )
    fig.add_scatter(
        name=f"ridge point ({ridge:,.0f} FLOP/byte)",
        x=[ridge, ridge],
        y=[peak_flops / 1e3, peak_flops],
        mode="lines",
        line={"color": PALETTE[7], "dash": "dot"},
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
            marker={"size": 13, "color": PALETTE[i % 6], "symbol": symbols[i % len(symbols)]},
        )
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    return layout(fig, title, "arithmetic intensity (FLOP per byte moved)", "attainable FLOP/s", height=420)
