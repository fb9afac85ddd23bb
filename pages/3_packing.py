"""Lesson 3 — packed variable-length batches: padding waste, the block-diagonal mask, packed vs padded runs."""

from typing import Any

import streamlit as st

from lessons.labs import packing as lab
from ui import charts_attention
from ui.backend import backend_info
from ui.chart_view import metric_row, show_chart
from ui.downloads import show_table
from ui.errors import run_or_stop
from ui.figure_cache import figure, frozen_figure
from ui.linked_view import linked_view
from ui.memo import memo
from ui.prose import page_header, prose, sources
from ui.quiz import lesson_check
from ui.router import lesson_section

PAGE = "packing"


@memo
def _visibility(lengths: tuple[int, ...], causal: bool) -> lab.MaskPicture:
    return lab.visibility(list(lengths), causal)


@memo(max_entries=64)
def _mask_fig(lengths: tuple[int, ...], causal: bool, title: str) -> Any:
    """The mask heatmap, once per setting: its cells (up to 256 x 256) are too many to key `figure` by value."""
    return frozen_figure(charts_attention.mask_heatmap(_visibility(lengths, causal).cells, list(lengths), title))


@memo
def _run(lengths: tuple[int, ...], causal: bool) -> lab.PackingRun:
    return lab.run_packed_vs_padded(list(lengths), causal, repeats=3)


@memo
def _sweep(causal: bool) -> lab.PaddingSweep:
    return lab.padding_sweep(causal)


page_header(PAGE)


def _calculator() -> None:
    """The lesson's settings, numbers and charts: a widget here re-runs only this (ui.router.lesson_section)."""
    view = linked_view(PAGE)  # lengths and causal come from the URL (defaults in lessons/links.py) and are written back

    text = st.text_input(
        "Request lengths in tokens (comma-separated)",
        key=view.keys["lengths"],
        max_chars=lab.MAX_TEXT_CHARS,
        help=f"Whole numbers from 1 to {lab.MAX_LENGTH}, at most {lab.MAX_REQUESTS} requests and {lab.MAX_TOTAL} in "
        "total.",
    )
    causal = st.toggle("Causal attention (each token sees only earlier tokens of its request)", key=view.keys["causal"])
    lengths = run_or_stop(
        lab.parse_lengths, text, hint=f"type whole numbers separated by commas, for example `{lab.DEFAULT_LENGTHS}`."
    )
    view.publish()
    stats = lab.padding_stats(lengths, causal)

    m1, m2, m3, m4 = metric_row(4)
    m1.metric("Real tokens", f"{stats.real_tokens:,}")
    m2.metric("Padded slots", f"{stats.padded_slots:,}")
    m3.metric("Padding wasted", f"{stats.padding_pct:.0f}%")
    m4.metric("Attention work saved by packing", f"{stats.ideal_speedup:,.2f}×")
    show_chart(
        figure(charts_attention.padding_vs_packed, stats.real_tokens, stats.padded_slots),
        f"Padding {stats.num_requests} requests to the longest ({stats.longest} tokens) needs {stats.padded_slots:,} "
        f"slots for {stats.real_tokens:,} real tokens; packing stores exactly the real tokens (hatched = padding).",
        stats.rows(),
        "padding-vs-packed",
        "pack_bars",
        summary=stats.summary(),
    )

    st.subheader("The block-diagonal mask")
    prose(PAGE, "The mask")
    mask = _visibility(tuple(lengths), causal)
    title = f"{'Causal b' if causal else 'B'}lock-diagonal mask over {mask.total_tokens} packed tokens"
    if mask.cut:
        title += f" (first {mask.drawn} tokens drawn)"
    show_chart(
        _mask_fig(tuple(lengths), causal, title),
        "Dark cells (■ on small masks) mark the keys (columns) each query (rows) may attend to; white cells are "
        "masked; dashed lines separate requests. "
        "Everything outside a request's own block is masked, so packing changes no result. "
        "Built by engine.attention.attn_bias.BlockDiagonalMask.materialize.",
        mask.rows,  # made only when the table is opened: a row per drawn query
        "block-diagonal-mask",
        "pack_mask",
        summary=mask.summary(),
    )

    st.subheader("Packed vs padded, run for real")
    prose(PAGE, "Run it")
    with st.spinner("Running varlen_attention on the packed batch and SDPA on the padded one …"):
        run = run_or_stop(_run, tuple(lengths), causal)
    r1, r2, r3, r4 = metric_row(4)
    r1.metric("Packed (varlen_attention)", f"{run.packed_ms:,.2f} ms", help=f"q shape {run.packed_shape}")
    r2.metric(f"Padded ({run.baseline})", f"{run.padded_ms:,.2f} ms", help=f"q shape {run.padded_shape}")
    r3.metric("Packing speed-up", f"{run.speedup:,.2f}×", f"ideal {stats.ideal_speedup:,.2f}×", delta_color="off")
    r4.metric("Max |packed − padded| on real tokens", f"{run.max_abs_err:.1e}")
    show_table(run.timing_rows(), "packing-run", "pack_times", "timings")
    st.caption(
        f"Median of 3 interleaved runs on this machine (4 heads, head dim 32, fp32, {backend_info()['label']}). The "
        f"padded side is the fastest single call that gives every real token the right answer ({run.baseline}); the "
        "materialized [B, 1, Lmax, Lmax] mask is slower still. The ideal is the attention work saved. On a busy "
        "machine every call waits for CPU threads, which favours the padded side's single call."
    )
    st.markdown("**Split back into requests** with `bias.split(out)` — one output per request, original lengths:")
    show_table(run.segment_rows(), "packing-segments", "pack_segments", "segments")

    st.subheader("Where packing starts to pay")
    prose(PAGE, "Where it pays")
    with st.spinner("Timing packed vs padded as the padding grows …"):
        sweep = run_or_stop(_sweep, causal)
    cross = sweep.crossover_pct
    show_chart(
        figure(
            charts_attention.packing_sweep,
            sweep.padding_pct,
            sweep.packed_ms,
            sweep.padded_ms,
            cross,
            f"{lab.SWEEP_BATCH} requests, the longest {lab.SWEEP_LONGEST} tokens: packed vs padded as padding grows",
            f"padded ({sweep.baseline})",
            stats.padding_pct,
        ),
        (
            f"Measured on this machine: one request of {lab.SWEEP_LONGEST} tokens and {lab.SWEEP_SHORTER} shorter "
            "ones. "
            + (
                "Packed was not faster at any measured point. "
                if cross is None
                else f"Packed is faster from about {cross:.0f}% padding on. "
            )
            + "Left of the crossover the padded call's one big launch beats packed's per-sequence overhead; to the "
            "right, the padded call computes scores for padding and packing saves that work. The dotted line is the "
            "padding of your batch above (its times are in the table above)."
        ),
        sweep.rows(),
        "packing-sweep",
        "pack_sweep",
        summary=sweep.summary(stats.padding_pct),
    )


lesson_section(_calculator)

sources(PAGE)
lesson_check(PAGE)
