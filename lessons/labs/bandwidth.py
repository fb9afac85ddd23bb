"""Page 1's arithmetic: decode vs prefill on the roofline for a catalog model and GPU (no Streamlit).

The step costs come from `engine.memory.roofline.roofline` (Williams et al., CACM 2009): a step takes at least
max(FLOPs / peak FLOP/s, bytes / HBM bandwidth). Decode streams every weight and the batch's KV cache for
one token per sequence, so its intensity is ~batch FLOP/byte; prefill reuses each weight for every prompt
token. This module packages those numbers into the rows, points and sentences page 1 shows.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.memory.catalog import GPUS, MODELS
from engine.memory.measure import Measurement
from engine.memory.roofline import Roofline, roofline

WEIGHT_DTYPES: tuple[str, ...] = ("bf16", "fp8", "int4")


@dataclass(frozen=True)
class BandwidthLesson:
    """Decode and prefill steps of one configuration plus the per-token figures page 1 headlines."""

    decode: Roofline
    prefill: Roofline

    @property
    def bytes_per_token(self) -> float:
        """HBM bytes moved per generated token in decode (weights + KV, shared across the batch)."""
        return self.decode.bytes / self.decode.batch_size

    @property
    def ms_per_token(self) -> float:
        """Roofline lower bound of one decode step in milliseconds (every sequence gets one token)."""
        return self.decode.time_s * 1e3

    @property
    def decode_tokens_per_s(self) -> float:
        """Generated tokens per second across the batch at the bound."""
        return self.decode.tokens_per_s

    def summary_rows(self) -> list[dict[str, float | str]]:
        """One row per phase: FLOPs, bytes, intensity, the two time limits, which one binds."""
        return [
            {
                "phase": r.phase,
                "batch": r.batch_size,
                "context": r.context_len,
                "GFLOP": r.flops / 1e9,
                "GB moved": r.bytes / 1e9,
                "FLOP per byte": r.intensity,
                "compute ms": r.compute_s * 1e3,
                "memory ms": r.memory_s * 1e3,
                "bound": "bandwidth" if r.bound == "memory" else "compute",
            }
            for r in (self.decode, self.prefill)
        ]

    def bytes_per_token_rows(self) -> list[dict[str, float | str]]:
        """Decode bytes per generated token split by operation (attention = reading the KV cache)."""
        b = self.decode.batch_size
        return [{"op": row["op"], "MB per token": float(row["bytes"]) / b / 1e6} for row in self.decode.rows()]

    def points(self) -> list[dict[str, float | str]]:
        """Roofline points (name, intensity, attainable FLOP/s) for the decode and prefill steps."""
        out = []
        for r in (self.decode, self.prefill):
            out.append(
                {"name": f"{r.phase} (batch {r.batch_size})", "intensity": r.intensity, "flops": r.flops / r.time_s}
            )
        return out

    def verdict(self) -> str:
        """One sentence per phase on which limit sets the time, and by how much."""
        d, p = self.decode, self.prefill
        return (
            f"Decode moves {d.bytes / 1e9:,.2f} GB for {d.flops / 1e9:,.1f} GFLOP "
            f"({d.intensity:,.1f} FLOP/byte): memory takes {d.memory_s * 1e3:,.2f} ms and compute "
            f"{d.compute_s * 1e3:,.3f} ms, so it is {d.memory_bound_factor:,.0f}× "
            f"{'bandwidth' if d.bound == 'memory' else 'compute'}-limited. "
            f"Prefill of {p.context_len:,} tokens does {p.intensity:,.0f} FLOP/byte and is "
            f"{'compute' if p.bound == 'compute' else 'bandwidth'}-bound "
            f"(ridge point of {d.gpu.name}: {d.gpu.ridge_point:,.0f} FLOP/byte)."
        )


def lesson(model: str, gpu: str, batch_size: int, context_len: int, weight_dtype: str = "bf16") -> BandwidthLesson:
    """Decode (batch_size sequences at context_len) and prefill (one prompt of context_len) for the page."""
    spec, _ = MODELS[model], GPUS[gpu]  # an unknown key is a ValueError listing the known ones
    if weight_dtype not in WEIGHT_DTYPES:
        raise ValueError(f"weight dtype {weight_dtype!r} is not offered; use one of {', '.join(WEIGHT_DTYPES)}")
    limit = spec.max_context
    if not isinstance(context_len, int) or not 1 <= context_len <= limit:
        raise ValueError(f"context length {context_len} is outside 1 … {limit:,}, the maximum context of {model}")
    if not isinstance(batch_size, int) or not 1 <= batch_size <= 4096:
        raise ValueError(f"batch size {batch_size} must be a whole number between 1 and 4096")
    return BandwidthLesson(
        decode=roofline(model, gpu, "decode", batch_size, context_len, weight_dtype),
        prefill=roofline(model, gpu, "prefill", 1, context_len, weight_dtype),
    )


def batch_sweep(model: str, gpu: str, context_len: int, batches: tuple[int, ...] = (1, 4, 16, 64, 256)) -> list[dict]:
    """Decode tokens/s and intensity as the batch grows (weights are shared; KV is not)."""
    rows = []
    for b in batches:
        r = roofline(model, gpu, "decode", b, context_len)
        rows.append({"batch": b, "FLOP per byte": r.intensity, "tokens per s": r.tokens_per_s, "bound": r.bound})
    return rows


def measured_points(measurements: list[Measurement]) -> list[dict[str, float | str]]:
    """Roofline points from live measurements on this machine (achieved FLOP/s at their intensity)."""
    return [{"name": m.name, "intensity": m.intensity, "flops": m.flops_per_s} for m in measurements]


def machine_roof(measurements: list[Measurement]) -> tuple[float, float]:
    """(peak FLOP/s, bandwidth) estimated from the measurements: best achieved of each."""
    if not measurements:
        raise ValueError("no measurements: run the measurement first")
    return max(m.flops_per_s for m in measurements), max(m.bytes_per_s for m in measurements)
