"""Lesson 6's "At GPU scale (simulated)" section: the simulator's rate sweep on a chosen GPU, and the learner's
own config.json beside it (ui/own_config.py). A section module so the page stays a list of sections."""

from __future__ import annotations

import streamlit as st

from lessons.labs import choices
from lessons.labs import pressure as lab
from ui import charts_pressure
from ui.chart_view import show_chart
from ui.figure_cache import figure
from ui.linked_view import LinkedView
from ui.memo import memo
from ui.own_config import own_config_box
from ui.prose import prose


@memo(max_entries=16)
def gpu_sweep(gpu: str) -> lab.GpuSweep:
    """The simulated rate sweep on one GPU (lessons.labs.pressure.gpu_sweep), shared by every learner."""
    return lab.gpu_sweep(gpu)


def gpu_scale_section(page: str, view: LinkedView) -> None:
    """The GPU select box (a linked setting: `view` publishes it), the simulated sweep's chart and the paste box."""
    st.subheader("At GPU scale (simulated)")
    prose(page, "At GPU scale")
    gpu = st.selectbox(
        "GPU (simulator)",
        lab.GPU_CHOICES,
        key=view.keys["gpu"],
        format_func=choices.gpu_name,
        help=f"{lab.GPU_REQUESTS} ShareGPT-like requests of {lab.GPU_MODEL}, max_model_len {lab.GPU_MAX_MODEL_LEN:,}, "
        f"gpu_memory_utilization {lab.GPU_UTILIZATION}.",
    )
    view.publish()
    sim = gpu_sweep(gpu)
    show_chart(
        figure(charts_pressure.gpu_sweep, sim.points, f"Simulated: {sim.model_name} on {sim.gpu_name}"),
        f"The simulator (lessons.sim over the engine's BlockManager and preemption rule, roofline step time; not "
        f"measured): {sim.capacity_tokens:,} KV tokens, the same trace at each request rate. Preemptions (hatched "
        "bars), p95 queue time (solid) and peak KV usage (dashed).",
        sim.rows(),
        f"pressure-gpu-{gpu}",
        "pr_gpu",
        summary=sim.summary(),
    )
    st.caption(
        f"The sweep above serves {lab.GPU_MAX_MODEL_LEN:,}-token requests of {sim.model_name}; paste your model's "
        "config.json below to see its KV per token and what one such request holds."
    )
    own_config_box(page, "bf16", lab.GPU_MAX_MODEL_LEN)
