"""The shared KV-precision section (ui/kv_precision.py) in AppTest, over a tiny model folder.

A two-line script calls `kv_precision_section("gqa", model=<tiny folder>)`; its prose comes from
lessons/sections/kv_precision.md; clicking the run button runs the real engine with both caches, and
switching the radio shows each precision's own measured numbers.
"""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from lessons import content
from tests.tiny_model import make_tiny_model

TEXT = "def add(a, b):\n    return a + b\n" * 20 + "class Stack:\n    pass\n" * 20


@pytest.fixture(scope="module")
def at(tmp_path_factory):
    folder = make_tiny_model(tmp_path_factory.mktemp("tiny_kv"), TEXT)
    script = f"from ui.kv_precision import kv_precision_section\nkv_precision_section('gqa', model={str(folder)!r})\n"
    app = AppTest.from_string(script, default_timeout=120)
    app.run()
    assert not app.exception and not app.error
    return app


def metrics(app: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in app.metric}


def test_nothing_runs_until_the_button(at):
    assert not at.metric and "Runs 4 prompts" in at.caption[0].value


def test_the_prose_is_the_sections_file(at):
    prose = content.load_section("kv_precision")
    assert [h.value for h in at.subheader] == [prose.title]
    assert at.markdown[0].value == prose.sections[content.INTRO] and "--kv-cache-dtype fp8" in at.markdown[0].value
    assert at.expander[0].label == "Sources on KV cache precision"
    assert at.markdown[1].value == prose.sections["Sources"]


def test_fp8_quarters_the_bytes_and_shows_the_agreement(at):
    at.button(key="gqa_kv_precision_run").click().run()
    assert not at.exception and not at.error
    full = metrics(at)
    assert full["KV bytes / token"] == "256" and "Top-1 agreement" not in full  # 2 x 2 layers x 2 heads x 8 x 4 B
    at.radio(key="gqa_kv_precision").set_value("fp8").run()
    assert not at.exception
    fp8 = metrics(at)
    assert fp8["KV bytes / token"] == "64"
    assert int(fp8["Tokens in the budget"].replace(",", "")) == 4 * int(full["Tokens in the budget"].replace(",", ""))
    agreement = float(fp8["Top-1 agreement"].rstrip("%"))
    assert 50.0 <= agreement <= 100.0 and "/ 4" in fp8["Identical generations"]


def test_the_table_and_caption_show_the_shared_budget(at):
    at.button(key="gqa_kv_precision_run").click().run()
    assert not at.exception and not at.error
    (table,) = [d.value for d in at.dataframe]
    # 8 MiB over 16-token blocks: 256 B per token in fp32 (2048 blocks), 64 B in fp8 (8192 blocks).
    assert table.to_dict("records") == [
        {
            "KV precision": "auto (float32)",
            "KV bytes / token": 256,
            "blocks in budget": 2048,
            "tokens in budget": 32768,
            "pool MiB": 8.0,
        },
        {
            "KV precision": "fp8 (float8_e4m3fn)",
            "KV bytes / token": 64,
            "blocks in budget": 8192,
            "tokens in budget": 131072,
            "pool MiB": 8.0,
        },
    ]
    (caption,) = [c.value for c in at.caption if c.value.startswith("Same ")]
    assert caption.startswith("Same 8 MiB KV budget for both. fp8 holds 4x the blocks of this model's float32 cache")
    assert caption.endswith("of 52 positions.")  # 4 prompts x (12 tokens + 1)
