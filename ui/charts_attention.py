"""Figures of lessons 2 and 3: the KV footprint per group count, which KV head each query head reads (MHA /
GQA / MQA), GQA vs MHA attention time (decode and prefill), the block-diagonal mask of a packed batch, padded
vs packed token slots, and packed vs padded time as the padding grows. No Streamlit here.
"""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from ui.charts import DASHES, INK, MARKS, OUTLINE, PALETTE, bar, fmt, layout, legend_key, lines


def kv_by_groups(groups: Sequence[int], kv_bytes: Sequence[float], chosen: int, title: str, ytitle: str) -> go.Figure:
    """KV footprint per KV-group count; the chosen count is highlighted (colour + pattern + label)."""
    if chosen not in groups:
        raise ValueError(f"chosen group count {chosen} is not one of {list(groups)}")
    labels = [f"G={g}" for g in groups]
    return bar(labels, kv_bytes, title, ytitle, highlight=list(groups).index(chosen))


def head_sharing(num_heads: int, num_kv_heads: int, max_drawn: int = 32) -> go.Figure:
    """Query heads (top row) joined to the KV head they read (bottom row): MHA, GQA or MQA at a glance.

    Each group's lines have their own colour AND dash, and lead to a KV head square of the same colour with
    its name (kv0, kv1, ...) written under it, so a group reads the same in greyscale."""
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
            line={"color": MARKS[g % len(MARKS)], "width": 1.5, "dash": DASHES[g % len(DASHES)]},
        )
    fig.add_scatter(
        name="query head",
        x=list(range(drawn_q)),
        y=[1] * drawn_q,
        mode="markers+text",
        text=[f"q{h}" for h in range(drawn_q)],
        textposition="top center",
        marker={"size": 12, "symbol": "circle", "color": INK},
    )
    kv_drawn = [g for g in range(num_kv_heads) if kv_x[g] <= drawn_q]
    fig.add_scatter(
        name="KV head (K and V cached)",
        x=[kv_x[g] for g in kv_drawn],
        y=[0] * len(kv_drawn),
        mode="markers+text",
        text=[f"kv{g}" for g in kv_drawn],
        textposition="bottom center",
        marker={"size": 18, "symbol": "square", "color": [MARKS[g % len(MARKS)] for g in kv_drawn]},
    )
    fig.update_yaxes(visible=False, range=[-0.5, 1.5])
    fig.update_xaxes(visible=False)
    suffix = f" (first {drawn_q} of {num_heads} query heads)" if drawn_q < num_heads else ""
    return layout(fig, f"{num_heads} query heads share {num_kv_heads} KV heads{suffix}", height=280)


def mask_heatmap(mask: Sequence[Sequence[bool]], seqlens: Sequence[int], title: str) -> go.Figure:
    """A [total_q, total_k] visibility mask: ■ = may attend; request boundaries drawn as dashed lines; a legend
    names both cell colours and the boundary line (a large mask has no cell glyphs)."""
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
    edge, boundaries = 0, 0
    for n in list(seqlens)[:-1]:
        edge += n
        if edge >= min(n_q, n_k):  # past the drawn corner of a large mask: a line there would stretch the axes
            break
        boundaries += 1
        for kind in ("v", "h"):
            fig.add_shape(
                type="line",
                line={"color": PALETTE[3], "width": 2, "dash": "dash"},
                x0=edge - 0.5 if kind == "v" else -0.5,
                x1=edge - 0.5 if kind == "v" else n_k - 0.5,
                y0=-0.5 if kind == "v" else edge - 0.5,
                y1=n_q - 0.5 if kind == "v" else edge - 0.5,
            )
    legend_key(fig, [("may attend (■)", PALETTE[0]), ("masked", "#FFFFFF")])
    if boundaries:
        fig.add_scatter(
            name="request boundary",
            x=[None],
            y=[None],
            mode="lines",
            line={"color": PALETTE[3], "width": 2, "dash": "dash"},
            hoverinfo="skip",
        )
    fig.update_yaxes(autorange="reversed", title="query token (packed index)")
    fig.update_xaxes(title="key token (packed index)")
    layout(fig, title, height=min(680, max(380, 12 * n_q + 200)))
    return fig.update_layout(margin={"t": 80})  # room for the legend between the title and the mask


def padding_vs_packed(real_tokens: int, padded_slots: int, title: str = "Token slots: padded vs packed") -> go.Figure:
    """Two stacked bars: real tokens vs padding in a padded batch, and in a packed one (no padding)."""
    if real_tokens < 0 or padded_slots < real_tokens:
        raise ValueError(f"padded slots ({padded_slots}) must be >= real tokens ({real_tokens}) >= 0")
    fig = go.Figure()
    cats = ["padded batch", "packed batch"]
    fig.add_bar(
        name="real tokens",
        x=cats,
        y=[real_tokens, real_tokens],
        text=[real_tokens] * 2,
        marker={"color": PALETTE[2], "line": OUTLINE},
    )
    pad = padded_slots - real_tokens
    fig.add_bar(
        name="padding (wasted)",
        x=cats,
        y=[pad, 0],
        text=[pad, 0],
        marker={"color": PALETTE[3], "pattern": {"shape": "x"}, "line": OUTLINE},
    )
    fig.update_layout(barmode="stack")
    return layout(fig, title, "", "token slots")


def gqa_times(shapes: Sequence[str], gqa_ms: Sequence[float], mha_ms: Sequence[float], title: str) -> go.Figure:
    """Grouped bars per attention shape (decode, prefill): GQA vs MHA with repeated heads, ms, value-labelled."""
    if not len(shapes) == len(gqa_ms) == len(mha_ms):
        raise ValueError(f"{len(shapes)} shapes but {len(gqa_ms)} GQA and {len(mha_ms)} MHA times; give one each")
    fig = go.Figure()
    for i, (name, ys) in enumerate((("GQA (K/V once per group)", gqa_ms), ("MHA (K/V heads repeated)", mha_ms))):
        fig.add_bar(
            name=name,
            x=list(shapes),
            y=list(ys),
            text=[f"{fmt(y)} ms" for y in ys],
            textposition="outside",
            marker={"color": MARKS[i], "pattern": {"shape": ("", "/")[i]}, "line": OUTLINE},
        )
    fig.update_layout(barmode="group")
    return layout(fig, title, "", "ms per attention call")


def packing_sweep(
    padding_pct: Sequence[float],
    packed_ms: Sequence[float],
    padded_ms: Sequence[float],
    crossover_pct: float | None,
    title: str,
    padded_name: str = "padded (SDPA)",
    current_pct: float | None = None,
) -> go.Figure:
    """Measured packed vs padded time against the padding fraction; the crossover (and the page's batch) marked."""
    fig = lines(padding_pct, {"packed (varlen)": packed_ms, padded_name: padded_ms}, title, "padding %", "ms")
    if crossover_pct is not None:
        fig.add_vline(
            x=crossover_pct,
            line={"color": PALETTE[3], "dash": "dash"},
            annotation_text=f"packed faster from {crossover_pct:.0f}% padding",
            annotation_position="top",
        )
    if current_pct is not None:
        fig.add_vline(
            x=current_pct,
            line={"color": INK, "dash": "dot"},
            annotation_text=f"your batch: {current_pct:.0f}%",
            annotation_position="bottom right",
        )
    return fig
