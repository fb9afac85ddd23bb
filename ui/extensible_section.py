"""Lesson 7's "vLLM v0.34's default" section: one server's KV cache estimated (0.92) and measured (the default).

`extensible_section(page_id)` shows what lessons/labs/extensible.py computes for the model, GPU and utilization the
learner picks: the two sizings' KV blocks side by side, their terms in a table, and the start-up lines v0.34.0
prints for the measured path. Its prose is lessons/sections/extensible_kv.md. Widget keys start with the page id.
"""

from __future__ import annotations

import streamlit as st

from lessons import content
from lessons.labs import extensible as lab
from lessons.labs.choices import gpu_name, model_name
from ui.errors import show_error
from ui.memo import memo

PROSE = "extensible_kv"  # lessons/sections/extensible_kv.md


@memo(max_entries=64)
def _compare(model: str, gpu: str, utilization: float | None) -> lab.SizingComparison:
    return lab.compare(model, gpu, lab.DEFAULTS["max_model_len"], utilization)


def _utilization_label(u: float | None) -> str:
    return "unset (1.0, the default)" if u is None else f"{u:g}"


def extensible_section(page_id: str) -> None:
    """The comparison's widgets, numbers, table and log lines."""
    prose = content.load_section(PROSE)
    st.subheader(prose.title)
    st.markdown(prose.sections[content.INTRO])
    with st.expander("Sources on the extensible KV cache", expanded=False):
        st.markdown(prose.sections["Sources"])
    models, gpus = lab.MODEL_CHOICES, lab.GPU_CHOICES
    c1, c2, c3 = st.columns(3)
    model = c1.selectbox(
        "Model",
        models,
        index=models.index(lab.DEFAULTS["model"]),
        key=f"{page_id}_ext_model",
        format_func=model_name,
    )
    gpu = c2.selectbox(
        "GPU", gpus, index=gpus.index(lab.DEFAULTS["gpu"]), key=f"{page_id}_ext_gpu", format_func=gpu_name
    )
    utilization = c3.selectbox(
        "--gpu-memory-utilization (measured path)",
        lab.UTILIZATIONS,
        key=f"{page_id}_ext_util",
        format_func=_utilization_label,
    )
    try:
        result = _compare(model, gpu, utilization)
    except ValueError as exc:
        show_error(f"{exc}", "pick a larger GPU or a smaller model")
        return
    est, meas = result.estimate, result.measured
    cols = st.columns(3)
    cols[0].metric("KV blocks, estimate at 0.92", f"{est.num_blocks:,}")
    cols[1].metric("KV blocks, measured (v0.34.0)", f"{meas.num_blocks:,}", f"{result.gain_blocks:+,}")
    cols[2].metric("KV difference", f"{result.gain_gib:+.2f} GiB")
    st.dataframe(result.rows(), hide_index=True, key=f"{page_id}_ext_table")
    st.caption(
        f"{model_name(model)} on one {gpu_name(gpu)}, max_model_len {est.max_model_len:,}, "
        f"{est.max_num_batched_tokens:,} batched tokens, CUDA graphs on. Blocks of {est.block_size} tokens "
        "(vLLM v0.34.0's default)."
    )
    st.code("\n".join(meas.log_lines()), language=None, wrap_lines=True)
