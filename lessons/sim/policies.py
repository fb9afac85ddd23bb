"""How a simulated server holds KV memory: static reservation (Max, Pow2, Oracle) or paged blocks.

The vLLM paper (Kwon et al., SOSP 2023, §3 and Fig. 2) compares three static reservation schemes with paged
KV blocks. A static server reserves one contiguous region per request at admission, in a first-fit arena,
and never grows it: *Max* reserves `max_model_len` slots (FasterTransformer), *Pow2* the next power of two
of the request's final length (Orca's), *Oracle* exactly the final length (a bound no real server reaches:
it knows the output length in advance). The *paged* server is the engine's own
`engine.core.block_manager.BlockManager`: a request holds only the blocks its tokens reach, and takes one
more from its allocator when a token crosses into a new block. Admission takes the blocks of the request's
whole `ctx` at once and keeps the scheduler's watermark of free blocks, 0.0 by default as in vLLM V1
(`engine.core.admission`, the rule `engine.core.scheduler.Scheduler` applies).

A policy answers what the simulation loop (`lessons.sim.loop`) asks of it, request by request:
    admit(req, num_running) -> verdict              take memory for the request's `ctx` tokens now
    refusal(req, num_running) -> str                why admit() just said NO_ROOM or NEVER (for the event)
    first_growth(req) -> int                        the first step after its admission that needs grow()
    grow(req, step) -> int | None                   room for the token `req` writes in `step`: the next step
                                                    that needs grow(), or None when there is no room
    release(req)                                    give all its memory back
    terms(stored, head) -> (reserved, internal, external, free)   this step's memory terms, in slots
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from engine.core.admission import admission_headroom, watermark_blocks
from engine.core.block_allocator import OutOfBlocksError
from engine.core.block_manager import BlockManager
from engine.core.sequence import Sequence
from lessons.sim.arena import FirstFitArena
from lessons.sim.metrics import RequestOutcome
from lessons.sim.traces import Request

__all__ = [
    "ADMITTED",
    "NO_ROOM",
    "NEVER",
    "SimRequest",
    "MemoryPolicy",
    "StaticReservation",
    "MaxReservation",
    "Pow2Reservation",
    "OracleReservation",
    "PagedBlocks",
    "RESERVATIONS",
]

# admit() verdicts: memory taken; no room now (wait, or fail if admission is unchecked); can never fit
ADMITTED, NO_ROOM, NEVER = "ok", "wait", "reject"
NO_GROWTH = 1 << 62  # first_growth() of a policy whose requests never grow: a step no run reaches


@dataclass(slots=True, eq=False)
class SimRequest:
    """A request inside the simulator: its trace entry, lengths, progress and the memory it holds."""

    index: int  # position in arrival order
    request: Request
    final: int  # tokens it ends with: prompt + output, capped at max_model_len
    outcome: RequestOutcome
    ctx: int  # tokens it holds at admission: the prompt, or all it had when preempted (recompute)
    order: int = 0  # admission number while it runs (the running list is in this order), 0 when it does not
    admit_step: int = 0  # it holds ctx + (s - admit_step) tokens after step s
    finish_step: int = 0
    handle: Any = None  # the policy's hold on its memory: a (start, size) reservation or an engine Sequence


class MemoryPolicy(Protocol):
    """What the simulation loop asks of a policy (see the module docstring)."""

    shortage: str  # the event detail when grow() finds no room

    def admit(self, req: SimRequest, num_running: int) -> str: ...
    def refusal(self, req: SimRequest, num_running: int) -> str: ...
    def first_growth(self, req: SimRequest) -> int: ...
    def grow(self, req: SimRequest, step: int) -> int | None: ...
    def release(self, req: SimRequest) -> None: ...
    def terms(self, stored: int, head: SimRequest | None) -> tuple[int, int, int, int]: ...


class StaticReservation:
    """One contiguous reservation per request in a first-fit arena; subclasses size it."""

    shortage = ""  # static requests never grow, so they never run short

    def __init__(self, capacity_tokens: int, max_model_len: int) -> None:
        self.arena = FirstFitArena(capacity_tokens)
        self.max_model_len = max_model_len
        self.sum_final = 0  # final lengths of the admitted requests: reserved = sum_final - stored
        # (internal, external, free) change only with the arena or the waiting head: kept for both
        self._head: SimRequest | None = None
        self._version = -1
        self._fixed = (0, 0, 0)

    def reservation_size(self, final: int) -> int:
        """Slots reserved for a request that ends with `final` tokens."""
        raise NotImplementedError

    def admit(self, req: SimRequest, num_running: int) -> str:
        """Reserve the request's region first-fit."""
        size = self.reservation_size(req.final)
        if size > self.arena.capacity:
            return NEVER
        start = self.arena.reserve(size)
        if start is None:
            return NO_ROOM
        req.handle = (start, size)
        self.sum_final += req.final
        return ADMITTED

    def refusal(self, req: SimRequest, num_running: int) -> str:
        """Why the request's region does not fit."""
        size, capacity = self.reservation_size(req.final), self.arena.capacity
        if size > capacity:
            return f"reservation of {size} slots exceeds the KV capacity of {capacity}"
        return f"tried to reserve {size} contiguous slots"

    def first_growth(self, req: SimRequest) -> int:
        """Never: the reservation already holds every token the request will write."""
        return NO_GROWTH

    def grow(self, req: SimRequest, step: int) -> int | None:
        """Not called: static requests never grow."""
        return NO_GROWTH

    def release(self, req: SimRequest) -> None:
        """Free the request's region."""
        self.arena.release(*req.handle)
        req.handle = None
        self.sum_final -= req.final

    def terms(self, stored: int, head: SimRequest | None) -> tuple[int, int, int, int]:
        """(reserved, internal, external, free): external counts the gaps too small for the waiting head."""
        arena = self.arena
        if head is not self._head or arena.version != self._version:  # else only `reserved` moved
            external = arena.external(self.reservation_size(head.final)) if head is not None else 0
            self._head, self._version = head, arena.version
            self._fixed = (arena.reserved - self.sum_final, external, arena.capacity - arena.reserved - external)
        internal, external, free = self._fixed
        return self.sum_final - stored, internal, external, free


class MaxReservation(StaticReservation):
    """Reserve max_model_len slots (FasterTransformer; a static Hugging Face cache)."""

    def reservation_size(self, final: int) -> int:
        """max_model_len, whatever the request's length."""
        return self.max_model_len


class Pow2Reservation(StaticReservation):
    """Reserve the next power of two of the final length, at most max_model_len (Orca's)."""

    def reservation_size(self, final: int) -> int:
        """The smallest power of two >= final, capped at max_model_len."""
        return min(1 << (final - 1).bit_length(), self.max_model_len)


class OracleReservation(StaticReservation):
    """Reserve exactly the final length (knows the output length in advance)."""

    def reservation_size(self, final: int) -> int:
        """final."""
        return final


RESERVATIONS: dict[str, type[StaticReservation]] = {
    "max_model_len": MaxReservation,
    "pow2": Pow2Reservation,
    "oracle": OracleReservation,
}


class PagedBlocks:
    """The engine's BlockManager: blocks taken as tokens reach them, the scheduler's watermark at admission.

    Admission and release make the scheduler's calls (`allocate_slots` with the watermark headroom,
    `free_sequence`) on one engine `Sequence` per request, whose token ids span its final length (the trace
    knows them). Growth takes the next block from the manager's allocator and appends it to the block table:
    for a sequence that shares no block (no prefix cache, no forks, no window here) that is what
    `allocate_slots` does, at a tenth of the cost (it plans copy-on-write on every call, and growth runs at
    every block boundary); the manager's per-slot view (`snapshot()`) is not read here. `watermark` None
    admits without the watermark (admission "unchecked").
    """

    def __init__(self, capacity_tokens: int, block_size: int, watermark: float | None) -> None:
        num_blocks = capacity_tokens // block_size
        bm = self.block_manager = BlockManager(num_blocks, block_size)
        self.block_size = block_size
        self.capacity = capacity_tokens
        self.watermark_blocks = 0 if watermark is None else watermark_blocks(watermark, num_blocks)
        self.shortage = f"no free KV block ({num_blocks} in the pool)"
        # bound once: called every step and at every block boundary
        self._allocator, self._num_blocks, self._allocate = bm.allocator, num_blocks, bm.allocator.allocate

    def admit(self, req: SimRequest, num_running: int) -> str:
        """Allocate blocks for the request's ctx tokens, leaving the watermark free while others run."""
        bm = self.block_manager
        if -(-req.final // self.block_size) > bm.num_blocks:
            return NEVER
        seq = req.handle
        if seq is None:
            seq = req.handle = Sequence(req.index, [0] * req.final, self.block_size)
        headroom = admission_headroom(num_running, self.watermark_blocks)
        if bm.allocate_slots(seq, req.ctx, watermark_blocks=headroom) is None:
            return NO_ROOM
        seq.num_computed_tokens = req.ctx  # its prefill runs in the admission step
        return ADMITTED

    def refusal(self, req: SimRequest, num_running: int) -> str:
        """Why the request's blocks do not fit."""
        bs, num_blocks = self.block_size, self.block_manager.num_blocks
        if -(-req.final // bs) > num_blocks:
            return f"needs {-(-req.final // bs)} blocks, the pool has {num_blocks}"
        headroom = admission_headroom(num_running, self.watermark_blocks)
        return f"needed {-(-req.ctx // bs)} blocks + {headroom} watermark, {self.block_manager.num_free_blocks} free"

    def first_growth(self, req: SimRequest) -> int:
        """The first step whose token opens a new block: the next position that is a multiple of block_size."""
        return req.admit_step + 1 + (-req.ctx) % self.block_size  # the step after admission writes position ctx

    def grow(self, req: SimRequest, step: int) -> int | None:
        """Take the block the token written in `step` opens; the next such step, or None if the pool is empty."""
        try:
            block_id = self._allocate()
        except OutOfBlocksError:
            return None
        req.handle.block_table.append(block_id)
        return step + self.block_size

    def release(self, req: SimRequest) -> None:
        """Free the request's blocks (its Sequence is kept for a re-admission)."""
        self.block_manager.free_sequence(req.handle)

    def terms(self, stored: int, head: SimRequest | None) -> tuple[int, int, int, int]:
        """(0, internal, 0, free): blocks hold no future tokens and leave no unusable gaps."""
        allocated = (self._num_blocks - self._allocator.num_free_blocks) * self.block_size
        return 0, allocated - stored, 0, self.capacity - allocated
