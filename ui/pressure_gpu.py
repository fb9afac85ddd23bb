"""Lesson 6's "At GPU scale (simulated)" section below its GPU select box: the simulator's rate sweep on that GPU,
and the learner's own config.json beside it (ui/own_config.py). A section module so the page stays a list of
sections."""

from __future__ import annotations

import streamlit as st

from lessons.labs import pressure as lab
from ui import charts_pressure
from ui.chart_view import show_chart
from ui.figure_cache import figure
from ui.memo import memo
from ui.own_config import own_config_box


@memo(max_entries=16)
def gpu_sweep(gpu: str) -> lab.GpuSweep:
    """The simulated rate sweep on one GPU (lessons.labs.pressure.gpu_sweep), shared by every learner."""
    return lab.gpu_sweep(gpu)


def gpu_scale_section(page: str, gpu: str) -> None:
    """The simulated sweep's chart on the GPU the page's (linked) select box chose, and the paste box."""
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
