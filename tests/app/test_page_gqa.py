"""Lesson 2 page (AppTest): the group slider moves the KV numbers, every widget at its extremes, the window note."""

import pytest
from streamlit.testing.v1 import AppTest

from engine.memory.catalog import MODELS
from lessons.labs import gqa as lab
from tests.app.conftest import open_chart_tables
from tests.conftest import DEVICE

KiB = 1024
TOL = 1e-5 if DEVICE == "cpu" else 2e-2  # Triton's fp32 dots may use TF32 on a GPU


def metric(at: AppTest, prefix: str) -> str:
    return next(m.value for m in at.metric if m.label.startswith(prefix))


def number(text: str) -> float:
    return float(text.split()[0].replace(",", ""))


@pytest.fixture(scope="module")
def at(app_test):
    app = app_test("gqa", timeout=30)
    app.run()
    assert not app.exception and not app.error
    return app


def test_kv_bytes_drop_by_the_group_factor(at):
    at.selectbox(key="gqa_model").set_value("llama-3-8b").run()
    slider = at.select_slider(key="gqa_groups_llama-3-8b")
    assert list(slider.options) == ["1", "2", "4", "8", "16", "32"]  # divisors of 32 only
    assert slider.value == 8  # the model's real KV-head count
    real = number(metric(at, "KV per token"))
    assert real == 128  # Llama-3-8B: 128 KiB per token at bf16
    slider.set_value(32).run()
    mha = number(metric(at, "KV per token"))
    at.select_slider(key="gqa_groups_llama-3-8b").set_value(1).run()
    mqa = number(metric(at, "KV per token"))
    assert (mha / real, real / mqa) == (4, 8)
    formula = next(m.value for m in at.markdown if m.value.startswith("**2 × "))
    assert formula.startswith("**2 × 32 layers × 1 KV heads × 128 head dim × 2 bytes = 16,384 bytes per token.**")
    assert "instead gets 524,288 bytes — 32× too much at G = 1" in formula
    sharing = next(d.value for d in open_chart_tables(at).dataframe if "query head" in d.value.columns)
    assert list(sharing["KV head"]) == [0] * 32  # MQA: every query head reads the one KV head
    layout = next(d.value for d in open_chart_tables(at).dataframe if "tensor" in d.value.columns)
    assert layout["shape"].iloc[0] == "[B=8, M=1, G=1, H=32, K=128]"  # 8 sequences x 1 query, 32 heads per group
    assert metric(at, "KV per token").endswith("KiB") and "MQA" in next(m.label for m in at.metric)
    run_table = next(d.value for d in open_chart_tables(at).dataframe if "K+V MiB read" in d.value.columns)
    for shape in ("decode", "prefill"):  # at G = 1 (MQA) the MHA model's cache holds 32x the K/V bytes
        gqa, mha = run_table[run_table["shape"] == shape]["K+V MiB read"].tolist()
        assert mha == 32 * gqa
    assert "32×" in next(c.value for c in at.caption if "MiB of K+V" in c.value)


def test_context_users_dtype_and_models_at_extremes(at):
    at.select_slider(key="gqa_groups_llama-3-8b").set_value(8)
    at.number_input(key="gqa_context").set_value(1)
    at.number_input(key="gqa_users").set_value(1).run()
    small = number(metric(at, "KV at context"))
    at.number_input(key="gqa_context").set_value(1_000_000)
    at.number_input(key="gqa_users").set_value(100_000).run()
    assert not at.exception and at.warning  # beyond the trained context: a warning, still computed
    assert number(metric(at, "KV at context")) > small
    at.number_input(key="gqa_context").set_value(8192)
    at.number_input(key="gqa_users").set_value(16)
    for dtype in lab.KV_DTYPES:
        at.selectbox(key="gqa_dtype").set_value(dtype).run()
        assert not at.exception
    for model in (list(MODELS)[0], "qwen2.5-0.5b", "llama-3.1-405b"):
        at.selectbox(key="gqa_model").set_value(model).run()
        assert not at.exception and not at.error
    at.selectbox(key="gqa_dtype").set_value("bf16")
    at.selectbox(key="gqa_model").set_value("qwen2.5-0.5b").run()
    assert [int(o) for o in at.select_slider(key="gqa_groups_qwen2.5-0.5b").options] == [1, 2, 7, 14]
    for seq in (16, 256, 64):
        at.slider(key="gqa_seq").set_value(seq).run()
        assert not at.exception
    radios = [r for r in at.radio if r.key.startswith("quiz_gqa.")]
    q = radios[0]
    q.set_value(q.options[-1]).run()
    assert at.success or at.warning


def test_a_sliding_window_model_shows_its_capped_kv(app_test):
    at = app_test("gqa", timeout=120)
    at.run()
    at.selectbox(key="gqa_model").set_value("mistral-7b").run()
    assert not at.exception
    assert any("sliding-window attention (window 4,096 tokens)" in i.value for i in at.info)
    at.selectbox(key="gqa_model").set_value("llama-3-8b").run()
    assert not any("sliding-window" in i.value for i in at.info)


def test_the_mla_section_is_on_the_page(at):
    """ui/mla_cache.py's section is laid out by the page (its own AppTest: tests/app/test_mla_cache_section.py)."""
    assert at.button(key="gqa_mla_run").label == "Run the latent cache on the engine"
