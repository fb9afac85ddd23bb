"""Write new K/V rows into the paged cache in plain torch: the CPU production path (any device).

Same contract as kernels/store_kv.py (vLLM's `reshape_and_cache`; PagedAttention, Kwon et al., SOSP 2023):
token i's key and value rows go to slot `slot_mapping[i] = block_id * block_size + offset` of the pool; a
negative slot is a padding token and is skipped. k/v [num_tokens, Hkv, D]; k_cache/v_cache
[num_blocks, block_size, Hkv, D]; kernels/ops.py validates inputs (slots in range and distinct).
"""

from __future__ import annotations

import torch


def store_kv_torch(
    k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: torch.Tensor
) -> None:
    """Scatter the rows of k/v into the caches in place."""
    slots = slot_mapping.long()
    keep = slots >= 0
    if not bool(keep.all()):
        slots, k, v = slots[keep], k[keep], v[keep]
    if slots.numel() == 0:
        return
    for src, cache in ((k, k_cache), (v, v_cache)):
        if cache.is_contiguous():
            # One row copy per token into the flat [num_slots, Hkv, D] view of the pool.
            cache.view(-1, cache.shape[2], cache.shape[3]).index_copy_(0, slots, src.to(cache.dtype))
        else:
            # A strided cache has no flat view; index it by (block, offset) so the writes land in place.
            block_size = cache.shape[1]
            cache[slots // block_size, slots % block_size] = src.to(cache.dtype)
