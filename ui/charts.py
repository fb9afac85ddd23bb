"""Plotly figure builders for KV Lab's pages (no Streamlit; each returns a `go.Figure`).

Accessibility: colours come from the Okabe–Ito palette (distinguishable with common colour-vision
deficiencies) and are never the only signal — bars carry value labels, series carry legend names and
distinct fill patterns or line dashes, and heatmaps carry text. Pages pair every figure with a caption
and a data table (`pages/_ui.show_chart`).

Generic builders (reuse these on any page): `bar`, `grouped_bar`, `stacked_area`, `lines`, `labelled_grid`.
Lesson-specific ones: `roofline`, `kv_by_groups`, `head_sharing`, `mask_heatmap`, `padding_vs_packed`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go

# Okabe & Ito (2008), "Color Universal Design": safe for the common colour-vision deficiencies.
PALETTE: tuple[str, ...] = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
PATTERNS: tuple[str, ...] = ("", "/", "x", ".", "\\", "+", "-", "|")
DASHES: tuple[str, ...] = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")


def fmt(value: float) -> str:
    """A short, readable value label: thousands separators for big numbers, 3 significant digits otherwise."""
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def _layout(fig: go.Figure, title: str, xtitle: str = "", ytitle: str = "", height: int = 380) -> go.Figure:
    fig.update_layout(
        title=title,
        xaxis_title=xtitle,
        yaxis_title=ytitle,
        height=height,
        margin={"l": 60, "r": 20, "t": 60, "b": 50},
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0},
    )
    return fig


def _check_lengths(x: Sequence, series: Mapping[str, Sequence], what: str) -> None:
    for name, ys in series.items():
        if len(ys) != len(x):
            raise ValueError(f"{what}: series {name!r} has {len(ys)} values but x has {len(x)}; give one per x")


# --- generic -----------------------------------------------------------------------------------------


def bar(
    labels: Sequence[str],
    values: Sequence[float],
    title: str,
    ytitle: str = "",
    text: Sequence[str] | None = None,
    highlight: int | None = None,
) -> go.Figure:
    """Vertical bars with a value label on each; `highlight` marks one bar with colour AND a pattern."""
    if len(labels) != len(values):
        raise ValueError(f"bar: {len(labels)} labels but {len(values)} values")
    colors = [PALETTE[1] if i == highlight else PALETTE[0] for i in range(len(labels))]
    patterns = ["/" if i == highlight else "" for i in range(len(labels))]
    fig = go.Figure(
        go.Bar(
            x=list(labels),
            y=list(values),
            text=list(text) if text is not None else [fmt(v) for v in values],
            textposition="outside",
            marker={"color": colors, "pattern": {"shape": patterns}},
        )
    )
    return _layout(fig, title, "", ytitle)


def grouped_bar(
    categories: Sequence[str], series: Mapping[str, Sequence[float]], title: str, ytitle: str = ""
) -> go.Figure:
    """Side-by-side bars per category, one pattern + colour + legend entry per series."""
    _check_lengths(categories, series, "grouped_bar")
    fig = go.Figure()
    for i, (name, ys) in enumerate(series.items()):
        fig.add_bar(
            name=name,
            x=list(categories),
            y=list(ys),
            text=[fmt(v) for v in ys],
            textposition="outside",
            marker={"color": PALETTE[i % len(PALETTE)], "pattern": {"shape": PATTERNS[i % len(PATTERNS)]}},
        )
    fig.update_layout(barmode="group")
    return _layout(fig, title, "", ytitle)


def stacked_area(
    x: Sequence[float], series: Mapping[str, Sequence[float]], title: str, xtitle: str = "", ytitle: str = ""
) -> go.Figure:
    """Stacked areas (e.g. stored / reserved / internal / external / free slots over time)."""
    _check_lengths(x, series, "stacked_area")
    fig = go.Figure()
    for i, (name, ys) in enumerate(series.items()):
        fig.add_scatter(
            name=name,
            x=list(x),
            y=list(ys),
            mode="lines",
            stackgroup="one",
            line={"width": 0.5, "color": PALETTE[i % len(PALETTE)]},
            fillpattern={"shape": PATTERNS[i % len(PATTERNS)]},
        )
    return _layout(fig, title, xtitle, ytitle)


def lines(
    x: Sequence[float],
    series: Mapping[str, Sequence[float]],
    title: str,
    xtitle: str = "",
    ytitle: str = "",
    log_x: bool = False,
    log_y: bool = False,
) -> go.Figure:
    """Line + marker series with distinct dashes and marker symbols."""
    _check_lengths(x, series, "lines")
    symbols = ("circle", "square", "diamond", "triangle-up", "x", "star")
    fig = go.Figure()
    for i, (name, ys) in enumerate(series.items()):
        fig.add_scatter(
            name=name,
            x=list(x),
            y=list(ys),
            mode="lines+markers",
            line={"color": PALETTE[i % len(PALETTE)], "dash": DASHES[i % len(DASHES)]},
            marker={"symbol": symbols[i % len(symbols)], "size": 7},
        )
    fig.update_xaxes(type="log" if log_x else "linear")
    fig.update_yaxes(type="log" if log_y else "linear")
    return _layout(fig, title, xtitle, ytitle)


def labelled_grid(
    values: Sequence[Sequence[float]],
    text: Sequence[Sequence[str]],
    title: str,
    xlabels: Sequence[str] | None = None,
    ylabels: Sequence[str] | None = None,
    colorscale: str = "Blues",
) -> go.Figure:
    """A heatmap whose every cell also shows text (e.g. a block table or a pool of physical blocks)."""
    if len(values) != len(text) or any(len(a) != len(b) for a, b in zip(values, text, strict=False)):
        raise ValueError("labelled_grid: values and text must have the same rows and columns")
    fig = go.Figure(
        go.Heatmap(
            z=[list(r) for r in values],
            text=[list(r) for r in text],
            texttemplate="%{text}",
            x=list(xlabels) if xlabels is not None else None,
            y=list(ylabels) if ylabels is not None else None,
            colorscale=colorscale,
            showscale=False,
            xgap=2,
            ygap=2,
        )
    )
    fig.update_yaxes(autorange="reversed")
    return _layout(fig, title, height=max(200, 40 * len(values) + 120))


# --- lesson-specific ---------------------------------------------------------------------------------


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
    return _layout(fig, title, "arithmetic intensity (FLOP per byte moved)", "attainable FLOP/s", height=420)


def kv_by_groups(groups: Sequence[int], kv_bytes: Sequence[float], chosen: int, title: str, ytitle: str) -> go.Figure:
    """KV footprint per KV-group count; the chosen count is highlighted (colour + pattern + label)."""
    if chosen not in groups:
        raise ValueError(f"chosen group count {chosen} is not one of {list(groups)}")
    labels = [f"G={g}" for g in groups]
    return bar(labels, kv_bytes, title, ytitle, highlight=list(groups).index(chosen))


def head_sharing(num_heads: int, num_kv_heads: int, max_drawn: int = 32) -> go.Figure:
    """Query heads (top row) joined to the KV head they read (bottom row): MHA, GQA or MQA at a glance."""
    if num_kv_heads < 1 or num_heads % num_kv_heads != 0:
        raise ValueError(f"{num_heads} query heads cannot be split into {num_kv_heads} KV groups; pick a divisor")
    drawn_q = min(num_heads, max_drawn)
    per_group = num_heads // num_kv_heads
    fig = go.Figure()
    kv_x = {g: (g + 0.5) * num_heads / num_kv_heads - 0.5 for g in range(num_kv_heads)}
    for h in range(drawn_q):
        g = h // per_group
        fig.add_scatter(
            x=[h, kv_x[g]],
            y=[1, 0],
            mode="lines",
            showlegend=False,
            hoverinfo="skip",
            line={"color": PALETTE[g % 6], "width": 1.5, "dash": DASHES[g % len(DASHES)]},
        )
    fig.add_scatter(
        name="query head",
        x=list(range(drawn_q)),
        y=[1] * drawn_q,
        mode="markers+text",
        text=[f"q{h}" for h in range(drawn_q)],
        textposition="top center",
        marker={"size": 12, "symbol": "circle", "color": PALETTE[5]},
    )
    kv_drawn = [g for g in range(num_kv_heads) if kv_x[g] <= drawn_q]
    fig.add_scatter(
        name="KV head (K and V cached)",
        x=[kv_x[g] for g in kv_drawn],
        y=[0] * len(kv_drawn),
        mode="markers+text",
        text=[f"kv{g}" for g in kv_drawn],
        textposition="bottom center",
        marker={"size": 18, "symbol": "square", "color": PALETTE[3]},
    )
    fig.update_yaxes(visible=False, range=[-0.5, 1.5])
    fig.update_xaxes(visible=False)
    suffix = f" (first {drawn_q} of {num_heads} query heads)" if drawn_q < num_heads else ""
    return _layout(fig, f"{num_heads} query heads share {num_kv_heads} KV heads{suffix}", height=280)


def mask_heatmap(mask: Sequence[Sequence[bool]], seqlens: Sequence[int], title: str) -> go.Figure:
    """A [total_q, total_k] visibility mask: ■ = may attend; request boundaries drawn as lines."""
    rows = [[1 if v else 0 for v in r] for r in mask]
    n_q = len(rows)
    n_k = len(rows[0]) if rows else 0
    show_text = n_q * n_k <= 900  # cell glyphs stay legible only on small masks
    fig = go.Figure(
        go.Heatmap(
            z=rows,
            text=[["■" if v else "" for v in r] for r in rows] if show_text else None,
            texttemplate="%{text}" if show_text else None,
            colorscale=[[0, "#FFFFFF"], [1, PALETTE[0]]],
            showscale=False,
            xgap=1 if show_text else 0,
            ygap=1 if show_text else 0,
            hovertemplate="query %{y}, key %{x}: %{z}<extra>1 = visible</extra>",
        )
    )
    edge = 0
    for n in list(seqlens)[:-1]:
        edge += n
        for kind in ("v", "h"):
            fig.add_shape(
                type="line",
                line={"color": PALETTE[3], "width": 2, "dash": "dash"},
                x0=edge - 0.5 if kind == "v" else -0.5,
                x1=edge - 0.5 if kind == "v" else n_k - 0.5,
                y0=-0.5 if kind == "v" else edge - 0.5,
                y1=n_q - 0.5 if kind == "v" else edge - 0.5,
            )
    fig.update_yaxes(autorange="reversed", title="query token (packed index)")
    fig.update_xaxes(title="key token (packed index)")
    return _layout(fig, title, height=min(620, max(320, 12 * n_q + 140)))


def padding_vs_packed(real_tokens: int, padded_slots: int, title: str = "Token slots: padded vs packed") -> go.Figure:
    """Two stacked bars: real tokens vs padding in a padded batch, and in a packed one (no padding)."""
    if real_tokens < 0 or padded_slots < real_tokens:
        raise ValueError(f"padded slots ({padded_slots}) must be >= real tokens ({real_tokens}) >= 0")
    fig = go.Figure()
    cats = ["padded batch", "packed batch"]
    fig.add_bar(
        name="real tokens", x=cats, y=[real_tokens, real_tokens], text=[real_tokens] * 2, marker={"color": PALETTE[2]}
    )
    pad = padded_slots - real_tokens
    fig.add_bar(
        name="padding (wasted)",
        x=cats,
        y=[pad, 0],
        text=[pad, 0],
        marker={"color": PALETTE[3], "pattern": {"shape": "x"}},
    )
    fig.update_layout(barmode="stack")
    return _layout(fig, title, "", "token slots")
