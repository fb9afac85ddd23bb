"""Write new K/V rows into the paged cache in plain torch: the CPU production path (any device).

Same contract as kernels/store_kv.py (vLLM's `reshape_and_cache`; PagedAttention, Kwon et al., SOSP 2023):
token i's key and value rows go to slot `slot_mapping[i] = block_id * block_size + offset` of the pool; a
negative slot is a padding token and is skipped. k/v [num_tokens, Hkv, D]; k_cache/v_cache
[num_blocks, block_size, Hkv, D]; kernels/ops.py validates inputs (slots in range and distinct).

An fp8 cache (`torch.float8_e4m3fn`, kernels/fp8.py) stores `clamp(x / scale, +-448)` with one float32 scale
per layer or per KV head (`k_scale`, `v_scale`, already calibrated by kernels.ops.store_kv); the attention
kernels multiply by the scale when they read. CPU torch has no indexing kernels for fp8, so the rows are
written through a uint8 view of the same bytes.
"""

from __future__ import annotations

import torch

from kernels.fp8 import FP8_DTYPE, quantize_fp8


def store_kv_torch(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
    all_live: bool = False,
) -> None:
    """Scatter the rows of k/v into the caches in place; quantized with k_scale / v_scale for an fp8 cache.

    all_live: the caller knows no slot is negative (a step plan read it), so no device read looks for one."""
    slots = slot_mapping.long()
    if not all_live:
        keep = slots >= 0
        if not bool(keep.all()):
            slots, k, v = slots[keep], k[keep], v[keep]
    if slots.numel() == 0:
        return
    for src, cache, scale in ((k, k_cache, k_scale), (v, v_cache, v_scale)):
        if cache.dtype == FP8_DTYPE:
            if scale is None:
                raise ValueError("an fp8 cache needs k_scale and v_scale (1-element float32 tensors)")
            rows, cache = quantize_fp8(src, scale).view(torch.uint8), cache.view(torch.uint8)
        else:
            rows = src.to(cache.dtype)
        if cache.is_contiguous():
            # One row copy per token into the flat [num_slots, Hkv, D] view of the pool.
            cache.view(-1, cache.shape[2], cache.shape[3]).index_copy_(0, slots, rows)
        else:
            # A strided cache has no flat view; index it by (block, offset) so the writes land in place.
            block_size = cache.shape[1]
            cache[slots // block_size, slots % block_size] = rows
