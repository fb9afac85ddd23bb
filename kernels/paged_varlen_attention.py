"""Triton paged attention for several queries per sequence: one kernel for prefill, chunks, prefix hits and decode.

vLLM V1's unified attention (flash-attn's varlen call with a `block_table`): q [total_q, Hq, D] packs each
sequence's new tokens; sequence s's len_q queries are its LAST len_q tokens of seq_lens[s], and their K/V are
read straight out of the paged cache (PagedAttention, Kwon et al., SOSP 2023) through its block-table row:
token t lives in slot block_tables[s, t // block_size] * block_size + t % block_size. Nothing is gathered.

One program owns (query tile, sequence, KV head) and computes every query head of that GQA group (Ainslie et
al., 2023): BLOCK_Q tokens x GROUP_P2 heads are the rows of one tile, so each K/V tile is loaded once per
group. Key tiles of BLOCK_N tokens stream through an online softmax (FlashAttention-2, Dao, 2023); each key
row looks its block up, so tiles are free of block_size (blocks of 1 token work). Decode is len_q = 1.
The value head dim may differ from the key's (HEAD_DIM_V): MLA's absorbed decode (DeepSeek-V2, arXiv 2405.04434)
is MQA whose key row is the latent + rope key and whose value is the latent alone, a narrower view of the same
cache rows, so one cache read serves both.

Masks: bottom-right causal (query at position p sees keys t <= p) and, with sliding_window = W, t >= p - W + 1
(transformers' Mistral). A tile reads keys [lo, hi): lo = its first query's window start, hi = its last
query's position + 1 (seq_len without causal), so no program reads a block-table entry before its sequence's
first window start or past its last token: freed blocks and NaN slots are never loaded. Key tiles visible
to every row skip the mask. fp8 (e4m3) caches: each loaded tile is converted to the compute dtype (exact:
e4m3 fits in fp16/bf16); k_scale multiplies the scores and v_scale the output (scalars per program), which
equals attending to cache.float() * scale; compiled, that needs fp8 conversions (sm_89+).
The torch twin (the CPU production path) is kernels/paged_varlen_attention_torch.py; kernels/ops.py validates
(once per step: kernels.ops.plan_attention).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.backend import triton_interpreting
from kernels.checks import check_last_stride, default_scale
from kernels.varlen_attention import softmax_update, tile_config


@triton.jit
def _paged_key_tile(
    q,  # [ROWS, HEAD_DIM_P2] query rows of this program (compute dtype)
    acc,  # [ROWS, HEAD_DIM_V_P2] fp32 running numerator
    l_i,  # [ROWS] fp32 running denominator
    m_i,  # [ROWS] fp32 running max (base 2)
    k_head_ptr,  # k_cache at this program's KV head
    v_head_ptr,
    table_row,  # this sequence's block-table row
    start,  # first key of the tile
    hi,  # keys >= hi are not this tile's to read
    pos,  # [ROWS] absolute position of each query row
    window,
    offs_n,
    offs_d,
    offs_dv,
    stride_kb,
    stride_ks,
    stride_vb,
    stride_vs,
    qk_scale,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_P2: tl.constexpr,
    HEAD_DIM_V: tl.constexpr,
    HEAD_DIM_V_P2: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    MASKED: tl.constexpr,
    CAUSAL: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    CONVERT: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    """One online-softmax step over keys start .. start + BLOCK_N, each row read through the block table."""
    key = start + offs_n  # [BLOCK_N] position within the sequence
    if MASKED:
        key_ok = key < hi
        block = tl.load(table_row + key // BLOCK_SIZE, mask=key_ok, other=0).to(tl.int64)
    else:  # the whole tile is in range
        block = tl.load(table_row + key // BLOCK_SIZE).to(tl.int64)
    offset = key % BLOCK_SIZE
    k_ptrs = k_head_ptr + (block * stride_kb + offset * stride_ks)[:, None] + offs_d[None, :]  # [BLOCK_N, D_P2]
    v_ptrs = v_head_ptr + (block * stride_vb + offset * stride_vs)[:, None] + offs_dv[None, :]  # [BLOCK_N, DV_P2]
    if MASKED:
        k = tl.load(k_ptrs, mask=key_ok[:, None] & (offs_d < HEAD_DIM)[None, :], other=0.0)
        v = tl.load(v_ptrs, mask=key_ok[:, None] & (offs_dv < HEAD_DIM_V)[None, :], other=0.0)
    elif HEAD_DIM_P2 != HEAD_DIM or HEAD_DIM_V_P2 != HEAD_DIM_V:  # only padded head-dim columns are masked
        k = tl.load(k_ptrs, mask=(offs_d < HEAD_DIM)[None, :], other=0.0)
        v = tl.load(v_ptrs, mask=(offs_dv < HEAD_DIM_V)[None, :], other=0.0)
    else:
        k = tl.load(k_ptrs)
        v = tl.load(v_ptrs)
    if CONVERT:  # fp8 cache, or the interpreter's fp32 upcast
        k = k.to(q.dtype)
        v = v.to(q.dtype)
    s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale  # [ROWS, BLOCK_N]
    if MASKED:  # only tiles that cross a range end, the causal diagonal or a window edge pay for the mask
        visible = (key < hi)[None, :]
        if CAUSAL:
            visible = visible & (key[None, :] <= pos[:, None])
        if HAS_WINDOW:
            visible = visible & (key[None, :] > pos[:, None] - window)
        s = tl.where(visible, s, float("-inf"))
    return softmax_update(s, v, acc, l_i, m_i, DOT_PRECISION=DOT_PRECISION)


# Public (not `_`-prefixed) so tests can compile it ahead of time without a GPU.
@triton.jit
def paged_varlen_attention_kernel(
    q_ptr,  # [total_q, num_heads, head_dim]
    k_cache_ptr,  # [num_blocks, block_size, num_kv_heads, head_dim]
    v_cache_ptr,  # [num_blocks, block_size, num_kv_heads, head_dim_v] (may be a view of k_cache's rows)
    o_ptr,  # [total_q, num_heads, head_dim_v]
    cu_seqlens_q_ptr,  # int32 [batch + 1]
    seq_lens_ptr,  # int32 [batch]
    block_tables_ptr,  # int32 [batch, max_blocks_per_seq]
    k_scale_ptr,  # fp32 [1] or [num_kv_heads] (fp8 caches only)
    v_scale_ptr,
    stride_k_scale,  # 0 (one scale per layer) or 1 (one per KV head)
    stride_v_scale,
    stride_qt,
    stride_qh,
    stride_kb,
    stride_ks,
    stride_kh,
    stride_vb,
    stride_vs,
    stride_vh,
    stride_bt,
    stride_ot,
    stride_oh,
    qk_scale,  # softmax scale * log2(e): the kernel works in base 2
    window,  # sliding window in tokens (unused without HAS_WINDOW)
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_P2: tl.constexpr,
    HEAD_DIM_V: tl.constexpr,
    HEAD_DIM_V_P2: tl.constexpr,
    QUERIES_PER_KV: tl.constexpr,
    GROUP_P2: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    CAUSAL: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    KV_SCALED: tl.constexpr,
    UPCAST: tl.constexpr,
    CONVERT: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    tile = tl.program_id(0)
    seq = tl.program_id(1)
    kv_head = tl.program_id(2)
    q_start = tl.load(cu_seqlens_q_ptr + seq)
    len_q = tl.load(cu_seqlens_q_ptr + seq + 1) - q_start
    tile_start = tile * BLOCK_Q
    if tile_start >= len_q:  # the grid is sized for the longest query run; shorter ones stop here
        return
    seq_len = tl.load(seq_lens_ptr + seq)
    context = seq_len - len_q  # position of the sequence's first query

    # Row r of the tile is query tile_start + r // GROUP_P2, head r % GROUP_P2 of this KV group.
    rows = tl.arange(0, BLOCK_Q * GROUP_P2)
    tok = tile_start + rows // GROUP_P2
    head = kv_head * QUERIES_PER_KV + rows % GROUP_P2
    row_ok = (tok < len_q) & (rows % GROUP_P2 < QUERIES_PER_KV)
    pos = context + tok  # [ROWS] absolute positions
    offs_d = tl.arange(0, HEAD_DIM_P2)
    io_mask = row_ok[:, None] & (offs_d < HEAD_DIM)[None, :]
    q_offs = ((rows // GROUP_P2) * stride_qt + head * stride_qh)[:, None] + offs_d[None, :]
    q_tile_ptr = q_ptr + (q_start + tile_start).to(tl.int64) * stride_qt
    q = tl.load(q_tile_ptr + q_offs, mask=io_mask, other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    if KV_SCALED:  # per layer (one value) or per KV head: a scalar per program either way
        k_scale = tl.load(k_scale_ptr + kv_head * stride_k_scale)
        v_scale = tl.load(v_scale_ptr + kv_head * stride_v_scale)
        qk_scale = qk_scale * k_scale

    # This tile's keys: [lo, hi). Keys in [full_lo, full_hi) are visible to every row (no mask needed).
    first_pos = context + tile_start
    last_pos = context + tl.minimum(tile_start + BLOCK_Q, len_q) - 1
    hi = seq_len
    full_hi = seq_len
    if CAUSAL:
        hi = last_pos + 1
        full_hi = first_pos + 1
    lo = 0
    full_lo = 0
    if HAS_WINDOW:
        lo = tl.maximum(first_pos - window + 1, 0)
        full_lo = tl.maximum(last_pos - window + 1, 0)
    # Masked tiles from lo up to full_lo, unmasked whole tiles up to full_hi, masked tiles up to hi.
    mid_lo = tl.minimum(lo + ((tl.maximum(full_lo - lo, 0) + BLOCK_N - 1) // BLOCK_N) * BLOCK_N, hi)
    mid_hi = mid_lo + (tl.maximum(tl.minimum(full_hi, hi) - mid_lo, 0) // BLOCK_N) * BLOCK_N

    m_i = tl.full([BLOCK_Q * GROUP_P2], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_Q * GROUP_P2], dtype=tl.float32)
    acc = tl.zeros([BLOCK_Q * GROUP_P2, HEAD_DIM_V_P2], dtype=tl.float32)
    offs_dv = tl.arange(0, HEAD_DIM_V_P2)
    offs_n = tl.arange(0, BLOCK_N)
    k_head_ptr = k_cache_ptr + kv_head * stride_kh
    v_head_ptr = v_cache_ptr + kv_head * stride_vh
    table_row = block_tables_ptr + seq.to(tl.int64) * stride_bt
    for start in range(lo, mid_lo, BLOCK_N):
        acc, l_i, m_i = _paged_key_tile(
            q, acc, l_i, m_i, k_head_ptr, v_head_ptr, table_row, start, hi, pos, window, offs_n, offs_d,
            offs_dv, stride_kb, stride_ks, stride_vb, stride_vs, qk_scale, HEAD_DIM=HEAD_DIM, HEAD_DIM_P2=HEAD_DIM_P2,
            HEAD_DIM_V=HEAD_DIM_V, HEAD_DIM_V_P2=HEAD_DIM_V_P2, BLOCK_SIZE=BLOCK_SIZE, MASKED=True, CAUSAL=CAUSAL, HAS_WINDOW=HAS_WINDOW, CONVERT=CONVERT,
            DOT_PRECISION=DOT_PRECISION,
        )  # fmt: skip
    for start in range(mid_lo, mid_hi, BLOCK_N):
        acc, l_i, m_i = _paged_key_tile(
            q, acc, l_i, m_i, k_head_ptr, v_head_ptr, table_row, start, hi, pos, window, offs_n, offs_d,
            offs_dv, stride_kb, stride_ks, stride_vb, stride_vs, qk_scale, HEAD_DIM=HEAD_DIM, HEAD_DIM_P2=HEAD_DIM_P2,
            HEAD_DIM_V=HEAD_DIM_V, HEAD_DIM_V_P2=HEAD_DIM_V_P2, BLOCK_SIZE=BLOCK_SIZE, MASKED=False, CAUSAL=CAUSAL, HAS_WINDOW=HAS_WINDOW, CONVERT=CONVERT,
            DOT_PRECISION=DOT_PRECISION,
        )  # fmt: skip
    for start in range(mid_hi, hi, BLOCK_N):
        acc, l_i, m_i = _paged_key_tile(
            q, acc, l_i, m_i, k_head_ptr, v_head_ptr, table_row, start, hi, pos, window, offs_n, offs_d,
            offs_dv, stride_kb, stride_ks, stride_vb, stride_vs, qk_scale, HEAD_DIM=HEAD_DIM, HEAD_DIM_P2=HEAD_DIM_P2,
            HEAD_DIM_V=HEAD_DIM_V, HEAD_DIM_V_P2=HEAD_DIM_V_P2, BLOCK_SIZE=BLOCK_SIZE, MASKED=True, CAUSAL=CAUSAL, HAS_WINDOW=HAS_WINDOW, CONVERT=CONVERT,
            DOT_PRECISION=DOT_PRECISION,
        )  # fmt: skip

    out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]  # rows that saw no key stay exactly zero
    if KV_SCALED:
        out = out * v_scale
    o_offs = ((rows // GROUP_P2) * stride_ot + head * stride_oh)[:, None] + offs_dv[None, :]
    o_tile_ptr = o_ptr + (q_start + tile_start).to(tl.int64) * stride_ot
    o_mask = row_ok[:, None] & (offs_dv < HEAD_DIM_V)[None, :]
    tl.store(o_tile_ptr + o_offs, out.to(o_ptr.dtype.element_ty), mask=o_mask)


def launch_config(dtype: torch.dtype, head_dim_p2: int, group_p2: int, max_seqlen_q: int) -> tuple[int, ...]:
    """(BLOCK_Q, BLOCK_N, num_warps, num_stages): varlen's tiles, the query tile shrunk for short query runs
    (decode) but kept at >= 16 rows (tl.dot's minimum)."""
    tile_rows, block_n, num_warps, num_stages = tile_config(dtype, head_dim_p2)
    block_q = max(tile_rows // group_p2, 1)
    block_q = min(block_q, max(triton.next_power_of_2(max(max_seqlen_q, 1)), triton.cdiv(16, group_p2)))
    return block_q, block_n, num_warps, num_stages


def paged_varlen_attention_triton(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    seq_lens: torch.Tensor,
    block_tables: torch.Tensor,
    max_seqlen_q: int,
    causal: bool = True,
    scale: float | None = None,
    sliding_window: int | None = None,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """Launch the kernel; inputs as validated by kernels.ops.plan_attention -> [total_q, Hq, Dv]."""
    total_q, num_heads, head_dim = q.shape
    head_dim_v = v_cache.shape[-1]
    _, block_size, num_kv_heads, _ = k_cache.shape
    check_last_stride(q=q, k_cache=k_cache, v_cache=v_cache)
    block_tables = block_tables if block_tables.stride(-1) == 1 else block_tables.contiguous()
    cu_seqlens_q, seq_lens = cu_seqlens_q.contiguous(), seq_lens.contiguous()  # read with unit stride
    scale = default_scale(scale, head_dim)
    out = torch.empty(total_q, num_heads, head_dim_v, dtype=q.dtype, device=q.device)
    batch = cu_seqlens_q.numel() - 1
    if total_q == 0 or batch == 0:
        return out
    queries_per_kv = num_heads // num_kv_heads
    group_p2 = triton.next_power_of_2(queries_per_kv)
    head_dim_p2 = max(triton.next_power_of_2(head_dim), 16)
    head_dim_v_p2 = max(triton.next_power_of_2(head_dim_v), 16)
    block_q, block_n, num_warps, num_stages = launch_config(q.dtype, head_dim_p2, group_p2, max_seqlen_q)
    # 2026-11: Triton 3.7's interpreter returns garbage from tl.dot on bf16 operands, so under
    # TRITON_INTERPRET=1 the kernel upcasts q/k/v/p to fp32 first. Compiled GPU code keeps bf16/fp16.
    upcast = triton_interpreting() and q.dtype != torch.float32
    scaled = k_scale is not None
    k_scale = k_scale.reshape(-1) if scaled else out  # a dummy pointer when unused
    v_scale = v_scale.reshape(-1) if scaled else out
    scale_strides = (int(k_scale.numel() > 1), int(v_scale.numel() > 1)) if scaled else (0, 0)
    grid = (triton.cdiv(max(max_seqlen_q, 1), block_q), batch, num_kv_heads)
    paged_varlen_attention_kernel[grid](
        q, k_cache, v_cache, out, cu_seqlens_q, seq_lens, block_tables, k_scale, v_scale, *scale_strides,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), block_tables.stride(0),
        out.stride(0), out.stride(1),
        scale * 1.4426950408889634,
        sliding_window or 0,
        HEAD_DIM=head_dim,
        HEAD_DIM_P2=head_dim_p2,
        HEAD_DIM_V=head_dim_v,
        HEAD_DIM_V_P2=head_dim_v_p2,
        QUERIES_PER_KV=queries_per_kv,
        GROUP_P2=group_p2,
        BLOCK_Q=block_q,
        BLOCK_N=block_n,
        BLOCK_SIZE=block_size,
        CAUSAL=causal,
        HAS_WINDOW=sliding_window is not None,
        KV_SCALED=scaled,
        UPCAST=upcast,
        CONVERT=upcast or k_cache.dtype != q.dtype,
        # fp32 inputs get true fp32 dots (not TF32) so they match the reference to ~1e-5.
        DOT_PRECISION="ieee" if q.dtype == torch.float32 or upcast else "tf32",
        num_warps=num_warps,
        num_stages=num_stages,
    )  # fmt: skip
    return out
