"""A live round against the lesson's prediction (lessons/live.py): histogram bins, slip groups, the learner's line."""

import dataclasses
import math

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from lessons import live, predictions

VALUES = st.floats(0, live.MAX_VALUE, allow_nan=False)


def holds(b: live.Bin, v: float, last: bool) -> bool:
    return b.low <= v < b.high or (last and b.low <= v <= b.high)


def check_bins(bins: tuple[live.Bin, ...], values: list[float], include: float | None = None) -> None:
    """Every value in exactly one bin, the counts those of the values, the bins contiguous and increasing."""
    assert 1 <= len(bins) <= live.MAX_BINS
    assert sum(b.count for b in bins) == len(values)
    for v in values:
        inside = [i for i, b in enumerate(bins) if holds(b, v, i == len(bins) - 1)]
        assert len(inside) == 1, (v, bins)
    for i, b in enumerate(bins):
        assert b.count == sum(holds(b, v, i == len(bins) - 1) for v in values)
    for a, b in zip(bins, bins[1:], strict=False):
        assert a.high == b.low and a.low < a.high
    if include is not None:
        assert any(holds(b, include, i == len(bins) - 1) for i, b in enumerate(bins))


@settings(deadline=None, max_examples=150)
@given(st.lists(VALUES, min_size=1, max_size=40), st.none() | VALUES)
@example([1.0], 0.0)  # a zero answer to include: the range reaches 0
@example([1.0000000000000002e-06, 1e-06], None)  # a float's rounding apart: one bin
@example([5e-324, 1e12], None)  # the smallest float and the largest answer
def test_every_answer_lands_in_exactly_one_bin(values, include):
    bins = live.histogram(values, include)
    check_bins(bins, values, include)
    assert live.histogram(list(values), include) == bins  # deterministic


def mantissa(x: float) -> float:
    """x's leading digits (0.000999999… from a subtraction reads as 1)."""
    return round(x / 10 ** math.floor(math.log10(x) + 1e-9), 6)


@settings(deadline=None, max_examples=80)
@given(st.lists(st.floats(1e-6, 1e9, allow_nan=False) | st.just(0.0), min_size=1, max_size=30))
def test_edges_are_round_numbers_linear_or_log_by_the_span(values):
    bins = live.histogram(values)
    positive = [v for v in values if v > 0]
    edges = [b.low for b in bins if b.low > 0] + [bins[-1].high]
    if not positive:
        assert bins == (live.Bin(0.0, 0.0, len(values), "0"),)
        return
    if 0 in values and bins[0].low == 0 and bins[0].high <= min(positive):
        assert bins[0].label == "0" and bins[0].count == values.count(0)  # zeros: their own first bin
    if max(positive) > live.LOG_SPAN * min(positive):  # log: 1, 2, 5 × 10ⁿ or whole powers of ten
        assert bins[0].label == "0" or 0 not in values
        assert {mantissa(e) for e in edges} <= {1, 2, 5}
        assert all(b / a >= 2 for a, b in zip(edges, edges[1:], strict=False))
    else:  # linear: one round width, every edge a multiple of it
        widths = [b.high - b.low for b in bins if b.label != "0"]
        assert max(widths) == pytest.approx(min(widths), rel=1e-9)
        assert mantissa(widths[0]) in {1, 2, 2.5, 5}
        assert all(abs(e / widths[0] - round(e / widths[0])) < 1e-6 for e in edges)


def test_bins_read_like_a_teacher_would_draw_them():
    linear = live.histogram([120, 125, 131, 140, 138])  # a 1.2× span: linear, 2 wide (20 ÷ 11 rounded up)
    assert [b.label for b in linear] == [f"{lo}–{lo + 2}" for lo in range(120, 142, 2)]
    assert [b.count for b in linear] == [1, 0, 1, 0, 0, 1, 0, 0, 0, 1, 1]
    same = live.histogram([128] * 5)
    assert same == (live.Bin(120.0, 140.0, 5, "120–140"),)
    spread = live.histogram([0, 0, 4, 64, 512, 900])  # a 225× span: log bins, the zeros first
    assert [(b.label, b.count) for b in spread] == [
        ("0", 2),
        ("2–5", 1),
        ("5–10", 0),
        ("10–20", 0),
        ("20–50", 0),
        ("50–100", 1),
        ("100–200", 0),
        ("200–500", 0),
        ("500–1,000", 2),
    ]
    assert [b.label for b in live.histogram([1e-3, 5e8])][:3] == ["0.001–0.01", "0.01–0.1", "0.1–1"]
    assert live.histogram([]) == () and live.histogram([0, 0]) == (live.Bin(0.0, 0.0, 2, "0"),)


def test_bins_hide_the_answer_until_the_reveal_then_cover_it():
    values = [1600, 1708, 1720, 2000]  # DeepSeek-V3's num_key_value_heads slip, not its 68.6 KiB latent
    before = live.class_round("gqa", values, revealed=False)
    assert before.bins == live.histogram(values) and before.answer is None and before.groups == ()
    assert before.bins[0].low > 68.625
    after = live.class_round("gqa", values, revealed=True)
    assert after.answer == 68.625 and after.bins == live.histogram(values, 68.625)
    assert after.bins[0].low <= 68.625 < after.bins[0].high and sum(b.count for b in after.bins) == 4
    empty = live.class_round("gqa", [], revealed=True)
    assert empty.bins == () and empty.answers == 0
    assert empty.groups == (live.SlipGroup("close", "close (within 2%)", 0, 0.0),)


@pytest.mark.parametrize("page", live.PAGES)
def test_each_trap_is_its_slip_the_answer_close_and_far_values_other(page):
    pred = predictions.for_page(page)
    for i, trap in enumerate(pred.traps):
        assert live.slip_of(page, trap.value) == (f"slip:{i}", trap.slip)
    assert live.slip_of(page, pred.answer)[0] == "close"
    known = [pred.answer, *(t.value for t in pred.traps)]
    for far in (max(known) * 1.7, max(known) * 9, min(known) * 0.6):
        assert live.slip_of(page, far) == ("other", live.OTHER_LABEL), far


@settings(deadline=None, max_examples=200)
@given(st.sampled_from(live.PAGES), st.data())
def test_the_group_is_what_check_says(page, data):
    pred = predictions.for_page(page)
    near = [pred.answer, *(t.value for t in pred.traps)]
    value = data.draw(
        st.floats(0, min(3 * pred.answer, pred.max_value))
        | st.sampled_from(near).flatmap(lambda v: st.floats(v * 0.95, min(v * 1.05, pred.max_value)))
    )
    key, label = live.slip_of(page, value)
    result = predictions.check(page, value)
    assert (key == "close") == result.close
    slips = [t for t in pred.traps if f"Likely slip: {t.feedback}." in result.feedback]
    if key.startswith("slip:"):
        assert slips == [pred.traps[int(key[5:])]] and label == slips[0].slip
    else:
        assert slips == [] and "Likely slip" not in result.feedback


@settings(deadline=None, max_examples=60)
@given(st.sampled_from(live.PAGES), st.data())
def test_groups_count_every_answer_once_in_order(page, data):
    pred = predictions.for_page(page)
    pool = st.sampled_from([pred.answer, *(t.value for t in pred.traps)]) | st.floats(0, 3 * pred.answer)
    values = data.draw(st.lists(pool, min_size=1, max_size=30))
    cr = live.class_round(page, values, revealed=True)
    assert cr.answers == len(values) and sum(g.count for g in cr.groups) == len(values)
    assert math.fsum(g.share for g in cr.groups) == pytest.approx(1.0)
    assert cr.groups[0].key == "close" and all(g.count > 0 for g in cr.groups[1:])
    slips = [g for g in cr.groups if g.key.startswith("slip:")]
    assert [g.count for g in slips] == sorted((g.count for g in slips), reverse=True)
    assert all(g.key != "other" for g in cr.groups[:-1])
    for g in cr.groups:
        assert g.count == sum(live.slip_of(page, v)[0] == g.key for v in values)
        assert g.share == g.count / len(values)


def test_a_class_round_is_hashable_and_equal_for_equal_answers():
    a = live.class_round("diagnosis", [16, 64, 17.18, 8, 0], True)
    b = live.class_round("diagnosis", (16.0, 64.0, 17.18, 8.0, 0.0), True)
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert [g.label for g in a.groups] == [
        "close (within 5%)",
        "counted query heads instead of KV heads",
        "GB instead of GiB",
        "K or V, not both",
        "other",
    ]
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.answers = 3  # type: ignore[misc]


def test_the_summary_says_the_round_and_the_answer_only_once_revealed():
    values = [1700, 1708, 1720, 1900, 137.25]
    hidden = live.class_round("gqa", values, False).summary()
    assert (
        hidden
        == "5 answers, most often 1,000–2,000 KiB (4); the engine's answer is hidden until the teacher reveals it."
    )
    shown = live.class_round("gqa", values, True).summary()
    assert "the engine: 68.62 KiB" in shown and "; stored the latent twice, as K and V: 1 (20%)" in shown
    assert "close: 0 (0%)" in shown and "read num_key_value_heads: 3 (60%)" in shown and "other: 1 (20%)" in shown
    assert live.class_round("paged", [], False).summary().startswith("No answers yet;")


def test_the_learner_line_before_and_after_the_reveal():
    values = [1708, 1708, 68.6, 137.25, 7]
    before = live.class_round("gqa", values, False)
    line = live.learner_line("gqa", 1708, before)
    assert (
        line == "You said 1,708 KiB. The engine's answer stays hidden until the teacher reveals it (5 answers so far)."
    )
    assert "68.6" not in live.learner_line("gqa", None, before)
    after = live.class_round("gqa", values, True)
    assert live.learner_line("gqa", 1708, after) == (  # the slip a class meets on MLA models
        "You said 1,708 KiB: read num_key_value_heads, like 2 of 5 answers (40%). "
        "The engine: 68.62 KiB. The class: 5 answers, 1 close (20%)."
    )
    assert live.learner_line("gqa", 7, after).startswith("You said 7 KiB: none of the known slips, like 1 of 5")
    assert live.learner_line("gqa", None, after).startswith("No answer from you this round. The engine: 68.62 KiB.")
    share = live.class_round("packing", [53.125, 40], True)
    assert live.learner_line("packing", 53.125, share).startswith("You said 53.1%: close (within 5%), like 1 of 2")
    assert live.learner_line("paged", 63, live.class_round("paged", [], True)).endswith("The class: no answers.")


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: live.class_round("golden_rules", [1], False), "no prediction exercise for page 'golden_rules'"),
        (lambda: live.class_round("gqa", [float("nan")], False), "answer nan is not a finite number"),
        (lambda: live.class_round("gqa", [-1], False), "answer -1.0 is outside 0..1e"),
        (lambda: live.class_round("gqa", [True], False), "answer True is not a finite number"),
        (lambda: live.histogram([1], float("inf")), "answer inf is not a finite number"),
        (lambda: live.slip_of("gqa", 2e12), "outside 0..1e"),
        (lambda: live.learner_line("paged", 1, live.class_round("gqa", [], True)), "round is on 'gqa', not 'paged'"),
    ],
)
def test_bad_arguments_are_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()
