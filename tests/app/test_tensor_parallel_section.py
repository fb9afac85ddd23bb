"""The KV-across-GPUs section (ui/tensor_parallel.py) in AppTest: its table follows the model and GPU chosen."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from engine.memory.catalog import MODELS
from lessons import content
from lessons.labs import tensor_parallel as lab

SCRIPT = "from ui.tensor_parallel import tensor_parallel_section\ntensor_parallel_section('gqa')\n"


def _table(at: AppTest):
    (frame,) = [d.value for d in at.dataframe if "KV heads per GPU" in d.value.columns]
    return frame


def test_the_section_shows_kv_heads_per_gpu_and_follows_its_widgets():
    at = AppTest.from_string(SCRIPT, default_timeout=60)
    at.run()
    assert not at.exception
    prose = content.load_section("tensor_parallel")
    assert at.subheader[0].value == prose.title
    frame = _table(at)
    assert list(frame["TP (GPUs)"]) == [1, 2, 4, 8, 16]
    assert list(frame["KV heads per GPU"]) == [8, 4, 2, 1, 1] and list(frame["copies of each KV head"]) == [1] * 4 + [2]
    text = " ".join(m.value for m in at.markdown)
    assert lab.tp_table("llama-3-70b", "h100-sxm").summary() in text
    at.selectbox(key="gqa_tp_model").set_value("qwen2.5-72b").run()
    at.selectbox(key="gqa_tp_gpu").set_value("a100-40gb").run()
    assert not at.exception
    frame = _table(at)
    want = lab.tp_table("qwen2.5-72b", "a100-40gb")
    assert list(frame["tokens in the pool"]) == [r.tokens_in_pool for r in want.points]
    assert list(frame["KV KiB/token per GPU"]) == [
        2 * 80 * max(1, 8 // tp) * 128 * 2 / 1024 for tp in (1, 2, 4, 8, 16)
    ]  # Qwen2.5-72B: 80 layers, 8 KV heads of 128
    assert MODELS["qwen2.5-72b"].num_kv_heads == 8


def test_a_model_that_fits_only_wide_shows_empty_pools_below():
    at = AppTest.from_string(SCRIPT, default_timeout=60)
    at.run()
    at.selectbox(key="gqa_tp_model").set_value("llama-3.1-405b").run()
    assert not at.exception
    pools = list(_table(at)["tokens in the pool"])
    assert pools[:4] == [0, 0, 0, 0] and pools[4] > 0  # 810 GB of bf16 weights: 16 H100s, not 8
