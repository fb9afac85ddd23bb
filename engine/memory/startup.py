"""vLLM V1's start-up memory arithmetic: the token budget it profiles, its CUDA graphs, and its start-up errors.

The course follows vLLM v0.29.0 (tag commit 98dff2a81d747d1dba01a47f939f48c3526d4206). At start-up vLLM loads
the weights, runs one dummy forward pass over the token budget ``max_num_batched_tokens``, estimates the memory
of the CUDA graphs it will capture (on by default since v0.21.0, vLLM PR #38284; PR #30515 added the estimate
switched off), and hands the rest of ``total * gpu_memory_utilization`` to the KV cache:

    KV = total * gpu_memory_utilization - (weights + activation peak + non-torch memory) - CUDA graphs

``total`` is what CUDA reports for the device (``torch.cuda.mem_get_info``), below nvidia-smi's MiB figure.
Chunked prefill is on by default, so the budget, not ``max_model_len``, sets the activation peak; with
``--no-enable-chunked-prefill`` vLLM raises the budget to at least ``max_model_len`` (``token_budget``).
`kv_budget_from_profile` is the KV line on the numbers vLLM logs; the vllm#10517 report (RTX 3090: total
23.58 GiB, peak torch memory 17.06 GiB, non-torch 0.35 GiB, utilization 0.90 -> kv_cache_size 3.81 GiB) is
reproduced in tests/engine/memory/test_startup.py. The budget defaults follow ``EngineArgs.get_batch_defaults``
(vllm/engine/arg_utils.py): for ``vllm serve`` 8192 batched tokens and 1024 sequences on GPUs with >= 70 GiB that
are not A100s, otherwise 2048 and 256. The CUDA graph sizes follow ``VllmConfig._set_cudagraph_sizes``
(``[1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16)`` with ``max = min(2 * max_num_seqs, 512,
max_num_batched_tokens)``). engine/memory/footprint.py builds the full footprint on top of these.
"""

from __future__ import annotations

from engine.memory.specs import GpuSpec, ModelSpec
from engine.memory.units import GiB
from kernels.validate import check_int

# vLLM's default share of the device (CacheConfig.gpu_memory_utilization): 0.92 since v0.21.0, when vLLM PR
# #38284 turned CUDA-graph memory profiling on and raised the default from 0.9 to make room for the estimate.
DEFAULT_GPU_MEMORY_UTILIZATION = 0.92
# vLLM's default KV-cache block size in tokens (CacheConfig.DEFAULT_BLOCK_SIZE): 64 since v0.34.0, 16 before. The
# attention backend may ask for another (FlashAttention on NVIDIA GPUs takes any multiple of 16, so 64 stands).
DEFAULT_BLOCK_SIZE = 64
PRE_V021_GPU_MEMORY_UTILIZATION = 0.9  # the default before v0.21.0 (no CUDA graphs in the profile)

# vLLM's estimate of its CUDA graphs ("Estimated CUDA graph memory: X GiB total") per decoder layer and captured
# batch size, calibrated on a v0.21+ log with the full default capture sizes: Qwen3-8B (36 layers) on a 24 GB card,
# "Profiling CUDA graph memory: PIECEWISE=51 (largest=512), FULL=35 (largest=256)" then "Estimated CUDA graph
# memory: 0.52 GiB total" (LMCache/LMCache#3430) -> 0.52 GiB / (51 * 36) ~ 0.29 MiB. An 8B Llama (32 layers) then
# costs 0.46 GiB, inside the 0.36-0.76 GiB public v0.21+ logs show for models of that size. (Before the estimate,
# vllm#14286 logged the graphs V1 captured after sizing the KV cache: "took 2.02 GiB" for 67 sizes.)
CUDA_GRAPH_BYTES_PER_LAYER = int(0.52 * GiB / (51 * 36))

# The page vLLM's start-up errors point to.
CONSERVING_MEMORY_URL = "https://docs.vllm.ai/en/latest/configuration/conserving_memory/"


def _is_large_gpu(gpu: GpuSpec) -> bool:
    """vLLM's test for its larger defaults: >= 70 GiB of device memory and not an A100 (PR #17885)."""
    return gpu.total_bytes >= 70 * GiB and "a100" not in gpu.name.lower()


def default_max_num_batched_tokens(gpu: GpuSpec) -> int:
    """vLLM V1's default token budget per step for `vllm serve` on this GPU: 8192 on large GPUs, else 2048."""
    return 8192 if _is_large_gpu(gpu) else 2048


def default_max_num_seqs(gpu: GpuSpec) -> int:
    """vLLM V1's default max_num_seqs for `vllm serve` on this GPU: 1024 on large GPUs, else 256."""
    return 1024 if _is_large_gpu(gpu) else 256


def token_budget(
    gpu: GpuSpec, max_model_len: int, max_num_batched_tokens: int | None = None, enable_chunked_prefill: bool = True
) -> int:
    """The tokens vLLM schedules (and profiles) per step: the budget, at least max_model_len without chunked prefill.

    Chunked prefill is on by default and splits a long prompt over steps. With ``--no-enable-chunked-prefill`` a
    prompt must fit one step, so vLLM raises the budget to ``max(max_model_len, max_num_batched_tokens)``
    (``EngineArgs`` in vllm/engine/arg_utils.py), and the profiled activation peak grows with it.
    """
    for name, value in (("max_model_len", max_model_len), ("max_num_batched_tokens", max_num_batched_tokens)):
        if value is not None:
            check_int(name, value, kind="a whole number of tokens")
    budget = default_max_num_batched_tokens(gpu) if max_num_batched_tokens is None else max_num_batched_tokens
    return budget if enable_chunked_prefill else max(max_model_len, budget)


def cudagraph_capture_sizes(max_num_seqs: int, max_num_batched_tokens: int) -> list[int]:
    """The batch sizes vLLM V1 captures a CUDA graph for by default (ascending)."""
    for name, value in (("max_num_seqs", max_num_seqs), ("max_num_batched_tokens", max_num_batched_tokens)):
        check_int(name, value, kind="a whole number")
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
    block_bytes: int | None = None,
    max_len_estimate: int | None = None,
) -> str | None:
    """The ValueError vLLM v0.29 raises at start-up for these numbers (its own wording), or None when it starts.

    Three checks, in vLLM's order: free memory at start-up below ``total * utilization`` (vllm/v1/worker, the
    "Free memory on device" error); no room for a single block; one max_model_len sequence larger than the pool
    (``_check_enough_kv_cache_memory`` in vllm/v1/core/kv_cache_utils.py). That last check plans against the
    pool minus the one null block vLLM's block pool keeps back, and its "estimated maximum model length" is what
    the remaining blocks hold. blocks_per_seq: the most blocks one max_model_len sequence holds (a sliding
    window caps it; None: full attention, ceil(max_model_len / block_size)). block_bytes: what one block id costs
    the pool (a hybrid model's `kv_pool.pool_bytes_per_block`; None: block_size * kv_bytes_per_token).
    max_len_estimate: the longest max_model_len whose blocks fit (vLLM binary-searches it for hybrids,
    ``_estimate_max_model_len_from_groups``; None: what the remaining blocks hold).
    """
    budget, free = capacity_bytes * gpu_memory_utilization, capacity_bytes - other_process_bytes
    if free < budget:
        return (
            f"ValueError: Free memory on device cuda:0 ({free / GiB:.2f}/{capacity_bytes / GiB:.2f} GiB) on startup "
            f"is less than desired GPU memory utilization ({gpu_memory_utilization}, {budget / GiB:.2f} GiB). "
            f"Decrease GPU memory utilization or reduce GPU memory used by other processes."
        )
    if num_blocks <= 0:
        return (
            "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
            "initializing the engine (this flag also controls CPU memory reservation on the CPU backend, despite "
            f"its name). See {CONSERVING_MEMORY_URL} for more details."
        )
    usable = num_blocks - 1  # the null block
    blocks = -(-max_model_len // block_size) if blocks_per_seq is None else blocks_per_seq
    if blocks > usable:
        block_bytes = block_size * kv_bytes_per_token if block_bytes is None else block_bytes
        needed, available = blocks * block_bytes, usable * block_bytes
        estimate = (
            f"Based on the available memory, the estimated maximum model length is "
            f"{usable * block_size if max_len_estimate is None else max_len_estimate}. "
            if usable > 0
            else ""
        )
        return (
            f"ValueError: To serve at least one request with the model's max seq len ({max_model_len}), "
            f"({needed / GiB:.2f} GiB KV cache is needed, which is larger than the available KV cache memory "
            f"({available / GiB:.2f} GiB). {estimate}Try increasing `gpu_memory_utilization` (which also controls "
            f"CPU memory on the CPU backend) or decreasing `max_model_len` when initializing the engine. "
            f"See {CONSERVING_MEMORY_URL} for more details."
        )
    return None
