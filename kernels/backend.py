"""Where attention runs: compiled Triton on CUDA, the Triton interpreter on CPU, or plain torch.

Triton is optional. Without it (macOS, Windows, a slim install) every op falls back to the torch backend
and `describe()` says so, so the app can show the learner which engine they are watching.
"""

from __future__ import annotations

import os

import torch

try:  # triton is a Linux-only dependency; the torch backend covers everything without it
    import triton  # noqa: F401

    HAS_TRITON = True
    TRITON_VERSION: str | None = triton.__version__
except ImportError:  # pragma: no cover - exercised on machines without triton
    HAS_TRITON = False
    TRITON_VERSION = None

BACKENDS = ("auto", "triton", "torch")


def triton_interpreting() -> bool:
    """True when TRITON_INTERPRET=1, i.e. Triton kernels run on CPU through the interpreter."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def resolve_backend(backend: str, device: torch.device | str) -> str:
    """Turn "auto" | "triton" | "torch" into the backend that will actually run on `device`.

    "auto" picks Triton on CUDA and torch on CPU (the interpreter is far too slow for real work).
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r} is not supported; use one of {', '.join(map(repr, BACKENDS))}")
    device = torch.device(device)
    if backend == "auto":
        return "triton" if HAS_TRITON and device.type == "cuda" else "torch"
    if backend == "triton":
        if not HAS_TRITON:
            raise ValueError(
                "backend='triton' but triton is not installed; install triton (Linux) or use backend='torch'"
            )
        if device.type != "cuda" and not triton_interpreting():
            raise ValueError(
                f"backend='triton' needs CUDA tensors, got device {device}; on CPU set TRITON_INTERPRET=1 "
                "before triton is imported, or use backend='torch'"
            )
    return backend


def describe(backend: str = "auto") -> dict:
    """A small, JSON-friendly description of the active backend for the app's sidebar and benchmarks."""
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    active = resolve_backend(backend, device) if backend != "triton" or HAS_TRITON else "torch"
    if active == "triton" and cuda:
        label = "CUDA + Triton"
    elif active == "triton":
        label = "Triton interpreter (CPU)"
    elif cuda:
        label = "CUDA torch"
    else:
        label = "CPU torch"
    return {
        "label": label,
        "backend": active,
        "device": torch.cuda.get_device_name(0) if cuda else "CPU",
        "torch": torch.__version__,
        "triton": TRITON_VERSION,
        "interpreter": triton_interpreting(),
        "threads": torch.get_num_threads(),
    }
