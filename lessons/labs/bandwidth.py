"""Page 1's arithmetic: decode vs prefill on the roofline for a catalog model and GPU (no Streamlit).

The step costs come from `engine.memory.roofline.roofline` (Williams et al., CACM 2009): a step takes at least
max(FLOPs / peak FLOP/s, bytes / HBM bandwidth). Decode streams every weight matrix (of an untied input embedding
table only each token's row; the lm_head whole) and the batch's KV cache for one token per sequence, so its
weight matmuls do ~batch FLOP/byte while attention stays at the GQA group size (every sequence's KV is read each
step, whatever the batch); prefill reuses each weight for every prompt token.
Which batches fit comes from `engine.memory.footprint.serving_footprint` (weights + activation peak + KV at the
chosen context against the total CUDA reports for the GPU at gpu_memory_utilization 0.92, vLLM's default for
estimate-based KV sizing since v0.20.0). The live part is model
bandwidth utilization (MBU): bytes a real decode step of the demo model moves (weights + KV read) per second,
over this machine's measured memory bandwidth (`measure_here`, `measure_demo`: the engine's timings of a
GEMV, a GEMM and the demo model's decode step). This module packages those numbers into dataclasses with the
page's units, their table rows and sentences, and `claims()` checks them at the page's defaults.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine.memory.catalog import GPUS, MODELS
from engine.memory.footprint import serving_footprint
from engine.memory.roofline import Roofline, roofline
from engine.memory.specs import GpuSpec
from engine.memory.startup import DEFAULT_GPU_MEMORY_UTILIZATION
from engine.memory.units import GiB
from kernels.validate import is_whole
from lessons.measure import Measurement, TooNoisy, measure_demo_decode, measure_machine

WEIGHT_DTYPES: tuple[str, ...] = ("bf16", "fp8", "int4")
MAX_BATCH = 256  # the batch slider's range
SWEEP_BATCHES: tuple[int, ...] = (1, 4, 16, 64, 256)
GPU_MEMORY_UTILIZATION = DEFAULT_GPU_MEMORY_UTILIZATION  # vLLM's default share of GPU memory (0.92)
DEFAULTS: dict[str, Any] = {
    "model": "llama-3-8b",
    "gpu": "h100-sxm",
    "dtype": WEIGHT_DTYPES[0],
    "batch": 1,
    "context": 4096,
}  # the page's (lessons/links.py reads them)


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
    max_batch: int  # whole blocks (vLLM's default size) per sequence, as vLLM's "maximum concurrency"

    def kv_bytes(self, batch: int) -> int:
        """KV cache of `batch` sequences at the context length."""
        return batch * self.context_len * self.kv_bytes_per_token

    def kv_gib(self, batch: int) -> float:
        """KV cache of `batch` sequences at the context length, in GiB."""
        return self.kv_bytes(batch) / GiB

    @property
    def kv_budget_gib(self) -> float:
        """What is left for KV on the GPU, in GiB (0 when weights and activations take everything)."""
        return max(self.kv_budget_bytes, 0) / GiB

    @property
    def gpu_name(self) -> str:
        """The GPU's display name."""
        return GPUS[self.gpu].name

    def fits(self, batch: int) -> bool:
        """Whether `batch` sequences of the context length fit in the KV budget at once."""
        return batch <= self.max_batch

    def why(self, batch: int) -> str:
        """One sentence: does this batch fit, and what is the largest that does."""
        gpu, need, left = self.gpu_name, self.kv_gib(batch), self.kv_budget_gib
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


def context_problem(model: str, context_len: int) -> tuple[str, str] | None:
    """(what is wrong, how to fix it) when `model` cannot read `context_len` tokens of context, else None."""
    limit = MODELS[model].max_context  # an unknown key is a ValueError listing the known ones
    if context_len <= limit:
        return None
    return (
        f"{model} reads at most {limit:,} tokens of context; {context_len:,} is an impossible setting.",
        f"lower the context length to {limit:,} or less, or pick a model with a longer context.",
    )


@dataclass(frozen=True)
class OpBytes:
    """Bytes one operation of a decode step moves per generated token (weights shared by the batch)."""

    op: str  # the roofline's operation name ("attention" reads the KV cache)
    mb_per_token: float  # MB (10**6 bytes) per generated token


@dataclass(frozen=True, slots=True)
class RooflinePoint:
    """One step on the roofline chart: its name, arithmetic intensity and attainable FLOP/s."""

    name: str  # "decode (batch 4)"
    intensity: float  # FLOP per byte moved
    flops: float  # attainable FLOP/s at the step's roofline bound


@dataclass(frozen=True)
class BandwidthLesson:
    """Decode and prefill steps of one configuration plus the per-token figures page 1 headlines."""

    decode: Roofline
    prefill: Roofline

    @property
    def gpu(self) -> GpuSpec:
        """The GPU both steps run on (its peak FLOP/s and bandwidth draw the roof)."""
        return self.decode.gpu

    @property
    def bandwidth_tb_per_s(self) -> float:
        """The GPU's HBM bandwidth in TB/s (10**12 bytes per second)."""
        return self.gpu.bandwidth_bytes_per_s / 1e12

    @property
    def peak_tflops(self) -> float:
        """The GPU's dense bf16 peak in TFLOP/s."""
        return self.gpu.bf16_flops / 1e12

    @property
    def bytes_per_token(self) -> float:
        """HBM bytes moved per generated token in decode (weights + KV, shared across the batch)."""
        return self.decode.bytes / self.decode.batch_size

    @property
    def gb_per_token(self) -> float:
        """`bytes_per_token` in GB (10**9 bytes)."""
        return self.bytes_per_token / 1e9

    @property
    def ms_per_token(self) -> float:
        """Roofline lower bound of one decode step in milliseconds (every sequence gets one token)."""
        return self.decode.time_s * 1e3

    @property
    def decode_tokens_per_s(self) -> float:
        """Generated tokens per second across the batch at the bound."""
        return self.decode.tokens_per_s

    @property
    def decode_limit(self) -> str:
        """What limits decode, in the lesson's words: "bandwidth" or "compute"."""
        return "bandwidth" if self.decode.bound == "memory" else "compute"

    def bytes_per_op(self) -> tuple[OpBytes, ...]:
        """Decode bytes per generated token split by operation (attention = reading the KV cache)."""
        b = self.decode.batch_size
        return tuple(OpBytes(str(row["op"]), float(row["bytes"]) / b / 1e6) for row in self.decode.rows())

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
        """`bytes_per_op` as table rows: op, MB per token."""
        return [{"op": o.op, "MB per token": o.mb_per_token} for o in self.bytes_per_op()]

    def points(self) -> tuple[RooflinePoint, ...]:
        """The roofline chart's points: the decode and the prefill step."""
        return tuple(
            RooflinePoint(f"{r.phase} (batch {r.batch_size})", r.intensity, r.flops / r.time_s)
            for r in (self.decode, self.prefill)
        )

    def roofline_summary(self) -> str:
        """The roofline chart in one sentence (its text alternative): where decode and prefill sit."""
        d, p, ridge = self.decode, self.prefill, self.gpu.ridge_point

        def side(r: Roofline) -> str:
            return "left of the ridge: bandwidth-bound" if r.bound == "memory" else "right of the ridge: compute-bound"

        return (
            f"On the {self.gpu.name} (ridge at {ridge:,.0f} FLOP/byte), decode at batch {d.batch_size:,} does "
            f"{d.intensity:,.1f} FLOP/byte ({side(d)}) and prefill of {p.context_len:,} tokens "
            f"{p.intensity:,.0f} FLOP/byte ({side(p)})."
        )

    def bytes_summary(self) -> str:
        """The bytes-per-token chart in one sentence: the total and the KV cache's ("attention") part."""
        ops = self.bytes_per_op()
        total = sum(o.mb_per_token for o in ops)
        kv = sum(o.mb_per_token for o in ops if o.op == "attention")
        return (
            f"Each generated token moves {total:,.0f} MB: {kv:,.0f} MB ({100 * kv / total:.0f}%) reading the KV "
            f"cache (attention) and {total - kv:,.0f} MB of weights shared by the batch of {self.decode.batch_size:,}."
        )

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
    if not is_whole(context_len) or not 1 <= context_len <= limit:
        raise ValueError(f"context length {context_len} is outside 1 … {limit:,}, the maximum context of {model}")
    if not is_whole(batch_size) or not 1 <= batch_size <= 4096:
        raise ValueError(f"batch size {batch_size} must be a whole number between 1 and 4096")
    return BandwidthLesson(
        decode=roofline(model, gpu, "decode", batch_size, context_len, weight_dtype),
        prefill=roofline(model, gpu, "prefill", 1, context_len, weight_dtype),
    )


@dataclass(frozen=True, slots=True)
class SweepPoint:
    """One batch of the decode sweep: does its KV fit, how intense is its step, how fast does it decode."""

    batch: int
    fits: bool  # its KV cache is inside the GPU's KV budget
    kv_bytes: int  # KV cache of the batch at the context length
    intensity: float  # FLOP per byte of the whole decode step
    attention_intensity: float  # FLOP per byte of attention alone (it reads the KV cache): the GQA group size
    attention_bytes: float  # bytes attention reads per step (every sequence's KV)
    step_bytes: float  # bytes the whole step moves (weights + KV + activations)
    tokens_per_s: float  # generated tokens per second across the batch at the roofline bound
    bound: str  # "memory" or "compute"

    @property
    def kv_share_pct(self) -> float:
        """Share of the step's bytes that are KV reads, in %."""
        return 100 * self.attention_bytes / self.step_bytes

    def row(self) -> dict[str, Any]:
        """The sweep table's row (the batch-sweep chart reads the fields)."""
        return {
            "batch": self.batch,
            "fits in memory": "yes" if self.fits else "no",
            "KV GiB": self.kv_bytes / GiB,
            "FLOP per byte": self.intensity,
            "attention FLOP per byte": self.attention_intensity,
            "KV share of bytes %": self.kv_share_pct,
            "tokens per s": self.tokens_per_s,
            "bound": self.bound,
        }


@dataclass(frozen=True)
class BatchSweep:
    """Decode as the batch grows at one context length, with the fit that marks which batches fit."""

    fit: BatchFit
    group_size: int  # query heads per KV head: attention's FLOP per byte in decode, whatever the batch
    points: tuple[SweepPoint, ...]  # ascending batch

    @property
    def largest(self) -> SweepPoint:
        """The sweep's largest batch."""
        return self.points[-1]

    @property
    def attention_intensity(self) -> float:
        """Attention's FLOP per byte (the same at every batch)."""
        return self.points[0].attention_intensity

    def rows(self) -> list[dict[str, Any]]:
        """One table row per batch (`SweepPoint.row`)."""
        return [p.row() for p in self.points]

    def summary(self) -> str:
        """The batch-sweep chart in one sentence: tokens/s at batch 1 and at the largest batch that fits."""
        first, fitting = self.points[0], [p for p in self.points if p.fits]
        if not fitting:
            return (
                f"No batch of {self.fit.context_len:,}-token sequences fits on the {self.fit.gpu_name}; at batch "
                f"{first.batch:,} the roofline would give {first.tokens_per_s:,.3g} decode tokens/s."
            )
        best = fitting[-1]
        return (
            f"Decode rises from {first.tokens_per_s:,.0f} tokens/s at batch {first.batch:,} to "
            f"{best.tokens_per_s:,.0f} at batch {best.batch:,}, the largest batch that fits, where the KV cache is "
            f"{best.kv_share_pct:.0f}% of the bytes moved."
        )


def batch_sweep(
    model: str, gpu: str, context_len: int, weight_dtype: str = "bf16", batches: tuple[int, ...] = SWEEP_BATCHES
) -> BatchSweep:
    """Decode tokens/s and intensities as the batch grows, each batch marked as fitting in memory or not.

    The largest batch that fits is added as a point of its own. Weights are shared by the batch; KV is not, so
    attention's FLOP per byte stays at the group size while its share of the bytes grows.
    """
    fit = batch_fit(model, gpu, context_len, weight_dtype)
    batch_set = set(batches) | ({fit.max_batch} if 1 <= fit.max_batch < max(batches) else set())
    points = []
    for b in sorted(batch_set):
        r = roofline(model, gpu, "decode", b, context_len, weight_dtype)
        attn = r.ops[0]  # the score / value part that reads the KV cache
        points.append(
            SweepPoint(
                b,
                fit.fits(b),
                fit.kv_bytes(b),
                r.intensity,
                attn.intensity,
                attn.bytes,
                r.bytes,
                r.tokens_per_s,
                r.bound,
            )
        )
    spec = MODELS[model]
    return BatchSweep(fit, spec.num_heads // spec.num_kv_heads, tuple(points))


def model_bandwidth_utilization(step: Measurement, machine: Sequence[Measurement]) -> float:
    """MBU: the decode step's achieved bytes/s (weights + KV read) over this machine's best measured bandwidth."""
    best = max((m.bytes_per_s for m in machine), default=0.0)
    if best <= 0:
        raise ValueError("no machine bandwidth measured: run the machine measurement first")
    return step.bytes_per_s / best


@dataclass(frozen=True)
class MachineBandwidth:
    """This machine's decode-like GEMV and prefill-like GEMM over the same kind of weight (`measure_here`)."""

    gemv: Measurement  # one token vector per weight read: bandwidth-bound
    gemm: Measurement  # `gemm.batch` token vectors per weight read: compute-bound

    @property
    def gemv_gb_per_s(self) -> float:
        """Bandwidth the decode-like GEMV achieved, in GB/s."""
        return self.gemv.bytes_per_s / 1e9

    @property
    def gemv_gflops(self) -> float:
        """Useful work the decode-like GEMV did, in GFLOP/s."""
        return self.gemv.flops_per_s / 1e9

    @property
    def gemm_gflops(self) -> float:
        """Useful work the prefill-like GEMM did, in GFLOP/s."""
        return self.gemm.flops_per_s / 1e9

    @property
    def best_bytes_per_s(self) -> float:
        """The best bandwidth either run achieved, in bytes per second (MBU's denominator)."""
        return max(m.bytes_per_s for m in (self.gemv, self.gemm))

    @property
    def best_gb_per_s(self) -> float:
        """The best bandwidth either run achieved, in GB/s (MBU's denominator)."""
        return self.best_bytes_per_s / 1e9

    @property
    def reuse_gain(self) -> float:
        """How many times more FLOP/s the GEMM achieved than the GEMV: what reusing each byte buys."""
        return self.gemm.flops_per_s / max(self.gemv.flops_per_s, 1.0)

    def rows(self) -> list[dict[str, Any]]:
        """The measurement table: each run's raw fields and rates (`Measurement.row`)."""
        return [self.gemv.row(), self.gemm.row()]


def measure_here() -> MachineBandwidth:
    """Time this machine's GEMV and GEMM (about a second; lessons.measure.measure_machine)."""
    gemv, gemm = measure_machine()
    return MachineBandwidth(gemv, gemm)


@dataclass(frozen=True)
class DemoDecode:
    """The demo model's real decode step, timed, against this machine's measured bandwidth."""

    step: Measurement
    machine: MachineBandwidth

    @property
    def mbu(self) -> float:
        """Model bandwidth utilization: the step's bytes/s over the machine's best measured bandwidth (0 … 1)."""
        return model_bandwidth_utilization(self.step, (self.machine.gemv, self.machine.gemm))

    @property
    def measured(self) -> bool:
        """Whether the MBU is one a machine can produce (0 < MBU <= 100 %): a step cannot stream its bytes faster
        than the machine's best measured bandwidth. Against a machine measurement slowed by other work it can
        come out above, and is then no measurement."""
        return 0 < self.mbu <= 1

    @property
    def mbu_text(self) -> str:
        """The MBU as the page shows it: a percentage, or TOO_NOISY when no machine could produce it."""
        return f"{self.mbu:,.1%}" if self.measured else TOO_NOISY

    def metrics(self) -> list[tuple[str, str, str | None]]:
        """The page's three figures as (label, value, help): a bandwidth above the machine's best is not shown."""
        return [
            ("Demo model: time per generated token", f"{self.ms_per_token:,.2f} ms", None),
            (
                "Demo model: bytes moved per second",
                f"{self.gb_per_s:,.2f} GB/s" if self.measured else TOO_NOISY,
                "weights + KV read per step",
            ),
            (
                "Model bandwidth utilization (MBU)",
                self.mbu_text,
                "the decode step's bytes per second over this machine's measured (GEMV) bandwidth",
            ),
        ]

    def caption(self) -> str:
        """The measurement in one sentence (bytes, time, bandwidth, MBU), or why the MBU is not shown."""
        moved = (
            f"{self.mb_per_step:,.2f} MB per decode step ({self.step.shape}, {self.step.dtype}) in "
            f"{self.ms_per_token:,.2f} ms is {self.gb_per_s:,.2f} GB/s"
        )
        best = f"{self.machine.best_gb_per_s:,.1f} GB/s this machine streamed in the GEMV"
        if not self.measured:
            return (
                f"{moved}, more than the {best}: the machine measurement was slowed by other work, so no MBU is "
                "shown. Measure the machine again, or time the decode step again, when it is less busy."
            )
        return (
            f"{moved}, {self.mbu:,.1%} of the {best}. A tiny model pays a fixed cost per step (Python, kernel "
            "launches, sampling) that its few bytes cannot hide."
        )

    @property
    def ms_per_token(self) -> float:
        """Milliseconds per decode step (one generated token, batch 1)."""
        return self.step.seconds * 1e3

    @property
    def gb_per_s(self) -> float:
        """Bytes the step moves per second (weights + KV read), in GB/s."""
        return self.step.bytes_per_s / 1e9

    @property
    def mb_per_step(self) -> float:
        """Bytes one decode step moves, in MB."""
        return self.step.bytes_moved / 1e6

    def against(self, machine: MachineBandwidth) -> DemoDecode:
        """The same step measured against another (a later) measurement of this machine."""
        return DemoDecode(self.step, machine)

    def rows(self) -> list[dict[str, Any]]:
        """The measurement table: the step's raw fields and rates (`Measurement.row`)."""
        return [self.step.row()]


TOO_NOISY = "too noisy to measure now"


def measure_demo(machine: MachineBandwidth | None = None) -> DemoDecode:
    """Time a fresh demo-model engine's decode step (measuring the machine first when `machine` is None).

    The step may not stream its bytes faster than the machine's best measured bandwidth (measure.py times it
    again when it does). When no round of timing gives a possible step, the machine is measured once more (a
    measurement slowed by other work makes an honest step look impossible), the faster of the two kept, and
    the step timed again; then TooNoisy. Raises FileNotFoundError (or OSError) when the demo weights are not
    installed."""
    machine = measure_here() if machine is None else machine
    try:
        return DemoDecode(measure_demo_decode(max_bytes_per_s=machine.best_bytes_per_s), machine)
    except TooNoisy:
        machine = max(machine, measure_here(), key=lambda m: m.best_bytes_per_s)
        return DemoDecode(measure_demo_decode(max_bytes_per_s=machine.best_bytes_per_s), machine)


def claims() -> dict[str, dict]:
    """Page 1 at its defaults: no batch beyond the KV budget shown as fitting; the demo model's MBU measured."""
    d = DEFAULTS
    sweep = batch_sweep(d["model"], d["gpu"], d["context"], d["dtype"])
    fit = sweep.fit
    # independent of max_batch: a batch shown fitting must have its KV inside the budget
    wrong = [p.batch for p in sweep.points if p.fits and p.kv_bytes > fit.kv_budget_bytes]
    wrong += [b for b in range(1, MAX_BATCH + 1) if fit.fits(b) and fit.kv_bytes(b) > fit.kv_budget_bytes]
    entry: dict[str, Any] = {
        "claim": "no offered batch beyond the GPU's KV budget is shown as fitting, and the demo model's decode "
        "step's bandwidth utilization (MBU) is measured on this machine",
        "max_batch": fit.max_batch,
        "kv_budget_GiB": round(fit.kv_budget_bytes / GiB, 2),
        "sweep": {p.batch: "yes" if p.fits else "no" for p in sweep.points},
        "shown_fitting_beyond_capacity": sorted(set(wrong)),
        "attention_FLOP_per_byte": sorted({round(p.attention_intensity, 2) for p in sweep.points}),
    }
    try:
        demo = measure_demo()
    except (FileNotFoundError, OSError, TooNoisy) as exc:  # the demo weights are not installed, a busy machine
        return {"bandwidth": {**entry, "holds": False, "error": repr(exc)}}
    entry.update(
        mbu=round(demo.mbu, 4),
        demo_GB_per_s=round(demo.gb_per_s, 3),
        machine_GB_per_s=round(demo.machine.best_gb_per_s, 2),
        demo_bytes_per_step=demo.step.bytes_moved,
        demo_ms_per_step=round(demo.ms_per_token, 3),
    )
    return {"bandwidth": {**entry, "holds": not wrong and demo.measured}}
