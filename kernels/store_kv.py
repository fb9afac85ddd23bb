"""Triton store of new K/V rows into the paged cache through a slot mapping (vLLM's `reshape_and_cache`).

PagedAttention (Kwon et al., SOSP 2023) stores token t of a sequence in slot
`block_table[t // block_size] * block_size + t % block_size` of a pool of blocks. Each step the scheduler
hands the model one slot per new token (`slot_mapping`); this kernel copies the new tokens' keys and values
there, one program per token. A negative slot means "no slot" (a padding token) and is skipped. The torch
twin is kernels/store_kv_torch.py.

k/v [num_tokens, Hkv, D] (v: Dv, which may differ); k_cache/v_cache [num_blocks, block_size, Hkv, D / Dv];
slot_mapping int32/int64 [num_tokens]. kernels/ops.py validates inputs (slots in range and distinct) before the
launcher runs.
An fp8 cache (`torch.float8_e4m3fn`) gets `clamp(x / scale, +-448)` with the per-tensor scales `k_scale` /
`v_scale` (1-element float32 tensors read on the device), as the torch twin does.
"""

from __future__ import annotations

import torch

from kernels.backend import HAS_TRITON
from kernels.checks import check_last_stride
from kernels.fp8 import FP8_DTYPE, FP8_MAX

if HAS_TRITON:
    import triton
    import triton.language as tl

    @triton.jit
    def _store_kv_kernel(
        k_ptr,  # [num_tokens, num_kv_heads, head_dim]
        v_ptr,  # [num_tokens, num_kv_heads, head_dim_v]
        k_cache_ptr,  # [num_blocks, block_size, num_kv_heads, head_dim]
        v_cache_ptr,  # [num_blocks, block_size, num_kv_heads, head_dim_v]
        slot_mapping_ptr,  # [num_tokens] int32 or int64
        k_scale_ptr,  # [1] float32 (read only when QUANT)
        v_scale_ptr,  # [1] float32 (read only when QUANT)
        stride_kt,
        stride_kh,
        stride_vt,
        stride_vh,
        stride_kcb,
        stride_kcs,
        stride_kch,
        stride_vcb,
        stride_vcs,
        stride_vch,
        NUM_KV_HEADS: tl.constexpr,
        HEAD_DIM: tl.constexpr,
        HEAD_DIM_V: tl.constexpr,
        BLOCK_H: tl.constexpr,
        BLOCK_D: tl.constexpr,
        BLOCK_DV: tl.constexpr,
        BLOCK_SIZE: tl.constexpr,
        QUANT: tl.constexpr,
        FP8_MAX: tl.constexpr,
    ):
        token = tl.program_id(0).to(tl.int64)
        slot = tl.load(slot_mapping_ptr + token).to(tl.int64)
        # A negative slot is a padding token: every load and store is masked off (no early return, which
        # keeps the kernel a single straight-line block for the compiler).
        live = slot >= 0
        block = tl.maximum(slot, 0) // BLOCK_SIZE
        offset = tl.maximum(slot, 0) % BLOCK_SIZE
        offs_h = tl.arange(0, BLOCK_H)
        offs_d = tl.arange(0, BLOCK_D)
        offs_dv = tl.arange(0, BLOCK_DV)
        mask = live & (offs_h < NUM_KV_HEADS)[:, None] & (offs_d < HEAD_DIM)[None, :]  # [BLOCK_H, BLOCK_D]
        mask_v = live & (offs_h < NUM_KV_HEADS)[:, None] & (offs_dv < HEAD_DIM_V)[None, :]  # [BLOCK_H, BLOCK_DV]

        k = tl.load(k_ptr + token * stride_kt + offs_h[:, None] * stride_kh + offs_d[None, :], mask=mask)
        v = tl.load(v_ptr + token * stride_vt + offs_h[:, None] * stride_vh + offs_dv[None, :], mask=mask_v)
        k_dst = k_cache_ptr + block * stride_kcb + offset * stride_kcs + offs_h[:, None] * stride_kch + offs_d[None, :]
        v_dst = v_cache_ptr + block * stride_vcb + offset * stride_vcs + offs_h[:, None] * stride_vch + offs_dv[None, :]
        if QUANT:  # fp8 cache: divide by the tensor's scale and saturate to the e4m3 range
            k = tl.clamp(k.to(tl.float32) / tl.load(k_scale_ptr), -FP8_MAX, FP8_MAX)
            v = tl.clamp(v.to(tl.float32) / tl.load(v_scale_ptr), -FP8_MAX, FP8_MAX)
        tl.store(k_dst, k.to(k_cache_ptr.dtype.element_ty), mask=mask)
        tl.store(v_dst, v.to(v_cache_ptr.dtype.element_ty), mask=mask_v)


def store_kv_triton(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
) -> None:
    """Triton store: one program per token copies its [Hkv, D] key and value rows into their slot."""
    quant = k_cache.dtype == FP8_DTYPE
    if quant and (k_scale is None or v_scale is None or k_scale.numel() != 1 or v_scale.numel() != 1):
        raise ValueError("an fp8 cache needs k_scale and v_scale, one float32 scale each (shape [] or [1])")
    if not HAS_TRITON:
        raise ValueError("store_kv_triton needs triton; install it (Linux) or use backend='torch'")
    check_last_stride(k=k, v=v, k_cache=k_cache, v_cache=v_cache)
    num_tokens, num_kv_heads, head_dim = k.shape
    if num_tokens == 0:
        return
    slot_mapping = slot_mapping.contiguous()
    _store_kv_kernel[(num_tokens,)](
        k,
        v,
        k_cache,
        v_cache,
        slot_mapping,
        k_scale if quant else slot_mapping,  # any pointer when not quantizing: never read
        v_scale if quant else slot_mapping,
        k.stride(0),
        k.stride(1),
        v.stride(0),
        v.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        v_cache.stride(0),
        v_cache.stride(1),
        v_cache.stride(2),
        NUM_KV_HEADS=num_kv_heads,
        HEAD_DIM=head_dim,
        HEAD_DIM_V=v.shape[2],
        BLOCK_H=triton.next_power_of_2(num_kv_heads),
        BLOCK_D=triton.next_power_of_2(head_dim),
        BLOCK_DV=triton.next_power_of_2(v.shape[2]),
        BLOCK_SIZE=k_cache.shape[1],
        QUANT=quant,
        FP8_MAX=FP8_MAX,
    )
