"""Lesson 5 — PagedAttention: block-size sweep, block tables from the real allocator, copy-on-write, V1 prefix cache."""

from typing import Any

import streamlit as st

from lessons.labs import paged as lab
from lessons.labs import paged_kernel
from ui import charts_memory
from ui.chart_view import metric_row, show_chart
from ui.downloads import show_table
from ui.errors import run_or_stop
from ui.figure_cache import frozen_figure
from ui.hybrid_view import hybrid_section
from ui.linked_view import linked_view
from ui.memo import memo
from ui.prose import page_header, prose, sources
from ui.quiz import lesson_check
from ui.router import lesson_section

PAGE = "paged"


@memo
def _kernel() -> lab.KernelFit:
    """The paged kernel timed once per block size on this machine (shared by every learner of this server)."""
    return lab.measure_kernel()


@memo
def _sweep(max_context: int) -> lab.BlockSizeSweep:
    # a + b / block size fitted to the timings: one noisy point cannot move it
    return lab.sweep(max_context, kernel=_kernel().fitted)


@memo
def _picture(block_size: int) -> lab.PoolPicture:
    return lab.allocator_picture(block_size)


@memo
def _sharing(block_size: int) -> tuple[lab.SharingStage, ...]:
    return tuple(lab.sharing_demo(block_size))


# Figures are built once per setting and shared read-only (ui.memo: no copy on each re-run; nothing mutates
# them after this point). Building a plotly figure costs more than the page's cached calculations.
@memo(max_entries=64)
def _sweep_fig(max_context: int, block_size: int) -> Any:
    return frozen_figure(charts_memory.block_size_sweep(_sweep(max_context).points, block_size))


@memo(max_entries=64)
def _throughput_fig(max_context: int, block_size: int) -> Any:
    return frozen_figure(charts_memory.block_size_throughput(_sweep(max_context).points, block_size))


@memo(max_entries=32)
def _tables_fig(block_size: int) -> Any:
    p = _picture(block_size)
    title = f"Block tables ({block_size}-token blocks)"
    return frozen_figure(charts_memory.block_table_picture(p.tables, p.fills, block_size, title))


@memo(max_entries=128)
def _pool_fig(block_size: int, stage: int | None, title: str) -> Any:
    p = _picture(block_size) if stage is None else _sharing(block_size)[stage].picture
    return frozen_figure(charts_memory.block_pool_grid(p.blocks, p.block_size, title, columns=8))


def _pool(picture: lab.PoolPicture, stage: int | None, title: str, name: str, key: str) -> None:
    show_chart(
        _pool_fig(picture.block_size, stage, title),
        "Every physical block of the pool: its state (free / cached / used / shared — written in the cell, "
        "not only coloured), the sequences that own it, ×N for its reference count and its filled slots.",
        picture.block_rows(),
        name,
        key,
        summary=charts_memory.pool_summary(picture.blocks),
    )


page_header(PAGE)


def _calculator() -> None:
    """The lesson's settings, numbers and charts: a widget here re-runs only this (ui.router.lesson_section)."""
    view = linked_view(PAGE)  # block_size and max_context come from the URL; the widgets write them back

    c1, c2 = st.columns(2)
    block_size = c1.select_slider(
        "Block size (tokens per KV block)",
        options=paged_kernel.BLOCK_SIZES,
        key=view.keys["block_size"],
        help="vLLM v0.34.0's default is 64 (16 until v0.33). Its --block-size takes any positive number, but its GPU "
        "attention backends need a multiple of 16: FlashAttention (its first choice on NVIDIA GPUs before "
        "Blackwell), FlashInfer, Triton and ROCm's. FlashInfer's kernels run 16, 32 or 64 and ROCm's AITER "
        "FlashAttention 16 or 32; a larger multiple of 16 is split into those. "
        "Use the arrow keys to move the slider.",
    )
    max_context = c2.select_slider(
        "Max context (max_model_len)",
        options=lab.MAX_CONTEXTS,
        key=view.keys["max_context"],
        help="The longest sequence the server accepts: it sets the block-table width and the trace's lengths.",
    )
    view.publish()

    with st.spinner("Timing the paged kernel per block size, then replaying the trace once per block size …"):
        swept = run_or_stop(_sweep, max_context, hint="pick a max context from the slider")
    row = run_or_stop(swept.row, block_size, hint="pick a block size from the slider")
    best = swept.peak()
    m1, m2, m3, m4 = metric_row(4)
    m1.metric(
        "Internal waste", f"{row.internal_waste_pct:.2f}%", help="allocated slots holding no token, step-averaged"
    )
    m2.metric("Block-table entries", f"{row.entries_per_sequence:.1f}", help="per sequence at its end, mean")
    m3.metric("Table width (max entries)", f"{row.table_width:,}")
    m4.metric("KV utilization", f"{row.utilization_pct:.1f}%")
    m5, m6, m7, m8 = metric_row(4)
    m5.metric(
        "Kernel cost vs best block size (fitted)",
        f"{row.kernel_cost:.2f}×",
        help="the paged decode kernel timed on this machine at this block size / at its fastest one",
    )
    m6.metric("Tokens/s (kernel cost charged)", f"{row.tokens_per_s:,.0f}")
    m7.metric("Best block size here", f"{best.block_size}")
    m8.metric("vLLM accepts this block size", row.vllm_accepts)
    if row.vllm_accepts != "yes":
        st.warning(
            f"vLLM would not run {block_size}-token blocks on a GPU: its config takes any positive block size, "
            "but its attention backends (FlashAttention, FlashInfer, Triton, ROCm's) need a multiple of 16."
        )
    st.markdown(
        f"With **{block_size}-token blocks**, only the last block of a sequence can be partly empty: at most "
        f"{row.max_idle_per_sequence} idle slots per sequence, {row.internal_waste_pct:.2f}% of the allocated KV "
        "on this "
        f"trace. A {max_context:,}-token sequence needs up to {row.table_width:,} table entries "
        f"({row.table_bytes:,} bytes of int32 per sequence); the average request here ends with "
        f"{row.entries_per_sequence:.1f}."
    )
    show_chart(
        _sweep_fig(max_context, block_size),
        f"The same ShareGPT-like trace (150 requests, Llama-2-13B shape on an A100 40GB, {max_context:,}-token max) "
        "paged with each block size and the same KV bytes: internal waste (solid, left axis) falls as blocks shrink "
        "while block-table entries (dashed, right axis, log scale) grow. The dotted line is the chosen block size.",
        swept.rows(),
        f"paged-block-size-sweep-{max_context}",
        "paged_sweep",
        summary=charts_memory.block_size_sweep_summary(swept.points, block_size),
    )
    prose(PAGE, "Block size")
    kernel = _kernel()
    show_chart(
        _throughput_fig(max_context, block_size),
        f"Tokens/s of the same trace when each step's KV reads cost what the project's paged attention costs at "
        "that block size on this machine: a per-token plus a per-block cost fitted to its timings (right axis: "
        f"the fitted time over the cheapest block size; the raw timings are in the table below; {kernel.seqs} "
        f"sequences × {kernel.context:,} cached tokens, the demo model's heads, blocks scattered over the pool; "
        "on a CPU one thread, charged its CPU time). "
        f"Peak here: {best.block_size}-token blocks. Dotted bars: not a multiple of 16, so accepted by vLLM's config "
        "but not by its GPU attention backends. The left axis starts near the lowest bar, not at zero.",
        swept.rows(),
        f"paged-block-size-throughput-{max_context}",
        "paged_throughput",
        summary=charts_memory.block_size_throughput_summary(swept.points, block_size),
    )
    if (note := kernel.note(swept)) is not None:
        st.info(note, icon=":material/info:")
    with st.expander("The paged kernel, timed per block size on this machine", expanded=False):
        show_table(kernel.rows(), "paged-kernel-per-block-size", "paged_kernel", "kernel timings")

    st.subheader("Logical → physical: block tables from the real allocator")
    prose(PAGE, "Block tables")
    picture = run_or_stop(_picture, block_size)
    for note in picture.notes:
        st.markdown(f"- {note}")
    show_chart(
        _tables_fig(block_size),
        "Each row is a running sequence's block table; each cell names the physical block (→ id) that holds that "
        "logical block and how many of its slots hold tokens. Consecutive logical blocks sit in scattered physical "
        "blocks: no contiguous reservation is needed.",
        picture.table_rows(),
        f"block-tables-{block_size}",
        "paged_tables",
        summary=charts_memory.block_tables_summary(picture.tables, picture.fills, block_size),
    )
    _pool(picture, None, f"The physical pool ({picture.num_blocks} blocks)", f"block-pool-{block_size}", "paged_pool")
    st.caption(
        f"Allocated slots {picture.allocated_slots:,}, holding tokens {picture.used_slots:,}: "
        f"{picture.idle_slots:,} idle slots, all in the sequences' last blocks. "
        "Drawn from engine.core.block_manager.BlockManager.snapshot()."
    )

    st.subheader("Sliding windows: blocks behind the window go back to the pool")
    prose(PAGE, "Sliding windows")
    window = lab.window_blocks(block_size)
    show_table(window.rows(), f"window-blocks-{block_size}", "paged_window", "blocks per sequence")
    st.caption(
        f"{window.model_name}, block size {block_size}, during decode: full attention keeps every block; with the "
        f"{window.window:,}-token window the engine frees the blocks behind it, so one sequence holds the same few "
        "blocks at any length (engine/core/sliding_window.py, which counts them the same way as vLLM V1)."
    )

    hybrid_section(block_size)

    st.subheader("Sharing: the paper's copy-on-write and V1's prefix cache")
    prose(PAGE, "Sharing")
    stages = run_or_stop(_sharing, block_size)
    show_table([s.row() for s in stages], f"sharing-{block_size}", "paged_sharing", "sharing steps")
    stage = st.select_slider(
        "Show the pool after step",
        options=list(range(len(stages))),
        value=2,
        format_func=lambda i: stages[i].label,
        key="paged_stage",
    )
    chosen = stages[stage]
    st.markdown(f"**{chosen.title}**")
    if chosen.copies:
        st.info(
            "Copy-on-write: "
            + ", ".join(f"block {s} was copied to block {d}" for s, d in chosen.copies)
            + " before the write, so the other sharer still reads the old contents.",
            icon=":material/content_copy:",
        )
    _pool(
        chosen.picture,
        stage,
        f"Pool after: {chosen.label}",
        f"sharing-pool-{block_size}-{stage}",
        "paged_spool",
    )


lesson_section(_calculator)

sources(PAGE)
lesson_check(PAGE)
