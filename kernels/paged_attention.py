"""Paged decode attention: one new query token per sequence against a KV cache stored in fixed-size blocks.

PagedAttention (Kwon et al., SOSP 2023, "Efficient Memory Management for Large Language Model Serving with
PagedAttention") keeps each sequence's keys and values in blocks of `block_size` tokens scattered anywhere
in one pool; a block table maps a sequence's logical block i to a physical block. Token t of a sequence
lives in slot `block_table[t // block_size] * block_size + t % block_size`.

Two implementations with one contract (kernels/ops.py validates inputs and picks one):
- `paged_attention_triton` (here): one program per (sequence, KV head[, split]) computes every query head
  of that GQA group (Ainslie et al., 2023), so each K/V tile is read once, with the online softmax of
  FlashAttention (Dao et al., 2022) over tiles of BLOCK_N tokens. Tokens past `seq_len` are never loaded.
  Long sequences on a big GPU are split across programs and merged by log-sum-exp (flash-decoding).
- `paged_attention_torch` (its twin, kernels/paged_attention_torch.py): the CPU production path.

q [num_seqs, Hq, D]; k_cache/v_cache [num_blocks, block_size, Hkv, D]; block_tables int32
[num_seqs, max_blocks_per_seq]; seq_lens int32 [num_seqs] -> out [num_seqs, Hq, D]. A sequence of length 0
outputs zeros. Slots past a sequence's length (and table entries past its last block) may hold anything,
NaN included; they never reach the output.
"""

from __future__ import annotations

import torch

from kernels.backend import HAS_TRITON, triton_interpreting
from kernels.checks import check_last_stride

if HAS_TRITON:
    import triton
    import triton.language as tl

# Tokens per tile in the Triton kernel. Tiles may span several cache blocks (each row looks its block up),
# so the tile size is free of block_size. At 64 rows, head_dim 128, fp16 and 4 warps, ptxas for sm_90 reports
# 125 registers, no spills and ~39 KB of shared memory (software-pipelined loads): 4 programs fit per SM.
BLOCK_N = 64
# Split-K (flash-decoding): on GPU each sequence is split across programs until there are about this many
# programs per SM, so a small batch of long sequences still fills the device...
PROGRAMS_PER_SM = 4
# ...but never into splits shorter than this, where merging would cost more than the extra parallelism.
MIN_SPLIT_TOKENS = 256
MAX_SPLITS = 16


if HAS_TRITON:

    @triton.jit
    def _paged_decode_kernel(
        q_ptr,  # [num_seqs, num_q_heads, head_dim]
        k_cache_ptr,  # [num_blocks, block_size, num_kv_heads, head_dim]
        v_cache_ptr,  # [num_blocks, block_size, num_kv_heads, head_dim]
        block_tables_ptr,  # [num_seqs, max_blocks_per_seq] int32
        seq_lens_ptr,  # [num_seqs] int32
        out_ptr,  # [num_seqs, num_q_heads, head_dim], or fp32 [num_seqs, num_q_heads, NUM_SPLITS, head_dim]
        lse_ptr,  # fp32 [num_seqs, num_q_heads, NUM_SPLITS] (log2 units); unused when NUM_SPLITS == 1
        scale,
        stride_qs,
        stride_qh,
        stride_kb,
        stride_ks,
        stride_kh,
        stride_vb,
        stride_vs,
        stride_vh,
        stride_bt,
        stride_os,
        stride_oh,
        QUERIES_PER_KV: tl.constexpr,
        BLOCK_G: tl.constexpr,
        HEAD_DIM: tl.constexpr,
        BLOCK_D: tl.constexpr,
        BLOCK_SIZE: tl.constexpr,
        BLOCK_N: tl.constexpr,
        NUM_SPLITS: tl.constexpr,
        UPCAST: tl.constexpr,
        DOT_PRECISION: tl.constexpr,
    ):
        seq = tl.program_id(0)
        kv_head = tl.program_id(1)
        split = tl.program_id(2)
        seq_len = tl.load(seq_lens_ptr + seq)
        # This program's share of the sequence: equal splits, rounded up to whole tiles.
        split_len = tl.cdiv(tl.cdiv(seq_len, NUM_SPLITS), BLOCK_N) * BLOCK_N
        lo = split * split_len
        hi = tl.minimum(lo + split_len, seq_len)

        offs_g = tl.arange(0, BLOCK_G)  # query heads of this KV group, padded to a tl.dot-friendly size
        offs_d = tl.arange(0, BLOCK_D)
        offs_n = tl.arange(0, BLOCK_N)
        in_group = offs_g < QUERIES_PER_KV
        in_dim = offs_d < HEAD_DIM
        q_heads = kv_head * QUERIES_PER_KV + offs_g

        q_ptrs = q_ptr + seq.to(tl.int64) * stride_qs + q_heads[:, None] * stride_qh + offs_d[None, :]
        q = tl.load(q_ptrs, mask=in_group[:, None] & in_dim[None, :], other=0.0)  # [BLOCK_G, BLOCK_D]
        if UPCAST:
            # 2026-11: Triton 3.7's interpreter computes tl.dot on bf16 operands wrongly; fp32 is exact.
            q = q.to(tl.float32)
        # exp2 is the hardware instruction; fold log2(e) into the scale once.
        qk_scale = scale * 1.4426950408889634

        m_i = tl.full([BLOCK_G], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_G], dtype=tl.float32)
        acc = tl.zeros([BLOCK_G, BLOCK_D], dtype=tl.float32)
        table_row = block_tables_ptr + seq.to(tl.int64) * stride_bt
        for start in range(lo, hi, BLOCK_N):
            tok = start + offs_n
            in_seq = tok < hi
            # Never touch table entries or slots past seq_len: they may be stale, out of range, or NaN.
            block = tl.load(table_row + tok // BLOCK_SIZE, mask=in_seq, other=0).to(tl.int64)
            offset = tok % BLOCK_SIZE
            kv_mask = in_seq[:, None] & in_dim[None, :]
            k_rows = block * stride_kb + offset * stride_ks + kv_head * stride_kh
            v_rows = block * stride_vb + offset * stride_vs + kv_head * stride_vh
            k = tl.load(k_cache_ptr + k_rows[:, None] + offs_d[None, :], mask=kv_mask, other=0.0)  # [BLOCK_N, BLOCK_D]
            v = tl.load(v_cache_ptr + v_rows[:, None] + offs_d[None, :], mask=kv_mask, other=0.0)  # [BLOCK_N, BLOCK_D]
            if UPCAST:
                k = k.to(tl.float32)
                v = v.to(tl.float32)

            scores = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale  # [BLOCK_G, BLOCK_N]
            scores = tl.where(in_seq[None, :], scores, float("-inf"))
            # Every tile holds at least one token of the range, so m_new is finite and p is NaN-free.
            m_new = tl.maximum(m_i, tl.max(scores, axis=1))
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(scores - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, axis=1)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
            m_i = m_new

        # An empty range (seq_len 0, or a split past the end) never enters the loop: acc = l_i = 0, out = 0.
        out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]
        row_mask = in_group[:, None] & in_dim[None, :]
        if NUM_SPLITS == 1:
            out_ptrs = out_ptr + seq.to(tl.int64) * stride_os + q_heads[:, None] * stride_oh + offs_d[None, :]
            tl.store(out_ptrs, out.to(out_ptr.dtype.element_ty), mask=row_mask)
        else:
            # Partial buffers are contiguous [num_seqs, num_q_heads, NUM_SPLITS, (head_dim)].
            row = seq.to(tl.int64) * (tl.num_programs(1) * QUERIES_PER_KV) + q_heads  # [BLOCK_G]
            tl.store(out_ptr + (row * NUM_SPLITS + split)[:, None] * HEAD_DIM + offs_d[None, :], out, mask=row_mask)
            # log2-sum-exp2 of this split; -inf for an empty split (where keeps log2 off zero).
            lse = tl.where(l_i > 0.0, m_i + tl.log2(tl.where(l_i > 0.0, l_i, 1.0)), float("-inf"))
            tl.store(lse_ptr + row * NUM_SPLITS + split, lse, mask=in_group)

    @triton.jit
    def _merge_splits_kernel(
        part_out_ptr,  # fp32 [num_seqs, num_q_heads, NUM_SPLITS, head_dim]
        part_lse_ptr,  # fp32 [num_seqs, num_q_heads, NUM_SPLITS]
        out_ptr,  # [num_seqs, num_q_heads, head_dim]
        stride_os,
        stride_oh,
        NUM_SPLITS: tl.constexpr,
        BLOCK_S: tl.constexpr,
        HEAD_DIM: tl.constexpr,
        BLOCK_D: tl.constexpr,
    ):
        seq = tl.program_id(0).to(tl.int64)
        head = tl.program_id(1)
        num_heads = tl.num_programs(1)
        offs_s = tl.arange(0, BLOCK_S)
        offs_d = tl.arange(0, BLOCK_D)
        in_split = offs_s < NUM_SPLITS
        row = seq * num_heads + head  # index of this (seq, head) in the partial buffers
        lse = tl.load(part_lse_ptr + row * NUM_SPLITS + offs_s, mask=in_split, other=float("-inf"))
        m = tl.max(lse, axis=0)
        # A sequence of length 0 has every split empty (all -inf): shifting by 0 gives weights 0, output 0.
        weights = tl.exp2(lse - tl.where(m > float("-inf"), m, 0.0))  # [BLOCK_S]
        parts_ptrs = part_out_ptr + (row * NUM_SPLITS + offs_s)[:, None] * HEAD_DIM + offs_d[None, :]
        parts = tl.load(parts_ptrs, mask=in_split[:, None] & (offs_d < HEAD_DIM)[None, :], other=0.0)
        total = tl.sum(weights, axis=0)
        out = tl.sum(parts * weights[:, None], axis=0) / tl.where(total > 0.0, total, 1.0)  # [BLOCK_D]
        out_ptrs = out_ptr + seq * stride_os + head * stride_oh + offs_d
        tl.store(out_ptrs, out.to(out_ptr.dtype.element_ty), mask=offs_d < HEAD_DIM)


def _auto_num_splits(q: torch.Tensor, num_kv_heads: int, max_tokens: int) -> int:
    """Splits per sequence: enough programs to fill the GPU, each split at least MIN_SPLIT_TOKENS long."""
    if q.device.type != "cuda":
        return 1  # the interpreter runs programs one after another; splitting only adds work
    programs = q.shape[0] * num_kv_heads
    wanted = triton.cdiv(PROGRAMS_PER_SM * torch.cuda.get_device_properties(q.device).multi_processor_count, programs)
    return max(1, min(wanted, max_tokens // MIN_SPLIT_TOKENS, MAX_SPLITS))


def paged_attention_triton(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    num_splits: int | None = None,
) -> torch.Tensor:
    """Triton paged decode attention; inputs as validated by kernels.ops.paged_attention.

    `num_splits` (default: chosen from the GPU's size and the block table's width) splits each sequence
    across that many programs whose partial results a second kernel merges by log-sum-exp.
    """
    if not HAS_TRITON:
        raise ValueError("paged_attention_triton needs triton; install it (Linux) or use backend='torch'")
    num_seqs, num_q_heads, head_dim = q.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    q = q.contiguous() if q.stride(-1) != 1 else q
    check_last_stride(k_cache=k_cache, v_cache=v_cache)
    block_tables = block_tables.to(torch.int32).contiguous()  # the kernel steps along a row with stride 1
    seq_lens = seq_lens.to(torch.int32).contiguous()
    out = torch.empty(num_seqs, num_q_heads, head_dim, dtype=q.dtype, device=q.device)
    if num_seqs == 0:
        return out
    if num_splits is None:
        num_splits = _auto_num_splits(q, num_kv_heads, block_tables.shape[1] * block_size)
    if isinstance(num_splits, bool) or not isinstance(num_splits, int) or num_splits < 1:
        raise ValueError(f"num_splits={num_splits!r} must be a positive int (or None to choose automatically)")
    queries_per_kv = num_q_heads // num_kv_heads
    upcast = triton_interpreting() and q.dtype == torch.bfloat16
    # tl.dot needs every dimension >= 16; padded query rows and head-dim columns are masked to zero.
    block_g = max(16, triton.next_power_of_2(queries_per_kv))
    block_d = max(16, triton.next_power_of_2(head_dim))
    if num_splits == 1:
        target, lse = out, out  # lse is unused with one split
    else:
        target = torch.empty(num_seqs, num_q_heads, num_splits, head_dim, dtype=torch.float32, device=q.device)
        lse = torch.empty(num_seqs, num_q_heads, num_splits, dtype=torch.float32, device=q.device)
    _paged_decode_kernel[(num_seqs, num_kv_heads, num_splits)](
        q,
        k_cache,
        v_cache,
        block_tables,
        seq_lens,
        target,
        lse,
        float(scale),
        q.stride(0),
        q.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        v_cache.stride(0),
        v_cache.stride(1),
        v_cache.stride(2),
        block_tables.stride(0),
        target.stride(0),
        target.stride(1),
        QUERIES_PER_KV=queries_per_kv,
        BLOCK_G=block_g,
        HEAD_DIM=head_dim,
        BLOCK_D=block_d,
        BLOCK_SIZE=block_size,
        BLOCK_N=BLOCK_N,
        NUM_SPLITS=num_splits,
        UPCAST=upcast,
        # fp32 inputs would otherwise run through tf32 tensor cores (10-bit mantissa) on GPU.
        DOT_PRECISION="ieee" if q.dtype == torch.float32 or upcast else "tf32",
    )
    if num_splits > 1:
        _merge_splits_kernel[(num_seqs, num_q_heads)](
            target,
            lse,
            out,
            out.stride(0),
            out.stride(1),
            NUM_SPLITS=num_splits,
            BLOCK_S=triton.next_power_of_2(num_splits),
            HEAD_DIM=head_dim,
            BLOCK_D=triton.next_power_of_2(head_dim),
        )
    return out
