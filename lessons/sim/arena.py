"""A first-fit arena of KV token slots: the contiguous memory a static-reservation server carves up.

The static servers of the vLLM paper's comparison (Kwon et al., SOSP 2023, §3 and Fig. 2) give each request
one contiguous reservation. Here a reservation goes to the lowest-addressed free gap that is large enough
(first fit); free gaps too small for the request waiting next are that request's *external* fragmentation.
Reservations are kept sorted by address, so a placement, a release or a gap count costs O(reservations),
and the external count is cached until the arena changes (the simulator asks for it every step).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator

from kernels.validate import check_int

__all__ = ["FirstFitArena"]


class FirstFitArena:
    """`capacity` token slots; reserve(size) places a region first-fit, release(start, size) frees it."""

    __slots__ = ("capacity", "reserved", "version", "_regions", "_external")

    def __init__(self, capacity: int) -> None:
        self.capacity = check_int("capacity", capacity, hint="token slots in the arena")
        self.reserved = 0  # slots inside reservations
        self.version = 0  # bumped on every change, so cached answers know when they went stale
        self._regions: list[tuple[int, int]] = []  # (start, size), sorted by start
        self._external: tuple[int, int, int] = (-1, 0, 0)  # (version, need, slots) of the last external()

    def __repr__(self) -> str:
        return f"FirstFitArena(capacity={self.capacity}, reserved={self.reserved}, regions={len(self._regions)})"

    def gaps(self) -> Iterator[int]:
        """Lengths of the free runs between reservations, in address order (zero-length ones included)."""
        prev_end = 0
        for start, size in self._regions:
            yield start - prev_end
            prev_end = start + size
        yield self.capacity - prev_end

    def reserve(self, size: int) -> int | None:
        """Place `size` adjacent slots in the first gap that holds them; the start slot, or None if none does."""
        if size < 1:
            raise ValueError(f"cannot reserve {size} slots; a reservation holds at least one slot")
        start = 0
        for region_start, region_size in self._regions:
            if region_start - start >= size:
                break
            start = region_start + region_size
        else:
            if self.capacity - start < size:
                return None
        bisect.insort(self._regions, (start, size))
        self.reserved += size
        self.version += 1
        return start

    def release(self, start: int, size: int) -> None:
        """Free the reservation [start, start + size); a ValueError if there is no such reservation."""
        i = bisect.bisect_left(self._regions, (start, size))
        if i == len(self._regions) or self._regions[i] != (start, size):
            raise ValueError(f"no reservation of {size} slots starts at slot {start}; release what reserve() gave")
        del self._regions[i]
        self.reserved -= size
        self.version += 1

    def external(self, need: int) -> int:
        """Free slots in gaps shorter than `need`: memory a request needing `need` adjacent slots cannot use."""
        version, cached_need, slots = self._external
        if version == self.version and cached_need == need:
            return slots
        slots = sum(gap for gap in self.gaps() if gap < need)
        self._external = (self.version, need, slots)
        return slots
