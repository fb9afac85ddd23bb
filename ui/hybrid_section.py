"""Lesson 4's "Hybrid models" section: one request's KV against its length for gpt-oss-120b and Gemma 3 27B,
the all-full formula against vLLM's per-kind allocation (lessons/labs/hybrid.py)."""

from __future__ import annotations

import streamlit as st

from lessons.labs import hybrid as lab
from ui import charts
from ui.chart_view import show_chart
from ui.figure_cache import figure
from ui.memo import memo
from ui.prose import prose

DTYPES: tuple[str, ...] = ("bf16", "fp8")


@memo(max_entries=4)
def curves(kv_dtype: str) -> tuple[lab.HybridCurve, ...]:
    """Both hybrid models' curves at one KV precision, shared by every learner."""
    return lab.hybrid_curves(kv_dtype)


def hybrid_section(page: str) -> None:
    """The KV precision radio, the chart (summary, caption, table) and the prose around it."""
    st.subheader("Hybrid models: not every layer keeps every token")
    prose(page, "Hybrid models")
    kv_dtype = st.radio("KV cache precision (hybrid chart)", DTYPES, key=f"{page}_hybrid_dtype", horizontal=True)
    found = curves(kv_dtype)
    show_chart(
        figure(
            charts.lines,
            lab.CONTEXTS,
            lab.series(found),
            f"KV of one request against its length ({kv_dtype})",
            "context length (tokens, log scale)",
            "GiB per request",
            log_x=True,
        ),
        "Per model, two lines: every layer charged for every token (the one formula, 2 × layers × KV heads × head "
        "dim × bytes) and what vLLM V1 allocates per layer kind (sliding layers keep their window, whole blocks of "
        f"{lab.BLOCK_SIZE}). Configs: openai/gpt-oss-120b and google/gemma-3-27b-it on Hugging Face.",
        lab.rows(found),
        f"hybrid-kv-{kv_dtype}",
        f"{page}_hybrid",
        summary=lab.summary(found),
    )
