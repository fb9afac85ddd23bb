"""Triton flash-attention forward over packed variable-length sequences, causal or not, GQA by index.

Follows FlashAttention-2 (Dao, 2023): tiles of queries stream over tiles of keys with an online softmax
(running max `m_i`, running sum `l_i`, fp32 accumulator `acc`), so the [Lq, Lk] score matrix never exists.
Packing follows flash-attn's varlen API: sequence `s` owns rows cu_seqlens_q[s]:cu_seqlens_q[s+1] of q.

GQA (Ainslie et al., 2023) without repeating K/V: one program owns (query tile, sequence, KV head) and
computes all Hq // Hkv query heads that read that KV head. Their rows are stacked into one tile of
BLOCK_Q tokens x GROUP_P2 heads, so each K/V tile is loaded once per group instead of once per query
head - the bandwidth saving the GQA lesson teaches.

Causal masking is bottom-right aligned (flash-attn >= 2.1): query i of a sequence sees key j iff
j <= i + len_k - len_q. Rows that see no key (and sequences with no keys) produce zeros, never NaN, and
masked loads never touch tokens of a neighbouring sequence or past the packed total.

The torch twin (the CPU production path) is kernels/varlen_attention_torch.py; kernels/ops.py validates
inputs and picks one.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.backend import triton_interpreting
from kernels.checks import check_last_stride, default_scale


def tile_config(dtype: torch.dtype, head_dim_p2: int) -> tuple[int, int, int, int]:
    """(rows per program, keys per step, num_warps, num_stages) for a dtype and padded head dim.

    Rows are query tokens x heads of one KV group. Chosen by compiling for sm_90 and reading `ptxas -v`
    (2026-11): 128 x 64 tiles at head dim <= 128 in fp16/bf16 use 254 registers and no spills at 8 warps
    (FlashAttention-2's forward tiles); head dim 256 needs 32 x 32; fp32 ("ieee" dots, a correctness path
    on GPU) gets small tiles. tl.dot needs every tile dim >= 16, which all of these keep.
    """
    if dtype == torch.float32:
        return 32, 32, 4, 1
    if head_dim_p2 > 128:
        return 32, 32, 8, 2
    return 128, 64, (8 if head_dim_p2 > 64 else 4), 2


@triton.jit
def softmax_update(s, v, acc, l_i, m_i, DOT_PRECISION: tl.constexpr):
    """One online-softmax step: fold a tile's log2-scaled scores `s` [ROWS, BLOCK_N] (-inf where masked) and its
    values `v` [BLOCK_N, D] into the running max `m_i`, denominator `l_i` and numerator `acc` (shared by the
    varlen and paged varlen kernels)."""
    m_new = tl.maximum(m_i, tl.max(s, 1))
    # A row with nothing visible yet keeps m = -inf; subtracting 0 instead keeps exp2 finite (it gives 0).
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2(m_i - m_safe)
    p = tl.exp2(s - m_safe[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
    return acc, l_i, m_new


@triton.jit
def _attend_key_tile(
    q,  # [ROWS, HEAD_DIM_P2] query rows of this program
    acc,  # [ROWS, HEAD_DIM_P2] fp32 running numerator
    l_i,  # [ROWS] fp32 running denominator
    m_i,  # [ROWS] fp32 running max (base 2)
    k_tile_ptr,  # key row start_n of this sequence, at this program's KV head
    v_tile_ptr,  # value row start_n of this sequence, at this program's KV head
    len_k,
    start_n,
    tok,  # [ROWS] query position within the sequence
    diag,  # len_k - len_q: bottom-right causal offset
    offs_n,
    offs_d,
    stride_kt,
    stride_vt,
    qk_scale,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_P2: tl.constexpr,
    MASKED: tl.constexpr,
    CAUSAL: tl.constexpr,
    UPCAST: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    """One online-softmax step over keys start_n .. start_n + BLOCK_N (FlashAttention-2, Algorithm 1)."""
    key = start_n + offs_n  # [BLOCK_N] position within the sequence
    # Scalar tile base (advanced by the caller in 64-bit pointer arithmetic) + small 32-bit in-tile offsets:
    # 64-bit offsets per element would double the registers the address tensors take (checked with ptxas -v).
    k_offs = offs_n[:, None] * stride_kt + offs_d[None, :]  # [BLOCK_N, HEAD_DIM_P2]
    v_offs = offs_n[:, None] * stride_vt + offs_d[None, :]
    if MASKED:
        key_ok = key < len_k
        kv_mask = key_ok[:, None]
        if HEAD_DIM_P2 != HEAD_DIM:
            kv_mask = kv_mask & (offs_d < HEAD_DIM)[None, :]
        k = tl.load(k_tile_ptr + k_offs, mask=kv_mask, other=0.0)
        v = tl.load(v_tile_ptr + v_offs, mask=kv_mask, other=0.0)
    elif HEAD_DIM_P2 != HEAD_DIM:  # whole tile in range: only padded head-dim columns are masked
        d_mask = (offs_d < HEAD_DIM)[None, :]
        k = tl.load(k_tile_ptr + k_offs, mask=d_mask, other=0.0)
        v = tl.load(v_tile_ptr + v_offs, mask=d_mask, other=0.0)
    else:
        k = tl.load(k_tile_ptr + k_offs)
        v = tl.load(v_tile_ptr + v_offs)
    if UPCAST:
        k = k.to(tl.float32)
        v = v.to(tl.float32)
    s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale  # [ROWS, BLOCK_N]
    if MASKED:  # only tiles that cross the sequence end or the causal diagonal pay for the mask
        visible = (key < len_k)[None, :]
        if CAUSAL:
            visible = visible & (key[None, :] <= tok[:, None] + diag)
        s = tl.where(visible, s, float("-inf"))
    return softmax_update(s, v, acc, l_i, m_i, DOT_PRECISION=DOT_PRECISION)


# Public (not `_`-prefixed) because tests compile it ahead of time for sm_90 without a GPU.
@triton.jit
def varlen_attention_kernel(
    q_ptr,  # [total_q, num_heads, head_dim]
    k_ptr,  # [total_k, num_kv_heads, head_dim]
    v_ptr,  # [total_k, num_kv_heads, head_dim]
    o_ptr,  # [total_q, num_heads, head_dim]
    cu_seqlens_q_ptr,  # int32 [batch + 1]
    cu_seqlens_k_ptr,  # int32 [batch + 1]
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_ot,
    stride_oh,
    qk_scale,  # softmax scale * log2(e): the kernel works in base 2
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_P2: tl.constexpr,
    QUERIES_PER_KV: tl.constexpr,
    GROUP_P2: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
    UPCAST: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    tile = tl.program_id(0)
    seq = tl.program_id(1)
    kv_head = tl.program_id(2)
    q_start = tl.load(cu_seqlens_q_ptr + seq)
    len_q = tl.load(cu_seqlens_q_ptr + seq + 1) - q_start
    k_start = tl.load(cu_seqlens_k_ptr + seq)
    len_k = tl.load(cu_seqlens_k_ptr + seq + 1) - k_start
    tile_start = tile * BLOCK_Q
    if tile_start >= len_q:  # the grid is sized for the longest sequence; shorter ones stop here
        return

    # Row r of the tile is query token tile_start + r // GROUP_P2, head (r % GROUP_P2) of this KV group,
    # so the BLOCK_Q * GROUP_P2 rows share every K/V tile loaded below.
    rows = tl.arange(0, BLOCK_Q * GROUP_P2)
    tok = tile_start + rows // GROUP_P2  # position within the sequence
    head = kv_head * QUERIES_PER_KV + rows % GROUP_P2
    row_ok = (tok < len_q) & (rows % GROUP_P2 < QUERIES_PER_KV)
    offs_d = tl.arange(0, HEAD_DIM_P2)
    io_mask = row_ok[:, None] & (offs_d < HEAD_DIM)[None, :]
    # In-tile row offsets stay 32-bit; the tile's first token is folded into a 64-bit scalar base pointer.
    q_offs = ((rows // GROUP_P2) * stride_qt + head * stride_qh)[:, None] + offs_d[None, :]  # [ROWS, HEAD_DIM_P2]
    q_tile_ptr = q_ptr + (q_start + tile_start).to(tl.int64) * stride_qt
    q = tl.load(q_tile_ptr + q_offs, mask=io_mask, other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    # Keys [0, lo) are visible to every row of the tile (whole tiles, no mask); [lo, hi) need the mask;
    # keys >= hi are hidden from every row and never loaded.
    diag = len_k - len_q
    hi = len_k
    full = len_k
    if CAUSAL:
        last_tok = tl.minimum(tile_start + BLOCK_Q, len_q) - 1
        hi = tl.maximum(tl.minimum(len_k, last_tok + diag + 1), 0)
        full = tl.maximum(tl.minimum(len_k, tile_start + diag + 1), 0)
    lo = (full // BLOCK_N) * BLOCK_N

    m_i = tl.full([BLOCK_Q * GROUP_P2], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_Q * GROUP_P2], dtype=tl.float32)
    acc = tl.zeros([BLOCK_Q * GROUP_P2, HEAD_DIM_P2], dtype=tl.float32)
    offs_n = tl.arange(0, BLOCK_N)
    k_tile_ptr = k_ptr + k_start.to(tl.int64) * stride_kt + kv_head * stride_kh
    v_tile_ptr = v_ptr + k_start.to(tl.int64) * stride_vt + kv_head * stride_vh
    for start_n in range(0, lo, BLOCK_N):
        acc, l_i, m_i = _attend_key_tile(
            q, acc, l_i, m_i, k_tile_ptr, v_tile_ptr, len_k, start_n, tok, diag, offs_n, offs_d, stride_kt, stride_vt,
            qk_scale, HEAD_DIM=HEAD_DIM, HEAD_DIM_P2=HEAD_DIM_P2,
            MASKED=False, CAUSAL=CAUSAL, UPCAST=UPCAST, DOT_PRECISION=DOT_PRECISION,
        )  # fmt: skip
        k_tile_ptr += BLOCK_N * stride_kt
        v_tile_ptr += BLOCK_N * stride_vt
    for start_n in range(lo, hi, BLOCK_N):  # the pointers already stand at key lo
        acc, l_i, m_i = _attend_key_tile(
            q, acc, l_i, m_i, k_tile_ptr, v_tile_ptr, len_k, start_n, tok, diag, offs_n, offs_d, stride_kt, stride_vt,
            qk_scale, HEAD_DIM=HEAD_DIM, HEAD_DIM_P2=HEAD_DIM_P2,
            MASKED=True, CAUSAL=CAUSAL, UPCAST=UPCAST, DOT_PRECISION=DOT_PRECISION,
        )  # fmt: skip
        k_tile_ptr += BLOCK_N * stride_kt
        v_tile_ptr += BLOCK_N * stride_vt

    out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]  # rows that saw no key stay exactly zero
    o_offs = ((rows // GROUP_P2) * stride_ot + head * stride_oh)[:, None] + offs_d[None, :]
    o_tile_ptr = o_ptr + (q_start + tile_start).to(tl.int64) * stride_ot
    tl.store(o_tile_ptr + o_offs, out.to(o_ptr.dtype.element_ty), mask=io_mask)


def varlen_attention_triton(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    causal: bool = False,
    scale: float | None = None,
) -> torch.Tensor:
    """Launch the packed varlen kernel; q [total_q, Hq, D], k/v [total_k, Hkv, D] -> [total_q, Hq, D].

    Inputs are assumed validated by kernels.ops.varlen_attention (shapes, int32 offsets); the torch twin
    is kernels/varlen_attention_torch.py.
    """
    total_q, num_heads, head_dim = q.shape
    num_kv_heads = k.shape[1]
    check_last_stride(q=q, k=k, v=v)
    queries_per_kv = num_heads // num_kv_heads
    scale = default_scale(scale, head_dim)
    out = torch.empty(total_q, num_heads, head_dim, dtype=q.dtype, device=q.device)
    batch = cu_seqlens_q.numel() - 1
    if total_q == 0 or batch == 0:
        return out
    group_p2 = triton.next_power_of_2(queries_per_kv)
    head_dim_p2 = max(triton.next_power_of_2(head_dim), 16)
    tile_rows, block_n, num_warps, num_stages = tile_config(q.dtype, head_dim_p2)
    block_q = max(tile_rows // group_p2, 1)
    interpreting = triton_interpreting()
    grid = (triton.cdiv(max(max_seqlen_q, 1), block_q), batch, num_kv_heads)
    varlen_attention_kernel[grid](
        q,
        k,
        v,
        out,
        cu_seqlens_q,
        cu_seqlens_k,
        q.stride(0),
        q.stride(1),
        k.stride(0),
        k.stride(1),
        v.stride(0),
        v.stride(1),
        out.stride(0),
        out.stride(1),
        scale * 1.4426950408889634,
        HEAD_DIM=head_dim,
        HEAD_DIM_P2=head_dim_p2,
        QUERIES_PER_KV=queries_per_kv,
        GROUP_P2=group_p2,
        BLOCK_Q=block_q,
        BLOCK_N=block_n,
        CAUSAL=causal,
        # 2026-11: Triton 3.7's interpreter returns garbage from tl.dot on bf16 operands, so under
        # TRITON_INTERPRET=1 the kernel upcasts q/k/v/p to fp32 first. Compiled GPU code keeps bf16/fp16.
        UPCAST=interpreting and q.dtype != torch.float32,
        # fp32 inputs get true fp32 dots (not TF32) so they match the reference to ~1e-5.
        DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
        num_warps=num_warps,
        num_stages=num_stages,
    )
    return out
