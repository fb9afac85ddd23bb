"""Page 1's arithmetic: decode vs prefill on the roofline for a catalog model and GPU (no Streamlit).

The step costs come from `engine.memory.roofline.roofline` (Williams et al., CACM 2009): a step takes at least
max(FLOPs / peak FLOP/s, bytes / HBM bandwidth). Decode streams every weight and the batch's KV cache for
one token per sequence, so its weight matmuls do ~batch FLOP/byte while attention stays at the GQA group size
(every sequence's KV is read each step, whatever the batch); prefill reuses each weight for every prompt token.
Which batches fit comes from `engine.memory.footprint.serving_footprint` (weights + activation peak + KV at the
chosen context against the GPU's memory at gpu_memory_utilization 0.9, vLLM's rule). The live part is model
bandwidth utilization (MBU): bytes a real decode step of the demo model moves (weights + KV read) per second,
over this machine's measured memory bandwidth. This module packages those numbers into page 1's rows, points
and sentences, and `claims()` checks them at the page's defaults.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.memory.catalog import GPUS, MODELS, GiB
from engine.memory.footprint import serving_footprint
from engine.memory.measure import Measurement, measure_demo_decode, measure_machine
from engine.memory.roofline import Roofline, roofline

WEIGHT_DTYPES: tuple[str, ...] = ("bf16", "fp8", "int4")
MAX_BATCH = 256  # the batch slider's range
SWEEP_BATCHES: tuple[int, ...] = (1, 4, 16, 64, 256)
GPU_MEMORY_UTILIZATION = 0.9  # vLLM's default share of GPU memory
DEFAULTS: dict[str, Any] = {
    "model": "llama-3-8b",
    "gpu": "h100-sxm",
    "dtype": WEIGHT_DTYPES[0],
    "batch": 1,
    "context": 4096,
}  # the page's (ui/links.py reads them)


@dataclass(frozen=True)
class BatchFit:
    """How many sequences of one context length a GPU's KV budget holds (vLLM's start-up arithmetic)."""

    model: str
    gpu: str
    context_len: int
    capacity_bytes: int
    weights_bytes: int
    kv_budget_bytes: int  # what is left for KV after weights, activation peak and overhead (may be < 0)
    kv_bytes_per_token: int
    max_batch: int  # whole 16-token blocks per sequence, as vLLM's "maximum concurrency"

    def kv_bytes(self, batch: int) -> int:
        """KV cache of `batch` sequences at the context length."""
        return batch * self.context_len * self.kv_bytes_per_token

    def fits(self, batch: int) -> bool:
        """Whether `batch` sequences of the context length fit in the KV budget at once."""
        return batch <= self.max_batch

    def why(self, batch: int) -> str:
        """One sentence: does this batch fit, and what is the largest that does."""
        gpu, need, left = GPUS[self.gpu].name, self.kv_bytes(batch) / GiB, max(self.kv_budget_bytes, 0) / GiB
        if self.max_batch == 0:
            return (
                f"Not even one {self.context_len:,}-token sequence fits on the {gpu}: its "
                f"{self.weights_bytes / GiB:,.1f} GiB of weights and the activation peak leave {left:,.2f} GiB "
                f"for KV at gpu_memory_utilization {GPU_MEMORY_UTILIZATION}."
            )
        verdict = "fits" if self.fits(batch) else "does not fit"
        return (
            f"Batch {batch} at {self.context_len:,} tokens needs {need:,.1f} GiB of KV and {verdict}: the "
            f"{gpu} has {left:,.1f} GiB left for KV after {self.weights_bytes / GiB:,.1f} "
            f"GiB of weights at gpu_memory_utilization {GPU_MEMORY_UTILIZATION}, room for at most "
            f"**{self.max_batch:,}** such sequences."
        )


def batch_fit(model: str, gpu: str, context_len: int, weight_dtype: str = "bf16") -> BatchFit:
    """The largest batch of context_len-token sequences the GPU's KV budget holds (footprint.py's arithmetic)."""
    fp = serving_footprint(
        model, gpu, weight_dtype=weight_dtype, max_model_len=context_len, gpu_memory_utilization=GPU_MEMORY_UTILIZATION
    )
    max_batch = fp.max_concurrency(context_len) if fp.num_blocks > 0 else 0
    return BatchFit(
        model,
        gpu,
        context_len,
        fp.capacity_bytes,
        fp.weights_bytes,
        fp.kv_budget_bytes,
        fp.kv_bytes_per_token,
        max_batch,
    )


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


def batch_sweep(
    model: str, gpu: str, context_len: int, weight_dtype: str = "bf16", batches: tuple[int, ...] = SWEEP_BATCHES
) -> list[dict[str, Any]]:
    """Decode tokens/s and intensities as the batch grows, each batch marked as fitting in memory or not.

    The largest batch that fits is added as a point of its own. Weights are shared by the batch; KV is not, so
    attention's FLOP per byte stays at the group size while its share of the bytes grows.
    """
    fit = batch_fit(model, gpu, context_len, weight_dtype)
    points = set(batches) | ({fit.max_batch} if 1 <= fit.max_batch < max(batches) else set())
    rows = []
    for b in sorted(points):
        r = roofline(model, gpu, "decode", b, context_len, weight_dtype)
        attn = r.ops[0]  # the score / value part that reads the KV cache
        rows.append(
            {
                "batch": b,
                "fits in memory": "yes" if fit.fits(b) else "no",
                "KV GiB": fit.kv_bytes(b) / GiB,
                "FLOP per byte": r.intensity,
                "attention FLOP per byte": attn.intensity,
                "KV share of bytes %": 100 * attn.bytes / r.bytes,
                "tokens per s": r.tokens_per_s,
                "bound": r.bound,
            }
        )
    return rows


def model_bandwidth_utilization(demo: Mapping[str, Any], machine: Sequence[Mapping[str, Any]]) -> float:
    """MBU: the decode step's achieved bytes/s (weights + KV read) over this machine's measured bandwidth."""
    best = max((float(m["GB_per_s"]) for m in machine), default=0.0)
    if best <= 0:
        raise ValueError("no machine bandwidth measured: run the machine measurement first")
    return float(demo["GB_per_s"]) / best


def claims() -> dict[str, dict]:
    """Page 1 at its defaults: no batch beyond the KV budget shown as fitting; the demo model's MBU measured."""
    d = DEFAULTS
    fit = batch_fit(d["model"], d["gpu"], d["context"], d["dtype"])
    rows = batch_sweep(d["model"], d["gpu"], d["context"], d["dtype"])
    # independent of max_batch: a batch shown fitting must have its KV inside the budget
    wrong = [r["batch"] for r in rows if r["fits in memory"] == "yes" and r["KV GiB"] * GiB > fit.kv_budget_bytes]
    wrong += [b for b in range(1, MAX_BATCH + 1) if fit.fits(b) and fit.kv_bytes(b) > fit.kv_budget_bytes]
    entry: dict[str, Any] = {
        "claim": "no offered batch beyond the GPU's KV budget is shown as fitting, and the demo model's decode "
        "step's bandwidth utilization (MBU) is measured on this machine",
        "max_batch": fit.max_batch,
        "kv_budget_GiB": round(fit.kv_budget_bytes / GiB, 2),
        "sweep": {r["batch"]: r["fits in memory"] for r in rows},
        "shown_fitting_beyond_capacity": sorted(set(wrong)),
        "attention_FLOP_per_byte": sorted({round(r["attention FLOP per byte"], 2) for r in rows}),
    }
    try:
        machine, demo = [m.row() for m in measure_machine()], measure_demo_decode().row()
    except (FileNotFoundError, OSError) as exc:  # the demo weights are not installed
        return {"bandwidth": {**entry, "holds": False, "error": repr(exc)}}
    mbu = model_bandwidth_utilization(demo, machine)
    entry.update(
        mbu=round(mbu, 4),
        demo_GB_per_s=round(demo["GB_per_s"], 3),
        machine_GB_per_s=round(max(m["GB_per_s"] for m in machine), 2),
        demo_bytes_per_step=demo["bytes_moved"],
        demo_ms_per_step=round(1e3 * demo["seconds"], 3),
    )
    return {"bandwidth": {**entry, "holds": not wrong and mbu > 0}}


def measured_points(measurements: list[Measurement]) -> list[dict[str, float | str]]:
    """Roofline points from live measurements on this machine (achieved FLOP/s at their intensity)."""
    return [{"name": m.name, "intensity": m.intensity, "flops": m.flops_per_s} for m in measurements]


def machine_roof(measurements: list[Measurement]) -> tuple[float, float]:
    """(peak FLOP/s, bandwidth) estimated from the measurements: best achieved of each."""
    if not measurements:
        raise ValueError("no measurements: run the measurement first")
    return max(m.flops_per_s for m in measurements), max(m.bytes_per_s for m in measurements)
