"""Live measurements on this machine: how fast can it stream weights, and how fast can it multiply them?

A decode step multiplies every weight matrix by one token vector (a GEMV): each weight is read once and
used for one multiply-add, about 2 FLOPs per element, so the step is limited by memory bandwidth. A prefill
step multiplies the same weights by many token vectors at once (a GEMM), reusing each weight it reads, so
it is limited by compute. Timing both on the same matrix puts two measured points on this machine's own
roofline (Williams, Waterman and Patterson, "Roofline", CACM 2009). `measure_llm_decode` times real decode
steps of the engine's model when one is loaded.

Measurements are kept small (tens of MB, a handful of repeats) so they finish in about a second on a
2-core CPU; the median of the repeats is reported because a shared machine is noisy. A number derived from
the difference of timings (the decode step's cost per token) is fitted over several lengths and checked
against what the machine can do; when it still comes out impossible it is refused (TooNoisy), never shown.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import torch

from engine import LLM, SamplingParams
from engine.memory.units import MiB

MAX_WEIGHT_BYTES = 1024 * MiB  # a lesson measurement must never hog the learner's machine


@dataclass(frozen=True)
class Measurement:
    """One timed kernel: what it moved and computed, and the achieved rates (median over repeats)."""

    name: str
    shape: str
    dtype: str
    device: str
    threads: int
    bytes_moved: float
    flops: float
    seconds: float
    repeats: int
    batch: int = 1  # token vectors per weight read (1 = decode-like)

    @property
    def bytes_per_s(self) -> float:
        """Achieved memory bandwidth in bytes per second."""
        return self.bytes_moved / self.seconds

    @property
    def flops_per_s(self) -> float:
        """Achieved FLOP/s."""
        return self.flops / self.seconds

    @property
    def intensity(self) -> float:
        """Arithmetic intensity of the kernel in FLOP per byte."""
        return self.flops / self.bytes_moved

    def row(self) -> dict[str, float | str | int]:
        """A flat dict for tables and downloads (raw fields plus the derived rates)."""
        return {
            **asdict(self),
            "GB_per_s": self.bytes_per_s / 1e9,
            "GFLOP_per_s": self.flops_per_s / 1e9,
            "intensity": self.intensity,
        }


def default_device() -> str:
    """Where live lesson runs go: "cuda" when a GPU is present (Triton kernels), else "cpu" (torch backend)."""
    return "cuda" if torch.cuda.is_available() else "cpu"


class TooNoisy(ValueError):
    """A timing that came out physically impossible on every try: the machine is too busy to measure it now.

    A ValueError, so a page's usual error path shows its message (what was measured, and to try again)."""


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_interleaved(
    fns: dict[str, Callable[[], object]],
    repeats: int = 5,
    warmup: int = 1,
    device: str | torch.device = "cpu",
    statistic: str = "median",
    clock: str = "wall",
) -> dict[str, float]:
    """Median (or minimum) seconds per named function, timed round-robin (A, B, A, B, ...) so noise hits both.

    Every function runs `warmup` times untimed first (compilation, caches); CUDA work on `device` is
    synchronized around each timed call, so a call is charged for the kernels it launched. statistic="min"
    keeps each function's fastest call: on a machine shared with other work, the least disturbed one.
    clock="cpu" counts this process's CPU time instead of wall time (CPU work only): time the process spends
    descheduled by other programs is not charged. A function that took no measurable time is no measurement
    (every rate and ratio of it would be infinite): TooNoisy.
    """
    if repeats < 1 or warmup < 0:
        raise ValueError(f"repeats must be >= 1 and warmup >= 0, got repeats={repeats}, warmup={warmup}")
    if statistic not in ("median", "min"):
        raise ValueError(f"statistic must be 'median' or 'min', got {statistic!r}")
    if clock not in ("wall", "cpu"):
        raise ValueError(f"clock must be 'wall' or 'cpu', got {clock!r}")
    device = torch.device(device)
    if clock == "cpu" and device.type != "cpu":
        raise ValueError(f"clock='cpu' times CPU work only; use clock='wall' on {device}")
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    now = time.perf_counter if clock == "wall" else time.process_time
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            _sync(device)
            start = now()
            fn()
            _sync(device)
            samples[name].append(now() - start)
    reduce = statistics.median if statistic == "median" else min
    times = {name: reduce(ts) for name, ts in samples.items()}
    unmeasured = [name for name, t in times.items() if not t > 0]
    if unmeasured:  # a clock that did not advance: a rate or a ratio of this time would be infinite
        raise TooNoisy(
            f"too noisy to measure now: {', '.join(map(repr, unmeasured))} took no measurable time on the "
            f"{clock} clock, which no real run can; try again"
        )
    return times


def median_seconds(fn: Callable[[], object], repeats: int, warmup: int, device: torch.device) -> float:
    """Median wall time of fn() over `repeats` calls after `warmup` untimed calls."""
    return time_interleaved({"fn": fn}, repeats, warmup, device)["fn"]


def measure_weight_streaming(
    weight_bytes: int = 64 * MiB,
    batch: int = 1,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    repeats: int = 5,
    warmup: int = 1,
) -> Measurement:
    """Time y = W @ X for a [rows, 4096] weight of ~weight_bytes and X with `batch` columns.

    batch=1 is a decode-like GEMV (bandwidth-bound); a large batch is a prefill-like GEMM (compute-bound).
    Bytes moved count W once plus X and Y; FLOPs are 2 * rows * cols * batch.
    """
    if not 1 * MiB <= weight_bytes <= MAX_WEIGHT_BYTES:
        raise ValueError(f"weight_bytes={weight_bytes} must be between 1 MiB and {MAX_WEIGHT_BYTES // MiB} MiB")
    if not 1 <= batch <= 4096:
        raise ValueError(f"batch={batch} must be between 1 and 4096 token vectors")
    device = torch.device(device)
    elem = torch.tensor([], dtype=dtype).element_size()
    cols = 4096  # a Llama-7B-class hidden size
    rows = max(1, weight_bytes // (cols * elem))
    # Generated on the device itself: a 1 GiB weight built on the CPU and copied over would take seconds.
    gen = torch.Generator(device=device).manual_seed(0)
    w = torch.randn(rows, cols, generator=gen, device=device, dtype=dtype)  # [rows, cols]
    x = torch.randn(cols, batch, generator=gen, device=device, dtype=dtype)  # [cols, B]
    if batch == 1:
        vec = x[:, 0].contiguous()  # [cols]
        fn: Callable[[], object] = lambda: torch.mv(w, vec)
    else:
        fn = lambda: torch.mm(w, x)
    seconds = median_seconds(fn, repeats, warmup, device)
    moved = (rows * cols + cols * batch + rows * batch) * elem
    return Measurement(
        name="decode-like GEMV" if batch == 1 else f"prefill-like GEMM ({batch} tokens)",
        shape=f"[{rows}, {cols}] x [{cols}, {batch}]",
        dtype=str(dtype).replace("torch.", ""),
        device=str(device),
        threads=torch.get_num_threads(),
        bytes_moved=float(moved),
        flops=float(2 * rows * cols * batch),
        seconds=seconds,
        repeats=repeats,
        batch=batch,
    )


def measure_machine(weight_bytes: int | None = None, prefill_batch: int = 256, repeats: int = 5) -> list[Measurement]:
    """The page-1 pair on the same weight size: a decode-like GEMV and a prefill-like GEMM.

    The default weight is 64 MiB on CPU (larger than most last-level caches) and 1 GiB on a GPU, whose
    L2 cache holds tens of MB and whose HBM streams 64 MiB in microseconds (launch overhead would dominate).
    """
    device = default_device()
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    if weight_bytes is None:
        weight_bytes = MAX_WEIGHT_BYTES if device == "cuda" else 64 * MiB
    gemv = measure_weight_streaming(weight_bytes, 1, dtype, device, repeats)
    # The GEMM does `prefill_batch` times the work; a smaller weight keeps it about as quick as the GEMV.
    gemm = measure_weight_streaming(max(MiB, weight_bytes // 8), prefill_batch, dtype, device, repeats)
    return [gemv, gemm]


def model_weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of every parameter and buffer of a torch module (a tied matrix counted once)."""
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    return params + buffers


def decode_weight_bytes(model: torch.nn.Module) -> int:
    """Weight bytes one batch-1 decode step streams: every parameter and buffer, but of an embedding table that no
    other layer uses only the one row the step gathers. A table tied to the lm_head is read whole by the lm_head."""
    used_elsewhere = {
        id(p)
        for module in model.modules()
        if not isinstance(module, torch.nn.Embedding)
        for p in module.parameters(recurse=False)
    }
    gathered_only = sum(
        (m.weight.numel() - m.weight.shape[-1]) * m.weight.element_size()
        for m in model.modules()
        if isinstance(m, torch.nn.Embedding) and id(m.weight) not in used_elsewhere
    )
    return model_weight_bytes(model) - gathered_only


def decode_kv_read_bytes(kv_bytes_per_token: int, prompt_len: int, new_tokens: int) -> float:
    """Mean KV bytes one decode step reads while a prompt of prompt_len grows by new_tokens (batch 1).

    Token k (k = 2 … new_tokens; token 1 comes from prefill) attends over prompt_len + k - 1 cached tokens,
    a mean of prompt_len + new_tokens / 2.
    """
    if kv_bytes_per_token < 0 or prompt_len < 1 or new_tokens < 2:
        raise ValueError(
            f"need kv_bytes_per_token >= 0, prompt_len >= 1, new_tokens >= 2; got "
            f"{kv_bytes_per_token}, {prompt_len}, {new_tokens}"
        )
    return kv_bytes_per_token * (prompt_len + new_tokens / 2)


DECODE_ATTEMPTS = 3  # timing rounds before a decode step is called too noisy to measure


def decode_lengths(new_tokens: int, points: int = 3) -> tuple[int, ...]:
    """The generation lengths timed to fit the per-token cost: 1 and new_tokens and evenly spaced ones between."""
    if new_tokens < 2:
        raise ValueError(f"new_tokens={new_tokens} must be >= 2 to separate decode from prefill")
    k = min(points, new_tokens)
    return tuple(sorted({round(1 + i * (new_tokens - 1) / (k - 1)) for i in range(k)}))


def per_token_slope(lengths: Sequence[int], seconds: Sequence[float]) -> float:
    """Least-squares slope of seconds against generation length: what each extra token adds (<= 0 when noisy).

    A fit over several lengths uses every timing, so one disturbed run shifts the slope instead of deciding
    it; a difference of two medians turns a busy moment during the shorter run into a negative step time."""
    if len(lengths) != len(seconds) or len(set(lengths)) < 2:
        raise ValueError(f"need seconds for at least two distinct lengths, got {list(lengths)}, {list(seconds)}")
    mean_n, mean_t = statistics.fmean(lengths), statistics.fmean(seconds)
    spread = sum((n - mean_n) ** 2 for n in lengths)
    return sum((n - mean_n) * (t - mean_t) for n, t in zip(lengths, seconds, strict=True)) / spread


def measure_llm_decode(
    llm: object,
    prompt_len: int = 16,
    new_tokens: int = 8,
    repeats: int = 3,
    max_bytes_per_s: float | None = None,
    attempts: int = DECODE_ATTEMPTS,
) -> Measurement:
    """Time real decode steps of an `engine.llm.LLM`: seconds per generated token and bytes moved per second.

    Requests of several lengths (`decode_lengths`: 1 … `new_tokens` tokens) are timed round-robin, each
    length's fastest run kept (noise only ever adds time), and the seconds-per-token is the least-squares
    slope over the lengths, so prefill cost cancels. A slope that is not positive, or a step that would move
    its bytes faster than `max_bytes_per_s` (this machine's best measured bandwidth), is no measurement: it is
    timed again, up to `attempts` rounds, then TooNoisy. Bytes moved per step are the weights it reads
    (`decode_weight_bytes`: of an untied embedding table one row) plus the KV cache the step reads
    (`decode_kv_read_bytes`, from the LLM's `kv_bytes_per_token` when it has one).
    """
    lengths = decode_lengths(new_tokens)
    if attempts < 1:
        raise ValueError(f"attempts={attempts} must be >= 1")
    model = getattr(llm, "model", None)
    if not isinstance(model, torch.nn.Module):
        raise ValueError("llm has no torch `model` attribute to count weight bytes of; pass an engine.llm.LLM")
    prompt = [[(7 * i + 3) % 100 + 1 for i in range(prompt_len)]]
    device = next(model.parameters()).device
    weights = decode_weight_bytes(model)
    kv = decode_kv_read_bytes(int(getattr(llm, "kv_bytes_per_token", 0)), prompt_len, new_tokens)
    fastest = (weights + kv) / max_bytes_per_s if max_bytes_per_s else 0.0  # the shortest step physics allows

    def run(n: int) -> Callable[[], object]:
        params = SamplingParams(max_tokens=n, temperature=0.0, seed=0, ignore_eos=True)
        return lambda: llm.generate(prompt, params)

    fns = {str(n): run(n) for n in lengths}
    fns[str(lengths[0])]()  # one untimed warm-up (first-call costs); warming every length would double the tokens
    tried = []
    for _ in range(attempts):
        times = time_interleaved(fns, repeats, 0, device, statistic="min")
        per_token = per_token_slope(lengths, [times[str(n)] for n in lengths])
        if per_token > 0 and per_token >= fastest:
            break
        tried.append(per_token)
    else:
        ceiling = f", or faster than {max_bytes_per_s / 1e9:,.2f} GB/s allows" if max_bytes_per_s else ""
        raise TooNoisy(
            f"too noisy to measure now: {attempts} rounds of timing gave per-token times of "
            f"{', '.join(f'{t * 1e3:,.3f} ms' for t in tried)} (not positive{ceiling}); the machine is busy, "
            "try again in a moment"
        )
    return Measurement(
        name="engine decode step (demo model)",
        shape=f"batch 1, prompt {prompt_len}, {new_tokens} new tokens; per step {weights / 1e6:,.2f} MB of weights "
        f"+ {kv / 1e3:,.1f} kB of KV",
        dtype=str(next(model.parameters()).dtype).replace("torch.", ""),
        device=str(device),
        threads=torch.get_num_threads(),
        bytes_moved=float(weights + kv),
        flops=float(2 * sum(p.numel() for p in model.parameters())),
        seconds=per_token,
        repeats=repeats,
    )


def measure_demo_decode(new_tokens: int = 8, repeats: int = 3, max_bytes_per_s: float | None = None) -> Measurement:
    """Load a fresh demo-model engine (never shared between learners), time its decode step, drop it.

    Raises FileNotFoundError when the demo weights are not installed (models/demo is created by the
    project's training script), TooNoisy when no round of timing gave a possible step time.
    """
    llm = LLM(model="demo")
    return measure_llm_decode(llm, new_tokens=new_tokens, repeats=repeats, max_bytes_per_s=max_bytes_per_s)
