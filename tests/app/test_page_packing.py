"""Lesson 3 page (AppTest): the fair baseline's timings and the sweep, guided errors for bad lengths, the toggle."""

import pytest
from streamlit.testing.v1 import AppTest

from lessons.labs import packing as lab
from tests.app.conftest import open_chart_tables
from tests.conftest import DEVICE

TOL = 1e-4 if DEVICE == "cpu" else 2e-2  # Triton's fp32 dots may use TF32 on a GPU


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


@pytest.fixture(scope="module")
def at(app_test):
    app = app_test("packing", timeout=30)
    app.run()
    assert not app.exception and not app.error
    return app


def test_defaults_show_fair_baseline_timings_and_the_sweep(at):
    assert at.text_input(key="pack_lengths").value == lab.DEFAULT_LENGTHS
    shown = metrics(at)
    assert shown["Real tokens"] == "1,607" and shown["Padding wasted"] == "73%"
    assert f"Padded ({lab.BASELINES[True]})" in shown and "Packing speed-up" in shown
    frames = {tuple(d.value.columns): d.value for d in open_chart_tables(at).dataframe}
    timings = next(v for cols, v in frames.items() if "side" in cols and "ms" in cols)
    assert timings["side"].tolist() == [
        "packed (varlen_attention)",
        f"padded, {lab.BASELINES[True]}",
        "padded, materialized mask",
    ]
    sweep = next(v for cols, v in frames.items() if "packed / padded" in cols)
    assert len(sweep) == len(lab.SWEEP_FRACTIONS)
    assert sweep["padding %"].is_monotonic_increasing and sweep["padding %"].iloc[0] == 0
    assert sweep["lengths"].tolist() == [str(lab.sweep_lengths(f)) for f in lab.SWEEP_FRACTIONS]
    bars = next(v for cols, v in frames.items() if "token slots" in cols)
    assert bars["token slots"].tolist() == [6 * 1000, 1607] and bars["padding %"].iloc[0] == pytest.approx(73.22, 0.01)
    caption = next(c.value for c in at.caption if c.value.startswith("Padding 6 requests"))
    assert "to the longest (1000 tokens) needs 6,000 slots for 1,607 real tokens" in caption
    assert any("Packed" in c.value and "padding" in c.value for c in at.caption)  # the crossover, in words


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "empty"),
        ("  ,  ", "empty"),
        ("5, abc, 3", "'abc' is not a whole number"),
        ("2.5", "not a whole number"),
        ("0, 4", "length 0"),
        ("-3", "length -3"),
        ("5000", "length 5000"),
        (", ".join(["1"] * 40), "40 requests"),
        ("1000, 1000, 1000, 1000, 1000", "5000 tokens"),
    ],
)
def test_bad_lengths_show_error_with_guidance(at, text, match):
    at.text_input(key="pack_lengths").set_value(text).run()
    assert not at.exception
    assert len(at.error) == 1 and match in at.error[0].value and "How to fix" in at.error[0].value
    with pytest.raises(ValueError, match=match):
        lab.parse_lengths(text)


def test_lengths_and_causal_toggle_drive_the_numbers(at):
    at.toggle(key="pack_causal").set_value(False)
    at.text_input(key="pack_lengths").set_value("10, 20, 1000").run()
    shown = metrics(at)
    assert not at.error and shown["Real tokens"] == "1,030" and shown["Padded slots"] == "3,000"
    assert shown["Padding wasted"] == "66%"
    full = float(shown["Attention work saved by packing"].rstrip("×"))
    assert full == pytest.approx(3 * 1000**2 / (10**2 + 20**2 + 1000**2), rel=1e-3)
    assert float(shown["Max |packed − padded| on real tokens"]) < TOL
    segments = [row for row in open_chart_tables(at).dataframe if "request" in str(row.value.columns.tolist())]
    assert segments and segments[-1].value["tokens"].tolist() == [10, 20, 1000]
    mask = next(d.value for d in open_chart_tables(at).dataframe if "visible keys" in d.value.columns)
    # 1,030 tokens: the first 256 are drawn; not causal, so query 0 sees all 10 keys of its request
    assert len(mask) == lab.MAX_HEATMAP and mask["visible keys"].iloc[0] == ", ".join(map(str, range(10)))
    at.toggle(key="pack_causal").set_value(True).run()
    assert not at.exception and float(metrics(at)["Max |packed − padded| on real tokens"]) < TOL
    for text in ("1", "7 7 7", "1024, 1024, 1024, 1024", "5, 12, 3, 20"):
        at.text_input(key="pack_lengths").set_value(text).run()
        assert not at.exception and not at.error
    radios = [r for r in at.radio if r.key.startswith("quiz_packing.")]
    radios[0].set_value(radios[0].options[0]).run()
    assert "packing.waste" in at.session_state["progress"]["quiz"]


PAYLOAD = "[click](https://evil.example/x) ![i](https://evil.example/i.png) :material/warning: $x^2$ ``` <b>b</b>"


@pytest.mark.parametrize("text", [f"5, {PAYLOAD}", "5, ６４", "5, 6_4", "64\u200f", "1e3", "9" * 5000])
def test_a_payload_or_odd_number_in_the_lengths_box_gets_an_inert_error(at, text):
    at.text_input(key="pack_lengths").set_value(text).run()
    assert not at.exception
    (error,) = [e.value for e in at.error]
    assert "How to fix" in error
    parser = pytest.importorskip("markdown_it").MarkdownIt("commonmark")
    message = error.split("\n\n**How to fix:**")[0]  # the hint after it is the course's own Markdown
    tokens = [c for b in parser.parse(message) if b.type == "inline" for c in b.children]
    assert {t.type for t in tokens} <= {"text", "code_inline"}, message
    plain = "".join(t.content for t in tokens if t.type == "text")
    assert "evil" not in plain and "$" not in plain and "\u200f" not in error and len(error) < 1000
    with pytest.raises(ValueError):
        lab.parse_lengths(text)


def test_the_lengths_box_holds_at_most_its_limit(at):
    at.text_input(key="pack_lengths").set_value("1," * lab.MAX_TEXT_CHARS).run()
    assert not at.exception
    assert len(at.session_state["pack_lengths"]) == lab.MAX_TEXT_CHARS  # then refused: too many requests
    assert at.error and "requests" in at.error[0].value
    at.text_input(key="pack_lengths").set_value(lab.DEFAULT_LENGTHS).run()
    assert not at.error
