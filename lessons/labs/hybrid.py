"""Lesson 4's hybrid-model section: one request's KV against its length, the all-full formula against vLLM's
per-kind allocation (no Streamlit).

Hybrid models mix layer kinds: gpt-oss alternates full attention with a 128-token sliding window (18 of each in
gpt-oss-120b), Gemma 3 runs five local layers of a 1,024-token window for each global one. The one formula the
course began with, 2 × layers × KV heads × head dim × bytes per token, charges every layer for every token: the
"all-full" line. vLLM V1 gives each layer kind its own `KVCacheSpec` (vllm/v1/kv_cache_interface.py): a
`SlidingWindowSpec` layer keeps only its window (``window - 1`` tokens plus the tokens in flight, in whole
blocks, + 1 block), so past the window a request's sliding layers stop growing and only the full layers pay
per token: the "per kind" line, `engine.memory.kv_request_bytes`. While the request fits in the window and the
tokens in flight the two lines are close (the per-kind one can cost a little more: vLLM's KV-cache groups hold
equal numbers of layers, so Gemma 3's 52 sliding layers fill six groups of ten, eight slots padded); past it the
per-kind line falls below and the two part.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.memory import DEFAULT_IN_FLIGHT_TOKENS, MODELS, kv_request_bytes
from engine.memory.specs import ModelSpec
from engine.memory.units import GiB, KiB, dtype_bytes, kv_bytes

HYBRID_MODELS: tuple[str, ...] = ("gpt-oss-120b", "gemma-3-27b")
BLOCK_SIZE = 16
# Context lengths of the chart: 256 tokens to 128k, doubling (both models read 128k tokens).
CONTEXTS: tuple[int, ...] = tuple(256 * 2**i for i in range(10))


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def all_full_bytes(spec: ModelSpec, num_tokens: int, kv_dtype: str = "bf16", block_size: int = BLOCK_SIZE) -> int:
    """What the one formula charges: every layer keeps K and V of every token, in whole blocks."""
    per_token = kv_bytes(spec.num_layers, spec.num_kv_heads, spec.head_dim, dtype_bytes(kv_dtype))
    return _cdiv(num_tokens, block_size) * block_size * per_token


@dataclass(frozen=True)
class HybridPoint:
    """One request length: bytes under the all-full formula and under vLLM's per-kind allocation."""

    model: str
    tokens: int
    all_full_bytes: int
    per_kind_bytes: int

    @property
    def ratio(self) -> float:
        """How many times the all-full formula over-states what vLLM allocates (1.0 before they part)."""
        return self.all_full_bytes / self.per_kind_bytes

    def row(self, name: str) -> dict[str, Any]:
        """The table row: model, tokens, both sizes in GiB, the over-statement."""
        return {
            "model": name,
            "context (tokens)": self.tokens,
            "all layers full (GiB)": self.all_full_bytes / GiB,
            "per kind, as vLLM allocates (GiB)": self.per_kind_bytes / GiB,
            "x over-stated": round(self.ratio, 2),
        }


@dataclass(frozen=True)
class HybridCurve:
    """One hybrid model's request KV at each of CONTEXTS, and the length where the two lines part."""

    model: str
    name: str
    kv_dtype: str
    points: tuple[HybridPoint, ...]
    parts_at: int  # the shortest request (tokens) for which the per-kind allocation is smaller (the lines part)
    full_layers: int  # layers that keep every token
    window: int  # the sliding layers' window (tokens)
    per_token_all_full: int  # bytes per token, every layer charged
    per_token_long: int  # bytes each further token adds at long context (the full layers only)

    def rows(self) -> list[dict[str, Any]]:
        """One table row per context length."""
        return [p.row(self.name) for p in self.points]


def _parting(spec: ModelSpec, kv_dtype: str, high: int) -> int:
    """The smallest length in 1..high where per-kind < all-full (their gap only grows with length): binary search."""
    lo, hi = 1, high
    while lo < hi:
        mid = (lo + hi) // 2
        if kv_request_bytes(spec, mid, kv_dtype, BLOCK_SIZE) < all_full_bytes(spec, mid, kv_dtype):
            hi = mid
        else:
            lo = mid + 1
    return lo


def hybrid_curve(model: str, kv_dtype: str = "bf16") -> HybridCurve:
    """The two lines for one catalog model at CONTEXTS; an unknown key is a ValueError listing the known ones."""
    spec = MODELS[model]
    if not spec.is_hybrid:
        raise ValueError(f"{model} has one layer kind: both lines are the same; pick one of {list(HYBRID_MODELS)}")
    points = tuple(
        HybridPoint(model, n, all_full_bytes(spec, n, kv_dtype), kv_request_bytes(spec, n, kv_dtype, BLOCK_SIZE))
        for n in CONTEXTS
    )
    kinds = spec.layer_kinds
    windows = sorted({k.window for k in kinds if hasattr(k, "window")})
    return HybridCurve(
        model=model,
        name=spec.name,
        kv_dtype=kv_dtype,
        points=points,
        parts_at=_parting(spec, kv_dtype, CONTEXTS[-1]),
        full_layers=sum(1 for k in kinds if k.keeps_every_token),
        window=windows[0] if windows else 0,
        per_token_all_full=kv_bytes(spec.num_layers, spec.num_kv_heads, spec.head_dim, dtype_bytes(kv_dtype)),
        per_token_long=spec.kv_bytes_per_token(dtype_bytes(kv_dtype)),
    )


def hybrid_curves(kv_dtype: str = "bf16") -> tuple[HybridCurve, ...]:
    """`hybrid_curve` for each of HYBRID_MODELS."""
    return tuple(hybrid_curve(m, kv_dtype) for m in HYBRID_MODELS)


def series(curves: tuple[HybridCurve, ...]) -> dict[str, list[float]]:
    """The chart's lines, GiB per request at CONTEXTS: each model's all-full and per-kind line."""
    out: dict[str, list[float]] = {}
    for c in curves:
        out[f"{c.name}: all full"] = [p.all_full_bytes / GiB for p in c.points]
        out[f"{c.name}: per kind"] = [p.per_kind_bytes / GiB for p in c.points]
    return out


def rows(curves: tuple[HybridCurve, ...]) -> list[dict[str, Any]]:
    """The chart's table: every model at every context length."""
    return [r for c in curves for r in c.rows()]


def summary(curves: tuple[HybridCurve, ...]) -> str:
    """The chart in one sentence per model: where the lines part and how far apart they end."""
    parts = []
    for c in curves:
        last = c.points[-1]
        parts.append(
            f"{c.name}'s per-kind line falls below the all-full one at {c.parts_at:,} tokens (past its "
            f"{c.window:,}-token window plus {DEFAULT_IN_FLIGHT_TOKENS:,} tokens in flight); at {last.tokens:,} "
            "tokens the all-full formula says "
            f"{last.all_full_bytes / GiB:,.2f} GiB per request, vLLM allocates {last.per_kind_bytes / GiB:,.2f} GiB "
            f"({last.ratio:,.1f}× less): past the window only its {c.full_layers} full layers grow, "
            f"{c.per_token_long / KiB:,.0f} KiB per token instead of {c.per_token_all_full / KiB:,.0f}."
        )
    return " ".join(parts)
