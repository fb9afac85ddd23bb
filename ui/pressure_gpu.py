"""Lesson 6's "At GPU scale (simulated)" section below its GPU select box: the simulator's rate sweep on that GPU
for a model the learner picks (the catalog's, today's included, or their own pasted config.json), and the paste
box beside it (ui/own_config.py). A section module so the page stays a list of sections."""

from __future__ import annotations

import streamlit as st

from engine.memory.catalog import MODELS, ModelSpec
from lessons.labs import own_config
from lessons.labs import pressure as lab
from ui import charts_pressure
from ui.chart_view import show_chart
from ui.errors import show_error
from ui.figure_cache import figure
from ui.memo import memo
from ui.own_config import key as paste_key
from ui.own_config import own_config_box

MODEL_KEY = "pr_gpu_model"  # the section's model select box
OWN = "__own_config__"  # the select box's "your config.json" choice
MODEL_CHOICES: tuple[str, ...] = tuple(k for k in MODELS if k != "demo")


@memo(max_entries=16)
def gpu_sweep(gpu: str, model: str | ModelSpec = lab.GPU_MODEL) -> lab.GpuSweep:
    """The simulated rate sweep on one GPU for one model (lessons.labs.pressure.gpu_sweep), shared by every learner;
    a pasted model is keyed by its parsed spec (a frozen dataclass)."""
    return lab.gpu_sweep(gpu, model)


def pasted_spec(page: str) -> ModelSpec | None:
    """The model the page's paste box holds, when it parses (the box itself shows why when it does not)."""
    try:
        parsed = own_config.read_config(st.session_state.get(paste_key(page)) or "")
    except ValueError:
        return None
    return None if parsed is None else parsed.spec


def _model_label(choice: str) -> str:
    return own_config.OWN_NAME if choice == OWN else MODELS[choice].name


def gpu_scale_section(page: str, gpu: str) -> None:
    """The simulated sweep's chart on the GPU the page's (linked) select box chose, and the paste box."""
    own = pasted_spec(page)
    options = MODEL_CHOICES + ((OWN,) if own is not None else ())
    if st.session_state.get(MODEL_KEY) not in options:  # the first run, or the paste was cleared or broken
        st.session_state[MODEL_KEY] = lab.GPU_MODEL  # the default: the page's evidence is unchanged
    choice = st.selectbox(
        "Model to simulate",
        options,
        key=MODEL_KEY,
        format_func=_model_label,
        help="The catalog's models, today's included; paste a config.json below to simulate your own.",
    )
    if own is None:
        st.caption("Paste a config.json that reads (below) and “your config.json” joins this list.")
    model = own if choice == OWN else choice
    try:
        sim = gpu_sweep(gpu, model)
    except ValueError as exc:
        show_error(exc, "pick a bigger GPU above, or a smaller model")
    else:
        show_chart(
            figure(charts_pressure.gpu_sweep, sim.points, f"Simulated: {sim.model_name} on {sim.gpu_name}"),
            f"The simulator (lessons.sim over the engine's BlockManager and preemption rule, roofline step time; "
            f"not measured): {sim.pool()}, the same trace at each request rate. Preemptions "
            "(hatched bars), p95 queue time (solid) and peak KV usage (dashed).",
            sim.rows(),
            f"pressure-gpu-{gpu}" if choice == lab.GPU_MODEL else f"pressure-gpu-{gpu}-{choice.strip('_')}",
            "pr_gpu",
            summary=sim.summary(),
        )
    st.caption(
        f"The sweep above serves {lab.GPU_MAX_MODEL_LEN:,}-token requests of {_model_label(choice)}; paste your "
        "model's config.json below to see its KV per token and what one such request holds."
    )
    own_config_box(page, "bf16", lab.GPU_MAX_MODEL_LEN)
