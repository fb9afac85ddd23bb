"""The simulator's one serving loop and the `SimConfig` it runs under: arrivals, growth and preemption,
admission, memory terms, finishes.

Each step follows the engine's scheduler (`engine.core.scheduler.Scheduler`, vLLM's recompute preemption) with
the rule it shares in `engine.core.admission`: running requests go first, oldest first, each writing one token;
when one needs memory the policy cannot give, the newest running request is preempted (`preempt_newest`)
until it can; a step that preempted admits nobody (`may_admit`); otherwise waiting requests are admitted
first-come-first-served while seats and memory allow, and they prefill their `ctx` tokens in that step. A
preempted request keeps its tokens and prefills them all again when re-admitted. With admission "unchecked"
nothing waits for memory: an admission or a growth that does not fit fails the request with an OOM.

The model of a token follows the vLLM paper's accounting (Kwon et al., SOSP 2023, Fig. 2): a request that
ends with `final` tokens holds ctx + k of them k steps after its admission and finishes when it holds all.
Work is bucketed by step: a step costs O(requests that start, need a new block or finish), not O(running).
The memory terms are in the policy's slots: a token is one slot, except under a policy with `stored_slots`
(a hybrid model's `lessons.sim.group_blocks.GroupBlocks`), which turns the tokens held into the slots they take.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass

from engine.core.admission import may_admit, preempt_newest
from engine.core.kv_groups import KVCacheGroup
from lessons.sim.metrics import RequestOutcome, SimEvent, SimResult, summarize
from lessons.sim.policies import ADMITTED, NEVER, NO_ROOM, RESERVATIONS, MemoryPolicy, SimRequest
from lessons.sim.traces import Request

__all__ = ["POLICIES", "ServingLoop", "SimConfig"]

POLICIES = ("static", "paged")


@dataclass(frozen=True, slots=True)
class SimConfig:
    """What the simulated server does: policy, KV capacity in token slots and admission limits.

    step_time(num_decode, context_tokens, prefill_tokens, prefill_pairs) -> seconds prices a step (e.g. an
    `engine.memory.roofline.StepTimeModel`); None charges a flat 20 ms. watermark is the fraction of blocks the
    paged policy keeps free when admitting (vLLM's default 1%). max_steps bounds a run; what is left is
    "unfinished". reservation sizes a static server's regions; a paged server ignores it. groups: the KV-cache
    groups of a hybrid model (engine.core.kv_groups; two or more), whose paged server holds blocks per group over
    one pool of capacity_tokens // block_size blocks (lessons.sim.group_blocks); () for one group.
    """

    policy: str
    capacity_tokens: int
    block_size: int = 16
    max_model_len: int = 2048
    max_num_seqs: int = 256
    reservation: str = "max_model_len"
    admission: str = "fcfs"
    watermark: float = 0.01
    step_time: Callable[..., float] | None = None
    max_steps: int = 1_000_000
    groups: tuple[KVCacheGroup, ...] = ()

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, got {self.policy!r}")
        if self.reservation not in RESERVATIONS:
            raise ValueError(f"reservation must be one of {tuple(RESERVATIONS)}, got {self.reservation!r}")
        if not 0 <= self.watermark < 1:
            raise ValueError(f"watermark must be a fraction in [0, 1), got {self.watermark}")
        if self.admission not in ("fcfs", "unchecked"):
            raise ValueError(f"admission must be 'fcfs' or 'unchecked', got {self.admission!r}")
        for name in ("capacity_tokens", "max_model_len", "max_num_seqs", "block_size", "max_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)}")
        if self.groups and (self.policy != "paged" or len(self.groups) < 2):
            raise ValueError(
                f"groups are the KV-cache groups of a paged server's hybrid model: two or more with policy 'paged', "
                f"got {len(self.groups)} with policy {self.policy!r} (leave groups empty for one group)"
            )
        if self.policy == "paged" and self.capacity_tokens < self.block_size:
            raise ValueError(
                f"capacity_tokens={self.capacity_tokens} holds no whole {self.block_size}-token block; "
                f"give the paged server more KV capacity or a smaller block_size"
            )


def _flat_step_time(num_decode: int, context_tokens: int, prefill_tokens: int = 0, prefill_pairs: float = 0.0) -> float:
    """20 ms a step, whatever runs in it (when no roofline is given)."""
    return 0.02


class ServingLoop:
    """One run of a trace through a policy under a SimConfig's limits; run() returns the SimResult."""

    def __init__(self, trace: list[Request], config: SimConfig, policy: MemoryPolicy) -> None:
        self.config, self.policy = config, policy
        self.unchecked = config.admission == "unchecked"
        reqs = sorted(trace, key=lambda r: (r.arrival_s, r.request_id))
        self.requests = [
            SimRequest(
                i,
                r,
                min(r.prompt_len + r.output_len, config.max_model_len),
                RequestOutcome(r.request_id, arrival_s=r.arrival_s),
                r.prompt_len,
            )
            for i, r in enumerate(reqs)
        ]
        self.arrivals = [r.arrival_s for r in reqs]
        self.next_arrival_s = self.arrivals[0] if reqs else math.inf
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []  # admission order: index 0 is the oldest
        # step -> [(admission number, request)]: the number tells a live entry from one left by an earlier admission
        self.growth_at: defaultdict[int, list[tuple[int, SimRequest]]] = defaultdict(list)
        self.finish_at: defaultdict[int, list[tuple[int, SimRequest]]] = defaultdict(list)
        self.events: list[SimEvent] = []
        self.records: list[tuple[float, ...]] = []  # one tuple of COLUMNS per step
        self.step, self.clock, self.num_arrived, self.num_admissions = 0, 0.0, 0, 0
        self.stored = self.num_finished = 0
        self.num_releases = 0  # memory can only free up when this moves
        # a policy whose growth can give memory back (a hybrid's sliding windows) counts it in num_gave_back
        self.windows = hasattr(policy, "num_gave_back")
        # the head request whose admission last waited for memory, and num_releases then: until a release it waits
        self.blocked: SimRequest | None = None
        self.blocked_at = -1

    def run(self) -> SimResult:
        """Step until every request has finished or failed (or max_steps); summarise the records."""
        t_start = time.perf_counter()
        step_time = self.config.step_time or _flat_step_time
        growth_at, finish_at, records, terms = self.growth_at, self.finish_at, self.records, self.policy.terms
        to_slots = getattr(self.policy, "stored_slots", None)  # tokens -> slots, for a policy whose slots differ
        waiting, running = self.waiting, self.running
        num_requests, max_steps = len(self.arrivals), self.config.max_steps
        while (self.num_arrived < num_requests or waiting or running) and self.step < max_steps:
            step = self.step = self.step + 1
            if self.next_arrival_s <= self.clock or not (running or waiting):
                self._arrive()
            due = growth_at.pop(step, None)
            preempted = self._grow(step, due) if due else False
            context = self.stored  # cached tokens of the requests decoding this step
            if waiting and (waiting[0] is not self.blocked or self.num_releases != self.blocked_at):
                admitted, prefill, pairs = self._admit(step, preempted)
            else:
                admitted, prefill, pairs = 0, 0, 0.0
            num_running = len(running)
            num_decode = num_running - admitted
            stored = self.stored = self.stored + num_decode
            if to_slots is not None:  # a hybrid's pool: each token takes a slot in every group that holds it
                stored = to_slots(stored)
            reserved, internal, external, free = terms(stored, waiting[0] if waiting else None)
            dt = step_time(num_decode, context, prefill, pairs)
            start = self.clock
            self.clock = start + dt
            due = finish_at.pop(step, None)
            if due:
                self._finish(due)
            records.append(
                (
                    step,
                    start,
                    stored,
                    reserved,
                    internal,
                    external,
                    free,
                    num_running,
                    len(waiting),
                    self.num_finished,
                    num_decode,
                    dt,
                )
            )
        outcomes = [r.outcome for r in self.requests]
        return summarize(self.config, records, self.events, outcomes, self.clock, time.perf_counter() - t_start)

    def _emit(self, kind: str, req: SimRequest, detail: str) -> None:
        self.events.append(SimEvent(self.step, self.clock, kind, req.request.request_id, detail))

    def _arrive(self) -> None:
        """Queue the requests that have arrived by now (jumping an idle server's clock to the next one)."""
        reqs, arrivals, max_model_len = self.requests, self.arrivals, self.config.max_model_len
        if not self.running and not self.waiting:
            self.clock = max(self.clock, self.next_arrival_s)
        while self.next_arrival_s <= self.clock:
            req = reqs[self.num_arrived]
            self.num_arrived += 1
            self.next_arrival_s = arrivals[self.num_arrived] if self.num_arrived < len(arrivals) else math.inf
            if req.request.prompt_len >= max_model_len:
                self._fail(req, "rejected", f"prompt of {req.ctx} tokens >= max_model_len {max_model_len}")
            else:
                self.waiting.append(req)

    def _grow(self, step: int, due: list[tuple[int, SimRequest]]) -> bool:
        """Give this step's tokens that open new memory their room, oldest request first; True if it preempted."""
        if len(due) > 1:
            due.sort()  # by admission number (unique, so requests are never compared): the running order
        preempted, grow, growth_at = False, self.policy.grow, self.growth_at
        gave_back = self.policy.num_gave_back if self.windows else 0
        for order, req in due:
            if req.order != order:
                continue  # stopped since this was scheduled (perhaps by an older request, earlier in this step)
            while (next_step := grow(req, step)) is None:
                if self.unchecked:
                    self._stop(req, step - 1, "oom", self.policy.shortage)
                    break
                victim = self._preempt_newest(step)  # never one served before `req`
                preempted = True
                if victim is req:
                    break
            else:
                if next_step <= req.finish_step:
                    growth_at[next_step].append((order, req))
        if self.windows and self.policy.num_gave_back != gave_back:
            self.num_releases += 1  # a window gave blocks back: the head of the queue may fit now
        return preempted

    def _admit(self, step: int, preempted: bool) -> tuple[int, int, float]:
        """Admit waiting requests FCFS while seats and memory allow; (admitted, prefill tokens, prefill pairs)."""
        admitted, prefill, pairs = 0, 0, 0.0
        waiting, running, max_num_seqs = self.waiting, self.running, self.config.max_num_seqs
        while waiting and may_admit(len(running), max_num_seqs, preempted):
            req = waiting[0]
            if req is self.blocked and self.num_releases == self.blocked_at:
                break  # nothing was freed since this request last waited for memory
            verdict = self.policy.admit(req, len(running))
            if verdict == NO_ROOM and not self.unchecked:
                self.blocked, self.blocked_at = req, self.num_releases
                break
            waiting.popleft()
            if verdict != ADMITTED:
                self._fail(req, "rejected" if verdict == NEVER else "oom", self.policy.refusal(req, len(running)))
                continue
            self._start(req, step)
            admitted += 1
            prefill += req.ctx
            pairs += req.ctx * (req.ctx + 1) / 2
        return admitted, prefill, pairs

    def _start(self, req: SimRequest, step: int) -> None:
        """Run an admitted request: it holds ctx tokens after this step and finishes when it holds all."""
        self.num_admissions += 1
        req.order, req.admit_step = self.num_admissions, step
        req.finish_step = step + req.final - req.ctx
        self.running.append(req)
        self.stored += req.ctx
        if req.outcome.first_admit_s is None:
            req.outcome.first_admit_s = self.clock
        self._emit("admit", req, f"{req.ctx} tokens in cache")
        self._schedule(self.finish_at, req, req.finish_step)
        self._schedule(self.growth_at, req, self.policy.first_growth(req))

    def _schedule(self, at: defaultdict[int, list[tuple[int, SimRequest]]], req: SimRequest, step: int) -> None:
        if step <= req.finish_step:
            at[step].append((req.order, req))

    def _stop(self, req: SimRequest, held_at: int, kind: str, detail: str) -> int:
        """Take a running request out (finish or OOM), as it stood after step held_at."""
        self.running.remove(req)
        return self._release(req, held_at, kind, detail)

    def _release(self, req: SimRequest, held_at: int, kind: str, detail: str) -> int:
        """Free the memory of a request already off `running` and record why; returns the tokens it held."""
        held = req.ctx + held_at - req.admit_step
        self._emit(kind, req, detail)
        req.order = 0  # not running: what was scheduled for it is void
        self.stored -= held
        self.policy.release(req)
        self.num_releases += 1
        if kind != "preempt":
            req.outcome.status = "finished" if kind == "finish" else kind
            req.outcome.generated = held - req.request.prompt_len
        return held

    def _preempt_newest(self, step: int) -> SimRequest:
        """Recompute preemption of the newest running request (taken off `running` and freed in one call): it
        goes first in line with all its tokens. Returns it."""
        victim = preempt_newest(self.running)
        victim.ctx = self._release(victim, step - 1, "preempt", self.policy.shortage)
        victim.outcome.preemptions += 1
        self.waiting.appendleft(victim)
        return victim

    def _fail(self, req: SimRequest, status: str, detail: str) -> None:
        """A request that never ran: rejected (can never fit) or oom (unchecked admission found no room)."""
        req.outcome.status = status
        self._emit("reject" if status == "rejected" else "oom", req, detail)

    def _finish(self, due: list[tuple[int, SimRequest]]) -> None:
        """Release the requests that wrote their last token in this step."""
        for order, req in due:
            if req.order == order:
                self._stop(req, self.step, "finish", f"{req.final} tokens")
                req.outcome.finish_s = self.clock
                self.num_finished += 1
