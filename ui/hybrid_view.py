"""Lesson 5's hybrid-model section: a sliding KV-cache group hands blocks back, live, beside the full group.

The run is lessons.labs.hybrid_engine (the real engine serving a tiny 1-full + 1-sliding Qwen2), cached per block
size and window for every learner of this server; the chart is ui.charts_memory.hybrid_groups.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from lessons.labs import hybrid_engine as hybrid
from ui import charts_memory
from ui.chart_view import metric_row, show_chart
from ui.errors import run_or_stop
from ui.figure_cache import frozen_figure
from ui.memo import memo


@memo(max_entries=64)
def _run(block_size: int, window: int) -> hybrid.HybridRun:
    return hybrid.hybrid_run(block_size, window)


@memo(max_entries=64)
def _figure(block_size: int, window: int) -> Any:
    return frozen_figure(charts_memory.hybrid_groups(_run(block_size, window)))


def hybrid_section(block_size: int) -> None:
    """The section: its window slider, three numbers, the live chart with its summary and table."""
    st.subheader("Hybrid models: one pool, a block table per kind of layer")
    st.markdown(
        "Models such as gpt-oss and Gemma 3 mix full-attention layers with sliding-window layers. vLLM V1 gives each "
        "kind its own KV-cache group and block table over one shared pool (vllm/v1/core/kv_cache_utils.py); a "
        "sliding group frees the blocks that fell out of its window as the request advances "
        "(vllm/v1/core/single_type_kv_cache_manager.py, `SlidingWindowManager.remove_skipped_blocks`). Below, the "
        "engine serves a tiny Qwen2 whose `layer_types` are one full and one sliding layer: a 160-token prompt in "
        "32-token chunks, then 40 new tokens."
    )
    window = st.select_slider(
        "Sliding window (tokens)",
        options=hybrid.WINDOWS,
        value=hybrid.DEFAULT_WINDOW,
        key="paged_hybrid_window",
        help="How many tokens back the sliding layer sees. Use the arrow keys to move the slider.",
    )
    with st.spinner("Running the engine on the hybrid model …"):
        run = run_or_stop(_run, block_size, window, hint="pick a window from the slider")
    m1, m2, m3 = metric_row(3)
    m1.metric("Full group's blocks at the end", f"{run.steps[-1].full_blocks}")
    m2.metric("Sliding group's blocks at the end", f"{run.steps[-1].sliding_blocks}")
    m3.metric("Blocks the sliding group gave back", f"{run.given_back}")
    show_chart(
        _figure(block_size, window),
        f"Each engine step of one request on the real engine ({block_size}-token blocks, a pool of "
        f"{run.num_blocks} blocks shared by both groups): the full group's blocks grow with the context, the sliding "
        "group's stay at the few its window needs, and the pool's free blocks show what the sliding group returned. "
        "Drawn from each step's StepTrace (group_block_tables).",
        run.rows(),
        f"hybrid-groups-{block_size}-{window}",
        "paged_hybrid",
        summary=run.summary(),
    )
