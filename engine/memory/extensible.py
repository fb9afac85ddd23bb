"""vLLM v0.34.0's default KV-cache sizing on CUDA and ROCm: the *extensible* KV cache, sized from measured memory.

Until v0.33 vLLM sized the KV cache once, from an estimate made before the CUDA graphs were captured
(``engine.memory.footprint``: total x gpu_memory_utilization less the weights, the profiled activation peak,
non-torch memory and the graphs' estimate). v0.34.0 keeps that path (``--no-enable-extensible-kv-cache``,
``--kv-cache-memory-bytes``, ``num_gpu_blocks_override``, and every platform other than CUDA and ROCm) but by
default on CUDA and ROCm reserves the KV cache's address range with device virtual memory, runs the warm-up and
the graph capture, and only then commits physical pages: the cache gets what is measured free afterwards.

The rule, in vLLM v0.34.0's words and numbers (``vllm/v1/worker/extensible_kv_cache.py``,
``measure_kv_cache_bytes`` and ``measure_kv_cache_blocks``; ``vllm/v1/worker/gpu_worker.py``;
``vllm/config/cache.py``):

- ``gpu_memory_utilization`` unset resolves to **1.0** (``resolved_gpu_memory_utilization``; 0.92 with the
  extensible cache off). The *requested* memory is ``ceil(total x utilization)``.
- The kept-free *transient peak* starts as the profiled activation peak plus the CUDA graphs' estimate
  (``peak_activation_memory``), raised to the warm-up's own peak if that is larger.
- ``non_kv_used`` is what the engine holds besides the KV cache (weights, the captured graphs) and
  ``headroom`` the device's free memory plus what the KV cache has committed.
- ``margin = max(floor, 0.75 x transient peak)`` with a floor of 1 GiB on CUDA and 3 GiB on ROCm.
- ``KV = min(requested - non_kv_used, headroom - margin) - transient peak``, then the most whole blocks that fit,
  and never more than the capacity the first estimate reserved.
- A utilization set between 0.7 and 1.0 that keeps at least 1 GiB out of the cache logs a warning: the old
  habit of leaving headroom is not needed, because the sizing measures it.

What this module assumes, because a course has no GPU to measure: the non-torch memory (CUDA context,
workspaces, NCCL) is resident before vLLM's first snapshot, other processes hold ``other_process_bytes`` all
along, the graphs' capture takes what their estimate said, and warm-up peaks no higher than the profiled peak
plus the graphs' estimate. The physical pages are committed in 2 MiB granules per cache segment, which can cost
a block or two against ``kv_bytes // block_bytes``; this model does not round to granules.

Public API:
    measured_kv(footprint, gpu_memory_utilization=None, platform="cuda", warmup_peak_bytes=0) -> MeasuredKV
    measure_kv_cache_bytes(...)       the measured-bytes rule alone, on raw numbers
    MeasuredKV.log_lines()            the start-up lines v0.34.0 prints for these numbers
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from engine.memory.footprint import ServingFootprint
from engine.memory.units import GiB

__all__ = [
    "MARGIN_FLOOR_BYTES",
    "MARGIN_FRACTION",
    "UNSET_UTILIZATION",
    "WARNING_MIN_WITHHELD_BYTES",
    "NON_TORCH_RESERVE_BYTES",
    "MeasuredKV",
    "margin_bytes",
    "measure_kv_cache_bytes",
    "measured_kv",
]

UNSET_UTILIZATION = 1.0  # gpu_memory_utilization when unset and the extensible KV cache is on
MARGIN_FLOOR_BYTES = {"cuda": 1 * GiB, "rocm": 3 * GiB}  # KV_CACHE_MARGIN_FLOOR_BYTES: ROCr maps scratch lazily
MARGIN_FRACTION = 0.75  # KV_CACHE_MARGIN_FRACTION: the margin's share of the transient peak
NON_TORCH_RESERVE_BYTES = {"cuda": GiB // 2, "rocm": GiB}  # kept outside torch's allocator once the cache is sized
WARNING_MIN_WITHHELD_BYTES = 1 * GiB  # a utilization below 1.0 is warned about when it withholds this much
_WARNED_UTILIZATION = (0.7, 1.0)  # ...and lies strictly between these


def _gib(num_bytes: int) -> str:
    """vLLM's ``format_gib``: GiB rounded to two decimals, as Python prints the float."""
    return f"{round(num_bytes / GiB, 2)}"


def margin_bytes(transient_peak_bytes: int, platform: str = "cuda") -> int:
    """The safety margin kept free beyond the transient peak: max(floor, 0.75 x peak)."""
    if platform not in MARGIN_FLOOR_BYTES:
        raise ValueError(f"platform={platform!r}: the extensible KV cache runs on {sorted(MARGIN_FLOOR_BYTES)} only")
    return max(MARGIN_FLOOR_BYTES[platform], int(transient_peak_bytes * MARGIN_FRACTION))


def measure_kv_cache_bytes(
    *,
    init_free_bytes: int,
    free_bytes: int,
    committed_bytes: int,
    requested_bytes: int,
    transient_peak_bytes: int = 0,
    torch_growth_bytes: int = 0,
    platform: str = "cuda",
) -> int:
    """The bytes the KV cache may take, measured after warm-up and graph capture (never negative).

    init_free_bytes: the device's free memory when the worker started; free_bytes: free now; committed_bytes:
    what the KV cache already holds; requested_bytes: ceil(total x utilization)."""
    for name, value in (
        ("init_free_bytes", init_free_bytes),
        ("free_bytes", free_bytes),
        ("committed_bytes", committed_bytes),
        ("requested_bytes", requested_bytes),
        ("transient_peak_bytes", transient_peak_bytes),
        ("torch_growth_bytes", torch_growth_bytes),
    ):
        if type(value) is not int or value < 0:
            raise ValueError(f"{name}={value!r} must be a whole number of bytes >= 0")
    non_kv_used = init_free_bytes - free_bytes - committed_bytes
    headroom = free_bytes + committed_bytes
    available = min(requested_bytes - non_kv_used, headroom - margin_bytes(transient_peak_bytes, platform))
    available -= max(transient_peak_bytes, torch_growth_bytes)
    return max(available, 0)


@dataclass(frozen=True)
class MeasuredKV:
    """One GPU's KV cache under v0.34.0's measured sizing, beside the estimate the footprint made."""

    footprint: ServingFootprint
    gpu_memory_utilization: float | None  # as set (None: unset, 1.0)
    platform: str
    requested_bytes: int
    init_free_bytes: int
    free_after_warmup_bytes: int
    transient_peak_bytes: int
    kv_bytes: int  # what the measurement gives the cache
    capacity_blocks: int  # what the first (estimate-based) pass reserved address space for
    num_blocks: int
    withheld_bytes: int  # what a utilization below 1.0 keeps out of the cache (0 when unset)

    @property
    def utilization(self) -> float:
        return UNSET_UTILIZATION if self.gpu_memory_utilization is None else self.gpu_memory_utilization

    @property
    def margin_bytes(self) -> int:
        """The safety margin kept free beyond the transient peak."""
        return margin_bytes(self.transient_peak_bytes, self.platform)

    @property
    def block_bytes(self) -> int:
        return self.footprint.pool_block_bytes

    @property
    def committed_bytes(self) -> int:
        return self.num_blocks * self.block_bytes

    @property
    def torch_limit_bytes(self) -> int:
        """The cap put on torch's allocator: what it holds (weights, graphs) plus what stays free after the cache,
        less the reserve for allocations outside it."""
        fp = self.footprint
        left = self.free_after_warmup_bytes - self.committed_bytes - NON_TORCH_RESERVE_BYTES[self.platform]
        return fp.weights_bytes + fp.cuda_graph_bytes + max(left, 0)

    @property
    def gain_blocks(self) -> int:
        """Blocks over the estimate-based sizing of the same footprint (negative: fewer)."""
        return self.num_blocks - self.footprint.num_blocks

    @property
    def warns(self) -> bool:
        low, high = _WARNED_UTILIZATION
        u = self.gpu_memory_utilization
        return u is not None and low < u < high and self.withheld_bytes >= WARNING_MIN_WITHHELD_BYTES

    def log_lines(self) -> list[str]:
        """The lines v0.34.0 logs as it settles the cache (vllm/v1/worker/extensible_kv_cache.py)."""
        peak = self.transient_peak_bytes
        lines = []
        if self.warns:
            lines.append(
                f"WARNING [extensible_kv_cache.py] gpu_memory_utilization={self.gpu_memory_utilization} caps this "
                f"instance at {_gib(self.requested_bytes)} GiB, keeping {_gib(self.withheld_bytes)} GiB of free "
                "device memory out of the KV cache. The extensible KV cache is sized from the memory measured after "
                "warmup and CUDA graph capture, so vLLM's own use needs no headroom below 1.0. Leave "
                "gpu_memory_utilization unset unless it leaves room for memory vLLM does not measure: other "
                "processes sharing the GPU (including ones that allocate on it later), the CPU on a unified-memory "
                "device, weight transfer buffers for weight updates, or a KV connector's own device buffers."
            )
        lines.append(
            f"INFO [extensible_kv_cache.py] Memory after warmup: {_gib(self.free_after_warmup_bytes)} GiB free, "
            f"0.0 GiB committed to the KV cache, {_gib(peak)} GiB kept for transient activations ({_gib(peak)} GiB "
            f"allocated at peak, 0.0 GiB of torch reservation growth); {self.num_blocks} KV cache blocks "
            f"({_gib(self.committed_bytes)} GiB) fit within the requested {_gib(self.requested_bytes)} GiB. Torch may "
            f"reserve up to {_gib(self.torch_limit_bytes)} GiB."
        )
        lines.append(
            f"INFO [extensible_kv_cache.py] Extended KV cache to {self.num_blocks} blocks "
            f"({self.committed_bytes / GiB:.2f} GiB)."
        )
        return lines


def measured_kv(
    footprint: ServingFootprint,
    gpu_memory_utilization: float | None = None,
    platform: str = "cuda",
    warmup_peak_bytes: int = 0,
) -> MeasuredKV:
    """What v0.34.0's extensible KV cache gives the server a footprint describes (see the module docstring).

    gpu_memory_utilization: None (unset: 1.0) or the value passed to vLLM. warmup_peak_bytes: a warm-up peak
    above the profiled one, if the caller knows of one."""
    if gpu_memory_utilization is not None and not 0.0 < gpu_memory_utilization <= 1.0:
        raise ValueError(
            f"gpu_memory_utilization={gpu_memory_utilization!r} must be in (0, 1], or None to leave it unset"
        )
    if type(warmup_peak_bytes) is not int or warmup_peak_bytes < 0:
        raise ValueError(f"warmup_peak_bytes={warmup_peak_bytes!r} must be a whole number of bytes >= 0")
    fp = footprint
    total = fp.capacity_bytes
    utilization = UNSET_UTILIZATION if gpu_memory_utilization is None else gpu_memory_utilization
    requested = math.ceil(total * utilization)
    init_free = total - fp.other_process_bytes - fp.overhead_bytes
    resident = fp.weights_bytes + fp.cuda_graph_bytes  # the engine's own use once the graphs are captured
    free_after = init_free - resident
    if free_after <= 0:
        raise ValueError(
            f"{fp.model.name} on {fp.gpu.name}: the weights ({_gib(fp.weights_bytes)} GiB) and CUDA graphs do not "
            f"fit in the {_gib(init_free)} GiB free at start-up; use more GPUs (tensor parallelism), a smaller "
            "weight dtype or a larger GPU"
        )
    peak = max(fp.activation_bytes + fp.cuda_graph_bytes, warmup_peak_bytes)
    measured = dict(
        init_free_bytes=init_free,
        free_bytes=free_after,
        committed_bytes=0,
        transient_peak_bytes=peak,
        platform=platform,
    )
    kv = measure_kv_cache_bytes(requested_bytes=requested, **measured)
    withheld = measure_kv_cache_bytes(requested_bytes=init_free, **measured) - kv
    block = fp.pool_block_bytes
    reserved_budget = requested - (fp.weights_bytes + fp.activation_bytes + fp.overhead_bytes) - fp.cuda_graph_bytes
    capacity = max(0, reserved_budget // block)
    return MeasuredKV(
        footprint=fp,
        gpu_memory_utilization=gpu_memory_utilization,
        platform=platform,
        requested_bytes=requested,
        init_free_bytes=init_free,
        free_after_warmup_bytes=free_after,
        transient_peak_bytes=peak,
        kv_bytes=kv,
        capacity_blocks=capacity,
        num_blocks=min(kv // block, capacity),
        withheld_bytes=max(withheld, 0),
    )
