"""Page 3's arithmetic and live run: padded vs packed variable-length batches (no Streamlit).

Padding every request to the longest wastes token slots linearly and attention work quadratically. Packing
concatenates the requests into one [total, H, D] tensor and a block-diagonal bias (xformers'
BlockDiagonalMask, `engine.attention.attn_bias`) keeps them from seeing each other; flash-attn's varlen API
(`kernels.ops.varlen_attention`) runs it from `cu_seqlens` without materializing the mask. The padded side is
the fastest single SDPA call a user can write without varlen support over [B, H, Lmax, D] (the fairness rule
in docs/BENCHMARKS.md, as in bench/packing.py): with right padding and causal attention `is_causal=True` and no
mask (a real row never reaches a padding key), without causality a key-padding mask [B, 1, 1, Lmax]; the
materialized [B, 1, Lmax, Lmax] mask is timed beside it. `padding_sweep` times packed vs padded as the padding
fraction of a fixed batch grows and finds the crossover; `claims()` runs the page's defaults for bench.evidence.
Each result is a dataclass in the page's units (`PaddingStats`, `MaskPicture`, `PackingRun`, `PaddingSweep`)
with the rows of its table."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from engine.attention.attn_bias import BlockDiagonalMask
from kernels.ops import varlen_attention
from lessons.measure import default_device, time_interleaved

MAX_REQUESTS = 32
MAX_LENGTH = 1024
MAX_TOTAL = 4096
MAX_TEXT_CHARS = 1_000  # the lengths box: 32 four-digit lengths with separators take under 200 characters
MAX_HEATMAP = 256  # tokens per side of the drawn mask; larger masks are summarized, not drawn
DEFAULT_LENGTHS = "50, 400, 30, 1000, 120, 7"  # the page's default batch: mixed traffic, 73% padding
BASELINES = {True: "SDPA is_causal (no mask)", False: "SDPA + key-padding mask"}  # the fair padded side
SWEEP_BATCH, SWEEP_LONGEST = 8, 256  # the sweep: one request of SWEEP_LONGEST tokens, the others shorter
SWEEP_SHORTER = SWEEP_BATCH - 1  # the sweep's requests shorter than the longest, all of one length
SWEEP_FRACTIONS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)  # padding fractions aimed at


_LENGTH = re.compile(r"[+-]?[0-9]+")  # ASCII digits only: int() would also take "５", "٥" and "1_000"
_SEPARATORS = re.compile(r"[,; \t\r\n]+")  # ASCII only: a no-break or ideographic space is not a separator


def _quoted(part: str, limit: int = 40) -> str:
    """A bad part for an error message: repr (hidden characters escaped), shortened."""
    return repr(part) if len(part) <= limit else f"{part[:limit]!r}… ({len(part):,} characters)"


def parse_lengths(text: str, max_requests: int = MAX_REQUESTS, max_length: int = MAX_LENGTH) -> list[int]:
    """Request lengths from text like "5, 12 3" (commas, semicolons or spaces); ValueError says what to type
    instead. Lengths are ASCII digits with an optional sign; nothing else (no "５", "1_000", "1e3", "6\u200f")."""
    if not isinstance(text, str):
        raise ValueError(f"the lengths must be text, got {type(text).__name__}; type numbers separated by commas")
    parts = [p for p in _SEPARATORS.split(text) if p]
    if not parts:
        raise ValueError("the length list is empty; type one or more request lengths, e.g. 5, 12, 3")
    if len(parts) > max_requests:
        raise ValueError(f"{len(parts)} requests is too many for a live run; give at most {max_requests}")
    lengths = []
    for p in parts:
        if not _LENGTH.fullmatch(p):
            raise ValueError(f"{_quoted(p)} is not a whole number; type lengths as integers separated by commas")
        if len(p.lstrip("+-").lstrip("0")) > len(str(max_length)):  # no 5,000-digit int() for a typo
            raise ValueError(f"length {_quoted(p)} is outside 1 … {max_length}; every request needs at least one token")
        n = int(p)
        if not 1 <= n <= max_length:
            raise ValueError(f"length {n} is outside 1 … {max_length}; every request needs at least one token")
        lengths.append(n)
    if sum(lengths) > MAX_TOTAL:
        raise ValueError(f"the lengths add up to {sum(lengths)} tokens; keep the total at most {MAX_TOTAL}")
    return lengths


@dataclass(frozen=True)
class PaddingStats:
    """Token slots and attention work of one batch, padded to the longest request vs packed."""

    lengths: tuple[int, ...]
    causal: bool

    @property
    def num_requests(self) -> int:
        """Requests in the batch."""
        return len(self.lengths)

    @property
    def longest(self) -> int:
        """Tokens of the longest request: every request is padded to it."""
        return max(self.lengths)

    @property
    def real_tokens(self) -> int:
        """Tokens the requests actually have."""
        return sum(self.lengths)

    @property
    def padded_slots(self) -> int:
        """Slots of a [B, Lmax] padded batch."""
        return len(self.lengths) * max(self.lengths)

    @property
    def padding_fraction(self) -> float:
        """Share of padded slots that hold padding."""
        return 1 - self.real_tokens / self.padded_slots

    @property
    def padding_pct(self) -> float:
        """`padding_fraction` in %."""
        return 100 * self.padding_fraction

    def _pairs(self, n: int) -> float:
        return n * (n + 1) / 2 if self.causal else float(n * n)

    @property
    def padded_pairs(self) -> float:
        """Query-key score pairs the padded batch computes (causal counted as half)."""
        return len(self.lengths) * self._pairs(max(self.lengths))

    @property
    def packed_pairs(self) -> float:
        """Score pairs packed attention computes: only each request's own block."""
        return sum(self._pairs(n) for n in self.lengths)

    @property
    def ideal_speedup(self) -> float:
        """Padded / packed attention work: the best speed-up packing can give."""
        return self.padded_pairs / self.packed_pairs

    def summary(self) -> str:
        """The padded-vs-packed chart in one sentence (its text alternative): the padding a padded batch wastes."""
        return (
            f"Padding {self.num_requests} requests to the longest ({self.longest} tokens) takes "
            f"{self.padded_slots:,} slots for {self.real_tokens:,} real tokens ({self.padding_pct:.0f}% padding); "
            f"packing takes exactly {self.real_tokens:,}."
        )

    def rows(self) -> list[dict]:
        """The page's comparison table."""
        return [
            {
                "batch": "padded",
                "token slots": self.padded_slots,
                "real tokens": self.real_tokens,
                "padding %": self.padding_pct,
                "attention pairs": self.padded_pairs,
            },
            {
                "batch": "packed",
                "token slots": self.real_tokens,
                "real tokens": self.real_tokens,
                "padding %": 0.0,
                "attention pairs": self.packed_pairs,
            },
        ]


def padding_stats(lengths: list[int], causal: bool = True) -> PaddingStats:
    """Padding and attention-work statistics for a list of request lengths."""
    if not lengths or any(n < 1 for n in lengths):
        raise ValueError(f"lengths {lengths} must be a non-empty list of positive integers")
    return PaddingStats(tuple(lengths), causal)


def make_bias(lengths: list[int], causal: bool) -> BlockDiagonalMask:
    """The block-diagonal bias of the packed batch (causal: each request sees only its past)."""
    bias = BlockDiagonalMask.from_seqlens(lengths)
    return bias.make_causal() if causal else bias


@dataclass(frozen=True)
class MaskPicture:
    """The packed batch's block-diagonal mask as booleans, cut to the first `drawn` tokens per side."""

    lengths: tuple[int, ...]
    causal: bool
    cells: list[list[bool]]  # [query][key]: True = the query may attend to the key
    total_tokens: int  # tokens of the whole packed batch

    @property
    def drawn(self) -> int:
        """Tokens per side in `cells` (at most MAX_HEATMAP)."""
        return len(self.cells)

    @property
    def cut(self) -> bool:
        """True when the mask is larger than what is drawn."""
        return self.drawn < self.total_tokens

    @property
    def visible_pct(self) -> float:
        """Share of the drawn mask's cells a query may attend to, in %."""
        return 100 * sum(map(sum, self.cells)) / self.drawn**2 if self.drawn else 0.0

    def summary(self) -> str:
        """The mask chart in one sentence: blocks, causality and the share of query-key pairs computed."""
        drawn = f" (the first {self.drawn:,} drawn)" if self.cut else ""
        kind = "causal triangles" if self.causal else "full squares"
        pairs = "drawn query-key pairs" if self.cut else "query-key pairs"
        return (
            f"{len(self.lengths)} requests packed into {self.total_tokens:,} tokens{drawn}: each query sees only its "
            f"own request's keys ({kind} on the diagonal), {self.visible_pct:.0f}% of the {pairs}."
        )

    def rows(self) -> list[dict[str, Any]]:
        """The chart's table: each drawn query and the keys it may attend to."""
        return [
            {"query": i, "visible keys": ", ".join(str(j) for j, ok in enumerate(row) if ok)}
            for i, row in enumerate(self.cells)
        ]


def visibility(lengths: list[int], causal: bool, limit: int = MAX_HEATMAP) -> MaskPicture:
    """The materialized mask as booleans (True = query may attend to key), first `limit` tokens per side."""
    bias = make_bias(lengths, causal)
    total = sum(lengths)
    mask = bias.materialize((total, total))  # [total, total]: 0 visible, -inf hidden
    n = min(total, limit)
    return MaskPicture(tuple(lengths), causal, (mask[:n, :n] == 0).tolist(), total)


@dataclass(frozen=True)
class PackingRun:
    """A real packed (varlen) and padded (SDPA) attention run over the same requests."""

    packed_seconds: float
    padded_seconds: float  # the fair baseline, BASELINES[causal]
    masked_seconds: float  # the same padded batch with a materialized [B, 1, Lmax, Lmax] boolean mask
    max_abs_err: float  # packed vs both padded sides at real token positions
    packed_shape: tuple[int, ...]
    padded_shape: tuple[int, ...]
    segment_shapes: tuple[tuple[int, ...], ...]
    baseline: str = BASELINES[True]

    @property
    def speedup(self) -> float:
        """Fair padded time / packed time (> 1: packing is faster)."""
        return self.padded_seconds / self.packed_seconds

    @property
    def packed_ms(self) -> float:
        """The packed call's time in milliseconds."""
        return self.packed_seconds * 1e3

    @property
    def padded_ms(self) -> float:
        """The fair padded call's time in milliseconds."""
        return self.padded_seconds * 1e3

    def segment_rows(self) -> list[dict]:
        """One row per request: the shape of its slice of the packed output after `bias.split`."""
        return [{"request": i, "tokens": s[1], "output shape": str(s)} for i, s in enumerate(self.segment_shapes)]

    def timing_rows(self) -> list[dict]:
        """The page's timing table: packed, the fair padded baseline, and the masked padded variant."""
        return [
            {"side": "packed (varlen_attention)", "q shape": str(self.packed_shape), "ms": self.packed_ms},
            {"side": f"padded, {self.baseline}", "q shape": str(self.padded_shape), "ms": self.padded_ms},
            {"side": "padded, materialized mask", "q shape": str(self.padded_shape), "ms": self.masked_seconds * 1e3},
        ]


def _padded_sides(qp, kp, vp, lengths: list[int], causal: bool) -> dict:
    """The fair padded SDPA call ("padded") and the materialized-mask variant ("masked") over [B, H, Lmax, D]."""
    batch, lmax, device = qp.shape[0], qp.shape[2], qp.device
    key_ok = torch.arange(lmax, device=device)[None, :] < torch.tensor(lengths, device=device)[:, None]  # [B, Lmax]
    key_mask = key_ok[:, None, None, :]  # [B, 1, 1, Lmax]
    full = key_mask.expand(batch, 1, lmax, lmax)
    if causal:
        full = full & torch.ones(lmax, lmax, dtype=torch.bool, device=device).tril()
    full = full.contiguous()  # [B, 1, Lmax, Lmax], materialized

    def padded() -> torch.Tensor:  # right padding: a causal real row never reaches a padding key
        if causal:
            return F.scaled_dot_product_attention(qp, kp, vp, is_causal=True)
        return F.scaled_dot_product_attention(qp, kp, vp, attn_mask=key_mask)

    return {"padded": padded, "masked": lambda: F.scaled_dot_product_attention(qp, kp, vp, attn_mask=full)}


def run_packed_vs_padded(
    lengths: list[int],
    causal: bool = True,
    num_heads: int = 4,
    head_dim: int = 32,
    repeats: int = 5,
    seed: int = 0,
    device: str | None = None,
    masked: bool = True,
) -> PackingRun:
    """Time varlen_attention on the packed batch against padded SDPA, check they agree, split the output.

    Runs on CUDA (the Triton varlen kernel) when a GPU is present, else on CPU (the torch backend). With
    masked=False the materialized-mask variant is checked but not timed (masked_seconds is then nan).
    """
    stats = padding_stats(lengths, causal)
    gen = torch.Generator().manual_seed(seed)
    total, batch, lmax = stats.real_tokens, len(lengths), max(lengths)
    device = device or default_device()
    q, k, v = (torch.randn(total, num_heads, head_dim, generator=gen).to(device) for _ in range(3))  # [total, H, D]
    bias = make_bias(lengths, causal)
    cu = bias.q_seqinfo.seqstart.to(device)  # int32 [B + 1]

    def pad(x: torch.Tensor) -> torch.Tensor:
        out = x.new_zeros(batch, lmax, num_heads, head_dim)  # [B, Lmax, H, D], right padding
        for i, (s, e) in enumerate(bias.q_seqinfo.intervals()):
            out[i, : e - s] = x[s:e]
        return out.transpose(1, 2).contiguous()  # [B, H, Lmax, D]

    qp, kp, vp = pad(q), pad(k), pad(v)
    sides = {"packed": lambda: varlen_attention(q, k, v, cu, cu, lmax, lmax, causal=causal)}
    sides |= _padded_sides(qp, kp, vp, lengths, causal)
    outs = {name: fn() for name, fn in sides.items()}
    timed = sides if masked else {n: f for n, f in sides.items() if n != "masked"}
    times = time_interleaved(timed, repeats=repeats, warmup=1, device=device)
    out = outs["packed"]  # [total, H, D]
    err = max(
        (out[s:e] - outs[side].transpose(1, 2)[i, : e - s]).abs().max().item()
        for side in ("padded", "masked")
        for i, (s, e) in enumerate(bias.q_seqinfo.intervals())
    )
    segments = bias.split(out.unsqueeze(0))  # list of [1, len_i, H, D]
    return PackingRun(
        packed_seconds=times["packed"],
        padded_seconds=times["padded"],
        masked_seconds=times.get("masked", float("nan")),
        max_abs_err=err,
        packed_shape=tuple(out.shape),
        padded_shape=tuple(qp.shape),
        segment_shapes=tuple(tuple(s.shape) for s in segments),
        baseline=BASELINES[causal],
    )


def sweep_lengths(fraction: float, batch: int = SWEEP_BATCH, longest: int = SWEEP_LONGEST) -> list[int]:
    """One request of `longest` tokens and batch - 1 equal shorter ones, padding about `fraction` of the slots."""
    if batch < 2 or not 0 <= fraction < 1:
        raise ValueError(f"batch={batch} must be >= 2 and fraction={fraction} in [0, 1)")
    short = round(longest - fraction * batch * longest / (batch - 1))
    return [longest] + [min(longest, max(1, short))] * (batch - 1)


def crossover(fractions: list[float], packed: list[float], padded: list[float]) -> float | None:
    """Padding fraction from which packed stays faster at every measured point (linear between the two points
    around the change); the first fraction if packed wins everywhere, None if it is not faster at the last."""
    ratio = [a / b for a, b in zip(packed, padded, strict=True)]  # < 1: packed faster
    i = len(ratio)
    while i > 0 and ratio[i - 1] < 1:
        i -= 1
    if i == len(ratio):
        return None
    if i == 0:
        return fractions[0]
    f0, f1, r0, r1 = fractions[i - 1], fractions[i], ratio[i - 1], ratio[i]
    return f0 + (r0 - 1) / (r0 - r1) * (f1 - f0)


@dataclass(frozen=True)
class SweepPoint:
    """One batch of the padding sweep: its lengths, its padding and both sides' times."""

    lengths: tuple[int, ...]
    padding_fraction: float  # share of the padded slots that hold padding
    packed_seconds: float
    padded_seconds: float  # the fair padded baseline

    @property
    def padding_pct(self) -> float:
        """`padding_fraction` in %."""
        return 100 * self.padding_fraction

    @property
    def packed_ms(self) -> float:
        """The packed call's time in milliseconds."""
        return self.packed_seconds * 1e3

    @property
    def padded_ms(self) -> float:
        """The fair padded call's time in milliseconds."""
        return self.padded_seconds * 1e3

    def row(self) -> dict[str, Any]:
        """The sweep table's row."""
        return {
            "padding %": self.padding_pct,
            "lengths": str(list(self.lengths)),
            "packed ms": self.packed_ms,
            "padded ms": self.padded_ms,
            "packed / padded": self.packed_seconds / self.padded_seconds,
        }


@dataclass(frozen=True)
class PaddingSweep:
    """Packed vs fair padded time as the padding of a fixed batch grows, and where packing starts to win."""

    points: tuple[SweepPoint, ...]  # ascending padding
    crossover: float | None  # padding fraction from which packed stays faster (`crossover`); None: never
    baseline: str  # the padded side, BASELINES[causal]

    @property
    def crossover_pct(self) -> float | None:
        """`crossover` in %, None when packed was not faster at the last point."""
        return None if self.crossover is None else 100 * self.crossover

    @property
    def padding_pct(self) -> list[float]:
        """Each point's padding in %."""
        return [p.padding_pct for p in self.points]

    @property
    def packed_ms(self) -> list[float]:
        """Each point's packed time in ms."""
        return [p.packed_ms for p in self.points]

    @property
    def padded_ms(self) -> list[float]:
        """Each point's fair padded time in ms."""
        return [p.padded_ms for p in self.points]

    def rows(self) -> list[dict[str, Any]]:
        """The sweep table: one row per point (`SweepPoint.row`)."""
        return [p.row() for p in self.points]

    def summary(self, current_pct: float | None = None) -> str:
        """The sweep chart in one sentence: where packed attention starts to beat the padded call."""
        lo, hi = self.points[0], self.points[-1]
        where = (
            "packed was not faster at any measured padding"
            if self.crossover_pct is None
            else f"packed is faster from about {self.crossover_pct:.0f}% padding on"
        )
        yours = "" if current_pct is None else f"; your batch above has {current_pct:.0f}% padding"
        return (
            f"Measured here, {where} (packed {lo.packed_ms:,.2f} vs padded {lo.padded_ms:,.2f} ms at "
            f"{lo.padding_pct:.0f}%, {hi.packed_ms:,.2f} vs {hi.padded_ms:,.2f} ms at {hi.padding_pct:.0f}%){yours}."
        )


def padding_sweep(causal: bool = True, repeats: int = 3, device: str | None = None) -> PaddingSweep:
    """Packed vs fair padded time over SWEEP_FRACTIONS for a SWEEP_BATCH batch with one SWEEP_LONGEST request."""
    points = []
    for target in SWEEP_FRACTIONS:
        lengths = sweep_lengths(target)
        run = run_packed_vs_padded(lengths, causal, repeats=repeats, device=device, masked=False)
        fraction = padding_stats(lengths, causal).padding_fraction
        points.append(SweepPoint(tuple(lengths), fraction, run.packed_seconds, run.padded_seconds))
    cross = crossover(
        [p.padding_fraction for p in points], [p.packed_seconds for p in points], [p.padded_seconds for p in points]
    )
    return PaddingSweep(tuple(points), cross, BASELINES[causal])


def claims(repeats: int = 5) -> dict[str, dict]:
    """Page 3 at its defaults: is packed varlen attention faster than the fair padded baseline?"""
    lengths = parse_lengths(DEFAULT_LENGTHS)
    run = run_packed_vs_padded(lengths, True, repeats=repeats)
    stats = padding_stats(lengths, True)
    return {
        "packing": {
            "claim": f"packed varlen attention is faster than the fastest fair padded call ({run.baseline}) on the "
            f"default lengths {DEFAULT_LENGTHS} (causal)",
            "holds": run.packed_seconds < run.padded_seconds,
            "packed_ms": round(run.packed_ms, 3),
            "padded_ms": round(run.padded_ms, 3),
            "padded_masked_ms": round(run.masked_seconds * 1e3, 3),
            "speedup": round(run.speedup, 3),
            "speedup_vs_masked": round(run.masked_seconds / run.packed_seconds, 3),
            "ideal_speedup": round(stats.ideal_speedup, 3),
            "padding_fraction": round(stats.padding_fraction, 4),
            "max_abs_err": run.max_abs_err,
            "threads": torch.get_num_threads(),
        }
    }


__all__ = [
    "MAX_HEATMAP",
    "MaskPicture",
    "PackingRun",
    "PaddingStats",
    "PaddingSweep",
    "SweepPoint",
    "claims",
    "crossover",
    "make_bias",
    "padding_stats",
    "padding_sweep",
    "parse_lengths",
    "run_packed_vs_padded",
    "sweep_lengths",
    "visibility",
]
