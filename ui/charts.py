"""Generic plotly figure builders for KV Lab's pages and the look they share (no Streamlit; each returns a `go.Figure`).

Accessibility: colours come from the Okabe–Ito palette (distinguishable with common colour-vision
deficiencies) and are never the only signal — bars carry value labels, series carry legend names and
distinct fill patterns, line dashes or marker shapes, and heatmaps carry text in their cells or a legend
naming each colour (tests/ui/test_chart_colours.py checks every builder). Lines, markers and reference
lines use `MARKS` and `INK`, which keep 3:1 against both the light and the dark theme's background; filled
marks in the lighter colours get an `INK` outline (`OUTLINE`) for the same 3:1 edge. Pages pair every
figure with a one-sentence summary, a caption and a data table (`ui.chart_view.show_chart`).

Generic builders (reuse these on any page): `bar`, `stacked_area`, `lines`, `labelled_grid`; `layout` gives
any figure the common title, axes, size and legend. Lesson figures live beside this module:
`ui.charts_bandwidth` (roofline), `ui.charts_attention` (GQA heads, packed masks), `ui.charts_memory`
(block tables, pools, GPU memory).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import plotly.graph_objects as go

# Okabe & Ito (2008), "Color Universal Design": safe for the common colour-vision deficiencies.
PALETTE: tuple[str, ...] = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
PATTERNS: tuple[str, ...] = ("", "/", "x", ".", "\\", "+", "-", "|")
# Okabe–Ito's mid-tone colours: each at least 3:1 on white and on the dark theme's #171614 (WCAG 1.4.11).
MARKS: tuple[str, ...] = ("#0072B2", "#D55E00", "#009E73", "#CC79A7")
INK = "#767676"  # neutral grey for reference lines, outlines and "not a series" marks: 4.5:1 light, 4.0:1 dark
OUTLINE = {"color": INK, "width": 1}  # the edge of a filled mark, whatever its fill
DASHES: tuple[str, ...] = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")


def fmt(value: float) -> str:
    """A short, readable value label: thousands separators for big numbers, 3 significant digits otherwise."""
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def layout(fig: go.Figure, title: str, xtitle: str = "", ytitle: str = "", height: int = 380) -> go.Figure:
    """The shared look: title, axis titles, height, margins and a horizontal legend above the plot."""
    fig.update_layout(
        title=title,
        xaxis_title=xtitle,
        yaxis_title=ytitle,
        height=height,
        margin={"l": 60, "r": 20, "t": 60, "b": 50},
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0},
    )
    return fig


def log_x_marker(fig: go.Figure, x: float, text: str, color: str, xanchor: str) -> go.Figure:
    """A dotted vertical line at ``x`` on a log x-axis with its label at the top of the plot.

    On a log axis plotly places shapes in data units but annotations in log10 units, so the two are added
    separately (a vline's own annotation would land at the wrong place)."""
    fig.add_vline(x=x, line={"color": color, "dash": "dot"})
    fig.add_annotation(
        x=math.log10(x), y=1.0, yref="paper", text=text, showarrow=False, xanchor=xanchor, yanchor="bottom"
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
    highlight_label: str = "chosen",
) -> go.Figure:
    """Vertical bars with a value label on each; `highlight` marks one bar with colour, a pattern AND the words
    `highlight_label` after its value."""
    if len(labels) != len(values):
        raise ValueError(f"bar: {len(labels)} labels but {len(values)} values")
    colors = [PALETTE[1] if i == highlight else PALETTE[0] for i in range(len(labels))]
    patterns = ["/" if i == highlight else "" for i in range(len(labels))]
    texts = list(text) if text is not None else [fmt(v) for v in values]
    if highlight is not None:
        texts[highlight] = f"{texts[highlight]} ({highlight_label})"  # the highlight in words too
    fig = go.Figure(
        go.Bar(
            x=list(labels),
            y=list(values),
            text=texts,
            textposition="outside",
            cliponaxis=False,
            marker={"color": colors, "pattern": {"shape": patterns}, "line": OUTLINE},
        )
    )
    return layout(fig, title, "", ytitle)


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
            line=OUTLINE,
            fillcolor=PALETTE[i % len(PALETTE)],
            fillpattern={"shape": PATTERNS[i % len(PATTERNS)]},
        )
    return layout(fig, title, xtitle, ytitle)


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
            line={"color": MARKS[i % len(MARKS)], "dash": DASHES[i % len(DASHES)]},
            marker={"symbol": symbols[i % len(symbols)], "size": 7},
        )
    fig.update_xaxes(type="log" if log_x else "linear")
    fig.update_yaxes(type="log" if log_y else "linear")
    return layout(fig, title, xtitle, ytitle)


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
    return layout(fig, title, height=max(200, 40 * len(values) + 120))


def legend_key(fig: go.Figure, entries: Sequence[tuple[str, str]], symbol: str = "square") -> go.Figure:
    """Legend-only entries (name, colour) naming the colours of a heatmap, which has no legend of its own."""
    for name, color in entries:
        fig.add_scatter(
            name=name,
            x=[None],
            y=[None],
            mode="markers",
            marker={"symbol": symbol, "size": 12, "color": color, "line": OUTLINE},
            hoverinfo="skip",
        )
    return fig.update_layout(showlegend=True)
