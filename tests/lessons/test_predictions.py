"""Predict-then-observe exercises (lessons/predictions.py): answers against independent arithmetic, input checks."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.core.block_manager import BlockManager
from engine.core.scheduler import Scheduler, SchedulerConfig
from engine.core.sequence import Sequence
from engine.sampling_params import SamplingParams
from lessons import predictions
from ui.course import LESSON_IDS

KiB, GiB = 1024, 1024**3

# Each answer worked out by hand from published numbers (config.json files, the H100 datasheet), not the engine.
EXPECTED = {
    # Llama-3-8B bf16 weights less the input embedding table (128,256 x 4,096, gathered one row per token; its
    # lm_head is a separate matrix, read whole) / H100 SXM bandwidth, in ms (4.48)
    "bandwidth": (8.030e9 - 128256 * 4096) * 2 / 3.35e12 * 1e3,
    # DeepSeek-V3 (deepseek-ai/DeepSeek-V3 config.json): 61 layers x (kv_lora_rank 512 + qk_rope_head_dim 64) x 2
    # bytes, one latent per token and layer, no V (vLLM's MLAAttentionSpec) -> 70,272 bytes = 68.625 KiB
    "gqa": 61 * (512 + 64) * 2 / KiB,
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
    r = predictions.check("gqa", 64)
    assert not r.close and "4.625 KiB (7%) too low" in r.feedback and "68.62 KiB" in r.feedback
    assert "68.625 KiB too high (2.0× off)" in predictions.check("gqa", 137.25).feedback
    assert predictions.check("gqa", 68.6).feedback.startswith(
        "Close — you predicted 68.6 KiB; the engine says 68.62 KiB: 0.025 KiB (0%) too low, within tolerance."
    )
    near = predictions.check("bandwidth", 4.6)  # within 4 % of 4.48 ms
    assert near.close and "within tolerance" in near.feedback


@pytest.mark.parametrize(
    ("page", "value", "slip"),
    [
        ("gqa", 2 * 61 * 128 * (7168 // 128) * 2 / KiB, "num_key_value_heads"),  # 1,708 KiB: the config's trap
        ("gqa", 61 * 128 * (128 + 64 + 128) * 2 / KiB, "decompressed K and V"),  # 4,880 KiB
        ("gqa", 2 * 61 * 576 * 2 / KiB, "counted the latent twice"),
        ("gqa", 61 * 512 * 2 / KiB, "RoPE key"),  # 61 KiB
        ("gqa", 576 * 2 / KiB, "one layer"),
        ("paged", 62, "rounded down"),
        ("packing", 100 - EXPECTED["packing"], "share of real tokens"),
        ("fragmentation", 1848, "left out the generated tokens"),
        ("diagnosis", 64, "query heads"),
        ("bandwidth", 2 * 8.030e9 / 989e12 * 1e3, "time of the arithmetic"),
        ("bandwidth", (8.030e9 - 128256 * 4096) / 3.35e12 * 1e3, "one byte per parameter"),  # 2.24 ms
        ("bandwidth", 8.030e9 * 2 / 3.35e12 * 1e3, "whole input embedding table"),  # 4.79 ms: every weight
        ("fragmentation", 200 + 300, "the slots the request fills"),
        ("diagnosis", 16 * 8192 * 128 * KiB / 1e9, "(GB); a GiB is 2³⁰ bytes"),  # 17.18 GB
        ("diagnosis", 8, "K or V, not both"),
        ("diagnosis", 1, "one user's KV cache"),
        ("diagnosis", 8.030e9 * 2 / GiB, "that is the weights"),  # 14.96 GiB
    ],
)
def test_common_mistakes_are_named(page, value, slip):
    result = predictions.check(page, value)
    assert not result.close and "Likely slip:" in result.feedback and slip in result.feedback


def test_the_feedback_of_the_older_traps_reads_as_before():
    said = {
        ("gqa", 1708): "you multiplied `num_key_value_heads` (128) by a head dim: MLA caches no per-head K or V, "
        "only the 576-value latent",
        ("paged", 62): "rounded down: the last, partial block still takes a whole block",
        ("pressure", 5): "you divided tokens (384 ÷ 72) and forgot that blocks are whole",
        ("diagnosis", 64): "you counted query heads, not KV heads",
    }
    for (page, value), feedback in said.items():
        parts = predictions.check(page, value).feedback.split("\n\n")
        assert parts[1] == f"Likely slip: {feedback}.", (page, value, parts)


@pytest.mark.parametrize("page", predictions.PAGES)
def test_every_trap_has_a_projector_slip_and_a_feedback_sentence(page):
    traps = predictions.for_page(page).traps
    assert traps and all(isinstance(t, predictions.Trap) for t in traps)
    for t in traps:
        assert 3 <= len(t.slip) <= 40 and not t.slip.endswith(".") and "you" not in t.slip.lower().split()
        assert t.feedback and not t.feedback.endswith(".") and 0 <= t.rel_tol <= 0.02
    assert len({t.slip for t in traps}) == len(traps)


def window(value: float, rel_tol: float) -> tuple[float, float]:
    half = abs(value) * rel_tol + 1e-9
    return value - half, value + half


@pytest.mark.parametrize("page", predictions.PAGES)
def test_no_trap_window_overlaps_another_or_the_close_band(page):
    pred = predictions.for_page(page)
    bands = [("close", *window(pred.answer, pred.rel_tol))]
    bands += [(t.slip, *window(t.value, t.rel_tol)) for t in pred.traps]
    bands.sort(key=lambda b: b[1])
    for (a, _, a_hi), (b, b_lo, _) in zip(bands, bands[1:], strict=False):
        assert a_hi < b_lo, f"{page}: {a!r} reaches into {b!r}"
    for i, t in enumerate(pred.traps):  # each trap's own value is that slip, and not close
        assert not predictions.is_close(pred, t.value) and predictions.trap_index(pred, t.value) == i
        assert t.value <= pred.max_value
    assert predictions.trap_index(pred, pred.answer) is None and predictions.is_close(pred, pred.answer)


def test_a_close_answer_names_no_slip_even_near_a_trap():
    assert "Likely slip" not in predictions.check("paged", 63).feedback  # 62 is the rounded-down trap
    assert "Likely slip" not in predictions.check("diagnosis", 15.3).feedback  # close, near the weights (14.96)
    assert "Likely slip" not in predictions.check("diagnosis", 16.8).feedback  # close, near GB (17.18)


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


def test_the_pressure_working_says_what_the_engine_admits():
    # 16 of the page's requests (48-token prompts, 24 tokens out) arrive at once in its pool of 24 blocks of 16,
    # with seats and token budget to spare: the engine's scheduler admits as many as memory allows in its
    # first step. vLLM V1's rule: each whole prompt's 3 blocks must fit, no watermark, so 24 // 3 = 8.
    sched = Scheduler(SchedulerConfig(16, 16 * 48, 72), BlockManager(24, 16))
    for i in range(16):
        sched.add(Sequence(i, [1] * 48, 16, SamplingParams(max_tokens=24, ignore_eos=True)))
    admitted = len(sched.schedule().admitted)
    assert admitted == 24 // 3 == predictions.admitted_at_once()
    pred = predictions.for_page("pressure")
    assert pred.answer == 24 // 5  # 72 tokens = 5 blocks each at their final length
    assert f"admits {admitted} at once" in pred.working
    assert "counted the prompts' blocks only" in {t.slip for t in pred.traps if t.value == admitted}
    # vLLM's pool keeps a null block: num_gpu_blocks = 24 leaves 23 for requests, 7 prompts
    assert f"num_gpu_blocks = 24 it admits {(24 - 1) // 3}" in pred.working


def test_decode_reads_an_untied_embedding_table_one_row_at_a_time():
    from engine.memory.catalog import GPUS, MODELS
    from engine.memory.footprint import weight_bytes
    from engine.memory.roofline import StepTimeModel

    llama, qwen = MODELS["llama-3-8b"], MODELS["qwen2.5-0.5b"]  # untied; tied (config.json tie_word_embeddings)
    assert not llama.tie_word_embeddings and qwen.tie_word_embeddings
    assert predictions.decode_weight_read_bytes(llama) == (8.030e9 - 128256 * 4096) * 2
    assert predictions.decode_weight_read_bytes(qwen) == weight_bytes(qwen, "bf16")  # the lm_head reads it all
    for m in (llama, qwen):  # the simulator's step time follows the same rule
        assert StepTimeModel.for_model(m, GPUS["h100-sxm"]).weight_bytes == predictions.decode_weight_read_bytes(m)
