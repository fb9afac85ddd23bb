"""Shared benchmark helpers: interleaved A/B timing, environment record, one-JSON-line output.

Both sides of a comparison run in the same process, interleaved (A, B, A, B, ...), median of >= 5 repeats
after a warm-up, so a noisy shared machine cannot fake a win. The timing loop is the lessons' own
(`lessons.measure.time_interleaved`); this module adds the benchmarks' defaults, and
`assert_same_rows`, the equal-outputs check a benchmark runs before it times two sides.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from collections.abc import Callable
from pathlib import Path

import torch

from kernels.backend import TRITON_VERSION, triton_interpreting
from lessons import measure

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def log(*parts: object) -> None:
    """Progress message to stderr (stdout is reserved for the one JSON line)."""
    print(*parts, file=sys.stderr, flush=True)


def time_interleaved(fns: dict[str, Callable[[], object]], repeats: int = 7, warmup: int = 2) -> dict[str, float]:
    """Median wall seconds per call for each named function, run round-robin A, B, A, B, ...

    Each function is called `warmup` times first (compilation, caches), then `repeats` rounds in which
    every function runs once, in order. CUDA work is synchronized around each call when a GPU is present.
    """
    return measure.time_interleaved(fns, repeats, warmup, device=measure.default_device())


# Tolerances for "the same answer" per dtype: fused kernels reorder sums, so the last bits may differ.
TOLERANCES = {
    torch.float32: {"atol": 1e-5, "rtol": 1e-4},
    torch.float16: {"atol": 1e-3, "rtol": 1e-3},
    torch.bfloat16: {"atol": 2e-2, "rtol": 2e-2},
}


def assert_same_rows(actual: torch.Tensor, expected: torch.Tensor, what: str) -> float:
    """torch.testing.assert_close at the dtype's tolerance (AssertionError naming `what`); returns max |diff|."""
    tol = TOLERANCES.get(expected.dtype, {})
    torch.testing.assert_close(actual, expected, **tol, msg=lambda m: f"{what}: not the same work. {m}")
    return (actual.float() - expected.float()).abs().max().item() if expected.numel() else 0.0


def env_info() -> dict:
    """What ran: versions, device, thread count, interpreter flag."""
    cuda = torch.cuda.is_available()
    return {
        "torch": torch.__version__,
        "triton": TRITON_VERSION,
        "python": platform.python_version(),
        "device": torch.cuda.get_device_name(0) if cuda else f"cpu ({platform.processor() or platform.machine()})",
        "cuda": torch.version.cuda if cuda else None,
        "threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "triton_interpret": triton_interpreting(),
    }


def emit(result: dict) -> None:
    """Print `result` as exactly one JSON line on stdout."""
    print(json.dumps(result, sort_keys=False), flush=True)


def save(name: str, result: dict) -> Path:
    """Write `result` to bench/results/NAME-DEVICE.json (DEVICE is "cuda" or "cpu") and return the path."""
    device = measure.default_device()
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}-{device}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path


def parser(description: str) -> argparse.ArgumentParser:
    """Argument parser with the flags every benchmark shares: --json, --repeats, --warmup, --save."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--json", action="store_true", help="print only the JSON result line on stdout")
    p.add_argument("--repeats", type=int, default=7, help="interleaved timed rounds (median is reported)")
    p.add_argument("--warmup", type=int, default=2, help="untimed calls per side before timing")
    p.add_argument("--save", action="store_true", help="also write bench/results/NAME-DEVICE.json")
    return p
