"""The live round's projector figures (lessons/live.py's `ClassRound`): the class's answers as a histogram and,
after the reveal, the answers grouped by slip. No Streamlit here.

Made for a projector at the back of a room: type of `FONT` px and more, a count on every bar, the axis in the
lesson's unit. `class_histogram` draws one bar per bin, side by side on an axis of bin positions (bar i spans
i − 0.5 .. i + 0.5, its edges labelled with the bin's edges), so log-spaced bins and the bin of zero answers
read like any other; after the reveal a dashed line marks the engine's answer inside its bin's bar
(`answer_x`), labelled "engine: 128 KiB". Before the reveal nothing in the figure depends on the answer.
`slip_chart` draws each group's share of the class as a horizontal bar with "42% (10)" on it, "close" in its
own colour and fill pattern — its label says it too, so colour is never the only signal. Each figure has a
one-sentence summary (`histogram_summary`, `slip_summary`). Figures are pure functions of the `ClassRound`.
"""

from __future__ import annotations

import plotly.graph_objects as go

from lessons.live import Bin, ClassRound, edge_text, most_common, range_text
from lessons.predictions import amount
from ui.charts import INK, MARKS, OUTLINE, layout
from ui.inert import plotly_text

FONT = 20  # px: the smallest type on the projector
BIG = 24  # bar labels and the engine's line
TITLE = 28


def _unit_words(unit: str) -> str:
    return "percent" if unit == "%" else unit


def bin_index(bins: tuple[Bin, ...], value: float) -> int:
    """The index of the bin holding `value` ([low, high), the last bin's high end included); ValueError if none."""
    for i, b in enumerate(bins):
        if b.low <= value < b.high or (i == len(bins) - 1 and b.low <= value <= b.high):
            return i
    raise ValueError(f"value {value!r} is in none of the {len(bins)} bins; pass a revealed round's answer")


def answer_x(bins: tuple[Bin, ...], value: float) -> float:
    """Where `value` sits on `class_histogram`'s axis: inside the bar of its bin (bar i spans i − 0.5 .. i + 0.5),
    as far along it as the value is between the bin's edges. ValueError when no bin holds it."""
    i = bin_index(bins, value)
    b = bins[i]
    return i - 0.5 + (0.5 if b.high == b.low else (value - b.low) / (b.high - b.low))


def _big(fig: go.Figure, title: str, height: int) -> go.Figure:
    return (
        fig.update_layout(
            font={"size": FONT},
            title={"text": title, "font": {"size": TITLE}},
            height=height,
            margin={"l": 90, "r": 30, "t": 130, "b": 110},
            showlegend=False,
        )
        .update_xaxes(tickfont={"size": FONT}, title_font={"size": FONT})
        .update_yaxes(tickfont={"size": FONT}, title_font={"size": FONT})
    )  # explicit: Streamlit's chart theme sets smaller axis type, which the layout's font does not override


def _empty(title: str, note: str) -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(text=note, x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False, font={"size": BIG})
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return _big(fig, title, 420)


def class_histogram(cr: ClassRound) -> go.Figure:
    """The class's answers: one bar per bin with its count on top, the bins' edges under the bars in the
    lesson's unit; after the reveal a dashed line at the engine's answer, labelled "engine: X unit"."""
    title = f"The class's answers ({cr.answers:,})"
    if not cr.bins:
        return _empty(title, "No answers yet")
    n = len(cr.bins)
    unit = plotly_text(_unit_words(cr.unit))
    fig = go.Figure()
    fig.add_bar(
        name="answers",
        x=list(range(n)),
        y=[b.count for b in cr.bins],
        width=0.92,
        text=[str(b.count) for b in cr.bins],
        textposition="outside",
        textfont={"size": BIG},
        cliponaxis=False,
        hovertext=[f"{plotly_text(range_text(b, cr.unit))}: {b.count}" for b in cr.bins],
        hoverinfo="text",
        marker={"color": MARKS[0], "line": OUTLINE},
    )
    edges = [cr.bins[0].low, *(b.high for b in cr.bins)]
    ticks = [edge_text(e) for e in edges]
    if cr.bins[0].label == "0":  # the bin of zero answers: "0" under its bar's middle, then the edges
        tickvals, ticktext = [0.0, *(i + 0.5 for i in range(n))], ["0", *ticks[1:]]
    else:
        tickvals, ticktext = [i - 0.5 for i in range(n + 1)], ticks
    fig.update_xaxes(
        tickmode="array",
        tickvals=tickvals,
        ticktext=ticktext,
        range=[-0.6, n - 0.4],
        tickangle=-45 if n > 6 else 0,
        zeroline=False,
    )
    top = max(b.count for b in cr.bins)
    fig.update_yaxes(range=[0, top * 1.25 + 0.5], tick0=0, dtick=max(1, -(-top // 5)), tickformat="d")
    layout(fig, title, unit, "answers")
    _big(fig, title, 560)
    if cr.revealed and cr.answer is not None:
        x = answer_x(cr.bins, cr.answer)
        fig.add_shape(
            type="line", x0=x, x1=x, y0=0, y1=1, yref="paper", line={"color": MARKS[1], "dash": "dash", "width": 5}
        )
        fig.add_annotation(
            x=x,
            y=1.0,
            yref="paper",
            text=f"engine: {plotly_text(amount(cr.answer, cr.unit, 2))}",
            showarrow=False,
            xanchor="left" if x < n / 2 - 0.5 else "right",  # beside the line, towards the middle of the plot
            yanchor="bottom",
            font={"size": BIG, "color": MARKS[1]},
        )
    return fig


def histogram_summary(cr: ClassRound) -> str:
    """`class_histogram` in one sentence: the answers, the most common range and, once revealed, the engine's."""
    if not cr.bins:
        return "No answers yet."
    top = most_common(cr)
    said = (
        f"{cr.answers:,} answer{'' if cr.answers == 1 else 's'} in {len(cr.bins)} range"
        f"{'' if len(cr.bins) == 1 else 's'}, the most ({top.count}) at {range_text(top, cr.unit)}"
    )
    if not cr.revealed or cr.answer is None:
        return f"{said}; the engine's answer is hidden until the teacher reveals it."
    home = cr.bins[bin_index(cr.bins, cr.answer)]
    return (
        f"{said}; the engine's answer, {amount(cr.answer, cr.unit, 2)}, is in the {range_text(home, cr.unit)} "
        f"range with {home.count} answer{'' if home.count == 1 else 's'}."
    )


CLOSE_COLOUR, SLIP_COLOUR, OTHER_COLOUR = MARKS[2], MARKS[0], INK


def _style(key: str) -> tuple[str, str]:
    """(colour, fill pattern) of a group's bar."""
    if key == "close":
        return CLOSE_COLOUR, ""
    return (OTHER_COLOUR, ".") if key == "other" else (SLIP_COLOUR, "/")


def slip_chart(cr: ClassRound) -> go.Figure:
    """The answers by group after the reveal: one horizontal bar per group ("close" first, then the slips by
    count, "other" last), its share of the class and its count written on it. Before the reveal: a note."""
    title = "The class's answers by slip"
    if not cr.revealed:
        return _empty(title, "Shown once the teacher reveals the answer")
    if not cr.answers:
        return _empty(title, "No answers this round")
    groups = cr.groups
    styles = [_style(g.key) for g in groups]
    fig = go.Figure()
    fig.add_bar(
        name="share of the class",
        y=[plotly_text(g.label) for g in groups],
        x=[100 * g.share for g in groups],
        orientation="h",
        text=[f"{100 * g.share:.0f}% ({g.count})" for g in groups],
        textposition="outside",
        textfont={"size": BIG},
        cliponaxis=False,
        hoverinfo="text",
        hovertext=[f"{plotly_text(g.label)}: {g.count} of {cr.answers} ({100 * g.share:.0f}%)" for g in groups],
        marker={
            "color": [c for c, _ in styles],
            "pattern": {"shape": [p for _, p in styles]},
            "line": OUTLINE,
        },
    )
    fig.update_yaxes(autorange="reversed", automargin=True, type="category")
    fig.update_xaxes(range=[0, 125], tickvals=[0, 25, 50, 75, 100], ticksuffix="%")
    layout(fig, title, "share of the class's answers", "")
    return _big(fig, title, 140 + 80 * len(groups)).update_layout(margin={"l": 20, "b": 80})


def slip_summary(cr: ClassRound) -> str:
    """`slip_chart` in one sentence: each group's count and share, "close" first."""
    if not cr.revealed:
        return "The answers are grouped by slip once the teacher reveals the engine's answer."
    if not cr.answers:
        return "No answers this round, so no slips to group."
    parts = "; ".join(f"{g.label}: {g.count} ({100 * g.share:.0f}%)" for g in cr.groups)
    return f"Of {cr.answers:,} answer{'' if cr.answers == 1 else 's'}, {parts}."


__all__ = ["FONT", "answer_x", "bin_index", "class_histogram", "histogram_summary", "slip_chart", "slip_summary"]
