"""What the engine hands back: a finished request (`RequestOutput`) and a record of one step (`StepTrace`).

`RequestOutput` follows vLLM's offline API (prompt_token_ids, token_ids, text, finish_reason) plus the
per-request timings a serving lesson needs (arrival, first token, finish: TTFT and latency). `StepTrace` is
what the engine playground draws after every step: which requests ran and how many tokens each computed,
who was admitted, preempted or finished, every block table, the allocator's per-block snapshot, the KV
usage and the scheduler's running counters (preemptions, recomputed tokens), which the pressure lesson
charts. It holds plain Python values (copies), so drawing it later never races with the next step.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine.core.block_usage import BlockInfo, BlockUsage

if TYPE_CHECKING:
    from engine.core.scheduler import Scheduler, SchedulerOutput
    from engine.core.sequence import Sequence


def is_decode(query_len: int, context_len: int) -> bool:
    """A row decodes when it computes one token on top of cached context (a label for traces: every row of a
    step attends alike, engine/model/forward_meta.py)."""
    return query_len == 1 and context_len > 0


@dataclass(slots=True)
class RequestOutput:
    """One request's prompt, generated tokens, text, why it stopped and when things happened."""

    request_id: int
    prompt: str | None  # the text prompt, None when token ids were given
    prompt_token_ids: list[int]
    token_ids: list[int]  # generated tokens (a stop token is included)
    text: str  # decoded generated tokens ("" without a tokenizer)
    finish_reason: str | None  # "stop" | "length" | None while running
    arrival_time: float  # time.perf_counter() clock
    first_token_time: float | None = None
    finish_time: float | None = None
    num_cached_tokens: int = 0  # prompt tokens reused from the prefix cache at its first admission (vLLM's)
    num_preemptions: int = 0  # times the request was evicted and recomputed

    @classmethod
    def of(cls, seq: Sequence, tokenizer: Any = None) -> RequestOutput:
        """A request's current state; `tokenizer` (anything with .decode) turns its tokens into text."""
        tokens = seq.completion_token_ids
        return cls(
            request_id=seq.seq_id,
            prompt=seq.prompt,
            prompt_token_ids=seq.prompt_token_ids,
            token_ids=tokens,
            text=tokenizer.decode(tokens) if tokenizer is not None else "",
            finish_reason=seq.finish_reason,
            arrival_time=seq.arrival_time,
            first_token_time=seq.first_token_time,
            finish_time=seq.finish_time,
            num_cached_tokens=seq.num_cached_tokens,
            num_preemptions=seq.num_preemptions,
        )

    @property
    def finished(self) -> bool:
        """True once the request stopped."""
        return self.finish_reason is not None

    @property
    def ttft(self) -> float | None:
        """Time to first token in seconds (queueing + prefill)."""
        return None if self.first_token_time is None else self.first_token_time - self.arrival_time

    @property
    def latency(self) -> float | None:
        """Arrival to finish in seconds."""
        return None if self.finish_time is None else self.finish_time - self.arrival_time


@dataclass(slots=True)
class ScheduledRequest:
    """One request's part in a step."""

    request_id: int
    num_new_tokens: int  # tokens computed this step (a prompt chunk, or 1 for a decode)
    num_computed_tokens: int  # tokens already in the cache before the step
    phase: str  # "decode" (one token on top of cached context, is_decode) or "prefill"
    sampled_token: int | None  # token drawn this step, None after a partial prompt chunk


@dataclass(slots=True)
class StepTrace:
    """Everything one engine step did, as plain values for the playground."""

    step: int
    start_time: float  # time.perf_counter() when the step began
    duration_s: float
    scheduled: list[ScheduledRequest]
    admitted: list[int]
    preempted: list[int]
    finished: list[int]
    copies: list[tuple[int, int]]  # copy-on-write block copies performed before the step
    waiting: list[int]  # request ids still queued after the step, in order
    running: list[int]  # request ids holding blocks after the step, oldest first
    block_tables: dict[int, list[int]]  # running request id -> physical block ids
    blocks: list[BlockInfo]  # every physical block after the step
    usage: BlockUsage
    num_blocks: int
    num_free_blocks: int
    num_preemptions_total: int = 0  # the scheduler's preemptions so far (vLLM's vllm:num_preemptions counter)
    num_recomputed_tokens_total: int = 0  # tokens computed again after preemptions so far
    # Per KV-cache group (engine/core/kv_groups.py): its window (None: full attention), and each running
    # request's table in it (FREED entries: blocks a sliding window gave back). One group for a one-kind model.
    group_windows: tuple[int | None, ...] = (None,)
    group_block_tables: dict[int, list[list[int]]] = field(default_factory=dict)

    @property
    def group_held_blocks(self) -> list[int]:
        """Blocks each KV-cache group holds after the step, over all running requests (FREED entries excluded)."""
        held = [0] * len(self.group_windows)
        for tables in self.group_block_tables.values():
            for g, table in enumerate(tables):
                held[g] += sum(1 for b in table if b >= 0)
        return held

    @property
    def num_batched_tokens(self) -> int:
        """New tokens computed in this step."""
        return sum(r.num_new_tokens for r in self.scheduled)

    @property
    def kv_usage(self) -> float:
        """Fraction of blocks in use (referenced) after the step."""
        return 1.0 - self.num_free_blocks / self.num_blocks

    @classmethod
    def capture(
        cls,
        step: int,
        start_time: float,
        out: SchedulerOutput,
        sampled: list[int | None],
        finished: list[Sequence],
        scheduler: Scheduler,
        kv_bytes_per_token: int = 0,
    ) -> StepTrace:
        """Record a step right after `scheduler.update()`; sampled[i] is out.scheduled[i]'s token or None."""
        bm = scheduler.block_manager
        scheduled = [
            ScheduledRequest(
                s.seq.seq_id,
                s.num_new_tokens,
                s.num_computed_tokens,
                "decode" if is_decode(s.num_new_tokens, s.num_computed_tokens) else "prefill",
                token,
            )
            for s, token in zip(out.scheduled, sampled, strict=True)
        ]
        return cls(
            step=step,
            start_time=start_time,
            duration_s=time.perf_counter() - start_time,
            scheduled=scheduled,
            admitted=list(out.admitted),
            preempted=list(out.preempted),
            finished=[s.seq_id for s in finished],
            copies=list(out.copies),
            waiting=[s.seq_id for s in scheduler.waiting],
            running=[s.seq_id for s in scheduler.running],
            block_tables={s.seq_id: list(s.block_table) for s in scheduler.running},
            blocks=bm.snapshot(),
            usage=bm.usage(kv_bytes_per_token),
            num_blocks=bm.num_blocks,
            num_free_blocks=bm.num_free_blocks,
            num_preemptions_total=scheduler.num_preemptions,
            num_recomputed_tokens_total=scheduler.num_recomputed_tokens,
            group_windows=bm.group_windows,
            group_block_tables={s.seq_id: [list(t) for t in s.block_tables] for s in scheduler.running},
        )
