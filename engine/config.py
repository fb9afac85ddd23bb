"""Every limit of one engine, validated once: the arguments `LLM(...)` takes, then the KV pool they size.

`EngineConfig` holds what a caller asked for and refuses, before a model loads, anything no engine could
run with (a non-integer limit, a block size that is not a power of two, an unknown dtype, device, backend or
cache dtype). `EngineConfig.size_cache(model)` then fixes what depends on the loaded model, in one place:
the cache's element type, its blocks (given, from a byte budget, or sized from the device's memory through
the memory model, engine/memory/footprint.py) and `max_model_len`, which must fit in the pool. The runner,
the block manager and the scheduler are built from the resulting `CacheConfig` and check none of it again.
vLLM splits the same job between `EngineArgs`, `CacheConfig` and `SchedulerConfig`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.core.kv_groups import KVCacheGroup, blocks_per_seq, group_size, kv_cache_groups
from engine.core.scheduler import SchedulerConfig
from engine.core.sequence import check_block_size
from engine.core.sliding_window import kv_blocks_per_seq
from engine.memory import ModelSpec, kv_blocks_from_budget, kv_budget_bytes, kv_bytes_per_token, model_from_config
from engine.memory.startup import DEFAULT_GPU_MEMORY_UTILIZATION
from engine.memory.units import kv_bytes
from engine.model.config import ModelConfig
from engine.worker.device import resolve_device
from engine.worker.kv_cache import CacheConfig
from kernels.backend import resolve_backend
from kernels.fp8 import FP8_DTYPE
from kernels.validate import check_int

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
KV_CACHE_DTYPES = ("auto", "fp8", "fp8_e4m3")  # vLLM's names: "auto" = the model's dtype; fp8 = e4m3
CPU_KV_BUDGET_BYTES = 256 * 2**20  # documented CPU default: small enough for a laptop, plenty for tiny models
# On CUDA, beyond the activation peak: allocator slack plus one step's fp32 logits and sampler temporaries
# (the CUDA context and the weights are already counted in the memory the device reports in use).
CUDA_OVERHEAD_BYTES = 256 * 2**20


def parse_dtype(dtype: torch.dtype | str | None) -> torch.dtype | None:
    """The model dtype an LLM was asked for: a torch.dtype, one of DTYPES' names, or None (the checkpoint's)."""
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r} is not supported; use one of {', '.join(DTYPES)} or a torch.dtype")
    return DTYPES[dtype]


def kv_cache_dtype(name: object, model_dtype: torch.dtype) -> torch.dtype:
    """The cache's element type for vLLM's `kv_cache_dtype` name; a ValueError lists the accepted names."""
    if name not in KV_CACHE_DTYPES:
        raise ValueError(
            f"kv_cache_dtype={name!r} is not supported; use one of {', '.join(map(repr, KV_CACHE_DTYPES))} "
            "('auto' keeps the model's dtype, 'fp8' stores K/V as float8 e4m3 with per-layer scales)"
        )
    return model_dtype if name == "auto" else FP8_DTYPE


def model_spec(config: ModelConfig) -> ModelSpec:
    """The memory model's description of a loaded model, from its config."""
    return model_from_config(config.to_hf(), name=config.architecture, source="the loaded model's config.json")


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """An engine's arguments (vLLM's names), validated when built; `device`, `backend` and `dtype` are stored
    resolved (a torch.device, "torch" or "triton", a torch.dtype or None).

    The defaults suit this small engine; only gpu_memory_utilization is vLLM's (its estimate-based 0.92). vLLM
    v0.34.0's others differ: 64-token blocks (`CacheConfig.DEFAULT_BLOCK_SIZE`), prefix caching on, and for `vllm
    serve` 256 or 1,024 sequences and 2,048 to 16,384 batched tokens by device (`EngineArgs.get_batch_defaults`).
    """

    block_size: int = 16
    num_gpu_blocks: int | None = None
    device: torch.device | str | None = None
    backend: str = "auto"
    enable_prefix_caching: bool = False
    max_model_len: int | None = None
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048
    dtype: torch.dtype | str | None = None
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION  # vLLM's default (0.92 since v0.20)
    kv_cache_dtype: str = "auto"
    kv_cache_memory_bytes: int | None = None

    def __post_init__(self) -> None:
        check_block_size(self.block_size)
        check_int("max_num_seqs", self.max_num_seqs, hint="requests running at once, e.g. 64")
        check_int("max_num_batched_tokens", self.max_num_batched_tokens, hint="new tokens per step, e.g. 2048")
        if self.max_model_len is not None:
            check_int("max_model_len", self.max_model_len, hint="or None for the model's limit")
        if self.num_gpu_blocks is not None:
            check_int("num_gpu_blocks", self.num_gpu_blocks, hint="or None to size it")
        util = self.gpu_memory_utilization
        if isinstance(util, bool) or not isinstance(util, (int, float)) or not 0.0 < util <= 1.0:
            raise ValueError(f"gpu_memory_utilization={util!r} must be a fraction in (0, 1], e.g. 0.92")
        if not isinstance(self.enable_prefix_caching, bool):
            raise ValueError(f"enable_prefix_caching={self.enable_prefix_caching!r} must be True or False")
        kv_cache_dtype(self.kv_cache_dtype, torch.float32)  # a bad name fails before the model loads
        budget = self.kv_cache_memory_bytes
        if budget is not None:
            check_int("kv_cache_memory_bytes", budget, kind="a whole number of bytes", hint="or None")
        if budget is not None and self.num_gpu_blocks is not None:
            raise ValueError(
                f"kv_cache_memory_bytes={budget!r} and num_gpu_blocks={self.num_gpu_blocks!r} both size the KV "
                "pool; give one of them"
            )
        device = resolve_device(self.device)
        object.__setattr__(self, "device", device)
        object.__setattr__(self, "backend", resolve_backend(self.backend, device))
        object.__setattr__(self, "dtype", parse_dtype(self.dtype))

    def scheduler_config(self, cache: CacheConfig) -> SchedulerConfig:
        """The scheduler's limits for an engine with this pool."""
        return SchedulerConfig(self.max_num_seqs, self.max_num_batched_tokens, cache.max_model_len)

    def size_cache(self, model: ModelConfig, model_dtype: torch.dtype) -> CacheConfig:
        """The KV pool for the loaded model: its element type, its blocks and a max_model_len that fits it.

        Blocks come from num_gpu_blocks, else from kv_cache_memory_bytes, else from the device's memory
        (`auto_num_blocks`). max_model_len must be within the model's max_position_embeddings; None takes the
        model's limit, or the pool's when the pool is smaller. A requested length the pool cannot hold is a
        ValueError: a sliding-window sequence holds at most its window's blocks (`kv_blocks_per_seq`), so for
        such a model the pool needs only one window's blocks."""
        dtype = kv_cache_dtype(self.kv_cache_dtype, model_dtype)
        spec = model_spec(model)  # the memory model's view of this model: KV bytes, activations
        groups = kv_cache_groups(model.layer_sliding_windows)
        hybrid = len(groups) > 1
        if hybrid:  # one slot of the shared pool: K+V of one layer per pool tensor (engine/core/kv_groups.py)
            per_token = kv_bytes(group_size(groups), model.num_key_value_heads, model.head_dim, dtype.itemsize)
        else:
            per_token = cache_bytes_per_token(model, spec, dtype)
        limit = model.max_model_len
        if self.max_model_len is not None and self.max_model_len > limit:
            raise ValueError(f"max_model_len={self.max_model_len} must be in 1..{limit} (max_position_embeddings)")
        if self.num_gpu_blocks is not None:
            num_blocks = self.num_gpu_blocks
        elif self.kv_cache_memory_bytes is not None:
            num_blocks = kv_blocks_from_budget(self.kv_cache_memory_bytes, per_token, self.block_size)
            if num_blocks < 1:
                raise ValueError(
                    f"kv_cache_memory_bytes={self.kv_cache_memory_bytes!r} must be a whole number of bytes holding "
                    f"at least one block ({per_token * self.block_size} bytes)"
                )
        else:
            num_blocks = auto_num_blocks(spec, dtype.itemsize, self, self.max_model_len or limit, groups, per_token)
        window = groups[0].sliding_window
        wanted = self.max_model_len or limit
        need = blocks_per_seq(groups, wanted, self.block_size, self.max_num_batched_tokens)
        capacity = num_blocks * self.block_size
        pool_tokens = None
        if need <= num_blocks:
            max_model_len = wanted
        elif self.max_model_len is None:
            max_model_len = pool_tokens = (
                longest_fitting(groups, num_blocks, self, limit) if hybrid else min(limit, capacity)
            )
        elif hybrid:
            raise ValueError(
                f"max_model_len={self.max_model_len} does not fit in the KV cache: a sequence that long holds "
                f"{need} blocks over its {len(groups)} KV-cache groups ({group_summary(groups)}) but the pool has "
                f"{num_blocks}; lower max_model_len or give the cache more memory (kv_cache_memory_bytes, "
                "num_gpu_blocks)"
            )
        else:
            windowed = f"; with the {window}-token sliding window a sequence needs {need} blocks" if window else ""
            raise ValueError(
                f"max_model_len={self.max_model_len} is larger than the maximum number of tokens the KV cache can "
                f"hold ({num_blocks} blocks x {self.block_size} = {capacity}{windowed}); lower max_model_len or "
                "raise num_gpu_blocks"
            )
        return CacheConfig(
            self.block_size,
            num_blocks,
            dtype,
            per_token,
            max_model_len,
            pool_tokens if pool_tokens is not None and pool_tokens < limit else None,
            window,
            self.enable_prefix_caching,
            groups if hybrid else (),
        )


def cache_bytes_per_token(model: ModelConfig, spec: ModelSpec, dtype: torch.dtype) -> int:
    """Bytes one token holds in the engine's cache: K and V per KV head (the memory model's formula), or for an MLA
    model one latent + rope-key row per layer (engine/worker/latent_cache.py), which has no fp8 form."""
    if model.mla is None:
        return kv_bytes_per_token(spec, dtype.itemsize)
    if dtype == FP8_DTYPE:
        raise ValueError(
            f"kv_cache_dtype='fp8' is not supported for {model.architecture}'s latent cache; use kv_cache_dtype='auto'"
        )
    return model.mla.cache_bytes_per_token(model.num_hidden_layers, dtype.itemsize)


def group_summary(groups: tuple[KVCacheGroup, ...]) -> str:
    """ "1 full, 1 sliding (window 16)": the groups a message names."""
    full = sum(g.sliding_window is None for g in groups)
    windows = sorted({g.sliding_window for g in groups if g.sliding_window is not None})
    sliding = len(groups) - full
    return f"{full} full, {sliding} sliding (window {', '.join(map(str, windows))})"


def longest_fitting(groups: tuple[KVCacheGroup, ...], num_blocks: int, config: EngineConfig, limit: int) -> int:
    """The longest sequence (<= limit) whose blocks over all groups fit in num_blocks (0 when none does)."""
    lo, hi = 0, limit
    while lo < hi:  # blocks_per_seq grows with the length: bisect
        mid = (lo + hi + 1) // 2
        if blocks_per_seq(groups, mid, config.block_size, config.max_num_batched_tokens) <= num_blocks:
            lo = mid
        else:
            hi = mid - 1
    return lo


def auto_num_blocks(
    spec: ModelSpec,
    element_size: int,
    config: EngineConfig,
    max_model_len: int,
    groups: tuple[KVCacheGroup, ...] | None = None,
    slot_bytes: int | None = None,
) -> int:
    """KV blocks for a cache of `element_size`-byte elements: the device's budget, capped by the batch limits.

    On CUDA, `gpu_memory_utilization` of the device's memory minus what is already in use (weights, other
    processes), one step's activation peak and CUDA_OVERHEAD_BYTES; on CPU, CPU_KV_BUDGET_BYTES. Either is
    capped at what `max_num_seqs` sequences of `max_model_len` tokens can use (for a sliding-window model, of
    the blocks one sequence can hold at most). groups / slot_bytes: the loaded model's KV-cache groups and the
    bytes of one pool slot (or an MLA latent cache's bytes per token), when they differ from what the memory
    model's spec says."""
    per_token = kv_bytes_per_token(spec, element_size) if slot_bytes is None else slot_bytes
    device, block_size = config.device, config.block_size
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        budget = kv_budget_bytes(
            spec,
            total,
            total - free,
            config.gpu_memory_utilization,
            config.max_num_batched_tokens,
            element_size,
            1,
            CUDA_OVERHEAD_BYTES,
        )
    else:
        budget = CPU_KV_BUDGET_BYTES
    # More than max_num_seqs full-length sequences can never be resident at once; a bigger pool would only
    # cost memory and make every allocator snapshot the playground draws longer.
    per_seq = max_model_len
    if groups is not None:  # each group holds its own blocks; a sliding one never more than its window's
        per_seq = blocks_per_seq(groups, max_model_len, block_size, config.max_num_batched_tokens) * block_size
    elif spec.sliding_window is not None:  # a windowed sequence never holds more than its window's blocks
        blocks = kv_blocks_per_seq(max_model_len, block_size, spec.sliding_window, config.max_num_batched_tokens)
        per_seq = blocks * block_size
    budget = min(budget, config.max_num_seqs * per_seq * per_token)
    num_blocks = kv_blocks_from_budget(budget, per_token, block_size)
    if num_blocks < 1:
        raise ValueError(
            f"no memory left for the KV cache (budget {budget} bytes, one block is {per_token * block_size} "
            "bytes); raise gpu_memory_utilization, use a smaller model, or pass num_gpu_blocks"
        )
    return num_blocks
