"""Lesson 3 page (AppTest) and its arithmetic + live run (lessons/labs/packing.py)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from streamlit.testing.v1 import AppTest

from kernels.reference import block_diagonal_mask
from lessons.labs import packing as lab
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
    frames = {tuple(d.value.columns): d.value for d in at.dataframe}
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
    segments = [row for row in at.dataframe if "request" in str(row.value.columns.tolist())]
    assert segments and segments[-1].value["tokens"].tolist() == [10, 20, 1000]
    at.toggle(key="pack_causal").set_value(True).run()
    assert not at.exception and float(metrics(at)["Max |packed − padded| on real tokens"]) < TOL
    for text in ("1", "7 7 7", "1024, 1024, 1024, 1024", "5, 12, 3, 20"):
        at.text_input(key="pack_lengths").set_value(text).run()
        assert not at.exception and not at.error
    radios = [r for r in at.radio if r.key.startswith("quiz_packing.")]
    radios[0].set_value(radios[0].options[0]).run()
    assert "packing.waste" in at.session_state["progress"]["quiz"]


@settings(deadline=None, max_examples=40)
@given(st.lists(st.integers(1, 1024), min_size=1, max_size=32), st.sampled_from([", ", " ", ";", ",\n"]))
def test_parse_lengths_round_trips(lengths, sep):
    if sum(lengths) > lab.MAX_TOTAL:
        return
    assert lab.parse_lengths(sep.join(map(str, lengths))) == lengths


@settings(deadline=None, max_examples=40)
@given(st.lists(st.integers(1, 64), min_size=1, max_size=8), st.booleans())
def test_padding_stats_match_brute_force(lengths, causal):
    stats = lab.padding_stats(lengths, causal)
    lmax = max(lengths)
    assert stats.padded_slots == len(lengths) * lmax and stats.real_tokens == sum(lengths)
    mask = block_diagonal_mask(lengths, causal="top_left" if causal else None)
    assert stats.packed_pairs == mask.sum().item()  # exactly the visible score pairs
    per_padded = (torch.ones(lmax, lmax).tril() if causal else torch.ones(lmax, lmax)).sum().item()
    assert stats.padded_pairs == len(lengths) * per_padded
    assert stats.ideal_speedup >= 1


@pytest.mark.parametrize("causal", [False, True])
def test_visibility_matches_reference_mask_and_is_capped(causal):
    lengths = [3, 1, 4]
    ref = block_diagonal_mask(lengths, causal="top_left" if causal else None)
    assert lab.visibility(lengths, causal) == ref.tolist()
    big = lab.visibility([200, 200], causal)
    assert len(big) == lab.MAX_HEATMAP and len(big[0]) == lab.MAX_HEATMAP


@settings(max_examples=10, deadline=None)
@given(st.lists(st.integers(1, 24), min_size=1, max_size=5), st.booleans())
def test_packed_run_agrees_with_padded_and_splits_back(lengths, causal):
    run = lab.run_packed_vs_padded(lengths, causal, num_heads=2, head_dim=8, repeats=1, device=DEVICE)
    assert run.max_abs_err < TOL
    assert run.packed_shape == (sum(lengths), 2, 8)
    assert run.padded_shape == (len(lengths), 2, max(lengths), 8)
    assert [s[1] for s in run.segment_shapes] == lengths
    assert [r["tokens"] for r in run.segment_rows()] == lengths


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
