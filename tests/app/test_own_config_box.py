"""The "your model's config.json" paste box (ui/own_config.py) on every calculator page (AppTest).

A real config (meta-llama/Meta-Llama-3-8B's published numbers) reads back as 2 · 32 layers · 8 KV heads · 128 ·
2 bytes = 131,072 bytes per token; a broken one gets a message naming the field; a hostile one stays text (no
Markdown, HTML or Streamlit directive is rendered) and an oversize paste is refused with its size."""

from __future__ import annotations

import json

import pytest

from lessons.labs.own_config import MAX_CONFIG_CHARS
from ui.own_config import key

LLAMA_3_8B = {
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "max_position_embeddings": 8192,
    "vocab_size": 128256,
}
HOSTILE = "**bold** <img src=x onerror=alert(1)> :red[red] [link](https://evil.example) $x$"


def shown_table(at) -> dict[str, str]:
    """The parsed model's table (figure -> value), from the page's dataframes."""
    for frame in at.dataframe:
        if "figure" in frame.value.columns:
            return dict(zip(frame.value["figure"], frame.value["value"], strict=True))
    raise AssertionError("no parsed-model table on the page")


def rendered(at) -> str:
    """Every Markdown, caption and alert body the page rendered, joined."""
    parts = [e.value for group in (at.markdown, at.caption, at.error, at.warning, at.info, at.success) for e in group]
    return "\n".join(str(p) for p in parts)


@pytest.fixture(scope="module")
def frag(app_test):
    at = app_test("fragmentation", timeout=120)
    at.run()
    assert not at.exception
    return at


def test_a_good_config_is_read_back(frag):
    frag.text_area(key=key("fragmentation")).set_value(json.dumps(LLAMA_3_8B)).run()
    assert not frag.exception and not frag.error
    table = shown_table(frag)
    assert table["KV per token (bf16)"] == "131,072 bytes = 128.0 KiB"
    assert table["layers (num_hidden_layers)"] == "32" and table["attention"] == "GQA"
    assert any("128.0 KiB of KV per token in bf16" in m.value for m in frag.markdown)


def test_a_broken_config_names_the_field(frag):
    broken = {k: v for k, v in LLAMA_3_8B.items() if k != "num_hidden_layers"}
    frag.text_area(key=key("fragmentation")).set_value(json.dumps(broken)).run()
    assert not frag.exception
    assert len(frag.error) == 1 and "num_hidden_layers" in frag.error[0].value
    frag.text_area(key=key("fragmentation")).set_value('{"num_hidden_layers": 32,').run()
    assert not frag.exception and "not valid JSON" in frag.error[0].value


def test_a_hostile_config_stays_text(frag):
    # a bad value that the error message quotes back, and a good config whose free-text fields are hostile
    frag.text_area(key=key("fragmentation")).set_value(json.dumps({**LLAMA_3_8B, "num_attention_heads": HOSTILE})).run()
    assert not frag.exception and len(frag.error) == 1
    body = frag.error[0].value
    assert "num_attention_heads" in body
    for piece in ("<img", "**bold**", ":red[red]", "[link](", "$x$"):
        at = body.find(piece)
        assert at != -1 and body[:at].count("`") % 2 == 1, (piece, body)  # quoted inside a code span
    named = {**LLAMA_3_8B, "_name_or_path": HOSTILE, "architectures": [HOSTILE]}
    frag.text_area(key=key("fragmentation")).set_value(json.dumps(named)).run()
    assert not frag.exception and not frag.error
    assert "onerror" not in rendered(frag) and "evil.example" not in rendered(frag)
    assert not any("onerror" in str(v) for v in shown_table(frag).values())


def test_an_oversize_paste_is_refused(frag):
    huge = json.dumps({**LLAMA_3_8B, "pad": "x" * MAX_CONFIG_CHARS})
    frag.text_area(key=key("fragmentation")).set_value(huge).run()
    assert not frag.exception
    assert len(frag.error) == 1 and f"{MAX_CONFIG_CHARS:,}" in frag.error[0].value
    frag.text_area(key=key("fragmentation")).set_value("").run()
    assert not frag.exception and not frag.error
    assert not any("figure" in d.value.columns for d in frag.dataframe)


@pytest.mark.parametrize("page", ["bandwidth", "gqa", "pressure", "diagnosis"])
def test_every_calculator_has_the_box(app_test, page):
    at = app_test(page, timeout=180)
    at.run()
    box = at.text_area(key=key(page))
    assert "config.json" in box.label
    box.set_value(json.dumps(LLAMA_3_8B)).run()
    assert not at.exception
    assert shown_table(at)["KV per token (bf16)"] == "131,072 bytes = 128.0 KiB"
