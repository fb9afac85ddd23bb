"""Warm start: every lesson's page is run once at its default settings before the server answers its health
check, so the first learner after a restart finds what the second one would.

A lesson's first visit computes results every later visit reads from the process's caches (ui/memo.py keys a
page's cached functions by their code, so any run of the page fills them): lesson 6 runs the engine a dozen
times (8–17 s on two busy cores), lessons 2, 3 and 5 time kernels and runs (3–9 s). `warm` runs each page
through Streamlit's own script runner (its testing harness, in this process, with no browser and no server),
which calls the same cached functions with the same arguments the learner's first visit would. A page that
fails here is reported and skipped: the learner who opens it sees the page's own message, as before.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from ui.course import COURSE, CoursePage

SKIPPED = ("teacher",)  # needs a teacher key and computes nothing shared
TIMEOUT_S = 300.0  # one page on a slow machine; a page that takes longer is reported, not waited for again


@dataclass(frozen=True)
class Warmed:
    """One page's warm-up: how long its first run took, and why it failed (None when it ran)."""

    page: str
    seconds: float
    error: str | None = None


def pages_to_warm() -> tuple[CoursePage, ...]:
    """The course's pages warm-up runs, in the course's order."""
    return tuple(p for p in COURSE if p.id not in SKIPPED)


def warm_page(page: CoursePage, timeout_s: float = TIMEOUT_S) -> Warmed:
    """Run one page at its defaults (its URL without parameters) as a new learner's first visit."""
    from streamlit.testing.v1 import AppTest

    started = time.perf_counter()
    try:
        at = AppTest.from_file(str(page.path), default_timeout=timeout_s)
        at.run()
    except Exception as exc:  # a page's failure must not stop the server's start
        return Warmed(page.id, time.perf_counter() - started, f"{type(exc).__name__}: {exc}")
    failed = [str(e.message).splitlines()[0] for e in at.exception] + [str(e.body)[:200] for e in at.error]
    return Warmed(page.id, time.perf_counter() - started, "; ".join(failed) or None)


def warm(pages: Iterable[CoursePage] | None = None) -> list[Warmed]:
    """Run each page once (default: every page but the teacher view); returns what each took."""
    return [warm_page(p) for p in (pages_to_warm() if pages is None else pages)]


__all__ = ["SKIPPED", "Warmed", "pages_to_warm", "warm", "warm_page"]
