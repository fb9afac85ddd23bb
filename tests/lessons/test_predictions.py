"""Predict-then-observe exercises (lessons/predictions.py): answers against independent arithmetic, input checks."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lessons import predictions
from ui.course import LESSON_IDS

KiB, GiB = 1024, 1024**3

# Each answer worked out by hand from published numbers (config.json files, the H100 datasheet), not the engine.
EXPECTED = {
    "bandwidth": 8.030e9 * 2 / 3.35e12 * 1e3,  # Llama-3-8B bf16 weights / H100 SXM bandwidth, in ms (4.79)
    "gqa": 2 * 32 * 8 * 128 * 2 / KiB,  # Llama-3-8B: 32 layers, 8 KV heads, head dim 128, bf16 -> 128 KiB
    "packing": 100 * (4 * 32 - (8 + 16 + 4 + 32)) / (4 * 32),  # 53.125 % of the padded slots
    "fragmentation": 2048 - (200 + 300),  # 1,548 slots past the request's final length
    "paged": math.ceil(1000 / 16),  # 63 blocks
    "diagnosis": 16 * 8192 * 128 * KiB / GiB,  # 16 GiB
}


def test_every_lesson_but_the_review_has_an_exercise():
    assert predictions.PAGES == tuple(p for p in LESSON_IDS if p != "golden_rules")
    with pytest.raises(ValueError, match="no prediction exercise for page 'golden_rules'"):
        predictions.for_page("golden_rules")


@pytest.mark.parametrize("page", sorted(EXPECTED))
def test_answers_match_the_hand_arithmetic(page):
    pred = predictions.for_page(page)
    assert pred.answer == pytest.approx(EXPECTED[page], rel=1e-9)
    assert pred.page_id == page and pred.prompt.endswith("?") and pred.working and pred.why
    assert predictions.check(page, pred.answer).close  # the engine's own number is right


@pytest.mark.parametrize("page", sorted(EXPECTED))
def test_feedback_says_how_far_off_and_shows_the_working(page):
    pred = predictions.for_page(page)
    value = min(pred.answer * 3 + 1, pred.max_value)  # a share is at most 100 %
    high = predictions.check(page, value)
    assert not high.close and high.feedback.startswith("Off") and "too high" in high.feedback
    assert "Working:" in high.feedback and "Why it matters:" in high.feedback
    assert high.error == pytest.approx(value - pred.answer)
    low = predictions.check(page, 0)
    assert not low.close and "too low" in low.feedback
    assert low.record() == {"value": 0.0, "answer": pred.answer, "close": False}


def test_distance_in_units_percent_and_factor():
    r = predictions.check("gqa", 120)
    assert not r.close and "8 KiB (6%) too low" in r.feedback and "128 KiB" in r.feedback
    assert "384 KiB too high (4.0× off)" in predictions.check("gqa", 512).feedback
    assert predictions.check("gqa", 128).feedback.startswith("Close — you predicted 128 KiB; the engine says 128 KiB.")
    near = predictions.check("bandwidth", 5.0)  # within 15 % of 4.79 ms
    assert near.close and "within tolerance" in near.feedback


@pytest.mark.parametrize(
    ("page", "value", "slip"),
    [
        ("gqa", 512, "query heads"),  # MHA count: the calculator error
        ("gqa", 64, "K or V, not both"),
        ("gqa", 4, "one layer"),
        ("paged", 62, "rounded down"),
        ("packing", 100 - EXPECTED["packing"], "share of real tokens"),
        ("fragmentation", 1848, "left out the generated tokens"),
        ("diagnosis", 64, "query heads"),
        ("bandwidth", 2 * 8.030e9 / 989e12 * 1e3, "time of the arithmetic"),
    ],
)
def test_common_mistakes_are_named(page, value, slip):
    result = predictions.check(page, value)
    assert not result.close and "Likely slip:" in result.feedback and slip in result.feedback


def test_exact_answers_need_the_exact_count():
    assert predictions.check("paged", 63).close and not predictions.check("paged", 64).close
    assert not predictions.check("fragmentation", 1547).close


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, "no prediction yet"),
        ("", "no prediction yet"),
        ("   ", "no prediction yet"),
        ("abc", "'abc' is not a number"),
        (True, "is not a finite number"),
        (float("nan"), "not a finite number"),
        (float("inf"), "not a finite number"),
        (-1, "is negative"),
        (-0.5, "is negative"),
        (1e12, "beyond any plausible answer"),
        (10_000_001, "check the unit: the question asks for KiB"),
        ([128], "not a finite number"),
    ],
)
def test_bad_inputs_get_a_clear_message(value, message):
    with pytest.raises(ValueError, match=message):
        predictions.check("gqa", value)


def test_text_input_with_separators_is_read():
    assert predictions.check("fragmentation", "1,548").close


@settings(deadline=None, max_examples=60)
@given(st.sampled_from(sorted(EXPECTED)), st.floats(0, 1, allow_nan=False))
def test_close_means_within_the_stated_tolerance(page, fraction):
    pred = predictions.for_page(page)
    value = fraction * min(3 * pred.answer, pred.max_value)
    result = predictions.check(page, value)
    assert result.close == (abs(value - pred.answer) <= abs(pred.answer) * pred.rel_tol + 1e-9)
    assert result.feedback.startswith("Close" if result.close else "Off")


def test_a_share_above_100_percent_is_refused_and_shares_read_as_percent():
    with pytest.raises(ValueError, match="200% is beyond any plausible answer"):
        predictions.check("packing", 200)
    feedback = predictions.check("packing", 40).feedback
    assert feedback.startswith("Off — you predicted 40%, 13.1 percentage points (25%) too low; the engine says 53.1%.")


@pytest.mark.parametrize("typed", ["1_000", "١٢", "１２", "1e3", "inf", "nan", "0x10", "12\u200f"])
def test_a_typed_prediction_takes_ascii_digits_only(typed):
    with pytest.raises(ValueError, match="is not a number; type digits only"):
        predictions.validate(predictions.for_page("gqa"), typed)


def test_a_typed_prediction_reads_plain_numbers():
    pred = predictions.for_page("gqa")
    assert [predictions.validate(pred, t) for t in ("12", " 1,024 ", "1.5", ".5")] == [12.0, 1024.0, 1.5, 0.5]


def test_an_absurd_prediction_gets_a_short_message():
    with pytest.raises(ValueError, match="beyond any plausible answer") as caught:
        predictions.validate(predictions.for_page("gqa"), 1e308)
    assert len(str(caught.value)) < 200 and "1e+308" in str(caught.value)


def test_a_saved_prediction_gives_back_its_number_or_none():
    record = predictions.check("gqa", 128).record()
    assert predictions.saved_value(record) == 128.0 and isinstance(predictions.saved_value(record), float)
    assert predictions.saved_value({"value": 3}) == 3.0  # JSON may bring an int back
    for damaged in (None, {}, {"value": "128"}, {"value": True}, {"value": None}, [128], "128"):
        assert predictions.saved_value(damaged) is None, damaged
