"""Today's models on lessons 2 and 4 (AppTest): `?model=deepseek-v3` opens lesson 2 on MLA and 68.6 KiB per token;
the MLA section's precision radio and TP chart; lesson 4's hybrid chart for gpt-oss-120b and Gemma 3 27B.

Reference numbers from the published configs: DeepSeek-V3 61 layers x (512 + 64) latent x 2 bytes = 70,272 bytes
(68.6 KiB); a calculator reading num_key_value_heads 128 x (7168 / 128) gets 1,748,992 (25x). gpt-oss-120b at 128k
tokens: 18 full layers keep every token, 36,864 bytes each, instead of 36 layers' 73,728."""

from __future__ import annotations

import pytest

from tests.app.conftest import open_chart_tables


def metric(at, prefix: str) -> str:
    return next(m.value for m in at.metric if m.label.startswith(prefix))


@pytest.fixture(scope="module")
def gqa(app_test):
    at = app_test("gqa", timeout=120)
    at.query_params["model"] = "deepseek-v3"
    at.run()
    assert not at.exception and not at.error
    return at


def test_a_deep_link_opens_lesson_2_on_mla(gqa):
    assert gqa.selectbox(key="gqa_model").value == "deepseek-v3"
    assert any(m.label == "KV per token (MLA)" for m in gqa.metric)
    assert metric(gqa, "KV per token (MLA)") == "68.6 KiB"
    assert metric(gqa, "Buggy calculator (num_key_value_heads)") == "1,708 KiB"
    assert any(
        m.value.startswith("**61 layers × (512 kv_lora_rank + 64 qk_rope_head_dim) × 2 bytes = 70,272")
        for m in gqa.markdown
    )
    assert not [s for s in gqa.select_slider if s.key.startswith("gqa_groups_")]  # MLA has no KV heads to group
    gqa.number_input(key="gqa_context").set_value(32_768)
    gqa.number_input(key="gqa_users").set_value(1).run()
    assert metric(gqa, "KV at context") == f"{70_272 * 32_768 / 2**30:,.2f} GiB"  # 2.14 GiB


def test_the_mla_section_moves_with_its_precision(gqa):
    for dtype, per_token in (("fp8", "35,136"), ("bf16", "70,272")):
        gqa.radio(key="gqa_mla_dtype").set_value(dtype).run()
        assert not gqa.exception
        assert any(f"stores {per_token} bytes" in m.value for m in gqa.markdown)
    tp = next(d.value for d in open_chart_tables(gqa).dataframe if "tensor parallel" in d.value.columns)
    assert list(tp["tensor parallel"]) == [1, 2, 4, 8]
    assert (
        list(tp["DeepSeek-V3 (MLA), KiB per token per GPU"]) == [68.62] * 4
        or list(tp["DeepSeek-V3 (MLA), KiB per token per GPU"]) == [68.63] * 4
    )
    assert list(tp["Llama-3.1-70B (GQA), KiB per token per GPU"]) == [320.0, 160.0, 80.0, 40.0]


def test_switching_between_mla_and_gqa_models(gqa):
    for model in ("kimi-k2", "gpt-oss-120b", "gemma-3-27b", "qwen3-next-80b-a3b", "llama-4-scout", "llama-3-8b"):
        gqa.selectbox(key="gqa_model").set_value(model).run()
        assert not gqa.exception and not gqa.error, model


def test_lesson_4_draws_the_hybrid_chart(app_test):
    at = app_test("fragmentation", timeout=120)
    at.run()
    assert not at.exception
    summary = next(m.value for m in at.markdown if "falls below the all-full one at" in m.value)
    assert "gpt-oss-120b's per-kind line falls below the all-full one at 4,241 tokens" in summary
    rows = next(
        d.value for d in open_chart_tables(at).dataframe if "per kind, as vLLM allocates (GiB)" in d.value.columns
    )
    gpt = rows[rows["model"] == "gpt-oss-120b"]
    last = gpt.iloc[-1]
    assert last["context (tokens)"] == 131_072
    assert last["all layers full (GiB)"] == pytest.approx(131_072 * 73_728 / 2**30)
    at.radio(key="fragmentation_hybrid_dtype").set_value("fp8").run()
    assert not at.exception
    rows = next(
        d.value for d in open_chart_tables(at).dataframe if "per kind, as vLLM allocates (GiB)" in d.value.columns
    )
    assert rows[rows["model"] == "gpt-oss-120b"].iloc[-1]["all layers full (GiB)"] == pytest.approx(
        131_072 * 36_864 / 2**30
    )
