"""Continuous-batching scheduler: a token budget per step, admission by free blocks, preemption by recompute.

Follows vLLM V1's scheduler (as of v0.34.0) (one rule, no prefill/decode phases): every request has `num_tokens`
token ids and `num_computed_tokens` of them already have K/V in the paged cache; each step hands out a
budget of `max_num_batched_tokens` new tokens so the counters catch up. Orca (Yu et al., OSDI 2022)
introduced this iteration-level scheduling; PagedAttention (Kwon et al., SOSP 2023) supplies the blocks.

One step, in order:
1. Running requests, oldest first, each get min(tokens left to compute, budget left): one token for a
   decode, a chunk for a long prompt (chunked prefill), their slots from one `BlockManager.allocate_slots`
   call. When it returns None, the *newest* running request is preempted (taken off `running` and freed in
   one call): its counter is reset to 0 and it goes back to the front of the waiting queue, to be
   recomputed later (prompt + tokens so far, less any prefix-cache hit); then the allocation is tried
   again. `num_preemptions` counts preemptions and `num_recomputed_tokens` the tokens computed a second time
   because of them.
2. Only if nobody was preempted, waiting requests (preempted ones first: they went back to the front) are
   admitted in arrival order while the budget, `max_num_seqs` and the free blocks allow. With
   `scheduler_reserve_full_isl` (on, as in vLLM) a request is admitted only if the blocks of its whole
   sequence fit now, not just those of the chunk it computes this step; that is a check, nothing is set
   aside, so a later chunk can still meet a shortage and preempt. `watermark` (vLLM's default 0.0: none)
   keeps that fraction of the pool free on admission while anything runs. Prefix-cache hits are counted as
   computed at admission, so their tokens are skipped; the lookup (`get_computed_blocks`) hashes the prompt's
   blocks once and hands its result to `allocate_slots`, as vLLM V1's scheduler does. A preempted request's
   freed blocks keep their hashes, so with prefix caching on its readmission finds the full blocks nobody
   has evicted since and recomputes only the rest (`num_recomputed_tokens` counts only those).

Where it differs from vLLM V1 (v0.34.0, `vllm/v1/core/sched/scheduler.py`): vLLM's pool holds back one null
block (`BlockPool.null_block`, so `num_gpu_blocks` N leaves N - 1 for requests) and this engine's does not;
vLLM can run a step's model asynchronously, speculate, and schedule by priority; none of that is modelled.
`schedule()` returns a `SchedulerOutput` whose `scheduled` list holds one `ScheduledSequence` (the sequence,
its new-token count and what it already had cached) per sequence in the step. After the model runs,
`update()` advances the counters, appends sampled tokens, applies stop rules and frees finished requests.
A request is never lost or duplicated: it is always in exactly one of `waiting`, `running` or finished.
Requests that could never fit (longer than `max_model_len`) never reach it: `LLM` refuses them and `add`
asserts it. That `max_model_len` itself fits in the cache (with a sliding window, only its window's blocks
must) is engine/config.py's check. The admission and preemption rule itself is engine/core/admission.py.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from engine.core.admission import admission_headroom, may_admit, preempt_newest, watermark_blocks
from engine.core.block_manager import BlockManager
from engine.core.sequence import Sequence, SequenceStatus
from engine.sampling_params import SamplingParams


@dataclass(slots=True)
class SchedulerConfig:
    """Limits of one step and of one request (EngineConfig checked them; here they are invariants)."""

    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048
    max_model_len: int = 2048
    # Fraction of the pool's blocks an admission leaves free while anything runs; vLLM V1's default, 0.0, keeps none.
    watermark: float = 0.0
    # Admit a request only if its whole sequence's blocks fit now, not only its first chunk's (vLLM V1's flag, on).
    scheduler_reserve_full_isl: bool = True

    def __post_init__(self) -> None:
        assert min(self.max_num_seqs, self.max_num_batched_tokens, self.max_model_len) >= 1, self
        assert 0.0 <= self.watermark < 1.0, self


@dataclass(slots=True)
class ScheduledSequence:
    """One sequence's part in a step: it computes `num_new_tokens` tokens after its `num_computed_tokens`."""

    seq: Sequence
    num_new_tokens: int  # tokens computed this step (query_len): a prompt chunk, or 1 for a decode
    num_computed_tokens: int  # tokens already in the cache before the step (context_len)

    @property
    def token_ids(self) -> list[int]:
        """The step's input tokens: the sequence's tokens from num_computed_tokens on, num_new_tokens of them."""
        start = self.num_computed_tokens
        return self.seq.token_ids[start : start + self.num_new_tokens]

    @property
    def samples(self) -> bool:
        """True when the step reaches the end of the sequence's tokens, so its last logits give the next token.

        Read it before `Scheduler.update` advances the counters (the model runner does).
        """
        return self.num_computed_tokens + self.num_new_tokens == self.seq.num_tokens


@dataclass(slots=True)
class SchedulerOutput:
    """What one step runs: the scheduled sequences with their token counts, plus preemptions and block copies."""

    scheduled: list[ScheduledSequence] = field(default_factory=list)  # running ones first, then newly admitted
    preempted: list[int] = field(default_factory=list)  # seq_ids sent back to waiting this step
    admitted: list[int] = field(default_factory=list)  # seq_ids that left waiting this step
    copies: list[tuple[int, int]] = field(default_factory=list)  # copy-on-write (src, dst) blocks, before the step

    @property
    def num_batched_tokens(self) -> int:
        """Total new tokens in this step (<= max_num_batched_tokens)."""
        return sum(s.num_new_tokens for s in self.scheduled)

    @property
    def is_empty(self) -> bool:
        """True when nothing was scheduled (no work left)."""
        return not self.scheduled


class Scheduler:
    """Waiting queue + running list over one BlockManager, filled each step up to the token budget."""

    def __init__(self, config: SchedulerConfig, block_manager: BlockManager) -> None:
        """config.max_model_len must fit in the block manager's pool (one sequence of that length never
        outgrows it, so preempting everyone else always makes room): engine/config.py checks it once."""
        self.config = config
        self.block_manager = block_manager
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []  # admission order: index 0 is the oldest
        self.num_preemptions = 0  # vLLM's vllm:num_preemptions counter
        self.num_recomputed_tokens = 0  # tokens computed a second time because a preemption discarded their K/V
        self._recompute_until: dict[int, int] = {}  # preempted seq_id -> tokens it had computed when preempted
        self._watermark_blocks = watermark_blocks(config.watermark, block_manager.num_blocks)

    def __repr__(self) -> str:
        return f"Scheduler(waiting={len(self.waiting)}, running={len(self.running)}, {self.block_manager!r})"

    def add(self, seq: Sequence) -> None:
        """Queue a new request: a fresh sequence within max_model_len (LLM.add_request / generate checked it)."""
        assert seq.status is SequenceStatus.WAITING and not seq.block_table and not seq.num_computed_tokens, seq
        assert seq.num_tokens <= self.config.max_model_len, (seq.num_tokens, self.config.max_model_len)
        assert isinstance(seq.sampling_params, SamplingParams), seq.sampling_params
        self.waiting.append(seq)

    @property
    def has_unfinished(self) -> bool:
        """True while any request is waiting or running."""
        return bool(self.waiting or self.running)

    def _preempt_newest(self) -> Sequence:
        """Preempt the newest running request for recompute and return it: off `running` (chosen and removed
        in one call, `preempt_newest`), its blocks freed, its counter reset, first in the waiting line."""
        seq = preempt_newest(self.running)
        self.block_manager.free_sequence(seq)
        done = max(seq.num_computed_tokens, self._recompute_until.get(seq.seq_id, 0))
        self._recompute_until[seq.seq_id] = done
        seq.num_computed_tokens = 0  # num_cached_tokens keeps its first admission's hit, as vLLM reports it
        seq.status = SequenceStatus.PREEMPTED
        seq.num_preemptions += 1
        self.waiting.appendleft(seq)
        self.num_preemptions += 1
        return seq

    def schedule(self) -> SchedulerOutput:
        """Pick this step's sequences and token counts, allocating their cache slots."""
        bm = self.block_manager
        budget = self.config.max_num_batched_tokens
        out = SchedulerOutput()

        # 1. Running requests, oldest first; on a block shortage preempt from the newest end.
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            n = min(seq.num_tokens - seq.num_computed_tokens, budget)
            while (got := bm.allocate_slots(seq, n)) is None:
                victim = self._preempt_newest()  # at an index >= i, so never one already scheduled
                out.preempted.append(victim.seq_id)
                if victim is seq:
                    break
            else:
                out.copies.extend(got.copies)
                out.scheduled.append(ScheduledSequence(seq, n, seq.num_computed_tokens))
                budget -= n
                i += 1

        # 2. Admit waiting requests, unless this step already had to preempt (memory is tight).
        max_num_seqs = self.config.max_num_seqs
        while self.waiting and budget > 0 and may_admit(len(self.running), max_num_seqs, bool(out.preempted)):
            seq = self.waiting[0]
            computed = bm.get_computed_blocks(seq)  # the prefix chain is hashed once, here, per admission
            n = min(seq.num_tokens - computed.num_tokens, budget)
            headroom = admission_headroom(len(self.running), self._watermark_blocks)
            got = bm.allocate_slots(
                seq, n, headroom, computed, self.config.scheduler_reserve_full_isl, self.config.max_num_batched_tokens
            )
            if got is None:  # else it set num_computed to the hit
                break
            self.waiting.popleft()
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            out.scheduled.append(ScheduledSequence(seq, n, seq.num_computed_tokens))
            out.admitted.append(seq.seq_id)
            budget -= n
        return out

    def update(
        self,
        out: SchedulerOutput,
        sampled: list[int | None],
        eos_token_ids: tuple[int, ...] = (),
        now: float = 0.0,
    ) -> list[Sequence]:
        """Advance counters after the model ran `out`; append sampled tokens, stop and free; returns finished.

        sampled[i] is the token drawn from out.scheduled[i]'s last logits, or None where the step did not reach
        the end of its tokens (a partial prompt chunk: that logit is meaningless and discarded).
        """
        assert len(sampled) == len(out.scheduled), (len(sampled), len(out.scheduled))
        finished: list[Sequence] = []
        for part, token in zip(out.scheduled, sampled, strict=True):
            seq = part.seq
            self._count_recompute(part)
            seq.num_computed_tokens += part.num_new_tokens
            if seq.num_computed_tokens < seq.num_tokens:
                continue  # mid-prompt chunk: nothing to sample yet
            assert token is not None, f"sequence {seq.seq_id} finished its prompt this step but got no token"
            seq.append_token(token)
            if seq.first_token_time is None:
                seq.first_token_time = now
            reason = self._stop_reason(seq, token, eos_token_ids)
            if reason is not None:
                seq.finish_reason = reason
                seq.finish_time = now
                seq.status = SequenceStatus.FINISHED
                self.block_manager.free_sequence(seq)
                self.running.remove(seq)
                self._recompute_until.pop(seq.seq_id, None)
                finished.append(seq)
        return finished

    def _count_recompute(self, part: ScheduledSequence) -> None:
        """Add the step's tokens that a preemption had already computed once to `num_recomputed_tokens`.

        A preempted request computes positions [0, n) again, n being what it had computed when it was
        preempted; prefix-cache hits at its readmission are skipped, not computed, so they do not count."""
        until = self._recompute_until.get(part.seq.seq_id)
        if until is None:
            return
        start, end = part.num_computed_tokens, part.num_computed_tokens + part.num_new_tokens
        self.num_recomputed_tokens += max(0, min(end, until) - start)
        if end >= until:
            del self._recompute_until[part.seq.seq_id]

    def _stop_reason(self, seq: Sequence, token: int, eos_token_ids: tuple[int, ...]) -> str | None:
        """ "stop" on a stop/EOS token, "length" at max_tokens or max_model_len, else None."""
        params: SamplingParams = seq.sampling_params
        if token in params.stop_token_ids or (not params.ignore_eos and token in eos_token_ids):
            return "stop"
        if seq.num_completion_tokens >= params.max_tokens or seq.num_tokens >= self.config.max_model_len:
            return "length"
        return None

    def abort(self, seq_id: int) -> Sequence | None:
        """Drop a waiting or running request: free its blocks, take it out of the queues and mark it FINISHED
        with finish_reason "abort"; returns it, or None if no unfinished request has that id.

        Safe after a step that raised between `schedule()` and `update()`: the slots that step allocated are
        freed, and only blocks whose K/V an earlier, completed step wrote (`num_computed_tokens`, which only
        `update()` advances) are published to the prefix cache, so no hash can point at unwritten K/V.
        """
        seq = next((s for s in self.waiting if s.seq_id == seq_id), None)
        if seq is not None:
            self.waiting.remove(seq)
        else:
            seq = next((s for s in self.running if s.seq_id == seq_id), None)
            if seq is None:
                return None
            self.running.remove(seq)
        self._recompute_until.pop(seq.seq_id, None)
        if seq.seq_id in self.block_manager.sequences:  # running ones; a waiting one holds none (preemption freed)
            self.block_manager.free_sequence(seq)
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = "abort"
        return seq

    def finish_requests(self, seq_ids: Iterable[int]) -> list[Sequence]:
        """Abort every unfinished request among `seq_ids` (vLLM v1's `Scheduler.finish_requests` with
        FINISHED_ABORTED); unknown or already finished ids are skipped. Returns the aborted sequences."""
        aborted = [self.abort(seq_id) for seq_id in dict.fromkeys(seq_ids)]
        return [seq for seq in aborted if seq is not None]
