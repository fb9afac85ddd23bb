"""A live classroom round read against the lesson's prediction: the class's answers as histogram bins and, once the
teacher reveals the engine's answer, grouped by the slip each most likely comes from. No Streamlit here.

`class_round(page_id, values, revealed)` turns the class's answers (numbers only, no names: progress/live.py's
`LiveBoard.answers`) into a `ClassRound`, a frozen, hashable value the projector's figures (ui/charts_live.py)
are built from:

- `bins`: at most `MAX_BINS` bins with round edges (1, 2, 2.5 or 5 × 10ⁿ apart on a linear scale; 1, 2, 5 × 10ⁿ
  or whole powers of ten on a log scale, used when the positive answers span more than `LOG_SPAN`×). Zero
  answers get their own first bin, labelled "0", whenever the positive answers' first edge is above 0. Every
  answer lands in exactly one bin: [low, high), the last bin's high end included. Until the reveal the bins
  come from the answers alone — their range must not hint at the engine's answer; after it they cover it too.
- `groups` (after the reveal): "close" when the exercise's `check()` would say close (the same tolerance,
  `predictions.is_close`), "slip:<i>" when the value lies in the window of the prediction's i-th `Trap`,
  else "other". The windows never overlap (tests/lessons/test_predictions.py), so each answer has one group.

`learner_line` is the learner's own sentence under the banner: plain text, numbers formatted as check()'s
feedback formats them. A bad argument (an unknown page, a negative or non-finite answer) is a ValueError
naming the value and the fix.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from numbers import Real

from lessons import predictions
from lessons.predictions import Prediction, amount

PAGES = predictions.PAGES
MAX_BINS = 12  # bars on the projector at most, the zero bin included
LOG_SPAN = 10.0  # positive answers spanning more than this factor get log-spaced bins
MAX_VALUE = 1e12  # as progress/live.py's MAX_ANSWER: anything larger is not a prediction

_LINEAR_STEPS = (1.0, 2.0, 2.5, 5.0)  # a linear bin width is one of these × 10ⁿ
_LOG_LADDERS = ((1, 2, 5), (1,))  # log edges per decade; then one edge every 2, 3, ... decades


@dataclass(frozen=True)
class Bin:
    """One histogram bar: the answers in [low, high) (the last bin also holds `high`); `label` e.g. "120–140"
    (no unit), "0" for the bin of zero answers."""

    low: float
    high: float
    count: int
    label: str


@dataclass(frozen=True)
class SlipGroup:
    """The answers of one group: "close", "slip:<i>" (the i-th trap of the Prediction) or "other"."""

    key: str
    label: str
    count: int
    share: float  # of all answers, 0..1


@dataclass(frozen=True)
class ClassRound:
    """The class's answers on one lesson's prediction, as the projector shows them (counts only, no names)."""

    page_id: str
    unit: str
    prompt: str
    answers: int
    bins: tuple[Bin, ...]  # from the answers only until revealed; after it the range covers the answer too
    revealed: bool
    answer: float | None  # None until revealed
    groups: tuple[SlipGroup, ...]  # () until revealed; "close" first, slips with answers by count, "other" last

    def summary(self) -> str:
        """The round in one sentence, for assistive tech (the answer only once revealed)."""
        if not self.answers:
            head = "No answers yet"
        else:
            top = most_common(self)
            head = f"{_answers(self.answers)}, most often {range_text(top, self.unit)} ({top.count})"
        if not self.revealed or self.answer is None:
            return f"{head}; the engine's answer is hidden until the teacher reveals it."
        parts = "".join(f"; {_name(g)}: {g.count} ({_pct(g.share)})" for g in self.groups) if self.answers else ""
        return f"{head}; the engine: {amount(self.answer, self.unit, 2)}{parts}."


def _name(g: SlipGroup) -> str:
    """A group in a sentence: "close", "other" or the slip's label."""
    return g.key if g.key in ("close", "other") else g.label


def _answers(n: int) -> str:
    return f"{n:,} answer" + ("" if n == 1 else "s")


def _pct(share: float) -> str:
    return f"{100 * share:.0f}%"


def most_common(cr: ClassRound) -> Bin:
    """The bin holding the most answers (the lowest of equals); ValueError when the round has no answers."""
    if not cr.bins:
        raise ValueError(f"round on {cr.page_id!r} has no answers yet, so no bin is the most common")
    return max(cr.bins, key=lambda b: (b.count, -b.low))


def range_text(b: Bin, unit: str) -> str:
    """A bin in prose with its unit: "120–140 KiB", "40–50%", "0 KiB" for the bin of zero answers."""
    if b.label == "0":
        return amount(0, unit)
    return f"{b.label}%" if unit == "%" else f"{b.label} {unit}"


def _check_value(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(float(value)):
        raise ValueError(f"answer {value!r} is not a finite number; pass the learner's checked prediction")
    number = float(value)
    if not 0 <= number <= MAX_VALUE:
        raise ValueError(f"answer {number!r} is outside 0..{MAX_VALUE:g}; pass the learner's checked prediction")
    return number


def _prediction(page_id: str) -> Prediction:
    if page_id not in PAGES:
        raise ValueError(f"no prediction exercise for page {page_id!r}; pages with one: {', '.join(PAGES)}")
    return predictions.for_page(page_id)


# --- bins -----------------------------------------------------------------------------------------------------


def _decimal(mantissa: float, exponent: int) -> float:
    """mantissa × 10**exponent read from its decimal text: 3 × 0.1 is 0.3, not 0.30000000000000004."""
    return float(Decimal(repr(mantissa)).scaleb(exponent))


def edge_text(x: float) -> str:
    """A bin edge for a label, exactly as the edge is: "1,000", "11.25", "0.002", "2.5e-05"."""
    text = repr(float(x))
    if "e" in text or "n" in text:  # below 1e-4 or above 1e16 (or inf): short scientific notation
        return f"{x:.3g}"
    whole, _, fraction = text.partition(".")
    fraction = fraction.rstrip("0")
    return f"{int(whole):,}" + (f".{fraction}" if fraction else "")


def _span(edge: Callable[[int], float], lo: float, hi: float) -> tuple[int, int]:
    """(k_lo, k_hi) for an increasing edge function: edge(k_lo) <= lo < edge(k_lo + 1), and k_hi the first k
    with edge(k) > hi."""
    k = 0
    while edge(k) > lo:
        k -= 1
    while edge(k + 1) <= lo:
        k += 1
    top = k + 1
    while edge(top) <= hi:
        top += 1
    return k, top


def _linear_edges(lo: float, hi: float, bins: int) -> list[float]:
    raw = (hi - lo) / max(bins - 1, 1)
    if raw <= hi * 1e-9:  # one value (or a float's rounding apart): one bin about a tenth of it wide
        raw = hi / 10 or hi
    exponent = math.floor(math.log10(raw))
    while True:
        for m in _LINEAR_STEPS:
            step = _decimal(m, exponent)
            if step < raw:
                continue

            def edge(k: int, m: float = m, exponent: int = exponent) -> float:
                return _decimal(k * m, exponent)

            start = math.floor(lo / step)
            k_lo, k_hi = _span(lambda k, s=start, e=edge: e(s + k), lo, hi)
            if k_hi - k_lo <= bins:
                return [edge(start + k) for k in range(k_lo, k_hi + 1)]
        exponent += 1


def _log_edges(lo: float, hi: float, bins: int) -> list[float]:
    base = math.floor(math.log10(lo))
    ladders = [(m, 1) for m in _LOG_LADDERS] + [((1,), d) for d in range(2, 700)]
    for mantissas, decades in ladders:
        per = len(mantissas)

        def edge(k: int, mantissas: tuple[int, ...] = mantissas, per: int = per, decades: int = decades) -> float:
            return _decimal(float(mantissas[k % per]), (base // decades + k // per) * decades)

        k_lo, k_hi = _span(edge, lo, hi)
        if k_hi - k_lo <= bins:
            return [edge(k) for k in range(k_lo, k_hi + 1)]
    raise AssertionError("unreachable: one edge every 700 decades spans any pair of floats")


def histogram(values: Sequence[float], include: float | None = None) -> tuple[Bin, ...]:
    """The bins of `values` (each in 0..MAX_VALUE); `include` widens the range to cover it without being
    counted (the engine's answer after the reveal). No values: no bins. Deterministic for equal inputs."""
    numbers = [_check_value(v) for v in values]
    if not numbers:
        return ()
    extra = [] if include is None else [_check_value(include)]
    positive = [v for v in numbers + extra if v > 0]
    zeros = sum(1 for v in numbers if v == 0)
    any_zero = bool(zeros) or 0.0 in extra
    if not positive:
        return (Bin(0.0, 0.0, zeros, "0"),)
    lo, hi = min(positive), max(positive)
    room = MAX_BINS - (1 if any_zero else 0)
    edges = _log_edges(lo, hi, room) if hi > LOG_SPAN * lo else _linear_edges(lo, hi, room)
    zero_bin = any_zero and edges[0] > 0
    if zero_bin:
        edges.insert(0, 0.0)
    counts = [0] * (len(edges) - 1)
    for v in numbers:
        counts[min(bisect.bisect_right(edges, v) - 1, len(counts) - 1)] += 1
    return tuple(
        Bin(low, high, n, "0" if zero_bin and i == 0 else f"{edge_text(low)}–{edge_text(high)}")
        for i, (low, high, n) in enumerate(zip(edges[:-1], edges[1:], counts, strict=True))
    )


# --- groups ---------------------------------------------------------------------------------------------------


def _close_label(pred: Prediction) -> str:
    return "exactly right" if pred.rel_tol == 0 else f"close (within {100 * pred.rel_tol:g}%)"


OTHER_LABEL = "other"


def _group(pred: Prediction, number: float) -> tuple[str, str]:
    if predictions.is_close(pred, number):
        return "close", _close_label(pred)
    index = predictions.trap_index(pred, number)
    if index is None:
        return "other", OTHER_LABEL
    return f"slip:{index}", pred.traps[index].slip


def slip_of(page_id: str, value: float) -> tuple[str, str]:
    """(key, label) of one answer's group: ("close", "close (within 2%)"), ("slip:1", "K or V, not both") or
    ("other", "other answers") — the rules check() grades by."""
    return _group(_prediction(page_id), _check_value(value))


def _groups(pred: Prediction, numbers: Sequence[float]) -> tuple[SlipGroup, ...]:
    counts: dict[tuple[str, str], int] = {}
    for v in numbers:
        key = _group(pred, v)
        counts[key] = counts.get(key, 0) + 1
    total = len(numbers)

    def group(key: tuple[str, str]) -> SlipGroup:
        n = counts.get(key, 0)
        return SlipGroup(key[0], key[1], n, n / total if total else 0.0)

    slips = [(f"slip:{i}", t.slip) for i, t in enumerate(pred.traps) if counts.get((f"slip:{i}", t.slip))]
    slips.sort(key=lambda k: -counts[k])  # stable: equal counts keep the traps' order
    other = [("other", OTHER_LABEL)] if counts.get(("other", OTHER_LABEL)) else []
    return tuple(group(k) for k in [("close", _close_label(pred)), *slips, *other])


def class_round(page_id: str, values: Sequence[float], revealed: bool) -> ClassRound:
    """The class's answers on `page_id`'s prediction: bins (from the answers alone until `revealed`), and once
    revealed the engine's answer and the answers' groups."""
    pred = _prediction(page_id)
    numbers = tuple(_check_value(v) for v in values)
    bins = histogram(numbers, pred.answer if revealed else None)
    groups = _groups(pred, numbers) if revealed else ()
    answer = pred.answer if revealed else None
    return ClassRound(page_id, pred.unit, pred.prompt, len(numbers), bins, bool(revealed), answer, groups)


def learner_line(page_id: str, value: float | None, cr: ClassRound) -> str:
    """The learner's own answer (`value`, None if none this round) against the class's and the engine's, in
    plain text; before the reveal, that the answer stays hidden until the teacher reveals it."""
    pred = _prediction(page_id)
    if cr.page_id != page_id:
        raise ValueError(f"the class round is on {cr.page_id!r}, not {page_id!r}; pass that lesson's round")
    mine = None if value is None else _check_value(value)
    said = None if mine is None else f"You said {amount(mine, pred.unit)}"
    if not cr.revealed or cr.answer is None:
        head = f"{said}. " if said else "No answer from you yet this round. "
        return f"{head}The engine's answer stays hidden until the teacher reveals it ({_answers(cr.answers)} so far)."
    if said is None:
        head = "No answer from you this round."
    else:
        key, label = _group(pred, mine)
        same = next((g for g in cr.groups if g.key == key), None)
        like = f", like {same.count} of {_answers(cr.answers)} ({_pct(same.share)})" if same and same.count else ""
        words = "none of the known slips" if key == "other" else label
        head = f"{said}: {words}{like}."
    close = cr.groups[0] if cr.groups else SlipGroup("close", _close_label(pred), 0, 0.0)
    klass = f"{_answers(cr.answers)}, {close.count} close ({_pct(close.share)})" if cr.answers else "no answers"
    return f"{head} The engine: {amount(cr.answer, pred.unit, 2)}. The class: {klass}."


__all__ = [
    "LOG_SPAN",
    "MAX_BINS",
    "MAX_VALUE",
    "OTHER_LABEL",
    "PAGES",
    "Bin",
    "ClassRound",
    "SlipGroup",
    "class_round",
    "edge_text",
    "histogram",
    "learner_line",
    "most_common",
    "range_text",
    "slip_of",
]
