"""The KV-precision section's widgets, shared by lessons 2 and 7: choose the KV cache precision, see a real run.

`kv_precision_section(page_id)` lays out what lessons/labs/kv_precision.py measures (cached per process):
the demo model run twice on the same prompts and the same KV byte budget, once with a full-precision cache
and once with vLLM's fp8 cache; the choice then shows its KV bytes per token, the blocks and tokens the
budget holds, and what fp8 costs (top-1 agreement with full precision, largest logit difference, identical
greedy generations). Its prose is lessons/sections/kv_precision.md. Widget keys start with the page id, so
two pages never share state.
"""

from __future__ import annotations

import streamlit as st

from lessons import content
from lessons.labs import kv_precision as lab
from ui.errors import show_error
from ui.memo import memo

PROSE = "kv_precision"  # lessons/sections/kv_precision.md


@memo(max_entries=4)
def _compare(model: str) -> lab.PrecisionRun:
    """The lab's comparison, once per model per process (a pure function of its arguments)."""
    return lab.compare(model, lab.PAGE_PROMPTS, lab.PAGE_MAX_TOKENS)


def kv_precision_section(page_id: str, model: str = "demo") -> None:
    """The KV-precision choice with its measured bytes, capacity and agreement (model: 'demo' or a folder)."""
    prose = content.load_section(PROSE)
    st.subheader(prose.title)
    st.markdown(prose.sections[content.INTRO])
    with st.expander("Sources on KV cache precision", expanded=False):
        st.markdown(prose.sections["Sources"])
    names = {"auto": "full precision (auto)", "fp8": "fp8 (e4m3 + scales)"}
    choice = st.radio(
        "KV cache precision", lab.CHOICES, key=f"{page_id}_kv_precision", horizontal=True, format_func=names.get
    )
    ran = st.session_state.get(f"{page_id}_kv_precision_ran", False)
    if st.button("Run both caches on the engine", key=f"{page_id}_kv_precision_run"):
        st.session_state[f"{page_id}_kv_precision_ran"] = ran = True
    if not ran:
        st.caption(f"Runs {len(lab.PAGE_PROMPTS)} prompts x {lab.PAGE_MAX_TOKENS} tokens twice (a few seconds).")
        return
    try:
        with st.spinner("Running the engine with both KV caches…"):
            result = _compare(model)
    except (ValueError, FileNotFoundError) as exc:
        show_error(f"The engine run failed: {exc}", "install the demo model (python -m scripts.train_demo) or retry")
        return
    shown = result.summary(choice)
    cols = st.columns(3)
    cols[0].metric("KV bytes / token", f"{shown.pool.kv_bytes_per_token:,}")
    cols[1].metric("Tokens in the budget", f"{shown.pool.token_capacity:,}")
    cols[2].metric("Blocks in the budget", f"{shown.pool.num_gpu_blocks:,}")
    if shown.price is not None:
        cols = st.columns(3)
        cols[0].metric("Top-1 agreement", f"{shown.price.top1_agreement:.1%}")
        cols[1].metric("Max |logit difference|", f"{shown.price.max_logit_error:.3f}")
        cols[2].metric("Identical generations", f"{shown.price.identical_generations} / {shown.price.num_prompts}")
    st.dataframe(result.rows(), hide_index=True, key=f"{page_id}_kv_precision_table")
    st.caption(
        f"Same {result.budget_mib:g} MiB KV budget for both. fp8 holds {result.blocks_ratio:.0f}x "
        f"the blocks of this model's {result.auto.kv_cache_dtype} cache (2x of bf16 on a GPU); along "
        f"full precision's greedy path its top token agrees at {result.price.top1_agreement:.1%} of "
        f"{result.price.positions} positions."
    )
