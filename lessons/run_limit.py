"""A per-session allowance of expensive uncached runs: what one learner may make the server compute.

A lesson whose settings start real engine runs (lesson 6 pushes traffic through the demo model: about a second
of server CPU per run, five to ten runs for one new setting) caches every result for the whole class, so a
setting someone already ran costs nothing. A setting nobody ran does, and a script moving sliders could keep the
server's cores busy for everyone. `RunAllowance` counts the uncached runs one session starts in a sliding
window and refuses the one past its limit with `RunLimitReached`, whose message names the limit and how long
until the next run may start. Nothing is reset: the settings stay, cached results still show, and the same
setting runs once the window has room. The clock is injectable, so tests count runs, not seconds.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable

MAX_RUNS = 30  # uncached runs one session may start per window: three or four new settings of lesson 6
WINDOW_S = 300.0  # the sliding window, seconds


def _span(seconds: float) -> str:
    """A window's length in words: '5 minutes', '1 minute', '45 s'."""
    if seconds < 60 or seconds % 60:
        return f"{seconds:g} s"
    return "1 minute" if seconds == 60 else f"{seconds / 60:g} minutes"


class RunLimitReached(Exception):
    """This session started as many uncached runs as its window allows; `wait_s` until the next may start."""

    def __init__(self, limit: int, window_s: float, wait_s: float) -> None:
        self.limit, self.window_s, self.wait_s = limit, window_s, wait_s
        super().__init__(
            f"This session has started {limit} new engine runs in the last {_span(window_s)}, the most one "
            f"learner may (each takes about a second of the server's CPU, which the whole class shares). Settings "
            f"that were run before still show at once; a new one can run in {math.ceil(wait_s)} s. Your settings "
            "are kept: after that, the next change on this page runs them."
        )


class RunAllowance:
    """The uncached runs one session started in the last `window_s` seconds, at most `limit` of them."""

    def __init__(self, limit: int = MAX_RUNS, window_s: float = WINDOW_S, clock: Callable[[], float] = time.monotonic):
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit={limit!r} must be a whole number of runs >= 1")
        if not (isinstance(window_s, (int, float)) and math.isfinite(window_s) and window_s > 0):
            raise ValueError(f"window_s={window_s!r} must be a finite number of seconds > 0")
        self.limit, self.window_s, self._clock = limit, float(window_s), clock
        self._starts: deque[float] = deque()
        self._lock = threading.Lock()  # a session's fragments may run on different threads

    def _forget_old(self, now: float) -> None:
        while self._starts and self._starts[0] <= now - self.window_s:
            self._starts.popleft()

    @property
    def started(self) -> int:
        """Runs started within the window that ends now."""
        with self._lock:
            self._forget_old(self._clock())
            return len(self._starts)

    def charge(self) -> None:
        """Count one uncached run starting now, or raise RunLimitReached (nothing counted) when none is left."""
        with self._lock:
            now = self._clock()
            self._forget_old(now)
            if len(self._starts) >= self.limit:
                raise RunLimitReached(self.limit, self.window_s, self._starts[0] + self.window_s - now)
            self._starts.append(now)
