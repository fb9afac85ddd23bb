"""The device the engine runs on: which one (`resolve_device`) and how much memory a new allocation can take
there now (`available_memory`), the number the KV cache is sized and checked against."""

from __future__ import annotations

import os
from pathlib import Path

import torch


def resolve_device(device: torch.device | str | None) -> torch.device:
    """The engine's device: CUDA when present for None; a CUDA device that is not there is a ValueError."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"device={device!r} is not a torch device; use 'cpu', 'cuda' or 'cuda:N'") from exc
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                f"device={device!r} but torch sees no CUDA device (torch.cuda.is_available() is False: no GPU, or "
                "a CPU-only torch build); use device='cpu', or device=None to pick the CPU"
            )
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            raise ValueError(f"device={device!r} but only {count} CUDA device(s) are visible: cuda:0..cuda:{count - 1}")
    return dev


# Linux's own accounting of memory a new allocation can take without swapping, and a cgroup v2 limit (a
# container's): kernel interfaces, the same on every Linux machine.
MEMINFO = Path("/proc/meminfo")
CGROUP = Path("/sys/fs/cgroup")


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max" (no limit) -> None


def _cpu_available() -> tuple[int | None, str]:
    """Bytes of RAM a new allocation can take now: MemAvailable (capped by a cgroup's limit), else all RAM."""
    available, source = None, ""
    try:
        for line in MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available, source = int(line.split()[1]) * 1024, "MemAvailable in /proc/meminfo"
                break
    except (OSError, ValueError, IndexError):
        pass
    if available is None:
        try:
            available = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
            source = "physical RAM"
        except (ValueError, OSError, AttributeError):  # not POSIX (Windows): no check
            return None, "unknown"
    limit, used = _read_int(CGROUP / "memory.max"), _read_int(CGROUP / "memory.current")
    if limit is not None and used is not None and limit - used < available:
        available, source = max(0, limit - used), "the container's cgroup memory.max minus memory.current"
    return available, source


def available_memory(device: torch.device | str) -> tuple[int | None, str]:
    """(bytes a new allocation on `device` can take now, where that number comes from); None if unknown.

    CUDA: the device's free memory (`torch.cuda.mem_get_info`); CPU: Linux's MemAvailable, capped by a
    cgroup v2 limit, else the physical RAM (`os.sysconf`)."""
    device = torch.device(device)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free, f"free on {device} (torch.cuda.mem_get_info)"
    if device.type == "cpu":
        return _cpu_available()
    return None, "unknown"
