"""Page 3's arithmetic and live run: padded vs packed variable-length batches (no Streamlit).

Padding every request to the longest wastes token slots linearly and attention work quadratically. Packing
concatenates the requests into one [total, H, D] tensor and a block-diagonal bias (xformers'
BlockDiagonalMask, `engine.attention.attn_bias`) keeps them from seeing each other; flash-attn's varlen API
(`kernels.ops.varlen_attention`) runs it from `cu_seqlens` without materializing the mask. The padded side is
what a user writes without varlen support: one SDPA call over [B, H, Lmax, D] with a key-padding mask
(the fairness rule in docs/BENCHMARKS.md)."""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from engine.attention.attn_bias import BlockDiagonalCausalMask, BlockDiagonalMask
from engine.memory.measure import default_device, time_interleaved
from kernels.ops import varlen_attention

MAX_REQUESTS = 32
MAX_LENGTH = 1024
MAX_TOTAL = 4096
MAX_HEATMAP = 256  # tokens per side of the drawn mask; larger masks are summarized, not drawn


def parse_lengths(text: str, max_requests: int = MAX_REQUESTS, max_length: int = MAX_LENGTH) -> list[int]:
    """Request lengths from text like "5, 12 3" (commas or spaces); ValueError says what to type instead."""
    parts = [p for p in re.split(r"[,\s;]+", text.strip()) if p]
    if not parts:
        raise ValueError("the length list is empty; type one or more request lengths, e.g. 5, 12, 3")
    lengths = []
    for p in parts:
        if not re.fullmatch(r"[+-]?\d+", p):
            raise ValueError(f"{p!r} is not a whole number; type lengths as integers separated by commas")
        n = int(p)
        if not 1 <= n <= max_length:
            raise ValueError(f"length {n} is outside 1 … {max_length}; every request needs at least one token")
        lengths.append(n)
    if len(lengths) > max_requests:
        raise ValueError(f"{len(lengths)} requests is too many for a live run; give at most {max_requests}")
    if sum(lengths) > MAX_TOTAL:
        raise ValueError(f"the lengths add up to {sum(lengths)} tokens; keep the total at most {MAX_TOTAL}")
    return lengths


@dataclass(frozen=True)
class PaddingStats:
    """Token slots and attention work of one batch, padded to the longest request vs packed."""

    lengths: tuple[int, ...]
    causal: bool

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

    def rows(self) -> list[dict]:
        """The page's comparison table."""
        return [
            {"batch": "padded", "token slots": self.padded_slots, "real tokens": self.real_tokens,
             "padding %": 100 * self.padding_fraction, "attention pairs": self.padded_pairs},
            {"batch": "packed", "token slots": self.real_tokens, "real tokens": self.real_tokens,
             "padding %": 0.0, "attention pairs": self.packed_pairs},
        ]  # fmt: skip


def padding_stats(lengths: list[int], causal: bool = True) -> PaddingStats:
    """Padding and attention-work statistics for a list of request lengths."""
    if not lengths or any(n < 1 for n in lengths):
        raise ValueError(f"lengths {lengths} must be a non-empty list of positive integers")
    return PaddingStats(tuple(lengths), causal)


def make_bias(lengths: list[int], causal: bool) -> BlockDiagonalMask:
    """The block-diagonal bias of the packed batch (causal: each request sees only its past)."""
    bias = BlockDiagonalMask.from_seqlens(lengths)
    return bias.make_causal() if causal else bias


def visibility(lengths: list[int], causal: bool, limit: int = MAX_HEATMAP) -> list[list[bool]]:
    """The materialized mask as booleans (True = query may attend to key), first `limit` tokens per side."""
    bias = make_bias(lengths, causal)
    total = sum(lengths)
    mask = bias.materialize((total, total))  # [total, total]: 0 visible, -inf hidden
    n = min(total, limit)
    return (mask[:n, :n] == 0).tolist()


@dataclass(frozen=True)
class PackingRun:
    """A real packed (varlen) and padded (SDPA) attention run over the same requests."""

    packed_seconds: float
    padded_seconds: float
    max_abs_err: float  # packed vs padded outputs at real token positions
    packed_shape: tuple[int, ...]
    padded_shape: tuple[int, ...]
    segment_shapes: tuple[tuple[int, ...], ...]

    def segment_rows(self) -> list[dict]:
        """One row per request: the shape of its slice of the packed output after `bias.split`."""
        return [{"request": i, "tokens": s[1], "output shape": str(s)} for i, s in enumerate(self.segment_shapes)]


def run_packed_vs_padded(
    lengths: list[int],
    causal: bool = True,
    num_heads: int = 4,
    head_dim: int = 32,
    repeats: int = 5,
    seed: int = 0,
    device: str | None = None,
) -> PackingRun:
    """Time varlen_attention on the packed batch against padded SDPA, check they agree, split the output.

    Runs on CUDA (the Triton varlen kernel) when a GPU is present, else on CPU (the torch backend).
    """
    stats = padding_stats(lengths, causal)
    gen = torch.Generator().manual_seed(seed)
    total, batch, lmax = stats.real_tokens, len(lengths), max(lengths)
    device = device or default_device()
    q = torch.randn(total, num_heads, head_dim, generator=gen).to(device)  # [total, H, D]
    k = torch.randn(total, num_heads, head_dim, generator=gen).to(device)
    v = torch.randn(total, num_heads, head_dim, generator=gen).to(device)
    bias = make_bias(lengths, causal)
    cu = bias.q_seqinfo.seqstart.to(device)  # int32 [B + 1]

    def pad(x: torch.Tensor) -> torch.Tensor:
        out = x.new_zeros(batch, lmax, num_heads, head_dim)  # [B, Lmax, H, D]
        for i, (s, e) in enumerate(bias.q_seqinfo.intervals()):
            out[i, : e - s] = x[s:e]
        return out.transpose(1, 2)  # [B, H, Lmax, D]

    qp, kp, vp = pad(q), pad(k), pad(v)
    key_ok = torch.arange(lmax, device=device)[None, :] < torch.tensor(lengths, device=device)[:, None]  # [B, Lmax]
    allowed = key_ok[:, None, None, :].expand(batch, 1, lmax, lmax)  # [B, 1, Lmax, Lmax]
    if causal:
        allowed = allowed & torch.ones(lmax, lmax, dtype=torch.bool, device=device).tril()
    packed = lambda: varlen_attention(q, k, v, cu, cu, lmax, lmax, causal=causal)
    padded = lambda: F.scaled_dot_product_attention(qp, kp, vp, attn_mask=allowed)
    times = time_interleaved({"packed": packed, "padded": padded}, repeats=repeats, warmup=1, device=device)
    out = packed()  # [total, H, D]
    out_pad = padded().transpose(1, 2)  # [B, Lmax, H, D]
    err = max(
        (out[s:e] - out_pad[i, : e - s]).abs().max().item() for i, (s, e) in enumerate(bias.q_seqinfo.intervals())
    )
    segments = bias.split(out.unsqueeze(0))  # list of [1, len_i, H, D]
    return PackingRun(
        packed_seconds=times["packed"],
        padded_seconds=times["padded"],
        max_abs_err=err,
        packed_shape=tuple(out.shape),
        padded_shape=tuple(qp.shape),
        segment_shapes=tuple(tuple(s.shape) for s in segments),
    )


__all__ = [
    "BlockDiagonalCausalMask",
    "MAX_HEATMAP",
    "PackingRun",
    "PaddingStats",
    "make_bias",
    "padding_stats",
    "parse_lengths",
    "run_packed_vs_padded",
    "visibility",
]
