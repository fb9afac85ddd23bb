"""The sizes the memory model counts in: binary byte units, bytes per element of a dtype, one token's KV bytes.

Every other memory module builds on these and this module imports none of them, so the spec dataclasses, the
catalog, the start-up arithmetic and the footprint share one set of numbers without importing each other.
Capacities are binary: ``GiB`` is 2**30 bytes, the unit ``nvidia-smi`` and vLLM's logs report memory in.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType

KiB = 1024
MiB = 1024**2
GiB = 1024**3

DTYPE_BYTES: Mapping[str, float] = MappingProxyType(
    {"fp32": 4, "bf16": 2, "fp16": 2, "auto": 2, "fp8": 1, "int8": 1, "int4": 0.5}
)


def dtype_bytes(dtype: str | float) -> float:
    """Bytes per element of a dtype name ("bf16", "fp8", "int4", ...) or a number passed through."""
    if isinstance(dtype, (int, float)) and not isinstance(dtype, bool):
        if not math.isfinite(dtype) or dtype <= 0:
            raise ValueError(f"dtype bytes must be a finite number > 0 (2 for bf16, 1 for fp8), got {dtype}")
        return float(dtype)
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {list(DTYPE_BYTES)}")
    return DTYPE_BYTES[dtype]


def kv_bytes(num_layers: int, num_kv_heads: int, head_dim: int, dtype_bytes: float) -> int:
    """K and V bytes of one token over all layers: 2 * layers * kv_heads * head_dim * bytes per element.

    The one formula for KV size: `ModelSpec.kv_bytes_per_token`, the footprint and the engine's paged cache all
    call it, so the cache the engine allocates is the cache the course computes."""
    return int(2 * num_layers * num_kv_heads * head_dim * dtype_bytes)
