"""Lesson 6's figures (serving under KV pressure): a run's dashboard over its steps, the traffic sweep, the
token-budget trade and the simulator's GPU-scale sweep. Series carry vLLM's metric names, distinct dashes
and markers (colour is never the only signal). No Streamlit here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from lessons.labs.pressure import GpuPoint, RunPoint, StepRow
from ui.charts import DASHES, MARKS, OUTLINE, PATTERNS, layout

SYMBOLS = ("circle", "square", "diamond", "triangle-up", "x", "star")


def _count_axis(counts: Sequence[int]) -> dict[str, object]:
    """A y-axis for a count: whole-number ticks from 0, about five of them (never 0.5 preemptions)."""
    top = max(counts, default=0)
    return {"rangemode": "tozero", "tick0": 0, "dtick": max(1, -(-top // 5)), "tickformat": "d"}


def _preemption_bars(x: Sequence[str], counts: Sequence[int], name: str) -> go.Figure:
    """A figure with a right axis and hatched, labelled preemption bars on the left one (whole-number ticks)."""
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_bar(
        name=name,
        x=list(x),
        y=list(counts),
        text=[str(n) for n in counts],
        textposition="outside",
        marker={"color": MARKS[3], "pattern": {"shape": PATTERNS[1]}, "line": OUTLINE},
        secondary_y=False,
    )
    return fig.update_yaxes(title_text="preemptions", secondary_y=False, **_count_axis(counts))


def _line(fig: go.Figure, i: int, name: str, x: Sequence[float], y: Sequence[float], **kw: object) -> None:
    fig.add_scatter(
        name=name,
        x=list(x),
        y=list(y),
        mode="lines+markers" if len(x) <= 60 else "lines",
        line={"color": MARKS[i % len(MARKS)], "dash": DASHES[i % len(DASHES)], "width": 2},
        marker={"symbol": SYMBOLS[i % len(SYMBOLS)], "size": 7},
        **kw,
    )


def dashboard(steps: Sequence[StepRow], metrics: Mapping[str, str], title: str) -> go.Figure:
    """A run's signals per engine step: KV usage (%) on top; running, waiting and the preemption counter below.

    steps: the run's `StepRow`s (lessons.labs.pressure.PressureRun.steps); metrics: the lab's METRICS names for
    the legend."""
    x = [s.step for s in steps]
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08, row_heights=[0.4, 0.6])
    _line(fig, 0, f"KV usage % ({metrics['kv_usage']})", x, [100 * s.kv_usage for s in steps], row=1, col=1)
    _line(fig, 1, f"running ({metrics['running']})", x, [s.running for s in steps], row=2, col=1)
    _line(fig, 2, f"waiting ({metrics['waiting']})", x, [s.waiting for s in steps], row=2, col=1)
    _line(fig, 3, f"preemptions ({metrics['preemptions']})", x, [s.preemptions for s in steps], row=2, col=1)
    fig.update_yaxes(title_text="KV usage %", range=[0, 105], row=1, col=1)
    fig.update_yaxes(title_text="requests / count", rangemode="tozero", row=2, col=1)
    fig.update_xaxes(title_text="engine step", row=2, col=1)
    # four long legend names wrap to two rows: give them room under the title instead of over it
    return layout(fig, title, height=560).update_layout(margin={"t": 120}, title={"y": 0.98, "yanchor": "top"})


def traffic_sweep(points: Sequence[RunPoint], title: str) -> go.Figure:
    """Preemptions (bars, left axis) and TTFT p50 / p95 in steps (lines, right axis) per arrival rate.

    points: lessons.labs.pressure.RateSweep.points(), one run per traffic level."""
    x = [str(p.traffic.rate) for p in points]
    fig = _preemption_bars(x, [p.preemptions for p in points], "preemptions (vllm:num_preemptions_total)")
    _line(fig, 0, "TTFT p50 (steps)", x, [p.ttft_p50_steps for p in points], secondary_y=True)
    _line(fig, 1, "TTFT p95 (steps)", x, [p.ttft_p95_steps for p in points], secondary_y=True)
    fig.update_yaxes(title_text="TTFT (engine steps)", rangemode="tozero", tickformat=".0f", secondary_y=True)
    fig.update_xaxes(title_text="new requests per engine step", type="category")
    return layout(fig, title, height=420)


def budget_trade(points: Sequence[RunPoint], title: str) -> go.Figure:
    """Per token budget: TTFT p50 (ms) and the gap between two tokens at the biggest step that carried decodes
    (ms: that step's duration), with TPOT p50 for reference.

    points: lessons.labs.pressure.BudgetSweep.points(), one run per budget."""
    x = [str(p.traffic.budget) for p in points]
    fig = go.Figure()
    _line(fig, 0, "TTFT p50 (ms)", x, [p.ttft_p50_ms for p in points])
    _line(fig, 3, "gap between two tokens at the biggest step (ms)", x, [p.stall_ms for p in points])
    _line(fig, 2, "TPOT p50 (ms)", x, [p.tpot_p50_ms for p in points])
    fig.update_xaxes(type="category")
    fig.update_yaxes(rangemode="tozero")
    return layout(fig, title, "max_num_batched_tokens (token budget)", "milliseconds (this CPU)", height=400)


def gpu_sweep(points: Sequence[GpuPoint], title: str) -> go.Figure:
    """The simulator per request rate: preemptions (bars) and p95 queue time (line, right axis).

    points: lessons.labs.pressure.GpuSweep.points, one per request rate."""
    x = [str(p.rate) for p in points]
    fig = _preemption_bars(x, [p.preemptions for p in points], "preemptions (simulated)")
    _line(fig, 0, "p95 queue time, s (simulated)", x, [p.p95_wait_s for p in points], secondary_y=True)
    _line(fig, 2, "peak KV usage % (simulated)", x, [100 * p.peak_kv_usage for p in points], secondary_y=True)
    fig.update_yaxes(title_text="seconds / %", rangemode="tozero", tickformat=".0f", secondary_y=True)
    fig.update_xaxes(title_text="requests per second", type="category")
    return layout(fig, title, height=420)
