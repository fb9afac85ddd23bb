"""vLLM V1's start-up memory arithmetic: the token budget it profiles, its CUDA graphs, and its start-up errors.

The course follows vLLM v0.34.0 (wheel commit 62d4bc3c7). At start-up vLLM loads the weights,
runs one dummy forward pass over the token budget ``max_num_batched_tokens``, estimates the memory of the CUDA
graphs it will capture (on by default since v0.20.0: ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` defaults to "1"
in vllm/envs.py; PR #30515 added the estimate switched off, PR #38284 switched it on), and hands the rest of
``total * gpu_memory_utilization`` to the KV cache:

    KV = total * gpu_memory_utilization - (weights + activation peak + non-torch memory) - CUDA graphs

This is vLLM's estimate-based sizing, with ``gpu_memory_utilization`` 0.92 by default
(``CacheConfig.DEFAULT_GPU_MEMORY_UTILIZATION``). Since v0.34.0 vLLM on CUDA and ROCm defaults to the *extensible*
KV cache instead (``enable_extensible_kv_cache``): the utilization then defaults to 1.0, the free-memory check at
start-up is skipped, and the final KV size is measured from the memory actually free after CUDA graph capture and
warmup (``resolved_gpu_memory_utilization`` in vllm/config/cache.py, ``finalize_extensible_kv_cache`` in
vllm/v1/core/kv_cache_planning.py). ``--no-enable-extensible-kv-cache`` (or ``--kv-cache-memory-bytes``) gives the
estimate-based sizing this module computes.

``total`` is what CUDA reports for the device (``torch.cuda.mem_get_info``), below nvidia-smi's MiB figure.
Chunked prefill is on by default, so the budget, not ``max_model_len``, sets the activation peak; with
``--no-enable-chunked-prefill`` vLLM raises the budget to at least ``max_model_len`` (``token_budget``).
`kv_budget_from_profile` is the KV line on the numbers vLLM logs; the vllm#10517 report (RTX 3090: total
23.58 GiB, peak torch memory 17.06 GiB, non-torch 0.35 GiB, utilization 0.90 -> kv_cache_size 3.81 GiB) is
reproduced in tests/engine/memory/test_startup.py. The budget defaults follow ``EngineArgs.get_batch_defaults``
(vllm/engine/arg_utils.py): for ``vllm serve`` 16384 batched tokens and 1024 sequences on devices with >= 160 GiB,
8192 and 1024 on devices with >= 70 GiB that are neither A100s nor a GB10, otherwise 2048 and 256 (the CPU
backend: 2048 and 128). The CUDA graph sizes follow ``VllmConfig._set_cudagraph_sizes`` (vllm/config/vllm.py):
``[1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16)`` with ``max = min(2 * max_num_seqs, 1024 on compute
capability 10.x (B200, B300), else 512, max_num_batched_tokens)``, plus ``max_num_batched_tokens`` and
``max_num_seqs`` themselves when they are at most ``max``. engine/memory/footprint.py builds the full footprint on
top of these.
"""

from __future__ import annotations

from engine.memory.specs import GpuSpec, ModelSpec
from engine.memory.units import GiB
from kernels.validate import check_int

# vLLM's default share of the device with estimate-based sizing (CacheConfig.DEFAULT_GPU_MEMORY_UTILIZATION):
# 0.92 since v0.20.0, when vLLM PR #38284 turned CUDA-graph memory profiling on and raised the default from 0.9 to
# make room for the estimate. (With the extensible KV cache, v0.34.0's default on CUDA, an unset utilization is 1.0.)
DEFAULT_GPU_MEMORY_UTILIZATION = 0.92
PRE_V020_GPU_MEMORY_UTILIZATION = 0.9  # the default up to v0.19.1 (no CUDA graphs in the profile)
EXTENSIBLE_KV_CACHE_GPU_MEMORY_UTILIZATION = 1.0  # the default with the extensible KV cache (v0.34.0)
# vLLM's default KV-cache block size in tokens (CacheConfig.DEFAULT_BLOCK_SIZE): 64 since v0.34.0, 16 before. The
# attention backend may ask for another (FlashAttention on NVIDIA GPUs takes any multiple of 16, so 64 stands).
DEFAULT_BLOCK_SIZE = 64

# vLLM's estimate of its CUDA graphs ("Estimated CUDA graph memory: X GiB total") per decoder layer and captured
# batch size, calibrated on a v0.20+ log with the full default capture sizes: Qwen3-8B (36 layers) on a 24 GB card,
# "Profiling CUDA graph memory: PIECEWISE=51 (largest=512), FULL=35 (largest=256)" then "Estimated CUDA graph
# memory: 0.52 GiB total" (LMCache/LMCache#3430) -> 0.52 GiB / (51 * 36) ~ 0.29 MiB. An 8B Llama (32 layers) then
# costs 0.46 GiB, inside the 0.36-0.76 GiB public v0.20+ logs show for models of that size. (Before the estimate,
# vllm#14286 logged the graphs V1 captured after sizing the KV cache: "took 2.02 GiB" for 67 sizes.)
CUDA_GRAPH_BYTES_PER_LAYER = int(0.52 * GiB / (51 * 36))

# The page vLLM's start-up errors point to.
CONSERVING_MEMORY_URL = "https://docs.vllm.ai/en/latest/configuration/conserving_memory/"
# What they suggest with estimate-based sizing (`_more_kv_cache_memory_hint` in vllm/v1/core/kv_cache_planning.py).
MORE_KV_CACHE_MEMORY_HINT = (
    "Try increasing `gpu_memory_utilization` when initializing the engine (this flag also controls CPU memory "
    "reservation on the CPU backend, despite its name)."
)


def format_gib(num_bytes: float) -> str:
    """A byte count as vLLM's logs and errors print GiB: rounded to 2 decimals, trailing zeros dropped ("16.0")."""
    return f"{round(num_bytes / GiB, 2)}"


def _is_cpu(gpu: GpuSpec) -> bool:
    """The catalog's CPU entry: vLLM's CPU backend has its own batch defaults."""
    return gpu.name.lower().startswith("cpu")


def _is_gb10(gpu: GpuSpec) -> bool:
    """DGX Spark's GB10 (compute capability 12.1): vLLM keeps it on the small defaults despite its memory."""
    return "gb10" in gpu.name.lower().replace("-", " ").split()


def is_blackwell_family(gpu: GpuSpec) -> bool:
    """Compute capability 10.x (B200, B300, GB200, GB300): vLLM captures CUDA graphs up to 1024 tokens there.

    ``current_platform.is_device_capability_family(100)`` in ``VllmConfig._set_cudagraph_sizes``; the RTX 50 series
    is Blackwell too but capability 12.0, so it keeps the 512 ceiling.
    """
    words = gpu.name.lower().replace("-", " ").split()
    return any(w in ("b200", "b300", "gb200", "gb300") for w in words)


def _batch_tier(gpu: GpuSpec) -> str:
    """vLLM's device class in ``EngineArgs.get_batch_defaults``: "xl" (>= 160 GiB), "large", "small" or "cpu"."""
    if _is_cpu(gpu):
        return "cpu"
    if gpu.total_bytes >= 160 * GiB:
        return "xl"
    if gpu.total_bytes >= 70 * GiB and "a100" not in gpu.name.lower() and not _is_gb10(gpu):
        return "large"  # the A100 is excluded (PR #17885: a larger budget lowered its throughput)
    return "small"


# `vllm serve`'s defaults per device class (UsageContext.OPENAI_API_SERVER in EngineArgs.get_batch_defaults).
SERVE_MAX_NUM_BATCHED_TOKENS = {"xl": 16384, "large": 8192, "small": 2048, "cpu": 2048}
SERVE_MAX_NUM_SEQS = {"xl": 1024, "large": 1024, "small": 256, "cpu": 128}


def default_max_num_batched_tokens(gpu: GpuSpec) -> int:
    """vLLM V1's default token budget per step for `vllm serve`: 16384 on >= 160 GiB, 8192 on large GPUs, else 2048."""
    return SERVE_MAX_NUM_BATCHED_TOKENS[_batch_tier(gpu)]


def default_max_num_seqs(gpu: GpuSpec) -> int:
    """vLLM V1's default max_num_seqs for `vllm serve`: 1024 on devices >= 70 GiB (not A100), 256 else, CPU 128."""
    return SERVE_MAX_NUM_SEQS[_batch_tier(gpu)]


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


def max_cudagraph_capture_size(gpu: GpuSpec | None = None) -> int:
    """vLLM's default ceiling on a captured batch: 1024 tokens on compute capability 10.x, else 512."""
    return 1024 if gpu is not None and is_blackwell_family(gpu) else 512


def cudagraph_capture_sizes(max_num_seqs: int, max_num_batched_tokens: int, gpu: GpuSpec | None = None) -> list[int]:
    """The batch sizes vLLM V1 captures a CUDA graph for by default (ascending), without speculative decoding.

    ``VllmConfig._set_cudagraph_sizes``: the ceiling is ``min(max_num_seqs * 2, 1024 on Blackwell data-centre GPUs
    else 512, max_num_batched_tokens)``; the grid is 1, 2, 4, every 8 below 256, every 16 from 256; vLLM appends
    ``max_num_batched_tokens`` and ``max_num_seqs`` (the widest decode batch) when they are within the ceiling.
    gpu: the device (None: one that is not compute capability 10.x).
    """
    for name, value in (("max_num_seqs", max_num_seqs), ("max_num_batched_tokens", max_num_batched_tokens)):
        check_int(name, value, kind="a whole number")
    ceiling = min(max_num_seqs * 2, max_cudagraph_capture_size(gpu))  # decode_query_len 1: no speculative decoding
    decode_sizes = [max_num_seqs] if max_num_seqs <= ceiling else []
    top = min(max_num_batched_tokens, ceiling)
    sizes = {s for s in (1, 2, 4) if s <= top} | set(range(8, min(top + 1, 256), 8)) | set(range(256, top + 1, 16))
    if max_num_batched_tokens <= top:
        sizes.add(max_num_batched_tokens)
    sizes |= {s for s in decode_sizes if s <= max_num_batched_tokens}
    return sorted(sizes)


def cuda_graph_bytes(
    model: ModelSpec, max_num_seqs: int, max_num_batched_tokens: int, enforce_eager: bool, gpu: GpuSpec | None = None
) -> int:
    """Memory of the CUDA graphs vLLM captures (0 with --enforce-eager): graphs * layers * per-layer cost."""
    if enforce_eager:
        return 0
    graphs = len(cudagraph_capture_sizes(max_num_seqs, max_num_batched_tokens, gpu))
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
    """The ValueError vLLM v0.34.0 raises at start-up for these numbers (its own wording), or None when it starts.

    The wording is that of estimate-based sizing (the extensible KV cache off; its errors give other hints). Three
    checks, in vLLM's order: free memory at start-up below ``total * utilization`` (``request_memory`` in
    vllm/v1/worker/utils.py, the "Free memory on device" error, which the extensible KV cache skips); no room for a
    single block; one max_model_len sequence larger than the pool (``_check_enough_kv_cache_memory`` in
    vllm/v1/core/kv_cache_planning.py, with the hint of ``_more_kv_cache_memory_hint``). That last check plans
    against the pool minus the one null block vLLM's block pool keeps back, and its "estimated maximum model length"
    is what the remaining blocks hold. blocks_per_seq: the most blocks one max_model_len sequence holds (a sliding
    window caps it; None: full attention, ceil(max_model_len / block_size)). block_bytes: what one block id costs
    the pool (a hybrid model's `kv_pool.pool_bytes_per_block`; None: block_size * kv_bytes_per_token).
    max_len_estimate: the longest max_model_len whose blocks fit (vLLM binary-searches it for hybrids,
    ``_estimate_max_model_len_from_groups``; None: what the remaining blocks hold).
    """
    budget, free = capacity_bytes * gpu_memory_utilization, capacity_bytes - other_process_bytes
    if free < budget:
        return (
            f"ValueError: Free memory on device cuda:0 ({format_gib(free)}/{format_gib(capacity_bytes)} GiB) on "
            f"startup is less than desired GPU memory utilization ({gpu_memory_utilization}, "
            f"{format_gib(budget)} GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes."
        )
    if num_blocks <= 0:
        return (
            f"ValueError: No available memory for the cache blocks. {MORE_KV_CACHE_MEMORY_HINT} "
            f"See {CONSERVING_MEMORY_URL} for more details."
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
            f"({format_gib(needed)} GiB KV cache is needed, which is larger than the available KV cache memory "
            f"({format_gib(available)} GiB). {estimate}{MORE_KV_CACHE_MEMORY_HINT} Decreasing `max_model_len` also "
            f"reduces what is needed. See {CONSERVING_MEMORY_URL} for more details."
        )
    return None
