"""Page 4's calculations: static reservation (Max, Pow2, Oracle) and paged KV over one trace, in vLLM's terms.

A static server (FasterTransformer-style, transformers' static cache) reserves `max_model_len` contiguous KV
slots the moment a request is admitted; Orca-style servers reserve the next power of two of the request's
final length (Pow2) or, with an oracle, exactly that length. The vLLM paper's Fig. 2 measured the share of
KV memory holding token states in its re-implementations: Orca (Max) 20.4%, Orca (Pow2) 26.8%, Orca (Oracle)
38.2%, vLLM 96.3% (`PAPER_STORED_PCT`). The vLLM paper (Kwon et al., SOSP 2023, §3 and Fig. 2-3) splits what
such a reservation holds into *stored* tokens, *reserved* slots for tokens not generated yet, *internal*
fragmentation (slots the request will never reach) and *external* fragmentation (gaps between reservations
too small for the next one); its Fig. 3 example reserves 2,048 slots for a request that uses 10, leaving
"2,038 slots" unused. This module runs `lessons.sim.simulate.simulate_model` (the engine's block manager and the
roofline step time) with the learner's model, GPU, max length and traffic once per policy, on the same trace
and the same KV bytes, and turns the results into the page's series, callouts and comparison table: one
`FragmentationReport` with its typical request (`ExampleRequest`), its busiest step (`PeakStep`), the trace
(`TraceSummary`) and each policy's shares of held memory (`PolicyShare`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from engine.memory.catalog import GPUS, MODELS
from engine.memory.footprint import serving_footprint
from engine.memory.startup import DEFAULT_BLOCK_SIZE
from engine.memory.units import GiB, KiB, MiB
from kernels.validate import is_whole
from lessons.labs.choices import MODEL_KEYS
from lessons.sim.metrics import SimSummary
from lessons.sim.simulate import simulate_model
from lessons.sim.traces import DATASETS, generate_trace, trace_stats

MAX_MODEL_LENS: tuple[int, ...] = (512, 1024, 2048, 4096, 8192, 16384, 32768)
MODEL_CHOICES: tuple[str, ...] = tuple(k for k in MODEL_KEYS if k != "demo")  # served models (the demo is a toy)
TRAFFIC: tuple[str, ...] = tuple(DATASETS)  # the traffic select box's options
# Shortest max length whose trace can be drawn quickly: the trace keeps requests with prompt + output <= max.
MIN_MAX_LEN: dict[str, int] = {"sharegpt": 512, "alpaca": 512, "rag": 2048}
MAX_REQUESTS = 400
DEFAULTS: dict[str, Any] = {
    "model": "llama-2-13b",
    "gpu": "a100-40gb",
    "max_model_len": 2048,
    "dataset": "sharegpt",
    "rate": 8.0,
    "requests": 200,
}  # the page's (lessons/links.py)
# Static reservation policies of lessons.sim.policies, by the vLLM paper's names (Fig. 2), and what each reserves.
STATIC_POLICIES: dict[str, tuple[str, str]] = {
    "Max": ("max_model_len", "max_model_len"),
    "Pow2": ("pow2", "next power of two of the final length"),
    "Oracle": ("oracle", "exactly the final length"),
}
# Kwon et al., SOSP 2023, Fig. 2: % of KV memory holding token states (Orca re-implementations, vLLM).
PAPER_STORED_PCT: dict[str, float] = {"Max": 20.4, "Pow2": 26.8, "Oracle": 38.2, "paged": 96.3}
# The systems of that figure, by the policy each one is here.
PAPER_SYSTEMS: dict[str, str] = {"Max": "Orca (Max)", "Pow2": "Orca (Pow2)", "Oracle": "Orca (Oracle)", "paged": "vLLM"}
MAX_RATE = 64.0
CHART_POINTS = 240  # steps kept for the chart (the table behind it has the same rows)
# Series of the stacked area, in vLLM's terms: simulator column -> legend label.
SERIES: dict[str, str] = {
    "stored": "stored (live tokens)",
    "reserved": "reserved (tokens still to come)",
    "internal": "internal fragmentation (never used)",
    "external": "external fragmentation (gaps)",
    "free": "free",
}


def traffic_help() -> str:
    """Where each traffic's prompt and output lengths come from (the traffic box's help)."""
    return "Prompt / output lengths: " + "; ".join(f"{k}: {v.source}" for k, v in DATASETS.items())


def paper_stored_sentence() -> str:
    """Fig. 2's shares in words: "Orca (Max) 20.4%, Orca (Pow2) 26.8%, Orca (Oracle) 38.2%, vLLM 96.3%"."""
    return ", ".join(f"{PAPER_SYSTEMS[key]} {pct}%" for key, pct in PAPER_STORED_PCT.items())


@dataclass(frozen=True)
class ExampleRequest:
    """A typical request (median final length) and what it uses of its max_model_len reservation."""

    prompt: int  # prompt tokens
    output: int  # tokens it writes
    used: int  # slots it fills: prompt + output, at most max_model_len
    reserved: int  # slots a static server reserves for it: max_model_len
    unused: int  # reserved - used: never written


@dataclass(frozen=True, slots=True)
class SlotStep:
    """One (thinned) step of the static Max run: where its KV slots are, and its queue (the stacked-area chart)."""

    time_s: float
    stored: float  # slots holding a live token
    reserved: float  # reserved for tokens still to come
    internal: float  # reserved and never used
    external: float  # free, but in gaps too small for the next request
    free: float
    running: float
    waiting: float

    def row(self) -> dict[str, float]:
        """The area chart's table row: the simulator's column names."""
        return {
            "time_s": self.time_s,
            "stored": self.stored,
            "reserved": self.reserved,
            "internal": self.internal,
            "external": self.external,
            "free": self.free,
            "running": self.running,
            "waiting": self.waiting,
        }


@dataclass(frozen=True)
class PeakStep:
    """The step of the static Max run where reservations held the most slots."""

    step: int
    held: int  # slots held by reservations: stored + reserved + internal
    stored: int  # of them, slots holding a token
    running: int  # requests running at that step

    @property
    def unused(self) -> int:
        """Held slots that store no token."""
        return self.held - self.stored


@dataclass(frozen=True)
class TraceSummary:
    """The replayed trace in numbers (lessons.sim.traces.trace_stats)."""

    num_requests: int
    prompt_mean: float  # tokens, rounded to 0.01
    output_mean: float


@dataclass(frozen=True, slots=True)
class PolicyShare:
    """Where one server's held KV memory goes, step-averaged, with what it achieved and the paper's figure."""

    key: str  # "Max", "Pow2", "Oracle" or "paged"
    server: str  # the comparison table's name for it
    stored_pct: float  # % of held slots storing a live token
    paper_stored_pct: float  # Kwon et al., Fig. 2
    reserved_pct: float  # % reserved for tokens still to come
    internal_pct: float  # % never used (internal fragmentation)
    external_pct: float  # % in gaps too small for the next request (external fragmentation)
    peak_running: int
    tokens_per_s: float
    p95_wait_s: float

    def row(self) -> dict[str, float | str]:
        """The comparison table's row (rounded as the page shows it)."""
        return {
            "server": self.server,
            "stored %": round(self.stored_pct, 1),
            "paper: stored %": self.paper_stored_pct,
            "reserved %": round(self.reserved_pct, 1),
            "internal %": round(self.internal_pct, 1),
            "external %": round(self.external_pct, 1),
            "peak running": self.peak_running,
            "tokens/s": round(self.tokens_per_s, 1),
            "p95 wait s": round(self.p95_wait_s, 2),
        }


def policy_share(key: str, s: SimSummary) -> PolicyShare:
    """One policy's run summary as shares of held memory (`key`: a STATIC_POLICIES key or "paged")."""
    server = (
        f"static {key} ({STATIC_POLICIES[key][1]})"
        if key in STATIC_POLICIES
        else f"paged ({DEFAULT_BLOCK_SIZE}-token blocks)"
    )
    return PolicyShare(
        key,
        server,
        100 * (1 - s.avg_waste),
        PAPER_STORED_PCT[key],
        100 * s.avg_reserved,
        100 * s.avg_internal,
        100 * s.avg_external,
        s.peak_concurrency,
        s.tokens_per_s,
        s.p95_wait_s,
    )


@dataclass(frozen=True)
class FragmentationReport:
    """One static run (and its paged twin) of the learner's settings, ready for the page."""

    model: str
    gpu: str
    max_model_len: int
    dataset: str
    capacity_tokens: int
    kv_bytes_per_token: int
    static: SimSummary  # the Max policy: reserve max_model_len (the stacked-area chart)
    paged: SimSummary
    policies: dict[str, SimSummary]  # Max, Pow2, Oracle, paged: the same trace and KV bytes
    steps: tuple[SlotStep, ...]  # the static Max run's steps, thinned to about CHART_POINTS
    example: ExampleRequest  # a typical request: prompt, output, used, reserved, unused slots
    peak: PeakStep  # the step holding the most reservations
    trace: TraceSummary  # the replayed trace

    @property
    def model_name(self) -> str:
        """The model's display name."""
        return MODELS[self.model].name

    @property
    def gpu_name(self) -> str:
        """The GPU's display name."""
        return GPUS[self.gpu].name

    @property
    def model_max_context(self) -> int:
        """The longest context the model was trained for."""
        return MODELS[self.model].max_context

    @property
    def beyond_training(self) -> bool:
        """True when max_model_len is longer than the model was trained for (a real server would refuse it)."""
        return self.max_model_len > self.model_max_context

    @property
    def kv_kib_per_token(self) -> int:
        """KV bytes of one token in whole KiB."""
        return self.kv_bytes_per_token // KiB

    @property
    def stored_fraction(self) -> float:
        """Step-average share of held KV memory that stores a live token (1 - waste)."""
        return 1.0 - self.static.avg_waste

    @property
    def unused_gib_at_peak(self) -> float:
        """KV memory held but not storing a token at the busiest step, in GiB."""
        return self.peak.unused * self.kv_bytes_per_token / GiB

    @property
    def paged_concurrency_gain(self) -> float:
        """Requests running at once paged over static Max, at their peaks."""
        return self.paged.peak_concurrency / max(self.static.peak_concurrency, 1)

    def callout(self) -> str:
        """The "2,038 unused slots" sentence of the vLLM paper, for the learner's own settings."""
        ex = self.example
        return (
            f"A typical request here has a {ex.prompt:,}-token prompt and writes {ex.output:,} tokens: "
            f"{ex.used:,} slots used out of {ex.reserved:,} reserved, so **{ex.unused:,} slots are never "
            f"used** — {ex.unused * self.kv_bytes_per_token / MiB:,.1f} MiB of KV for one request."
        )

    def shares(self) -> tuple[PolicyShare, ...]:
        """Each policy's shares of held memory, in `policies` order (Max, Pow2, Oracle, paged)."""
        return tuple(policy_share(key, s) for key, s in self.policies.items())

    def share(self, key: str) -> PolicyShare:
        """One policy's shares ("Max", "Pow2", "Oracle" or "paged")."""
        if key not in self.policies:
            raise ValueError(f"policy {key!r} is not in this report; use one of {', '.join(self.policies)}")
        return policy_share(key, self.policies[key])

    def waste_rows(self) -> list[dict[str, float | str]]:
        """The comparison table: step-averaged shares of held memory per kind, one row per policy, with the
        paper's figure (the waste-by-policy chart reads `shares`)."""
        return [s.row() for s in self.shares()]

    def area_summary(self) -> str:
        """The stacked-area chart in one sentence (its text alternative): the busiest step of static Max."""
        peak = self.peak
        return (
            f"Static Max reserving {self.max_model_len:,} tokens per request: at the busiest step "
            f"{peak.running} requests held {peak.held:,} of {self.capacity_tokens:,} KV slots and only "
            f"{peak.stored:,} stored a token; over the run {self.stored_fraction:.1%} of held KV stored tokens."
        )

    def waste_summary(self) -> str:
        """The waste-by-policy chart in one sentence: the share of held KV wasted by each policy."""
        paged = self.share("paged")
        static = [f"static {s.key} {100 - s.stored_pct:.1f}%" for s in self.shares() if s.key != "paged"]
        return (
            f"Share of held KV memory wasted (reserved, internal or external fragmentation): paged "
            f"{100 - paged.stored_pct:.1f}%, {', '.join(static)}."
        )

    def rows(self) -> list[dict[str, float]]:
        """The area chart's table: one row per drawn step (`SlotStep.row`)."""
        return [s.row() for s in self.steps]

    def series(self) -> tuple[list[float], dict[str, list[float]]]:
        """(x = seconds, {legend label: slots}) for the stacked-area chart, bottom to top in SERIES order."""
        steps = self.steps
        slots = (
            [s.stored for s in steps],
            [s.reserved for s in steps],
            [s.internal for s in steps],
            [s.external for s in steps],
            [s.free for s in steps],
        )
        return [s.time_s for s in steps], dict(zip(SERIES.values(), slots, strict=True))


def check_settings(model: str, gpu: str, max_model_len: int, dataset: str, num_requests: int, rate: float) -> None:
    """Raise a ValueError naming the bad setting and the fix; return None when the run can go ahead."""
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; pick one of {', '.join(MODELS)}")
    if gpu not in GPUS:
        raise ValueError(f"unknown GPU {gpu!r}; pick one of {', '.join(GPUS)}")
    if dataset not in DATASETS:
        raise ValueError(f"unknown traffic {dataset!r}; pick one of {', '.join(DATASETS)}")
    if not is_whole(max_model_len) or max_model_len < MIN_MAX_LEN[dataset]:
        raise ValueError(
            f"max_model_len={max_model_len} is too short for {dataset} traffic; use at least "
            f"{MIN_MAX_LEN[dataset]} tokens so its requests fit"
        )
    if not is_whole(num_requests) or not 1 <= num_requests <= MAX_REQUESTS:
        raise ValueError(f"number of requests {num_requests} must be a whole number in 1 … {MAX_REQUESTS}")
    if not (isinstance(rate, (int, float)) and 0 < rate <= MAX_RATE and math.isfinite(rate)):
        raise ValueError(f"request rate {rate} must be a number in (0, {MAX_RATE:g}] requests per second")


def _example(trace: list, max_model_len: int) -> ExampleRequest:
    """The request of median final length: what it uses of its max_model_len reservation."""
    ordered = sorted(trace, key=lambda r: r.prompt_len + r.output_len)
    r = ordered[len(ordered) // 2]
    used = min(r.prompt_len + r.output_len, max_model_len)
    return ExampleRequest(r.prompt_len, r.output_len, used, max_model_len, max_model_len - used)


def _peak(columns: dict[str, list[float]]) -> PeakStep:
    """The step where reservations held the most slots: what they held and what stored a token."""
    held = [s + r + i for s, r, i in zip(columns["stored"], columns["reserved"], columns["internal"], strict=True)]
    if not held:
        return PeakStep(0, 0, 0, 0)
    k = max(range(len(held)), key=held.__getitem__)
    return PeakStep(int(columns["step"][k]), int(held[k]), int(columns["stored"][k]), int(columns["running"][k]))


def static_report(
    model: str,
    gpu: str,
    max_model_len: int,
    dataset: str = "sharegpt",
    num_requests: int = 200,
    rate: float = 8.0,
    seed: int = 0,
) -> FragmentationReport:
    """Replay a seeded trace through a static max-length server and a paged one with the same KV bytes."""
    check_settings(model, gpu, max_model_len, dataset, num_requests, rate)
    fp = serving_footprint(model, gpu, max_model_len=max_model_len)
    capacity = fp.kv_budget_bytes // fp.kv_bytes_per_token if fp.kv_budget_bytes > 0 else 0
    if capacity < max_model_len:
        raise ValueError(
            f"{MODELS[model].name} on {GPUS[gpu].name} leaves room for {max(capacity, 0):,} KV tokens, less than "
            f"one {max_model_len:,}-token reservation; pick a bigger GPU, a smaller model or a shorter max_model_len"
        )
    trace = generate_trace(dataset, num_requests, rate, seed=seed, max_len=max_model_len)
    runs = {
        key: simulate_model(trace, model, gpu, "static", max_model_len=max_model_len, footprint=fp, reservation=res)
        for key, (res, _) in STATIC_POLICIES.items()
    }
    runs["paged"] = simulate_model(trace, model, gpu, "paged", max_model_len=max_model_len, footprint=fp)
    static = runs["Max"]
    stats = trace_stats(trace)
    keep = ("time_s", *SERIES, "running", "waiting")  # SlotStep's fields, in order
    steps = tuple(SlotStep(*(row[k] for k in keep)) for row in static.to_rows(CHART_POINTS))
    return FragmentationReport(
        model=model,
        gpu=gpu,
        max_model_len=max_model_len,
        dataset=dataset,
        capacity_tokens=static.capacity_tokens,
        kv_bytes_per_token=fp.kv_bytes_per_token,
        static=static.summary,
        paged=runs["paged"].summary,
        policies={key: run.summary for key, run in runs.items()},
        steps=steps,
        example=_example(trace, max_model_len),
        peak=_peak(static.columns),
        trace=TraceSummary(stats["num_requests"], stats["prompt_mean"], stats["output_mean"]),
    )


def claims() -> dict[str, dict]:
    """Page 4 at its defaults: does paged KV waste less than every static reservation on the same trace?"""
    d = DEFAULTS
    rep = static_report(d["model"], d["gpu"], d["max_model_len"], d["dataset"], d["requests"], d["rate"])
    waste = {key: round(100 * s.avg_waste, 2) for key, s in rep.policies.items()}
    static = min(v for k, v in waste.items() if k != "paged")
    return {
        "fragmentation": {
            "claim": "paged KV wastes less held memory than static Max, Pow2 and Oracle reservation on the same trace",
            "holds": waste["paged"] < static,
            "waste_pct": waste,
            "stored_pct": {key: round(100 - w, 2) for key, w in waste.items()},
            "paper_stored_pct": dict(PAPER_STORED_PCT),
            "peak_running": {key: s.peak_concurrency for key, s in rep.policies.items()},
            "settings": dict(d),
        }
    }


__all__ = [
    "CHART_POINTS",
    "DEFAULTS",
    "MAX_MODEL_LENS",
    "MAX_RATE",
    "MAX_REQUESTS",
    "MIN_MAX_LEN",
    "MODEL_CHOICES",
    "PAPER_STORED_PCT",
    "PAPER_SYSTEMS",
    "SERIES",
    "STATIC_POLICIES",
    "TRAFFIC",
    "ExampleRequest",
    "FragmentationReport",
    "PeakStep",
    "PolicyShare",
    "TraceSummary",
    "check_settings",
    "claims",
    "paper_stored_sentence",
    "policy_share",
    "static_report",
    "traffic_help",
]
