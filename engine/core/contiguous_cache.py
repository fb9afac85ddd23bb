"""The contiguous KV-cache baseline: every sequence reserves `max_model_len` adjacent slots up front.

This is how FasterTransformer-style engines and a static Hugging Face cache size memory, and what
PagedAttention (Kwon et al., SOSP 2023, section 3 and figure 3) measures its waste against. A
reservation [start, start + max_model_len) in one arena of `num_slots` token slots holds:
    used      slots with a token (prompt + generated so far)
    reserved  slots waiting for tokens the request will still generate (up to its final length)
    internal  slots past the request's final length, never used
and the arena's free gaps that are too short for another reservation are *external* fragmentation.
A request's final length is known to a trace replay (pass `final_len`); otherwise it is taken as
prompt + `sampling_params.max_tokens` when available, else everything unused counts as reserved.

Public API (same shape as BlockManager's query / mutate pairs and observability):
    ContiguousAllocator(num_slots, max_model_len)
        .can_allocate() -> bool; .allocate_sequence(seq, final_len=None) -> start slot
        .free_sequence(seq); .snapshot() -> list[Reservation]; .usage(bytes_per_slot=0) -> ContiguousUsage
        .slot(seq, position) -> int;  .num_free_slots;  .largest_free_gap
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.core.block_allocator import OutOfBlocksError
from engine.core.sequence import Sequence


@dataclass(frozen=True, slots=True)
class Reservation:
    """One sequence's contiguous region and how its slots split."""

    seq_id: int
    start: int
    num_reserved: int  # max_model_len
    num_used: int  # tokens held now
    final_len: int | None  # tokens the request will hold when it finishes, if known

    @property
    def future_slots(self) -> int:
        """Slots held for tokens not generated yet (vLLM's "reserved")."""
        end = self.num_reserved if self.final_len is None else min(self.final_len, self.num_reserved)
        return max(0, end - self.num_used)

    @property
    def internal_slots(self) -> int:
        """Slots past the final length, never to be used (vLLM's "internal fragmentation")."""
        return self.num_reserved - self.num_used - self.future_slots


@dataclass(frozen=True, slots=True)
class ContiguousUsage:
    """Arena-wide slot accounting; the three kinds of waste of the vLLM paper side by side."""

    capacity_slots: int
    reserved_slots: int  # sum of reservations (max_model_len each)
    used_slots: int
    future_slots: int  # "reserved" waste
    internal_slots: int  # "internal" waste
    external_slots: int  # free gaps shorter than max_model_len: no request fits there
    free_slots: int
    bytes_per_slot: int = 0

    @property
    def waste_slots(self) -> int:
        """Slots held or stranded without a token: future + internal + external."""
        return self.future_slots + self.internal_slots + self.external_slots

    @property
    def internal_fragmentation_slots(self) -> int:
        """Reserved but token-less slots (future + internal), comparable to BlockUsage's number."""
        return self.future_slots + self.internal_slots

    @property
    def waste_bytes(self) -> int:
        """waste_slots in bytes (0 unless bytes_per_slot was given)."""
        return self.waste_slots * self.bytes_per_slot

    @property
    def reserved_bytes(self) -> int:
        """reserved_slots in bytes."""
        return self.reserved_slots * self.bytes_per_slot

    @property
    def used_bytes(self) -> int:
        """used_slots in bytes."""
        return self.used_slots * self.bytes_per_slot


class ContiguousAllocator:
    """First-fit arena of `num_slots` token slots handing out `max_model_len`-slot reservations."""

    def __init__(self, num_slots: int, max_model_len: int) -> None:
        for name, value in (("num_slots", num_slots), ("max_model_len", max_model_len)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be an integer >= 1")
        self.num_slots = num_slots
        self.max_model_len = max_model_len
        self._regions: dict[int, tuple[int, Sequence, int | None]] = {}  # seq_id -> (start, seq, final_len)

    def __repr__(self) -> str:
        return (
            f"ContiguousAllocator(num_slots={self.num_slots}, max_model_len={self.max_model_len}, "
            f"num_sequences={len(self._regions)})"
        )

    def _gaps(self) -> list[tuple[int, int]]:
        """Free (start, length) gaps between reservations, in address order."""
        gaps, cursor = [], 0
        for start in sorted(r[0] for r in self._regions.values()):
            if start > cursor:
                gaps.append((cursor, start - cursor))
            cursor = start + self.max_model_len
        if cursor < self.num_slots:
            gaps.append((cursor, self.num_slots - cursor))
        return gaps

    @property
    def num_free_slots(self) -> int:
        """Slots in no reservation."""
        return self.num_slots - len(self._regions) * self.max_model_len

    @property
    def largest_free_gap(self) -> int:
        """Longest run of free adjacent slots."""
        return max((length for _, length in self._gaps()), default=0)

    def can_allocate(self) -> bool:
        """Whether a free gap of `max_model_len` slots exists."""
        return self.largest_free_gap >= self.max_model_len

    def allocate_sequence(self, seq: Sequence, final_len: int | None = None) -> int:
        """Reserve `max_model_len` slots for `seq` (first fit); returns the first slot."""
        if seq.seq_id in self._regions:
            raise ValueError(f"sequence {seq.seq_id} already has a reservation; free_sequence() it first")
        if seq.num_tokens > self.max_model_len:
            raise ValueError(
                f"sequence {seq.seq_id} has {seq.num_tokens} tokens but max_model_len is {self.max_model_len}; "
                f"shorten the prompt or raise max_model_len"
            )
        if final_len is None and seq.sampling_params is not None and hasattr(seq.sampling_params, "max_tokens"):
            final_len = seq.num_prompt_tokens + seq.sampling_params.max_tokens
        gaps = self._gaps()
        for start, length in gaps:
            if length >= self.max_model_len:
                self._regions[seq.seq_id] = (start, seq, final_len)
                return start
        largest = max((length for _, length in gaps), default=0)
        raise OutOfBlocksError(self.max_model_len, largest, self.num_slots, unit="contiguous slots")

    def free_sequence(self, seq: Sequence) -> None:
        """Release `seq`'s reservation."""
        if self._regions.pop(seq.seq_id, None) is None:
            raise ValueError(f"sequence {seq.seq_id} has no reservation; it was never allocated or is already freed")

    def slot(self, seq: Sequence, position: int) -> int:
        """Cache slot of token `position` of `seq` (start + position)."""
        if seq.seq_id not in self._regions:
            raise ValueError(f"sequence {seq.seq_id} has no reservation; allocate_sequence() it first")
        if not 0 <= position < self.max_model_len:
            raise ValueError(f"position {position} is outside 0..{self.max_model_len - 1} (max_model_len)")
        return self._regions[seq.seq_id][0] + position

    def snapshot(self) -> list[Reservation]:
        """Every reservation in address order."""
        cap = self.max_model_len
        return sorted(
            (
                Reservation(sid, start, cap, min(seq.num_tokens, cap), final)
                for sid, (start, seq, final) in self._regions.items()
            ),
            key=lambda r: r.start,
        )

    def usage(self, bytes_per_slot: int = 0) -> ContiguousUsage:
        """Arena-wide used / reserved / internal / external slots (bytes if bytes_per_slot given)."""
        regions = self.snapshot()
        external = sum(length for _, length in self._gaps() if length < self.max_model_len)
        return ContiguousUsage(
            capacity_slots=self.num_slots,
            reserved_slots=len(regions) * self.max_model_len,
            used_slots=sum(r.num_used for r in regions),
            future_slots=sum(r.future_slots for r in regions),
            internal_slots=sum(r.internal_slots for r in regions),
            external_slots=external,
            free_slots=self.num_free_slots,
            bytes_per_slot=bytes_per_slot,
        )
