"""Public attention entry points: validate, pick a backend, dispatch.

Vocabulary follows flash-attn's `flash_attn_varlen_func` (packed tokens + `cu_seqlens`) and vLLM's
PagedAttention (`block_tables`, `seq_lens`, `slot_mapping`; Kwon et al., SOSP 2023). Every error a caller
can cause is a ValueError that names the bad value and the fix, raised here, before any kernel runs, so
neither backend ever sees malformed metadata (which on a GPU would mean silent out-of-bounds reads).

Backends: "triton" (kernels/varlen_attention.py, paged_attention.py, kv_store.py) and "torch" (the CPU
production path: per-sequence SDPA, never a materialized [total, total] mask). Triton modules are imported
lazily so this file works without triton installed.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels.backend import resolve_backend
from kernels.checks import (
    check_cache,
    check_cu_tensor,
    check_heads,
    check_last_stride,
    check_max_seqlen,
    check_offsets,
    check_same,
    check_scale,
    check_tensor,
)
from kernels.paged_attention_torch import TokenSlots


# --------------------------------------------------------------------------------------------- varlen
def varlen_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    causal: bool = False,
    scale: float | None = None,
    backend: str = "auto",
) -> torch.Tensor:
    """Packed variable-length attention: q [total_q, Hq, D], k/v [total_k, Hkv, D] -> [total_q, Hq, D].

    Sequence i owns rows cu_seqlens_q[i]:cu_seqlens_q[i+1] of q and cu_seqlens_k[i]:cu_seqlens_k[i+1] of
    k/v. `causal` is bottom-right aligned; rows that see no key are zeros.
    """
    q = check_tensor("q", q, 3, "[total_q, num_heads, head_dim]")
    k = check_tensor("k", k, 3, "[total_k, num_kv_heads, head_dim]")
    v = check_tensor("v", v, 3, "[total_k, num_kv_heads, head_dim]")
    check_same("q, k, v", [q, k, v])
    if k.shape != v.shape:
        raise ValueError(f"k has shape {tuple(k.shape)} but v has {tuple(v.shape)}; they must match")
    if k.shape[2] != q.shape[2]:
        raise ValueError(f"q has head_dim {q.shape[2]} but k has {k.shape[2]}; they must match")
    check_heads(q.shape[1], k.shape[1], q.shape[2])
    if not isinstance(causal, bool):
        raise ValueError(f"causal={causal!r} must be True or False")
    scale = check_scale(scale, q.shape[2])
    cu_q = check_cu_tensor("cu_seqlens_q", cu_seqlens_q, q.device)
    cu_k = check_cu_tensor("cu_seqlens_k", cu_seqlens_k, q.device)
    offsets = torch.cat([cu_q, cu_k]).tolist()  # one device sync reads both offset tensors
    starts_q, starts_k = offsets[: cu_q.numel()], offsets[cu_q.numel() :]
    check_offsets("cu_seqlens_q", starts_q, q.shape[0])
    check_offsets("cu_seqlens_k", starts_k, k.shape[0])
    if len(starts_q) != len(starts_k):
        raise ValueError(
            f"cu_seqlens_q describes {len(starts_q) - 1} sequences but cu_seqlens_k {len(starts_k) - 1}; "
            "give both one offset per sequence plus the total"
        )
    max_seqlen_q = check_max_seqlen("max_seqlen_q", max_seqlen_q, starts_q)
    max_seqlen_k = check_max_seqlen("max_seqlen_k", max_seqlen_k, starts_k)
    backend = resolve_backend(backend, q.device)
    check_last_stride(backend, q=q, k=k, v=v)
    if backend == "triton":
        from kernels.varlen_attention import varlen_attention_triton

        return varlen_attention_triton(
            q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=causal, scale=scale
        )
    return varlen_attention_torch(q, k, v, starts_q, starts_k, causal=causal, scale=scale)


def _sdpa_blocks(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float) -> torch.Tensor:
    """Bottom-right causal (or full) attention for B equal-shape sequences: q [B, Lq, Hq, D] -> [B, Lq, Hq, D]."""
    len_q, len_k = q.shape[1], k.shape[1]
    # Bottom-right causal: with more queries than keys the first len_q - len_k rows see no key.
    hidden = len_q - len_k if causal and len_q > len_k else 0
    if len_k == 0 or hidden == len_q:
        return q.new_zeros(q.shape)
    mask, is_causal = None, False
    if causal and len_q - hidden == len_k:
        is_causal = True  # square block: SDPA's top-left causal equals bottom-right
    elif causal and len_q > 1:
        # len_q < len_k: a per-block [len_q, len_k] mask (never [total, total]).
        mask = torch.ones(len_q, len_k, dtype=torch.bool, device=q.device).tril(len_k - len_q)
    # 4-D views on purpose: CPU SDPA sends 3-D inputs to its slow math path, 4-D to the flash kernel.
    o = F.scaled_dot_product_attention(
        q[:, hidden:].transpose(1, 2),  # [B, Hq, len_q - hidden, D]
        k.transpose(1, 2),  # [B, Hkv, len_k, D]
        v.transpose(1, 2),
        attn_mask=mask,
        is_causal=is_causal,
        scale=scale,
        enable_gqa=k.shape[2] != q.shape[2],
    ).transpose(1, 2)  # [B, len_q - hidden, Hq, D]
    if hidden:
        o = torch.cat([o.new_zeros(o.shape[0], hidden, *o.shape[2:]), o], dim=1)
    return o


def varlen_attention_torch(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    starts_q: list[int],
    starts_k: list[int],
    causal: bool,
    scale: float,
) -> torch.Tensor:
    """Torch backend: per-sequence SDPA (enable_gqa: K/V heads are never repeated in memory).

    When every sequence has the same query and key length (a plain batch) it is one batched SDPA call.
    """
    batch = len(starts_q) - 1
    lens_q = {b - a for a, b in zip(starts_q[:-1], starts_q[1:], strict=True)}
    lens_k = {b - a for a, b in zip(starts_k[:-1], starts_k[1:], strict=True)}
    if batch > 1 and len(lens_q) == 1 and len(lens_k) == 1:
        (len_q,), (len_k,) = lens_q, lens_k
        q4 = q.reshape(batch, len_q, *q.shape[1:])  # [B, Lq, Hq, D]
        k4, v4 = k.reshape(batch, len_k, *k.shape[1:]), v.reshape(batch, len_k, *v.shape[1:])  # [B, Lk, Hkv, D]
        return _sdpa_blocks(q4, k4, v4, causal, scale).reshape(q.shape)
    out = torch.empty_like(q)
    for i in range(batch):
        q0, q1, k0, k1 = starts_q[i], starts_q[i + 1], starts_k[i], starts_k[i + 1]
        if q1 > q0:
            out[q0:q1] = _sdpa_blocks(q[None, q0:q1], k[None, k0:k1], v[None, k0:k1], causal, scale)[0]
    return out


# ---------------------------------------------------------------------------------------------- paged
def paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float | None = None,
    backend: str = "auto",
    index: TokenSlots | None = None,
) -> torch.Tensor:
    """Decode attention through block tables: q [num_seqs, Hq, D] -> [num_seqs, Hq, D].

    Sequence i's token t lives in k_cache[block_tables[i, t // block_size], t % block_size]; only the first
    seq_lens[i] tokens are read. A sequence with seq_lens 0 outputs zeros.

    index: optional `token_slots(block_tables, seq_lens, block_size)` of this batch for the torch backend (a
    model builds it once per step and shares it between its layers); the Triton kernel reads the tables itself.
    """
    q = check_tensor("q", q, 3, "[num_seqs, num_heads, head_dim]")
    k_cache, v_cache = check_cache(k_cache, v_cache)
    check_same("q, k_cache, v_cache", [q, k_cache, v_cache])
    num_blocks, block_size, num_kv_heads, head_dim = k_cache.shape
    if q.shape[2] != head_dim:
        raise ValueError(f"q has head_dim {q.shape[2]} but k_cache has {head_dim}; they must match")
    check_heads(q.shape[1], num_kv_heads, head_dim, kv_name="k_cache")
    scale = check_scale(scale, head_dim)
    num_seqs = q.shape[0]
    block_tables = check_tensor("block_tables", block_tables, 2, "int32 [num_seqs, max_blocks_per_seq]")
    seq_lens = check_tensor("seq_lens", seq_lens, 1, "int32 [num_seqs]")
    for name, t in (("block_tables", block_tables), ("seq_lens", seq_lens)):
        if t.dtype != torch.int32:
            raise ValueError(f"{name} has dtype {t.dtype}; pass {name}.to(torch.int32)")
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}; move {name} to {q.device}")
        if t.shape[0] != num_seqs:
            raise ValueError(f"{name} has {t.shape[0]} rows but q has {num_seqs} sequences; give one row per sequence")
    capacity = block_tables.shape[1] * block_size
    if num_seqs:
        # Only the blocks a sequence actually uses must be valid; padding entries past them are never read.
        blocks_used = (seq_lens.long() + block_size - 1) // block_size  # [num_seqs]
        used = torch.arange(block_tables.shape[1], device=q.device)[None, :] < blocks_used[:, None]
        bad = used & ((block_tables < 0) | (block_tables >= num_blocks))  # [num_seqs, max_blocks_per_seq]
        first_bad = torch.where(bad.flatten(), torch.arange(bad.numel(), device=q.device), bad.numel()).min()
        stats = torch.stack([seq_lens.min().long(), seq_lens.max().long(), first_bad]).tolist()  # one sync
        lo, hi, first = stats
        if lo < 0:
            raise ValueError(f"seq_lens has a negative entry ({lo}); lengths must be >= 0")
        if hi > capacity:
            raise ValueError(
                f"seq_lens has {hi} tokens but a block table row holds {block_tables.shape[1]} blocks x "
                f"{block_size} = {capacity} slots; widen block_tables or shorten the sequence"
            )
        if first < bad.numel():
            seq, col = divmod(first, block_tables.shape[1])
            raise ValueError(
                f"block_tables[{seq}, {col}] = {int(block_tables[seq, col])} is outside the cache's "
                f"{num_blocks} blocks; table entries for used blocks must be in [0, {num_blocks})"
            )
    backend = resolve_backend(backend, q.device)
    check_last_stride(backend, q=q, k_cache=k_cache, v_cache=v_cache)
    if backend == "triton":
        from kernels.paged_attention import paged_attention_triton

        return paged_attention_triton(q, k_cache, v_cache, block_tables, seq_lens, scale)
    from kernels.paged_attention import paged_attention_torch

    return paged_attention_torch(q, k_cache, v_cache, block_tables, seq_lens, scale, index=index)


def store_kv(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    backend: str = "auto",
) -> None:
    """Write k/v [num_tokens, Hkv, D] into the paged caches in place at slot_mapping (slot < 0 is skipped)."""
    k = check_tensor("k", k, 3, "[num_tokens, num_kv_heads, head_dim]")
    v = check_tensor("v", v, 3, "[num_tokens, num_kv_heads, head_dim]")
    k_cache, v_cache = check_cache(k_cache, v_cache)
    check_same("k, v, k_cache, v_cache", [k, v, k_cache, v_cache])
    if k.shape != v.shape:
        raise ValueError(f"k has shape {tuple(k.shape)} but v has {tuple(v.shape)}; they must match")
    num_blocks, block_size, num_kv_heads, head_dim = k_cache.shape
    if k.shape[1:] != (num_kv_heads, head_dim):
        raise ValueError(
            f"k rows are [{k.shape[1]}, {k.shape[2]}] (heads, head_dim) but the cache holds "
            f"[{num_kv_heads}, {head_dim}]; they must match"
        )
    slot_mapping = check_tensor("slot_mapping", slot_mapping, 1, "int32/int64 [num_tokens]")
    if slot_mapping.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"slot_mapping has dtype {slot_mapping.dtype}; pass slot_mapping.to(torch.int64)")
    if slot_mapping.device != k.device:
        raise ValueError(f"slot_mapping is on {slot_mapping.device} but k is on {k.device}; move it to {k.device}")
    if slot_mapping.shape[0] != k.shape[0]:
        raise ValueError(f"slot_mapping has {slot_mapping.shape[0]} slots but k has {k.shape[0]} tokens; give one each")
    num_slots = num_blocks * block_size
    # One read-back of the (per-step, small) mapping; plain Python is faster than a chain of tiny torch ops.
    live = [s for s in slot_mapping.tolist() if s >= 0]
    if live and max(live) >= num_slots:
        raise ValueError(
            f"slot_mapping holds slot {max(live)} but the cache has {num_blocks} blocks x {block_size} = "
            f"{num_slots} slots; slots must be < {num_slots} (or negative to skip)"
        )
    if len(set(live)) != len(live):
        raise ValueError("slot_mapping writes the same slot twice; each new token needs its own slot")
    backend = resolve_backend(backend, k.device)
    check_last_stride(backend, k=k, v=v, k_cache=k_cache, v_cache=v_cache)
    if backend == "triton":
        from kernels.kv_store import store_kv_triton

        store_kv_triton(k, v, k_cache, v_cache, slot_mapping)
    else:
        from kernels.kv_store import store_kv_torch

        store_kv_torch(k, v, k_cache, v_cache, slot_mapping)
