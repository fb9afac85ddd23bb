"""vLLM V1's start-up memory arithmetic: the token budget it profiles, its CUDA graphs, and its start-up errors.

At start-up vLLM V1 loads the weights, runs one dummy forward pass over ``max_num_batched_tokens`` tokens (chunked
prefill is always on in V1, so this budget, not ``max_model_len``, sets the activation peak), optionally
estimates the memory of the CUDA graphs it will capture, and hands the rest of
``total * gpu_memory_utilization`` to the KV cache:

    KV = total * gpu_memory_utilization - (weights + activation peak + non-torch memory) [- CUDA graphs]

`kv_budget_from_profile` is that line on the numbers vLLM logs; the vllm#10517 report (RTX 3090: total 23.58 GiB,
peak torch memory 17.06 GiB, non-torch 0.35 GiB, utilization 0.90 -> kv_cache_size 3.81 GiB) is reproduced in
tests/engine/memory/test_startup.py. The defaults follow vLLM's ``EngineArgs.get_batch_defaults``
(vllm/engine/arg_utils.py): for ``vllm serve`` 8192 batched tokens and 1024 sequences on GPUs with >= 70 GiB that are
not A100s, otherwise 2048 and 256. The CUDA graph sizes follow vLLM's ``CompilationConfig`` default
(``[1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16)`` with ``max = min(2 * max_num_seqs, 512,
max_num_batched_tokens)``). engine/memory/footprint.py builds the full footprint on top of these.
"""

from __future__ import annotations

from engine.memory.specs import GpuSpec, ModelSpec
from engine.memory.units import GiB

# One captured graph costs memory per decoder layer (piecewise graphs keep each layer's buffers). Calibrated on
# vllm#14286: Llama-3.1-8B (32 layers) with V1's early default of 67 capture sizes logged "Graph capturing
# finished in 17 secs, took 2.02 GiB" -> 2.02 GiB / (67 * 32) ~ 0.96 MiB per layer and graph.
CUDA_GRAPH_BYTES_PER_LAYER = int(2.02 * GiB / (67 * 32))


def _is_large_gpu(gpu: GpuSpec) -> bool:
    """vLLM's test for its larger defaults: >= 70 GiB of device memory and not an A100 (PR #17885)."""
    return gpu.memory_bytes >= 70 * GiB and "a100" not in gpu.name.lower()


def default_max_num_batched_tokens(gpu: GpuSpec) -> int:
    """vLLM V1's default token budget per step for `vllm serve` on this GPU: 8192 on large GPUs, else 2048."""
    return 8192 if _is_large_gpu(gpu) else 2048


def default_max_num_seqs(gpu: GpuSpec) -> int:
    """vLLM V1's default max_num_seqs for `vllm serve` on this GPU: 1024 on large GPUs, else 256."""
    return 1024 if _is_large_gpu(gpu) else 256


def cudagraph_capture_sizes(max_num_seqs: int, max_num_batched_tokens: int) -> list[int]:
    """The batch sizes vLLM V1 captures a CUDA graph for by default (ascending)."""
    for name, value in (("max_num_seqs", max_num_seqs), ("max_num_batched_tokens", max_num_batched_tokens)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r} must be a positive whole number")
    top = min(2 * max_num_seqs, 512, max_num_batched_tokens)
    grid = [1, 2, 4, *range(8, 256, 8), *range(256, top + 1, 16)]
    return [s for s in grid if s <= top]


def cuda_graph_bytes(model: ModelSpec, max_num_seqs: int, max_num_batched_tokens: int, enforce_eager: bool) -> int:
    """Memory of the CUDA graphs vLLM captures (0 with --enforce-eager): graphs * layers * per-layer cost."""
    if enforce_eager:
        return 0
    graphs = len(cudagraph_capture_sizes(max_num_seqs, max_num_batched_tokens))
    return graphs * model.num_layers * CUDA_GRAPH_BYTES_PER_LAYER


def check_startup_args(gpu_memory_utilization: float, block_size: int, *byte_counts: int | None) -> None:
    """ValueError unless utilization is in (0, 1], block_size >= 1 and every byte count (None allowed) >= 0."""
    if not 0 < gpu_memory_utilization <= 1:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    if block_size < 1:
        raise ValueError(f"block_size must be a positive integer, got {block_size}")
    if any(b is not None and b < 0 for b in byte_counts):
        raise ValueError("other_process_bytes, overhead_bytes, cuda_graph_bytes and kv_cache_memory_bytes must be >= 0")


def kv_budget_from_profile(
    total_bytes: float,
    gpu_memory_utilization: float,
    peak_torch_bytes: float,
    non_torch_bytes: float,
    cuda_graph_bytes: float = 0,
) -> float:
    """KV bytes vLLM sizes from its profile: total * utilization - peak torch (weights + activations) - non-torch.

    `cuda_graph_bytes` is subtracted too when vLLM estimates CUDA graph memory during profiling (the log says
    "CUDA graph memory profiling is enabled"). The result may be negative: then no KV block fits.
    """
    if not 0 < gpu_memory_utilization <= 1:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    if min(total_bytes, peak_torch_bytes, non_torch_bytes, cuda_graph_bytes) < 0:
        raise ValueError("memory figures must be >= 0 bytes")
    return total_bytes * gpu_memory_utilization - peak_torch_bytes - non_torch_bytes - cuda_graph_bytes


def startup_error_text(
    capacity_bytes: int,
    other_process_bytes: int,
    gpu_memory_utilization: float,
    num_blocks: int,
    block_size: int,
    kv_bytes_per_token: int,
    max_model_len: int,
    blocks_per_seq: int | None = None,
) -> str | None:
    """The ValueError vLLM V1 raises at start-up for these numbers (its own wording), or None when it starts.

    blocks_per_seq: the most blocks one max_model_len sequence holds (a sliding window caps it; None: full
    attention, ceil(max_model_len / block_size)). The "estimated maximum model length" assumes full attention.
    """
    budget, free = capacity_bytes * gpu_memory_utilization, capacity_bytes - other_process_bytes
    if free < budget:
        return (
            f"ValueError: Free memory on device ({free / GiB:.2f}/{capacity_bytes / GiB:.2f} GiB) on startup is "
            f"less than desired GPU memory utilization ({gpu_memory_utilization}, {budget / GiB:.2f} GiB). Decrease "
            f"GPU memory utilization or reduce GPU memory used by other processes."
        )
    if num_blocks <= 0:
        return (
            "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
            "initializing the engine."
        )
    capacity_tokens = num_blocks * block_size
    blocks = -(-max_model_len // block_size) if blocks_per_seq is None else blocks_per_seq
    if blocks > num_blocks:
        needed = blocks * block_size * kv_bytes_per_token
        available = capacity_tokens * kv_bytes_per_token
        return (
            f"ValueError: To serve at least one request with the models's max seq len ({max_model_len}), "
            f"({needed / GiB:.2f} GiB KV cache is needed, which is larger than the available KV cache memory "
            f"({available / GiB:.2f} GiB). Based on the available memory, the estimated maximum model length is "
            f"{capacity_tokens}. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
            f"initializing the engine."
        )
    return None
