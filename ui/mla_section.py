"""Lesson 2's MLA part (lessons/labs/mla.py): the calculator's numbers when the chosen model is an MLA model, and the
"MLA: one latent per token" section (prose, the three readings of DeepSeek-V3's config, tensor parallelism)."""

from __future__ import annotations

import streamlit as st

from lessons.labs import mla as lab
from ui import charts
from ui.chart_view import metric_row, show_chart
from ui.downloads import show_table
from ui.figure_cache import figure
from ui.memo import memo
from ui.prose import prose

SECTION = "MLA: one latent per token"  # the section of lessons/gqa.md


@memo(max_entries=16)
def lesson(model: str, kv_dtype: str) -> lab.MlaLesson:
    """The three readings of one MLA model's config at one KV precision, shared by every learner."""
    return lab.mla_lesson(model, kv_dtype)


def mla_calculator(model: str, kv_dtype: str, context: int, users: int) -> None:
    """The calculator's metrics and formula for an MLA model, in place of the KV-group slider (it has no KV heads
    to group)."""
    found = lesson(model, kv_dtype)
    m1, m2, m3 = metric_row(3)
    m1.metric("KV per token (MLA)", f"{found.kib_per_token:,.1f} KiB")
    m2.metric("KV at context × users", f"{found.total_gib(context, users):,.2f} GiB")
    m3.metric(
        "Buggy calculator (num_key_value_heads)",
        f"{found.readings[1].bytes_per_token / 1024:,.0f} KiB",
        f"{found.overcount(1):,.0f}× too high",
        delta_color="off",
    )
    st.markdown(f"**{found.readings[0].formula} = {found.bytes_per_token:,} bytes per token.**")
    st.info(
        f"{found.name} uses multi-head latent attention: no KV heads to group, so the group slider, the "
        "head-sharing diagram and the 5-D runs are for the GQA models. Every GPU of a tensor-parallel deployment "
        "keeps this whole latent (the MLA section below).",
        icon=":material/compress:",
    )


def mla_section(page: str) -> None:
    """The MLA section: prose, the readings of DeepSeek-V3's config at a chosen precision, the TP chart."""
    st.subheader(SECTION)
    prose(page, SECTION)
    kv_dtype = st.radio("KV cache precision (MLA)", lab.KV_DTYPES, key=f"{page}_mla_dtype", horizontal=True)
    found = lesson(lab.MLA_MODEL, kv_dtype)
    st.markdown(f"**{found.summary()}**")
    show_table(found.rows(), f"mla-readings-{kv_dtype}", f"{page}_mla_readings", "readings")
    show_chart(
        figure(
            charts.lines,
            lab.TP_SIZES,
            lab.tp_series(kv_dtype),
            f"KV per token on each GPU under tensor parallelism ({kv_dtype})",
            "tensor-parallel GPUs",
            "KiB per token per GPU",
        ),
        "Each GPU's KV bytes per token as the tensor-parallel size grows, from the memory model "
        "(vLLM's get_num_kv_heads: KV heads split over the GPUs, 1 latent for MLA).",
        lab.tp_rows(kv_dtype),
        f"mla-tp-{kv_dtype}",
        f"{page}_mla_tp",
        summary=lab.tp_summary(kv_dtype),
    )
