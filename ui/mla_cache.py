"""Lesson 2's MLA section: the engine's paged latent cache on a tiny MLA model, measured beside the formula.

`mla_cache_section(page_id)` lays out lessons/labs/mla_cache.py's run (cached per process): a button serves a
few prompts on a tiny random DeepSeek-V3-shaped model with the real engine, then the section shows the latent
cache's measured bytes per token beside layers x (kv_lora_rank + qk_rope_head_dim) x bytes, and beside the K/V
the same heads would need without the latent; DeepSeek-V3's own numbers follow. Its prose is
lessons/sections/mla_cache.md. Widget keys start with the page id.
"""

from __future__ import annotations

import streamlit as st

from lessons import content
from lessons.labs import mla_cache as lab
from ui.downloads import show_table
from ui.errors import show_error
from ui.memo import memo

PROSE = "mla_cache"  # lessons/sections/mla_cache.md


@memo(max_entries=1)
def _run() -> lab.LatentCacheRun:
    """The lab's run, once per process (a pure function: seeded weights and prompts)."""
    return lab.run_latent_cache()


def mla_cache_section(page_id: str) -> None:
    """The MLA latent cache: run it on the engine, then its measured bytes per token beside the formula."""
    prose = content.load_section(PROSE)
    st.subheader(prose.title)
    st.markdown(prose.sections[content.INTRO])
    with st.expander("Sources on MLA", expanded=False):
        st.markdown(prose.sections["Sources"])
    ran = st.session_state.get(f"{page_id}_mla_ran", False)
    if st.button("Run the latent cache on the engine", key=f"{page_id}_mla_run"):
        st.session_state[f"{page_id}_mla_ran"] = ran = True
    if not ran:
        st.caption(
            f"Serves {len(lab.PROMPT_LENS)} prompts x {lab.MAX_TOKENS} tokens on a 2-layer MLA model (a few seconds)."
        )
        return
    try:
        with st.spinner("Serving prompts over the paged latent cache…"):
            run = _run()
    except ValueError as exc:
        show_error(f"The engine run failed: {exc}", "retry; the model is built in memory, nothing is downloaded")
        return
    cols = st.columns(3)
    cols[0].metric("Measured bytes / token", f"{run.measured_bytes_per_token:,}")
    cols[1].metric("Formula bytes / token", f"{run.formula_bytes_per_token:,}")
    cols[2].metric("Smaller than per-head K/V", f"{run.saving:,.1f}×")
    st.markdown(
        f"**{run.num_layers} layers × ({run.kv_lora_rank} + {run.qk_rope_head_dim}) × {run.element_bytes} bytes = "
        f"{run.formula_bytes_per_token:,} bytes per token**; the engine's cache holds {run.num_blocks} blocks of "
        f"{run.block_size} token rows of shape {list(run.cache_shape)} per layer, {run.pool_bytes:,} bytes, and "
        f"served {run.tokens_served} tokens from them."
    )
    show_table(run.rows(), f"{page_id}-mla-cache", f"{page_id}_mla_table", "bytes per token")
    latent, expanded = lab.deepseek_v3_bytes_per_token()
    st.caption(
        f"DeepSeek-V3 in bf16: 61 × (512 + 64) × 2 = {latent:,} bytes per token, against {expanded:,} for K and V "
        f"of its 128 heads — {expanded / latent:,.0f}× less."
    )
