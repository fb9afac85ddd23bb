"""Production diagnosis: OOM incidents, the learner's diagnosis and fixes, and grading by re-simulation.

An incident is a serving configuration (`ServeConfig`: model, GPU, policy, vLLM-style knobs), a traffic
pattern and a product requirement (context length, queueing-delay target). `grade` applies the learner's
fixes as parameter changes, recomputes the memory arithmetic (`engine.memory`), replays the same trace
through the simulator over the real block allocator (`engine.sim.simulate`) and explains with numbers why the
incident is or is not resolved and what the fix costs. The incidents themselves live in `lessons.diagnosis.incidents`.
Lesson 6 of the course (DESIGN.md); no Streamlit here.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Any

from engine.memory.catalog import GPUS, MODELS, GiB
from engine.memory.footprint import ServingFootprint, serving_footprint
from engine.memory.roofline import StepTimeModel
from engine.sim.simulate import SimConfig, SimResult, SimSummary, simulate
from engine.sim.traces import generate_trace

__all__ = ["ServeConfig", "Traffic", "Diagnosis", "Scenario", "Outcome", "Symptoms", "Grade", "FIX_PARAMS",
           "scenario_ids", "get_scenario", "all_scenarios", "apply_fixes", "run_outcome", "symptoms", "grade",
           "vllm_command"]  # fmt: skip

# The knobs a learner may turn, with the values the page offers (ints in between are accepted too).
FIX_PARAMS: dict[str, tuple[Any, ...]] = {
    "policy": ("static", "paged"),
    "block_size": (8, 16, 32, 64, 128),
    "model": tuple(k for k in MODELS if k != "demo"),
    "kv_cache_dtype": ("auto", "fp8"),
    "max_model_len": (2048, 4096, 8192, 16384, 32768, 131072),
    "max_num_seqs": (4, 8, 16, 32, 64, 128, 256),
    "tensor_parallel_size": (1, 2, 4, 8),
    "gpu_memory_utilization": (0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95),
}


@dataclass(frozen=True, slots=True)
class ServeConfig:
    """A deployment: `static` is a naive server reserving max_model_len per request; `paged` is vLLM."""

    model: str
    gpu: str
    hf_repo: str
    policy: str = "paged"
    block_size: int = 16
    max_model_len: int | None = None  # None: the model's max context, as vLLM defaults
    max_num_seqs: int = 256
    gpu_memory_utilization: float = 0.9
    kv_cache_dtype: str = "auto"
    tensor_parallel_size: int = 1

    @property
    def context_len(self) -> int:
        """The effective max_model_len."""
        return self.max_model_len or MODELS[self.model].max_context


@dataclass(frozen=True, slots=True)
class Traffic:
    """The load and what the product promises: context length and p95 time waiting for a slot."""

    dataset: str
    num_requests: int
    request_rate: float
    required_context: int
    slo_p95_wait_s: float
    seed: int = 0


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """A candidate explanation the learner may pick; `explanation` says why it is right or wrong."""

    id: str
    text: str
    correct: bool
    explanation: str


@dataclass(frozen=True)
class Scenario:
    """One incident: story, deployment, traffic, candidate diagnoses and a fix set known to resolve it."""

    id: str
    title: str
    story: str
    config: ServeConfig
    traffic: Traffic
    diagnoses: tuple[Diagnosis, ...]
    reference_fix: dict[str, Any]
    hint: str
    other_process_bytes: int = 0
    max_gpus: int = 1
    allowed_models: tuple[str, ...] = ()
    seed: int | None = None


@dataclass(frozen=True)
class Outcome:
    """A configuration run against the scenario: memory arithmetic, simulation, and what is still wrong."""

    config: ServeConfig
    footprint: ServingFootprint
    startup_error: str | None
    result: SimResult | None
    problems: tuple[str, ...]

    @property
    def summary(self) -> SimSummary | None:
        """The simulator's summary, or None when the server did not start."""
        return self.result.summary if self.result else None

    @property
    def resolved(self) -> bool:
        """True when nothing in `problems` remains."""
        return not self.problems


@dataclass(frozen=True)
class Symptoms:
    """What the on-call engineer sees: memory breakdown rows, log lines and traffic numbers."""

    memory: list[dict[str, float | str]]
    logs: list[str]
    traffic: dict[str, float | int | str]


@dataclass(frozen=True)
class Grade:
    """The verdict on a diagnosis plus fix set, explained with numbers."""

    resolved: bool
    diagnosis_correct: bool
    diagnosis_feedback: list[str]
    explanation: list[str]
    costs: list[str]
    command: str
    before: Outcome
    after: Outcome
    fixes: dict[str, Any] = field(default_factory=dict)


def scenario_ids() -> list[str]:
    """Ids of the incidents, in course order."""
    from lessons.diagnosis.incidents import INCIDENTS

    return list(INCIDENTS)


def get_scenario(scenario_id: str, seed: int | None = None) -> Scenario:
    """An incident; with a seed, a randomised variant (traffic, sizes) so a class does not share one answer."""
    from lessons.diagnosis.incidents import INCIDENTS

    if scenario_id not in INCIDENTS:
        raise ValueError(f"unknown scenario {scenario_id!r}; known: {list(INCIDENTS)}")
    return INCIDENTS[scenario_id](None if seed is None else random.Random(f"{scenario_id}:{seed}"), seed)


def all_scenarios(seed: int | None = None) -> list[Scenario]:
    """Every incident (variants of one seed)."""
    return [get_scenario(i, seed) for i in scenario_ids()]


def apply_fixes(config: ServeConfig, fixes: dict[str, Any]) -> ServeConfig:
    """The configuration with the learner's parameter changes, each checked for type and range."""
    changes: dict[str, Any] = {}
    for key, value in fixes.items():
        if key not in FIX_PARAMS:
            raise ValueError(f"unknown fix {key!r}; fixes are parameter changes among {list(FIX_PARAMS)}")
        options = FIX_PARAMS[key]
        if key in ("max_model_len", "max_num_seqs"):
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
        elif key == "gpu_memory_utilization":
            ok = isinstance(value, (int, float)) and 0 < value <= 1
        else:
            ok = value in options
        if not ok:
            raise ValueError(f"fix {key}={value!r} is not allowed; use one of {list(options)}")
        changes[key] = value
    if "model" in changes and changes["model"] != config.model:
        changes["hf_repo"] = MODELS[changes["model"]].source
    return replace(config, **changes)


def _footprint(scenario: Scenario, cfg: ServeConfig) -> ServingFootprint:
    """vLLM's start-up arithmetic for the config (the static server is held to the same budget)."""
    util = cfg.gpu_memory_utilization
    gpu_bytes = GPUS[cfg.gpu].memory_bytes
    if cfg.policy == "static":  # no utilization knob: it grows into whatever memory no other process holds
        util = (gpu_bytes - scenario.other_process_bytes) / gpu_bytes
    kv_dtype = "fp8" if cfg.kv_cache_dtype == "fp8" else "bf16"
    return serving_footprint(
        cfg.model,
        cfg.gpu,
        kv_dtype=kv_dtype,
        gpu_memory_utilization=util,
        max_model_len=cfg.context_len,
        block_size=cfg.block_size,
        tensor_parallel=cfg.tensor_parallel_size,
        other_process_bytes=0 if cfg.policy == "static" else scenario.other_process_bytes,
    )


def run_outcome(scenario: Scenario, fixes: dict[str, Any] | None = None) -> Outcome:
    """Apply fixes, compute memory, replay the scenario's trace, and list every unmet requirement."""
    cfg = apply_fixes(scenario.config, fixes or {})
    tr = scenario.traffic
    problems: list[str] = []
    if cfg.tensor_parallel_size > scenario.max_gpus:
        problems.append(
            f"tensor_parallel_size={cfg.tensor_parallel_size} needs {cfg.tensor_parallel_size} GPUs; "
            f"this team has {scenario.max_gpus}"
        )
    if scenario.allowed_models and cfg.model not in scenario.allowed_models:
        problems.append(
            f"{MODELS[cfg.model].name} is not an accepted replacement; the product team accepts "
            f"{', '.join(MODELS[m].name for m in scenario.allowed_models)}"
        )
    if cfg.context_len < tr.required_context:
        problems.append(
            f"max_model_len={cfg.context_len} is below the {tr.required_context} tokens the product "
            f"promises: long conversations would be cut off"
        )
    try:
        fp = _footprint(scenario, cfg)
    except ValueError as e:  # e.g. tensor parallel degree that does not divide the heads
        raise ValueError(f"configuration rejected: {e}") from None
    error = fp.startup_error if cfg.policy == "paged" else None
    if cfg.policy == "static" and fp.kv_budget_bytes <= 0:
        error = (
            f"torch.OutOfMemoryError: CUDA out of memory while loading: weights and activations need "
            f"{(fp.weights_bytes + fp.activation_bytes + fp.overhead_bytes) / GiB:.2f} GiB"
        )
    if error:
        problems.insert(0, f"the server does not start: {error}")
        return Outcome(cfg, fp, error, None, tuple(problems))
    trace = generate_trace(tr.dataset, tr.num_requests, tr.request_rate, seed=tr.seed, max_len=tr.required_context)
    sim = SimConfig(cfg.policy, max(1, fp.kv_budget_bytes // fp.kv_bytes_per_token), block_size=cfg.block_size,
                    max_model_len=cfg.context_len, max_num_seqs=cfg.max_num_seqs,
                    admission="unchecked" if cfg.policy == "static" else "fcfs",
                    step_time=StepTimeModel.for_model(cfg.model, cfg.gpu, "bf16", fp.kv_dtype,
                                                      cfg.tensor_parallel_size))  # fmt: skip
    result = simulate(trace, sim)
    s = result.summary
    if s.num_oom:
        problems.append(
            f"{s.num_oom} of {tr.num_requests} requests crashed with CUDA out of memory (peak "
            f"{s.peak_concurrency} sequences held KV at once)"
        )
    if s.num_rejected:
        problems.append(f"{s.num_rejected} requests were rejected: they do not fit max_model_len or the KV cache")
    if s.p95_wait_s > tr.slo_p95_wait_s:
        problems.append(
            f"p95 wait for a slot is {s.p95_wait_s:.1f} s, above the {tr.slo_p95_wait_s:.0f} s target: "
            f"at most {s.peak_concurrency} sequences ran at once for {tr.request_rate:.1f} requests/s"
        )
    return Outcome(cfg, fp, None, result, tuple(problems))


def symptoms(scenario: Scenario) -> Symptoms:
    """Memory breakdown, log lines and traffic numbers of the incident as deployed (no fixes)."""
    from lessons.diagnosis.incidents import incident_logs

    before = run_outcome(scenario)
    tr = scenario.traffic
    traffic: dict[str, float | int | str] = {"requests": tr.num_requests, "requests_per_s": tr.request_rate,
                                             "workload": tr.dataset, "required_context": tr.required_context,
                                             "p95_wait_target_s": tr.slo_p95_wait_s}  # fmt: skip
    if before.summary:
        s = before.summary
        traffic.update(
            peak_concurrency=s.peak_concurrency,
            p95_wait_s=round(s.p95_wait_s, 2),
            tokens_per_s=round(s.tokens_per_s, 1),
            oom_events=s.num_oom,
            preemptions=s.num_preemptions,
        )
    rows = before.footprint.breakdown()
    if before.config.policy == "static" and before.summary:
        # a static server holds whole reservations: show what the sessions had reserved at the peak
        fp, peak = before.footprint, before.summary.peak_concurrency
        held = min(fp.kv_budget_bytes, peak * before.config.context_len * fp.kv_bytes_per_token)
        parts = [(r["part"], r["bytes"]) for r in rows[:3]]
        parts += [(f"KV reserved by {peak} sessions ({before.config.context_len} tokens each)", held),
                  ("other processes", scenario.other_process_bytes)]  # fmt: skip
        parts.append(("free", fp.capacity_bytes - sum(b for _, b in parts)))
        rows = [{"part": p, "bytes": float(b), "GiB": b / GiB} for p, b in parts]
    return Symptoms(rows, incident_logs(scenario, before), traffic)


def _costs(before: Outcome, after: Outcome) -> list[str]:
    """What the fix gives up, in numbers."""
    b, a = before.config, after.config
    costs: list[str] = []
    if a.context_len < b.context_len:
        costs.append(f"max context shrinks from {b.context_len} to {a.context_len} tokens")
    if a.kv_cache_dtype == "fp8" and b.kv_cache_dtype != "fp8":
        costs.append(
            f"fp8 KV halves bytes per token ({before.footprint.kv_bytes_per_token // 1024} -> "
            f"{after.footprint.kv_bytes_per_token // 1024} KiB) at a small accuracy risk: re-run evals"
        )
    if a.tensor_parallel_size > b.tensor_parallel_size:
        costs.append(
            f"{a.tensor_parallel_size} GPUs instead of {b.tensor_parallel_size}: "
            f"{a.tensor_parallel_size // b.tensor_parallel_size}x the hardware, plus all-reduces per layer"
        )
    if a.model != b.model:
        costs.append(
            f"serves {MODELS[a.model].name} instead of {MODELS[b.model].name} (KV "
            f"{before.footprint.kv_bytes_per_token // 1024} -> {after.footprint.kv_bytes_per_token // 1024}"
            f" KiB/token): answers change, re-run evals"
        )
    if a.max_num_seqs < b.max_num_seqs:
        costs.append(f"at most {a.max_num_seqs} sequences at once (was {b.max_num_seqs})")
    if a.block_size != b.block_size and a.policy == "paged":
        costs.append(
            f"block size {a.block_size}: up to {a.block_size - 1} idle slots per sequence, "
            f"block tables {b.block_size / a.block_size:.1f}x as long"
        )
    if a.gpu_memory_utilization < b.gpu_memory_utilization and a.policy == "paged":
        lost = (b.gpu_memory_utilization - a.gpu_memory_utilization) * after.footprint.capacity_bytes / GiB
        costs.append(
            f"gpu_memory_utilization {b.gpu_memory_utilization:g} -> {a.gpu_memory_utilization:g}: "
            f"{lost:.1f} GiB less for vLLM, all of it KV cache ({after.footprint.num_blocks} blocks left)"
        )
    if after.footprint.num_blocks < before.footprint.num_blocks and before.startup_error is None:
        costs.append(f"KV pool shrinks from {before.footprint.num_blocks} to {after.footprint.num_blocks} blocks")
    if before.summary and after.summary:
        costs.append(
            f"throughput {before.summary.tokens_per_s:.0f} -> {after.summary.tokens_per_s:.0f} tokens/s; "
            f"mean latency {before.summary.mean_latency_s:.1f} -> {after.summary.mean_latency_s:.1f} s"
        )
    return costs


def grade(scenario: Scenario, diagnosis_ids: list[str] | tuple[str, ...], fixes: dict[str, Any]) -> Grade:
    """Grade a diagnosis and re-run the incident with the fixes; explain, with numbers, the verdict and cost."""
    by_id = {d.id: d for d in scenario.diagnoses}
    unknown = [d for d in diagnosis_ids if d not in by_id]
    if unknown:
        raise ValueError(f"unknown diagnosis ids {unknown}; choose among {list(by_id)}")
    right = {d.id for d in scenario.diagnoses if d.correct}
    chosen = set(diagnosis_ids)
    feedback = [f"{'Right' if by_id[i].correct else 'Not this'}: {by_id[i].explanation}" for i in diagnosis_ids]
    feedback += [f"Missed: {by_id[i].explanation}" for i in sorted(right - chosen)]
    before, after = run_outcome(scenario), run_outcome(scenario, fixes)
    fp = after.footprint
    need = scenario.traffic.required_context
    room = fp.max_concurrency(need)
    lines = [f"{MODELS[after.config.model].name} on {fp.gpu.name} (x{after.config.tensor_parallel_size}): weights "
             f"{fp.weights_bytes / GiB:.2f} GiB, KV {fp.kv_bytes_per_token / 1024:.0f} KiB/token, KV pool "
             f"{max(fp.kv_budget_bytes, 0) / GiB:.2f} GiB = {max(fp.kv_budget_bytes, 0) // fp.kv_bytes_per_token} "
             f"tokens: room for {room} full-length ({need}-token) sequence{'s' * (room != 1)} at once"]  # fmt: skip
    if after.summary:
        s = after.summary
        lines.append(f"Replayed {scenario.traffic.num_requests} requests: {s.num_finished} finished, {s.num_oom} OOM, "
                     f"peak {s.peak_concurrency} running, p95 wait {s.p95_wait_s:.1f} s, KV waste "
                     f"{100 * s.avg_waste:.1f}%, {s.tokens_per_s:.0f} tokens/s")  # fmt: skip
    lines += [f"Still wrong: {p}" for p in after.problems] or ["Resolved: every requirement is met."]
    return Grade(
        after.resolved,
        bool(chosen) and chosen <= right,
        feedback,
        lines,
        _costs(before, after),
        vllm_command(scenario, fixes),
        before,
        after,
        dict(fixes),
    )


def vllm_command(scenario: Scenario, fixes: dict[str, Any] | None = None) -> str:
    """The `vllm serve` command line equivalent to the scenario's deployment with the fixes applied."""
    cfg = apply_fixes(scenario.config, fixes or {})
    parts = [f"vllm serve {cfg.hf_repo}", f"--max-model-len {cfg.context_len}",
             f"--gpu-memory-utilization {cfg.gpu_memory_utilization:g}", f"--max-num-seqs {cfg.max_num_seqs}",
             f"--block-size {cfg.block_size}"]  # fmt: skip
    if cfg.kv_cache_dtype == "fp8":
        parts.append("--kv-cache-dtype fp8")
    if cfg.tensor_parallel_size > 1:
        parts.append(f"--tensor-parallel-size {cfg.tensor_parallel_size}")
    cmd = " \\\n    ".join(parts)
    if cfg.policy == "static":
        cmd = "# vLLM has no static-reservation mode; this is the paged engine with the same limits\n" + cmd
    return cmd
