"""Page 6's calculations: push traffic through the real engine and read it the way a vLLM operator does.

The live part runs `engine.LLM` with the demo model on the CPU (torch backend): a seeded stream of requests
(Poisson arrivals counted in engine steps, random prompts of one length, `OUTPUT_TOKENS` generated tokens
each, greedy, no stop token) is fed to the engine step by step, and every number comes from the engine
itself: its `StepTrace`s (running and waiting requests, KV blocks in use, the scheduler's preemption and
recomputed-token counters, each step's tokens and duration) and its `RequestOutput`s (arrival, first-token
and finish timestamps, preemptions per request). The signals are named as vLLM's metrics (`METRICS`, the
release's vllm/v1/metrics/loggers.py). Arrivals are counted in steps, not seconds, so what is admitted,
preempted and recomputed is the same on every machine; TTFT and TPOT are given both in steps (the same
everywhere) and in milliseconds (this CPU's timing of the same run).

The GPU-scale part replays a ShareGPT-like trace through `lessons.sim` (the engine's own BlockManager and
admission rule, a roofline step time): simulated, and labelled so on the page. It has no chunked prefill,
so the token budget is only explored live.

The page gets frozen dataclasses: `Traffic` (the settings, checked), `PressureRun` (one run: `StepRow`s,
`RequestRow`s, the headline counters and latencies, which limit bound), `RateSweep` / `BudgetSweep` (runs
that differ in one setting, a `RunPoint` each) and `GpuSweep` (the simulator over request rates, a `GpuPoint`
each). The charts read these fields; the `row()`s are the tables and downloads.
"""

from __future__ import annotations

import math
import random
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from engine import LLM, SamplingParams
from engine.memory.catalog import GPUS, MODELS, ModelSpec
from engine.memory.footprint import serving_footprint
from engine.model.loader import load_model
from engine.outputs import StepTrace
from lessons.diagnosis.metrics import BINDS_KV_POOL, BINDS_MAX_NUM_SEQS, BINDS_NEITHER, BINDS_UNKNOWN
from lessons.sim.simulate import simulate_model
from lessons.sim.traces import generate_trace

BLOCK_SIZE = 16  # tokens per KV block, vLLM's default
OUTPUT_TOKENS = 24  # tokens every request generates (no stop token: the same work on every run)
NUM_REQUESTS = 12  # requests per run: enough to fill the pool, few enough for a run of about a second
SEED = 0
VOCAB = 1000  # prompt token ids are drawn below the demo tokenizer's special ids
RATES: tuple[float, ...] = (0.02, 0.05, 0.1, 0.2, 0.3, 0.5)  # new requests per engine step (the traffic slider)
SWEEP_RATES: tuple[float, ...] = (0.05, 0.1, 0.3, 0.5)  # the "traffic grows" chart
PROMPT_LENS: tuple[int, ...] = (16, 32, 48, 64, 96, 128)
POOL_BLOCKS: tuple[int, ...] = (16, 24, 32, 48, 64, 96, 128)  # KV blocks of BLOCK_SIZE tokens
MAX_NUM_SEQS: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
BUDGETS: tuple[int, ...] = (16, 32, 64, 128, 256, 512)  # max_num_batched_tokens (the token budget)
SWEEP_BUDGETS: tuple[int, ...] = (16, 64, 256, 512)  # the token-budget comparison
# The token-budget scenario: 4 requests start, and while they decode the other 8 arrive at once (a burst).
BURST_ARRIVALS: tuple[int, ...] = (0, 0, 0, 0) + (8,) * (NUM_REQUESTS - 4)
DEFAULTS: dict[str, Any] = {
    "rate": 0.3,
    "prompt_len": 48,
    "num_blocks": 24,
    "max_num_seqs": 16,
    "budget": 256,
}  # the page's (lessons/links.py)
GROWN_POOL = 96  # "grow the pool": 12 requests x 72 tokens = 54 blocks fit at once, so nobody is preempted
LOW_RATE = 0.05  # "little traffic": a request every 20 steps on average, each done in about 25

# vLLM v0.34.0's names for what the page shows (vllm/v1/metrics/loggers.py; counters are declared without
# `_total`, which prometheus_client adds when it exposes them). The waiting gauge splits by reason (0.20 and
# later): "capacity" counts the requests waiting for room in the batch or the pool, "deferred" those held back by a
# LoRA budget, a KV transfer or a blocked status. The engine here defers nothing, so every waiting request of its
# runs waits for capacity.
METRICS: dict[str, str] = {
    "kv_usage": "vllm:kv_cache_usage_perc",
    "running": "vllm:num_requests_running",
    "waiting": "vllm:num_requests_waiting",
    "waiting_capacity": 'vllm:num_requests_waiting_by_reason{reason="capacity"}',
    "preemptions": "vllm:num_preemptions_total",
    "ttft": "vllm:time_to_first_token_seconds",
    "tpot": "vllm:request_time_per_output_token_seconds",
    "itl": "vllm:inter_token_latency_seconds",
}
LIMITS = ("KV pool", "max_num_seqs", "token budget", "neither")
# lessons.diagnosis.read_vllm_metrics's verdicts on a pasted scrape, in the page's words
SCRAPE_BINDING: dict[str, str] = {
    BINDS_KV_POOL: "the KV pool",
    BINDS_MAX_NUM_SEQS: "max_num_seqs",
    BINDS_NEITHER: "neither limit",
    BINDS_UNKNOWN: "not known from this scrape",
}

# The simulator's GPU-scale configuration: a ShareGPT-like trace, paged KV at vLLM's memory arithmetic
GPU_MODEL = "llama-2-13b"  # no GQA: 800 KiB of KV per token, so the pool binds on a 40 GB card
GPU_MAX_MODEL_LEN = 2048
# vLLM's gpu_memory_utilization when the KV cache is sized from a profiling estimate (CacheConfig's
# DEFAULT_GPU_MEMORY_UTILIZATION, the default since v0.20; v0.34.0 keeps it for that sizing and defaults to 1.0 with
# its extensible KV cache, on by default on CUDA and ROCm, which measures the free memory after CUDA graph capture)
GPU_UTILIZATION = 0.92
GPU_RATES: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0, 16.0)  # requests per second
GPU_REQUESTS = 300
GPU_DEFAULT = "a100-40gb"


def gpu_choices() -> tuple[str, ...]:
    """The catalog's GPUs on which GPU_MODEL leaves room for at least one GPU_MAX_MODEL_LEN request."""
    fits = []
    for key in GPUS:
        fp = serving_footprint(GPU_MODEL, key, max_model_len=GPU_MAX_MODEL_LEN, gpu_memory_utilization=GPU_UTILIZATION)
        if fp.kv_budget_bytes // fp.kv_bytes_per_token >= GPU_MAX_MODEL_LEN:
            fits.append(key)
    return tuple(fits)


GPU_CHOICES: tuple[str, ...] = tuple(g for g in gpu_choices() if g != "cpu")  # the simulated part's select box


def count_times(n: int) -> str:
    """'1 time', '2 times': a count of preemptions in words."""
    return f"{n} time{'s' * (n != 1)}"


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank q-th percentile (q in 0 … 100) of values; 0.0 for none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


@dataclass(frozen=True)
class Traffic:
    """One run's settings: the traffic and the engine's three limits (pool, seats, token budget)."""

    rate: float = DEFAULTS["rate"]  # new requests per engine step (Poisson)
    prompt_len: int = DEFAULTS["prompt_len"]
    num_blocks: int = DEFAULTS["num_blocks"]  # the KV pool, in blocks of BLOCK_SIZE tokens
    max_num_seqs: int = DEFAULTS["max_num_seqs"]
    budget: int = DEFAULTS["budget"]  # max_num_batched_tokens (the token budget)

    @property
    def pool_tokens(self) -> int:
        """Tokens the KV pool holds."""
        return self.num_blocks * BLOCK_SIZE

    @property
    def request_tokens(self) -> int:
        """Tokens one request holds when it finishes: its prompt plus its output."""
        return self.prompt_len + OUTPUT_TOKENS

    @property
    def request_blocks(self) -> int:
        """KV blocks one finished request holds."""
        return -(-self.request_tokens // BLOCK_SIZE)

    def check(self) -> Traffic:
        """Return self, or raise a ValueError naming the setting that cannot run and what to change."""
        if not (isinstance(self.rate, (int, float)) and 0 < self.rate <= 1 and math.isfinite(self.rate)):
            raise ValueError(f"traffic {self.rate!r} must be a number of new requests per step in (0, 1]")
        for name, options in (
            ("prompt_len", PROMPT_LENS),
            ("num_blocks", POOL_BLOCKS),
            ("max_num_seqs", MAX_NUM_SEQS),
            ("budget", BUDGETS),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or value not in options:
                raise ValueError(f"{name}={value!r} is not offered here; pick one of {', '.join(map(str, options))}")
        if self.budget < self.max_num_seqs:
            raise ValueError(
                f"max_num_batched_tokens (token budget) {self.budget} is smaller than max_num_seqs "
                f'{self.max_num_seqs}: vLLM refuses to start ("max_num_batched_tokens ({self.budget}) must be '
                f'greater than or equal to max_num_seqs ({self.max_num_seqs})"); raise the token budget to at '
                f"least {self.max_num_seqs} or lower max_num_seqs to at most {self.budget}"
            )
        if self.request_tokens > self.pool_tokens:
            raise ValueError(
                f"one request ends with {self.request_tokens} tokens but a pool of {self.num_blocks} blocks holds "
                f"{self.pool_tokens}; give the pool at least {self.request_blocks} blocks or shorten the prompt"
            )
        return self


@dataclass(frozen=True, slots=True)
class StepRow:
    """One engine step as an operator's dashboard sees it (the values after the step)."""

    step: int
    time_ms: float  # the engine's clock at the step's end, from the run's first step
    running: int  # vllm:num_requests_running
    waiting: int  # vllm:num_requests_waiting
    kv_usage: float  # vllm:kv_cache_usage_perc (0 … 1)
    preemptions: int  # vllm:num_preemptions_total, the counter so far
    recomputed_tokens: int  # tokens computed again after preemptions, so far
    prefill_tokens: int  # prompt (or recompute) tokens computed in the step
    decode_tokens: int  # sequences that decoded one token in the step
    step_ms: float  # the step's duration

    def row(self) -> dict[str, float | int]:
        """The dashboard table's row (the chart reads the fields)."""
        return {
            "step": self.step,
            "time ms": round(self.time_ms, 1),
            "running": self.running,
            "waiting": self.waiting,
            "KV usage %": round(100 * self.kv_usage, 1),
            "preemptions (total)": self.preemptions,
            "recomputed tokens (total)": self.recomputed_tokens,
            "prefill tokens": self.prefill_tokens,
            "decodes": self.decode_tokens,
            "step ms": round(self.step_ms, 2),
        }


@dataclass(frozen=True)
class RequestRow:
    """One request's latencies, from the engine's own timestamps and steps."""

    request_id: int
    arrival_step: int
    ttft_steps: int  # steps from its arrival to the step that sampled its first token (1 = at once)
    ttft_ms: float  # first_token_time - arrival_time
    tpot_ms: float  # (finish_time - first_token_time) / (output tokens - 1)
    preemptions: int

    def row(self) -> dict[str, float | int]:
        return {
            "request": self.request_id,
            "arrival step": self.arrival_step,
            "TTFT steps": self.ttft_steps,
            "TTFT ms": round(self.ttft_ms, 1),
            "TPOT ms": round(self.tpot_ms, 2),
            "preemptions": self.preemptions,
        }


@dataclass(frozen=True)
class PressureRun:
    """One run of the traffic through the engine: its steps, its requests and the dashboard's headlines."""

    traffic: Traffic
    steps: tuple[StepRow, ...]
    requests: tuple[RequestRow, ...]
    limit_steps: tuple[tuple[str, int], ...]  # (limit, steps where it held a request back), LIMITS order
    wall_s: float
    burst: bool = False  # BURST_ARRIVALS (the token-budget scenario) rather than Poisson arrivals

    @property
    def preemptions(self) -> int:
        """vllm:num_preemptions_total at the end of the run."""
        return self.steps[-1].preemptions if self.steps else 0

    @property
    def recomputed_tokens(self) -> int:
        return self.steps[-1].recomputed_tokens if self.steps else 0

    @property
    def peak_kv_usage(self) -> float:
        return max((s.kv_usage for s in self.steps), default=0.0)

    @property
    def peak_running(self) -> int:
        return max((s.running for s in self.steps), default=0)

    @property
    def peak_waiting(self) -> int:
        return max((s.waiting for s in self.steps), default=0)

    @property
    def num_steps(self) -> int:
        return len(self.steps)

    def ttft_ms(self, q: float) -> float:
        """TTFT's q-th percentile over the run's requests, ms."""
        return percentile([r.ttft_ms for r in self.requests], q)

    def ttft_steps(self, q: float) -> float:
        return percentile([r.ttft_steps for r in self.requests], q)

    def tpot_ms(self, q: float) -> float:
        """TPOT's q-th percentile over the run's requests, ms."""
        return percentile([r.tpot_ms for r in self.requests], q)

    def itl_ms(self, q: float) -> float:
        """Inter-token latency's q-th percentile over every decoded token, ms: a decode waits for its whole
        step, so each decode of a step counts that step's duration (vllm:inter_token_latency_seconds)."""
        return percentile([s.step_ms for s in self.steps for _ in range(s.decode_tokens)], q)

    def _biggest_decode_steps(self) -> list[StepRow]:
        """The steps that carried decodes and computed the most tokens of any such step."""
        decoding = [s for s in self.steps if s.decode_tokens]
        most = max((s.prefill_tokens + s.decode_tokens for s in decoding), default=0)
        return [s for s in decoding if s.prefill_tokens + s.decode_tokens == most]

    @property
    def max_step_tokens(self) -> int:
        """The most tokens any step that carried a decode computed: what a decoding request waited on."""
        steps = self._biggest_decode_steps()
        return steps[0].prefill_tokens + steps[0].decode_tokens if steps else 0

    @property
    def stall_ms(self) -> float:
        """How long such a step takes (ms; the median when several computed that many tokens, so one step the
        machine slowed down does not stand for all): the gap its decodes saw between two tokens."""
        return percentile([s.step_ms for s in self._biggest_decode_steps()], 50)

    @property
    def binding(self) -> str:
        """The limit that held requests back most often: "KV pool", "max_num_seqs", "token budget" or "neither"."""
        held = [(n, limit) for limit, n in self.limit_steps if n]
        return max(held)[1] if held else "neither"

    def chart_summary(self) -> str:
        """The dashboard chart in one sentence: its peak usage, its preemptions and the limit that binds."""
        return (
            f"KV-cache usage peaks at {self.peak_kv_usage:.0%} of {self.traffic.num_blocks} blocks, the scheduler "
            f"preempts {count_times(self.preemptions)}, at most {self.peak_running} requests "
            f"run and {self.peak_waiting} wait; the limit that binds: {self.binding}."
        )

    def binding_sentence(self) -> str:
        """How an operator tells which limit binds, in this run's numbers."""
        t = self.traffic
        if self.binding == "KV pool":
            return (
                f"The **KV pool** binds: KV usage reached {self.peak_kv_usage:.0%} and the scheduler preempted "
                f"{self.preemptions} times while at most {self.peak_running} of {t.max_num_seqs} seats "
                f"(max_num_seqs) were taken. Fix: more KV memory (a higher gpu_memory_utilization, an fp8 KV cache, "
                f"a smaller model or more GPUs) or less traffic per server; a higher max_num_seqs would only "
                f"admit more requests to preempt."
            )
        if self.binding == "max_num_seqs":
            return (
                f"**max_num_seqs** binds: {self.peak_running} requests ran, the limit of {t.max_num_seqs}, "
                f"while up to {self.peak_waiting} waited and KV usage peaked at only {self.peak_kv_usage:.0%}. "
                f"Fix: raise max_num_seqs (the pool has room), not the memory."
            )
        if self.binding == "token budget":
            return (
                f"The **token budget** binds: waiting requests had seats and blocks, but each step's "
                f"{t.budget} tokens (max_num_batched_tokens) were already spent, so their prefill waited. "
                f"Fix: a larger max_num_batched_tokens (TTFT falls; TPOT rises)."
            )
        return (
            f"**Neither** limit binds: no request ever waited (KV usage peaked at {self.peak_kv_usage:.0%}, "
            f"{self.peak_running} of {t.max_num_seqs} seats)."
        )

    def point(self) -> RunPoint:
        """The run's headline numbers: one point of a sweep's chart and one row of its table."""
        t = self.traffic
        return RunPoint(
            t,
            self.preemptions,
            self.recomputed_tokens,
            self.peak_kv_usage,
            self.peak_running,
            self.peak_waiting,
            self.ttft_ms(50),
            self.ttft_ms(95),
            self.ttft_steps(50),
            self.ttft_steps(95),
            self.tpot_ms(50),
            self.tpot_ms(95),
            self.itl_ms(95),
            self.max_step_tokens,
            self.stall_ms,
            self.binding,
            self.num_steps,
        )


@dataclass(frozen=True, slots=True)
class RunPoint:
    """One run of a sweep in numbers (`PressureRun.point`): what the sweep charts draw and its table shows."""

    traffic: Traffic
    preemptions: int
    recomputed_tokens: int
    peak_kv_usage: float  # 0 … 1
    peak_running: int
    peak_waiting: int
    ttft_p50_ms: float
    ttft_p95_ms: float
    ttft_p50_steps: float
    ttft_p95_steps: float
    tpot_p50_ms: float
    tpot_p95_ms: float
    itl_p95_ms: float
    max_step_tokens: int  # the largest step that carried decodes
    stall_ms: float  # its duration: the gap its decodes saw between two tokens
    binding: str  # one of LIMITS
    steps: int

    def row(self) -> dict[str, float | int | str]:
        """One row of a sweep's table (rounded as the page shows it)."""
        t = self.traffic
        return {
            "requests per step": t.rate,
            "prompt tokens": t.prompt_len,
            "KV blocks": t.num_blocks,
            "max_num_seqs": t.max_num_seqs,
            "max_num_batched_tokens": t.budget,
            "preemptions": self.preemptions,
            "recomputed tokens": self.recomputed_tokens,
            "peak KV usage %": round(100 * self.peak_kv_usage, 1),
            "peak running": self.peak_running,
            "peak waiting": self.peak_waiting,
            "TTFT p50 ms": round(self.ttft_p50_ms, 1),
            "TTFT p95 ms": round(self.ttft_p95_ms, 1),
            "TTFT p50 steps": self.ttft_p50_steps,
            "TTFT p95 steps": self.ttft_p95_steps,
            "TPOT p50 ms": round(self.tpot_p50_ms, 2),
            "TPOT p95 ms": round(self.tpot_p95_ms, 2),
            "ITL p95 ms": round(self.itl_p95_ms, 2),
            "largest step with decodes (tokens)": self.max_step_tokens,
            "its duration ms": round(self.stall_ms, 1),
            "binding limit": self.binding,
            "steps": self.steps,
        }


def load_demo() -> tuple[Any, Any, Any]:
    """The demo model on the CPU (model, config, tokenizer), to share read-only between runs."""
    return load_model("demo", "cpu")


def arrival_steps(rate: float, n: int = NUM_REQUESTS, seed: int = SEED) -> list[int]:
    """Poisson arrivals at `rate` requests per step: the step at which each of n requests arrives (first at 0)."""
    rng = random.Random(seed)
    clock, steps = 0.0, []
    for i in range(n):
        steps.append(math.floor(clock))
        if i < n - 1:
            clock += rng.expovariate(rate)
    return steps


def prompts(prompt_len: int, n: int = NUM_REQUESTS, seed: int = SEED) -> list[list[int]]:
    """n distinct random prompts of prompt_len token ids (no shared prefix, so nothing is a cache hit)."""
    rng = random.Random(seed + 1)
    return [[rng.randrange(VOCAB) for _ in range(prompt_len)] for _ in range(n)]


def _held_back(t: StepTrace, traffic: Traffic) -> str | None:
    """Which limit kept a request waiting after this step (None when nobody waits)."""
    if not t.waiting:
        return None
    if t.preempted or len(t.running) < traffic.max_num_seqs and t.num_batched_tokens < traffic.budget:
        return "KV pool"  # a seat and budget were free, so memory refused the head of the queue
    if len(t.running) >= traffic.max_num_seqs:
        return "max_num_seqs"
    return "token budget"


def run(traffic: Traffic, loaded: tuple[Any, Any, Any] | None = None, burst: bool = False) -> PressureRun:
    """Feed the seeded traffic to a fresh engine (demo model, CPU, torch) step by step until every request
    finished; ValueError (naming the setting and the fix) for settings that cannot run. burst: the token-budget
    scenario's arrivals (`BURST_ARRIVALS`) instead of Poisson ones at traffic.rate."""
    traffic.check()
    llm = LLM(
        "demo",
        block_size=BLOCK_SIZE,
        num_gpu_blocks=traffic.num_blocks,
        device="cpu",
        backend="torch",
        max_num_seqs=traffic.max_num_seqs,
        max_num_batched_tokens=traffic.budget,
        preloaded=loaded or load_demo(),
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one core: on a shared machine more threads make every step's time noisier
    try:
        return _feed(llm, traffic, list(BURST_ARRIVALS) if burst else arrival_steps(traffic.rate), burst)
    finally:
        torch.set_num_threads(threads)


def _feed(llm: LLM, traffic: Traffic, arrivals: list[int], burst: bool) -> PressureRun:
    """The run's loop: add each request at its arrival step, step the engine, record what it reports."""
    params = SamplingParams(max_tokens=OUTPUT_TOKENS, temperature=0.0, ignore_eos=True)
    texts = prompts(traffic.prompt_len)
    arrived_at: dict[int, int] = {}
    first_step: dict[int, int] = {}
    steps: list[StepRow] = []
    held: Counter[str] = Counter()
    clock, nxt, t0 = 0, 0, None
    start = time.perf_counter()
    while nxt < len(arrivals) or llm.has_unfinished_requests():
        if not llm.has_unfinished_requests():
            clock = max(clock, arrivals[nxt])  # an idle server waits for the next arrival
        while nxt < len(arrivals) and arrivals[nxt] <= clock:
            arrived_at[llm.add_request(texts[nxt], params)] = clock
            nxt += 1
        t = llm.step()
        clock += 1
        assert t is not None  # something was queued, so the step ran
        t0 = t.start_time if t0 is None else t0
        for s in t.scheduled:
            if s.sampled_token is not None:
                first_step.setdefault(s.request_id, clock)
        limit = _held_back(t, traffic)
        if limit is not None:
            held[limit] += 1
        steps.append(
            StepRow(
                clock,
                1e3 * (t.start_time + t.duration_s - t0),
                len(t.running),
                len(t.waiting),
                t.kv_usage,
                t.num_preemptions_total,
                t.num_recomputed_tokens_total,
                sum(s.num_new_tokens for s in t.scheduled if s.phase == "prefill"),
                sum(1 for s in t.scheduled if s.phase == "decode"),
                1e3 * t.duration_s,
            )
        )
    wall = time.perf_counter() - start
    requests = []
    for rid, at in arrived_at.items():
        o = llm.get_output(rid)
        first, finish = o.first_token_time, o.finish_time
        assert first is not None and finish is not None  # every request ran to its length
        tpot = (finish - first) / max(len(o.token_ids) - 1, 1)
        requests.append(
            RequestRow(rid, at, first_step[rid] - at, 1e3 * (first - o.arrival_time), 1e3 * tpot, o.num_preemptions)
        )
        llm.release(rid)
    return PressureRun(traffic, tuple(steps), tuple(requests), tuple((k, held[k]) for k in LIMITS[:3]), wall, burst)


@dataclass(frozen=True)
class RateSweep:
    """The same engine settings at growing traffic."""

    runs: tuple[PressureRun, ...]

    def points(self) -> tuple[RunPoint, ...]:
        """Each run's numbers, in traffic order: the traffic chart's points."""
        return tuple(r.point() for r in self.runs)

    def rows(self) -> list[dict[str, float | int | str]]:
        """The traffic table: one row per run (`RunPoint.row`)."""
        return [p.row() for p in self.points()]

    @property
    def rates(self) -> list[float]:
        return [r.traffic.rate for r in self.runs]

    @property
    def preemptions(self) -> list[int]:
        return [r.preemptions for r in self.runs]

    def summary(self) -> str:
        """The traffic chart in one sentence: preemptions and TTFT p95 at the lightest and the heaviest traffic."""
        lo, hi = self.runs[0], self.runs[-1]
        return (
            f"At {lo.traffic.rate:g} new requests per step the engine preempts {count_times(lo.preemptions)} (TTFT p95 "
            f"{lo.ttft_steps(95):g} steps); at {hi.traffic.rate:g} it preempts {count_times(hi.preemptions)} (TTFT p95 "
            f"{hi.ttft_steps(95):g} steps)."
        )


def rate_settings(traffic: Traffic) -> tuple[Traffic, ...]:
    """The "traffic grows" runs: `traffic` at each of SWEEP_RATES."""
    return tuple(replace(traffic, rate=r) for r in SWEEP_RATES)


def rate_sweep(traffic: Traffic, loaded: tuple[Any, Any, Any] | None = None) -> RateSweep:
    """`run` at each of SWEEP_RATES with the other settings of `traffic`."""
    loaded = loaded or load_demo()
    return RateSweep(tuple(run(t, loaded) for t in rate_settings(traffic)))


@dataclass(frozen=True)
class BudgetSweep:
    """The same traffic and limits at different token budgets (max_num_batched_tokens)."""

    runs: tuple[PressureRun, ...]

    def points(self) -> tuple[RunPoint, ...]:
        """Each run's numbers, in budget order: the budget chart's points."""
        return tuple(r.point() for r in self.runs)

    def rows(self) -> list[dict[str, float | int | str]]:
        """The budget table: one row per run (`RunPoint.row`)."""
        return [p.row() for p in self.points()]

    @property
    def smallest(self) -> PressureRun:
        return self.runs[0]

    def summary(self) -> str:
        """The budget chart in one sentence: first tokens against the longest step a decode waited for."""
        a, b = self.smallest, self.largest
        return (
            f"A budget of {a.traffic.budget} tokens gives a median first token after {a.ttft_ms(50):.0f} ms and "
            f"steps of at most {a.max_step_tokens} tokens ({a.stall_ms:.0f} ms); {b.traffic.budget} gives "
            f"{b.ttft_ms(50):.0f} ms and a {b.max_step_tokens}-token step ({b.stall_ms:.0f} ms)."
        )

    @property
    def largest(self) -> PressureRun:
        return self.runs[-1]

    def caption(self) -> str:
        """What the budget chart draws, for the text under it."""
        t = self.smallest.traffic
        return (
            f"The burst (4 requests decoding, then 8 arriving at once) in a {GROWN_POOL}-block pool with "
            f"{t.prompt_len}-token prompts and max_num_seqs {t.max_num_seqs}, once per budget: TTFT p50 (solid), the "
            "gap a decoding request saw between two tokens at the biggest step that carried decodes (dash-dot: "
            "that step's duration, the median of such steps) and TPOT p50 (dotted), in this CPU's milliseconds."
        )

    def outcome(self) -> str:
        """What the smallest and the largest budget did to the burst, in a sentence of the course's Markdown
        (numbers only: no learner text)."""
        small, large = self.smallest, self.largest
        return (
            f"With a budget of **{small.traffic.budget}** tokens no step carrying a decode computed more than "
            f"{small.max_step_tokens} tokens (such a step took {small.stall_ms:.0f} ms), and the median first token "
            f"came after {small.ttft_steps(50):g} steps ({small.ttft_ms(50):.0f} ms). With "
            f"**{large.traffic.budget}** the burst's prompts went in together: a {large.max_step_tokens}-token step "
            f"that its decodes waited {large.stall_ms:.0f} ms for, and first tokens after "
            f"{large.ttft_steps(50):g} steps ({large.ttft_ms(50):.0f} ms)."
        )


def budget_settings(traffic: Traffic) -> tuple[Traffic, ...]:
    """The token-budget runs: `traffic` at each of SWEEP_BUDGETS that its max_num_seqs allows (vLLM needs
    max_num_batched_tokens >= max_num_seqs; at least two budgets), in a pool of GROWN_POOL blocks so memory
    stays out of the way; they run with BURST_ARRIVALS."""
    budgets = [b for b in SWEEP_BUDGETS if b >= traffic.max_num_seqs]
    if len(budgets) < 2:
        budgets = [min(b for b in BUDGETS if b >= traffic.max_num_seqs), BUDGETS[-1]]
    return tuple(replace(traffic, budget=b, num_blocks=GROWN_POOL) for b in dict.fromkeys(budgets))


def budget_sweep(traffic: Traffic, loaded: tuple[Any, Any, Any] | None = None) -> BudgetSweep:
    """`run` at each budget of `budget_settings(traffic)`."""
    loaded = loaded or load_demo()
    return BudgetSweep(tuple(run(t, loaded, burst=True) for t in budget_settings(traffic)))


# ---- GPU scale: the simulator ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GpuPoint:
    """One simulated request rate on the GPU-scale configuration."""

    rate: float  # requests per second
    preemptions: int
    peak_running: int
    peak_waiting: int
    peak_kv_usage: float
    p95_wait_s: float  # arrival to first admission, 95th percentile (vllm:request_queue_time_seconds)
    tokens_per_s: float

    def row(self) -> dict[str, float | int]:
        """The simulator table's row (the chart reads the fields)."""
        return {
            "requests/s": self.rate,
            "preemptions": self.preemptions,
            "peak running": self.peak_running,
            "peak waiting": self.peak_waiting,
            "peak KV usage %": round(100 * self.peak_kv_usage, 1),
            "p95 queue time s": round(self.p95_wait_s, 2),
            "tokens/s": round(self.tokens_per_s, 1),
        }


@dataclass(frozen=True)
class GpuSweep:
    """The simulator over request rates: one model on one GPU with the engine's block manager (simulated)."""

    model: str
    gpu: str
    gpu_memory_utilization: float
    capacity_tokens: int  # the simulated pool's slots: a token each, or for a hybrid one token of one KV-cache group
    points: tuple[GpuPoint, ...]
    kv_groups: int = 1  # KV-cache groups sharing the pool (a hybrid model's sliding groups give blocks back)

    @property
    def model_name(self) -> str:
        return MODELS[self.model].name if self.model in MODELS else self.model

    @property
    def gpu_name(self) -> str:
        return GPUS[self.gpu].name

    def rows(self) -> list[dict[str, float | int]]:
        return [p.row() for p in self.points]

    def pool(self) -> str:
        """What the simulated KV pool holds, in words: tokens, or for a hybrid its slots over its groups."""
        if self.kv_groups == 1:
            return f"{self.capacity_tokens:,} KV tokens"
        return (
            f"{self.capacity_tokens:,} KV slots shared by {self.kv_groups} KV-cache groups (a token takes a slot in "
            "each; the sliding-window groups give theirs back once the token leaves the window)"
        )

    def summary(self) -> str:
        """The simulated chart in one sentence: the first rate that preempts, and the heaviest rate's count."""
        first = next((p for p in self.points if p.preemptions), None)
        last = self.points[-1]
        if first is None:
            return (
                f"Simulated: {self.model_name} on {self.gpu_name} preempts nothing up to {last.rate:g} requests/s "
                f"(peak KV usage {last.peak_kv_usage:.0%})."
            )
        return (
            f"Simulated: {self.model_name} on {self.gpu_name} first preempts at {first.rate:g} requests/s "
            f"({count_times(first.preemptions)}) and {count_times(last.preemptions)} at {last.rate:g} requests/s, "
            f"p95 queue time {last.p95_wait_s:.1f} s."
        )


def _gpu_footprint(gpu: str, spec: ModelSpec):
    return serving_footprint(
        spec, gpu, weight_dtype="bf16", max_model_len=GPU_MAX_MODEL_LEN, gpu_memory_utilization=GPU_UTILIZATION
    )


def _fits(gpu: str, spec: ModelSpec) -> bool:
    fp = _gpu_footprint(gpu, spec)
    return fp.startup_error is None and fp.kv_budget_bytes > 0


def gpu_fit_error(gpu: str, model: ModelSpec | str = GPU_MODEL) -> str | None:
    """Why this model cannot serve a GPU_MAX_MODEL_LEN request on this GPU at TP 1 (None when it can)."""
    if gpu not in GPUS:
        raise ValueError(f"unknown GPU {gpu!r}; pick one of {', '.join(GPU_CHOICES)}")
    spec = MODELS[model] if isinstance(model, str) else model
    if _fits(gpu, spec):
        return None
    fp = _gpu_footprint(gpu, spec)
    bigger = [g for g in GPU_CHOICES if g != gpu and _fits(g, spec)]
    where = f"pick one of {', '.join(bigger)}" if bigger else "no single catalog GPU holds it at TP 1"
    return (
        f"{spec.name} does not fit {fp.gpu.name} at TP 1: its weights are {fp.weights_bytes / 1e9:,.1f} GB in bf16 "
        f"and the GPU has {fp.capacity_bytes / 1e9:,.1f} GB, so no {GPU_MAX_MODEL_LEN:,}-token request's KV has room. "
        f"Pick a bigger GPU or a smaller model ({where})."
    )


def gpu_sweep(gpu: str = GPU_DEFAULT, model: ModelSpec | str = GPU_MODEL) -> GpuSweep:
    """The same seeded ShareGPT-like trace at each of GPU_RATES through the paged simulator (simulated).

    model: a catalog key or a ModelSpec (a learner's parsed config.json); one that leaves no room for a
    GPU_MAX_MODEL_LEN request on this GPU at TP 1 is a ValueError naming the model, its weights and the GPU."""
    if isinstance(model, str) and model not in MODELS:
        raise ValueError(f"unknown model {model!r}; pick one of {', '.join(MODELS)}")
    error = gpu_fit_error(gpu, model)
    if error:
        raise ValueError(error)
    points, capacity, groups = [], 0, 1
    for rate in GPU_RATES:
        trace = generate_trace("sharegpt", GPU_REQUESTS, rate, seed=SEED, max_len=GPU_MAX_MODEL_LEN)
        res = simulate_model(
            trace,
            model,
            gpu,
            "paged",
            max_model_len=GPU_MAX_MODEL_LEN,
            gpu_memory_utilization=GPU_UTILIZATION,
        )
        capacity, groups = res.capacity_tokens, max(1, len(res.config.groups))
        cols = res.columns
        free = min(cols["free"], default=capacity)
        s = res.summary
        points.append(
            GpuPoint(
                rate,
                s.num_preemptions,
                s.peak_concurrency,
                int(max(cols["waiting"], default=0)),
                1 - free / capacity if capacity else 0.0,
                s.p95_wait_s,
                s.tokens_per_s,
            )
        )
    label = model if isinstance(model, str) else model.name
    return GpuSweep(label, gpu, GPU_UTILIZATION, capacity, tuple(points), groups)


def claims() -> dict[str, dict]:
    """Page 6 at its defaults, on the real engine: preemptions appear as traffic grows and vanish when the pool
    grows; a small token budget gives a lower TPOT and a higher TTFT than a large one."""
    loaded = load_demo()
    base = Traffic()
    low, high = run(replace(base, rate=LOW_RATE), loaded), run(base, loaded)
    grown = run(replace(base, num_blocks=GROWN_POOL), loaded)
    budgets = budget_sweep(base, loaded)
    small, large = budgets.smallest, budgets.largest
    pressure_holds = low.preemptions == 0 < high.preemptions and grown.preemptions == 0
    budget_holds = (
        small.ttft_steps(50) > large.ttft_steps(50)
        and small.max_step_tokens < large.max_step_tokens
        and small.stall_ms < large.stall_ms
    )
    return {
        "pressure": {
            "claim": "at the page's defaults the real engine preempts under heavy traffic, not under light "
            "traffic, and not once the KV pool grows",
            "holds": pressure_holds,
            "preemptions": {
                "low_traffic": low.preemptions,
                "default": high.preemptions,
                "grown_pool": grown.preemptions,
            },
            "recomputed_tokens": high.recomputed_tokens,
            "peak_kv_usage_pct": round(100 * high.peak_kv_usage, 1),
            "binding": {"default": high.binding, "grown_pool": grown.binding},
            "settings": {**DEFAULTS, "low_rate": LOW_RATE, "grown_pool": GROWN_POOL},
            "wall_s": round(high.wall_s, 2),
        },
        "pressure.budget": {
            "claim": "with chunked prefill a small max_num_batched_tokens keeps every step that carries decodes "
            "small and quick (no long gap between two tokens) and makes first tokens late (higher TTFT), "
            "compared with a large one, on a burst of prompts",
            "holds": budget_holds,
            "budgets": [r.traffic.budget for r in budgets.runs],
            "ttft_p50_steps": [r.ttft_steps(50) for r in budgets.runs],
            "ttft_p50_ms": [round(r.ttft_ms(50), 1) for r in budgets.runs],
            "tpot_p50_ms": [round(r.tpot_ms(50), 2) for r in budgets.runs],
            "tpot_p95_ms": [round(r.tpot_ms(95), 2) for r in budgets.runs],
            "itl_p95_ms": [round(r.itl_ms(95), 2) for r in budgets.runs],
            "largest_step_with_decodes": [r.max_step_tokens for r in budgets.runs],
            "that_step_ms": [round(r.stall_ms, 1) for r in budgets.runs],
        },
    }
