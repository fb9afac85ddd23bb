"""The KV-across-GPUs section, shown by lesson 2: each GPU's share of the KV heads per tensor-parallel size.

`tensor_parallel_section(page_id)` lays out lessons/labs/tensor_parallel.py's table for a model and a GPU the
learner picks; its prose is lessons/sections/tensor_parallel.md. Widget keys start with the page id.
"""

from __future__ import annotations

import streamlit as st

from engine.memory.footprint import NCCL_EXTRA_BYTES, non_torch_bytes
from engine.memory.units import GiB
from lessons import content
from lessons.labs import choices
from lessons.labs import tensor_parallel as lab
from ui.errors import show_error
from ui.memo import memo

PROSE = "tensor_parallel"  # lessons/sections/tensor_parallel.md
MODELS = ("llama-3-70b", "llama-3.1-405b", "qwen2.5-72b", "llama-3-8b", "llama-2-70b")
GPUS = ("h100-sxm", "a100-80gb", "h200", "a100-40gb", "l4")


@memo(max_entries=64)
def _table(model: str, gpu: str) -> lab.TpTable:
    return lab.tp_table(model, gpu)


def tensor_parallel_section(page_id: str) -> None:
    """KV heads, KV bytes per token and the KV pool per GPU at TP 1..16 for one model on one GPU type."""
    prose = content.load_section(PROSE)
    st.subheader(prose.title)
    st.markdown(prose.sections[content.INTRO])
    with st.expander("Sources on tensor parallelism and KV", expanded=False):
        st.markdown(prose.sections["Sources"])
    c1, c2 = st.columns(2)
    model = c1.selectbox("Model", MODELS, key=f"{page_id}_tp_model", format_func=choices.model_name)
    gpu = c2.selectbox("GPU", GPUS, key=f"{page_id}_tp_gpu", format_func=choices.gpu_name)
    try:
        table = _table(model, gpu)
    except ValueError as exc:
        show_error(f"The table could not be built: {exc}", "pick a model and a GPU from the lists")
        return
    st.markdown(table.summary())
    st.dataframe(table.rows(), hide_index=True, key=f"{page_id}_tp_table")
    for tp, why in table.refused:
        st.caption(f"TP {tp}: {why}")
    st.caption(
        "One row per TP size on GPUs of this type, with vLLM V1's start-up sizing per GPU; 'tokens in the pool' "
        f"is 0 where the weights leave no room. Non-torch memory: {non_torch_bytes(1) / GiB:.2f} GiB, plus "
        f"{NCCL_EXTRA_BYTES / GiB:.2f} GiB of NCCL buffers per GPU from TP 2 on (one published pair of logs: "
        "an estimate)."
    )
