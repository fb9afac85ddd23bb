"""What a serving simulation reports: per-step memory columns, events, per-request outcomes and a summary.

The memory terms are the vLLM paper's (Kwon et al., SOSP 2023, §3): *stored* slots hold a live token,
*reserved* slots wait for tokens a request will still generate, *internal* slots will never be used, and
*external* slots are free gaps too small for the request at the head of the queue (Fig. 2 charts the same
split). Waste is the step-average, over steps with running requests, of (reserved + internal + external) /
(those + stored): the share of held KV memory that holds no live token.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

__all__ = ["COLUMNS", "SimEvent", "RequestOutcome", "SimSummary", "SimResult", "summarize"]

# time_s: clock at the step's start; stored..free: KV slots, summing to the capacity; running / waiting: requests;
# finished: cumulative; generated: tokens decoded in the step; step_s: its roofline duration, so the step's
# throughput is generated / step_s.
COLUMNS = (
    "step",
    "time_s",
    "stored",
    "reserved",
    "internal",
    "external",
    "free",
    "running",
    "waiting",
    "finished",
    "generated",
    "step_s",
)


@dataclass(frozen=True, slots=True)
class SimEvent:
    """Something a learner should see: admit, finish, preempt, reject (never fits) or oom (failed allocation)."""

    step: int
    time_s: float
    kind: str
    request_id: int
    detail: str = ""


@dataclass(slots=True)
class RequestOutcome:
    """What happened to one request."""

    request_id: int
    status: str = "unfinished"  # finished | rejected | oom | unfinished
    arrival_s: float = 0.0
    first_admit_s: float | None = None
    finish_s: float | None = None
    generated: int = 0
    preemptions: int = 0


@dataclass(frozen=True, slots=True)
class SimSummary:
    """Headline numbers of a run."""

    avg_waste: float
    avg_internal: float
    avg_reserved: float
    avg_external: float
    peak_concurrency: int
    tokens_per_s: float
    generated_tokens: int
    num_finished: int
    num_rejected: int
    num_oom: int
    num_preemptions: int
    num_unfinished: int
    p95_wait_s: float
    mean_latency_s: float
    duration_s: float
    num_steps: int
    wall_s: float


@dataclass
class SimResult:
    """Per-step records (one tuple of COLUMNS each), events, per-request outcomes and the summary."""

    config: Any  # the SimConfig that produced it
    steps: list[tuple[float, ...]]
    events: list[SimEvent]
    requests: list[RequestOutcome]
    summary: SimSummary
    capacity_tokens: int = 0
    extra: dict[str, float] = field(default_factory=dict)

    @cached_property
    def columns(self) -> dict[str, list[float]]:
        """Column name -> one value per step (built on first use: most callers read only the summary)."""
        return _columns(self.steps)

    def to_rows(self, max_points: int | None = None) -> list[dict[str, float]]:
        """One dict per step, for a dataframe or a chart; max_points keeps every k-th step plus the last."""
        return [dict(zip(COLUMNS, step, strict=True)) for step in self._thinned(max_points)]

    def sampled(self, max_points: int | None = None) -> dict[str, list[float]]:
        """The columns, thinned to at most about max_points steps (charts of 50k-step runs stay light)."""
        if max_points is None or len(self.steps) <= max_points:
            return self.columns
        return _columns(self._thinned(max_points))

    def _thinned(self, max_points: int | None) -> list[tuple[float, ...]]:
        num_steps = len(self.steps)
        if max_points is None or num_steps <= max_points:
            return self.steps
        if max_points < 2:
            raise ValueError(f"max_points must be >= 2, got {max_points}")
        keep = self.steps[:: -(-num_steps // (max_points - 1))]
        if keep[-1] is not self.steps[-1]:
            keep.append(self.steps[-1])
        return keep


def _columns(steps: list[tuple[float, ...]]) -> dict[str, list[float]]:
    if not steps:
        return {name: [] for name in COLUMNS}
    return {name: list(col) for name, col in zip(COLUMNS, zip(*steps, strict=True), strict=True)}


def summarize(
    cfg: Any,
    steps: list[tuple[float, ...]],
    events: list[SimEvent],
    out: list[RequestOutcome],
    clock: float,
    wall_s: float,
) -> SimResult:
    """Summarise the per-step records: step-averaged waste while requests run, waits, throughput."""
    waste = internal = reserved = external = 0.0
    busy = peak = generated = 0
    for _, _, st, rs, it, ex, _, run, _, _, gen, _ in steps:  # the COLUMNS
        generated += gen
        peak = max(peak, run)
        held = st + rs + it + ex
        if run and held:
            busy += 1
            waste += (rs + it + ex) / held
            internal += it / held
            reserved += rs / held
            external += ex / held
    busy = max(busy, 1)
    waits = sorted(o.first_admit_s - o.arrival_s for o in out if o.first_admit_s is not None)
    latencies = [o.finish_s - o.arrival_s for o in out if o.finish_s is not None]
    start = min((o.arrival_s for o in out), default=0.0)
    duration = max(clock - start, 0.0)
    counts = {k: sum(1 for o in out if o.status == k) for k in ("finished", "rejected", "oom", "unfinished")}
    summary = SimSummary(
        avg_waste=waste / busy,
        avg_internal=internal / busy,
        avg_reserved=reserved / busy,
        avg_external=external / busy,
        peak_concurrency=peak,
        tokens_per_s=generated / duration if duration > 0 else 0.0,
        generated_tokens=generated,
        num_finished=counts["finished"],
        num_rejected=counts["rejected"],
        num_oom=counts["oom"],
        num_preemptions=sum(o.preemptions for o in out),
        num_unfinished=counts["unfinished"],
        p95_wait_s=waits[min(len(waits) - 1, int(0.95 * len(waits)))] if waits else 0.0,
        mean_latency_s=sum(latencies) / len(latencies) if latencies else 0.0,
        duration_s=duration,
        num_steps=len(steps),
        wall_s=wall_s,
    )
    return SimResult(cfg, steps, events, out, summary, capacity_tokens=cfg.capacity_tokens)
