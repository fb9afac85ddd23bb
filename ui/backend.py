"""What this server computes on, described once per process (the sidebar and the timing captions show it)."""

from __future__ import annotations

from kernels.backend import describe
from ui.memo import memo


@memo(max_entries=1)
def backend_info() -> dict:
    """kernels.backend.describe() computed once per process (shared: read it, never change it)."""
    return describe()
