"""Packed variable-length attention in plain torch: the CPU production path (and a fallback on any device).

Same contract as kernels/varlen_attention.py (flash-attn's varlen API): sequence i owns rows
starts_q[i]:starts_q[i+1] of q and starts_k[i]:starts_k[i+1] of k/v; causal is bottom-right aligned and rows
that see no key are zeros. Each sequence is one SDPA call (or the whole batch one call when every sequence
has the same lengths), so a [total, total] block-diagonal mask is never materialized. Grouped-query attention
(Ainslie et al., 2023) uses SDPA's enable_gqa: K/V heads are never repeated in memory.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


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
    """Per-sequence SDPA over packed q [total_q, Hq, D], k/v [total_k, Hkv, D] -> [total_q, Hq, D].

    starts_q / starts_k are cu_seqlens_q / cu_seqlens_k as Python lists (inputs as validated by
    kernels.ops.varlen_attention). When every sequence has the same query and key length (a plain batch)
    it is one batched SDPA call.
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
