"""Lesson 2 page (AppTest) and its arithmetic + live run (lessons/labs/gqa.py)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from streamlit.testing.v1 import AppTest

from engine.memory.catalog import MODELS
from kernels.reference import attention_ref
from lessons.labs import gqa as lab
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
    assert metric(at, "KV per token").endswith("KiB") and "MQA" in next(m.label for m in at.metric)
    run_table = next(d.value for d in at.dataframe if "K+V MiB read" in d.value.columns)
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


@pytest.mark.parametrize(
    ("model", "kib"),
    [("llama-2-7b", 512), ("llama-2-70b", 320), ("llama-3-8b", 128), ("llama-3.1-405b", 504), ("qwen2.5-7b", 56)],
)
def test_real_configs_match_published_kv_per_token(model, kib):
    spec = MODELS[model]
    fp = lab.footprint(model, spec.num_kv_heads, "bf16", 1000, 3)
    assert fp.bytes_per_token == kib * KiB
    assert fp.total_bytes == kib * KiB * 3000
    assert fp.overcount == spec.num_heads // spec.num_kv_heads  # the calculator bug


@settings(deadline=None, max_examples=40)
@given(st.integers(1, 256))
def test_group_options_are_exactly_the_divisors(n):
    opts = lab.group_options(n)
    assert opts == sorted(d for d in range(1, n + 1) if n % d == 0)
    assert opts[0] == 1 and opts[-1] == n


def test_footprint_rows_and_bad_input():
    rows = lab.footprint_rows("llama-3-8b", "fp8", 100, 1)
    assert [r["kind"] for r in rows] == ["MQA", "GQA-2", "GQA-4", "GQA-8", "GQA-16", "MHA"]
    assert rows[-1]["KiB per token"] == 2 * 32 * 32 * 128 / KiB  # fp8: 1 byte per element
    with pytest.raises(ValueError, match="do not divide 32"):
        lab.footprint("llama-3-8b", 5)
    with pytest.raises(ValueError, match="users"):
        lab.footprint("llama-3-8b", 8, users=0)
    with pytest.raises(ValueError, match="KV dtype"):
        lab.footprint("llama-3-8b", 8, kv_dtype="fp64")


@pytest.mark.parametrize(("heads", "groups"), [(8, 8), (8, 2), (6, 1)])
def test_live_gqa_run_matches_reference_and_reads_fewer_kv_bytes(heads, groups):
    run = lab.run_gqa(heads, groups, head_dim=16, seq_len=12, repeats=1, device=DEVICE)
    per_group = heads // groups
    assert run.query_shape == (1, 12, groups, per_group, 16)
    assert per_group == 1 or run.key_stride[3] == 0  # K/V expanded over H without a copy
    assert run.max_abs_err < TOL
    assert run.mha_kv_bytes == per_group * run.gqa_kv_bytes
    # Independent check of the same computation through the plain-torch reference.
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 12, groups, per_group, 16, generator=gen)
    k = torch.randn(1, 12, groups, 1, 16, generator=gen)
    v = torch.randn(1, 12, groups, 1, 16, generator=gen)
    from engine.attention.fmha import memory_efficient_attention

    out = memory_efficient_attention(q, k.expand_as(q), v.expand_as(q))
    ref = attention_ref(q[0].flatten(1, 2), k[0, :, :, 0], v[0, :, :, 0])  # [M, Hq, K] vs KV [N, G, K]
    torch.testing.assert_close(out[0].flatten(1, 2), ref, atol=1e-5, rtol=1e-5)


def test_layout_shapes_name_every_dimension():
    shapes = lab.layout_shapes(32, 8, 128, 64)
    assert shapes["query"] == "[B=1, M=64, G=8, H=4, K=128]"
    assert "stride 0" in shapes["key / value (as the kernel sees them)"]
    with pytest.raises(ValueError, match="use one of"):
        lab.layout_shapes(32, 3, 128, 64)


def test_a_sliding_window_model_shows_its_capped_kv(app_test):
    at = app_test("gqa", timeout=120)
    at.run()
    at.selectbox(key="gqa_model").set_value("mistral-7b").run()
    assert not at.exception
    assert any("sliding-window attention (window 4,096 tokens)" in i.value for i in at.info)
    at.selectbox(key="gqa_model").set_value("llama-3-8b").run()
    assert not any("sliding-window" in i.value for i in at.info)
