"""Plain-torch attention references: slow, obviously correct, fp32 math.

These are the "manual attention" paths beside the kernels (in the spirit of nanoGPT's manual path next to
SDPA): they materialize every mask and every repeated K/V head so a reader can check each number by hand.
They are not the fast torch twins (kernels/*_torch.py, which the CPU path runs); those are tested against these.
Tests compare every backend against them; lessons may show them. Nothing here is meant to be fast.

Conventions follow flash-attn (Dao, 2023, "FlashAttention-2") and vLLM:
- one sequence: q [Lq, Hq, D], k/v [Lk, Hkv, D], query head h reads KV head h // (Hq // Hkv) (GQA,
  Ainslie et al., 2023);
- causal "bottom_right" (flash-attn >= 2.1): query i sees key j iff j <= i + Lk - Lq, so the last query
  sees every key (queries appended to a cached prefix);
- causal "top_left" (xformers' BlockDiagonalCausalMask): query i sees key j iff j <= i;
- a query row that sees no key outputs zeros, never NaN.
"""

from __future__ import annotations

import torch

CAUSAL_ALIGNS = ("top_left", "bottom_right")


def causal_mask(
    len_q: int, len_k: int, align: str = "bottom_right", device: torch.device | str = "cpu"
) -> torch.Tensor:
    """Boolean [len_q, len_k] mask, True where query i may attend to key j."""
    if align not in CAUSAL_ALIGNS:
        raise ValueError(f"align={align!r} is not supported; use 'top_left' or 'bottom_right'")
    shift = len_k - len_q if align == "bottom_right" else 0
    rows = torch.arange(len_q, device=device)[:, None]  # [Lq, 1]
    cols = torch.arange(len_k, device=device)[None, :]  # [1, Lk]
    return cols <= rows + shift


def repeat_kv(x: torch.Tensor, num_queries_per_kv: int) -> torch.Tensor:
    """[L, Hkv, D] -> [L, Hkv * num_queries_per_kv, D]; KV head g serves query heads g*n .. g*n + n - 1."""
    return x.repeat_interleave(num_queries_per_kv, dim=1)


def attention_ref(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    scale: float | None = None,
    align: str = "bottom_right",
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Attention over one sequence: q [Lq, Hq, D], k/v [Lk, Hkv, D] -> [Lq, Hq, D] in q's dtype.

    `mask` (bool [Lq, Lk], True = visible) is combined with the causal mask when both are given.
    """
    len_q, num_heads, head_dim = q.shape
    len_k, num_kv_heads, _ = k.shape
    if num_heads % num_kv_heads != 0:
        raise ValueError(f"q has {num_heads} heads but k has {num_kv_heads}; Hq must be a multiple of Hkv")
    scale = head_dim**-0.5 if scale is None else scale
    group = num_heads // num_kv_heads
    qf = q.float().transpose(0, 1)  # [Hq, Lq, D]
    kf = repeat_kv(k.float(), group).transpose(0, 1)  # [Hq, Lk, D]
    vf = repeat_kv(v.float(), group).transpose(0, 1)  # [Hq, Lk, Dv]
    scores = (qf @ kf.transpose(1, 2)) * scale  # [Hq, Lq, Lk]
    visible = torch.ones(len_q, len_k, dtype=torch.bool, device=q.device)
    if causal:
        visible &= causal_mask(len_q, len_k, align, device=q.device)
    if mask is not None:
        visible &= mask.to(device=q.device, dtype=torch.bool)
    scores = scores.masked_fill(~visible, float("-inf"))
    # A row with no visible key is all -inf: softmax would give NaN, so those rows are zeroed instead.
    any_visible = visible.any(dim=1)  # [Lq]
    probs = torch.softmax(scores.masked_fill(~any_visible[None, :, None], 0.0), dim=-1)
    probs = probs * any_visible[None, :, None]
    out = probs @ vf  # [Hq, Lq, Dv]
    return out.transpose(0, 1).to(q.dtype)  # [Lq, Hq, Dv]


def varlen_attention_ref(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    causal: bool = False,
    scale: float | None = None,
    align: str = "bottom_right",
) -> torch.Tensor:
    """Packed varlen attention by looping over sequences: q [total_q, Hq, D] -> [total_q, Hq, D]."""
    starts_q = cu_seqlens_q.tolist()
    starts_k = cu_seqlens_k.tolist()
    out = torch.zeros(q.shape[0], q.shape[1], v.shape[2], dtype=q.dtype, device=q.device)
    for i in range(len(starts_q) - 1):
        q0, q1, k0, k1 = starts_q[i], starts_q[i + 1], starts_k[i], starts_k[i + 1]
        if q1 > q0:
            out[q0:q1] = attention_ref(q[q0:q1], k[k0:k1], v[k0:k1], causal=causal, scale=scale, align=align)
    return out


def block_diagonal_mask(
    seqlens_q: list[int],
    seqlens_k: list[int] | None = None,
    causal: str | None = None,
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    """Materialized boolean [total_q, total_k] mask: True where a query may see a key of its own sequence.

    `causal` is None, "top_left" or "bottom_right" (alignment within each block).
    """
    seqlens_k = list(seqlens_q) if seqlens_k is None else list(seqlens_k)
    if len(seqlens_q) != len(seqlens_k):
        raise ValueError(f"{len(seqlens_q)} query lengths but {len(seqlens_k)} key lengths; give one per sequence")
    mask = torch.zeros(sum(seqlens_q), sum(seqlens_k), dtype=torch.bool, device=device)
    q0 = k0 = 0
    for len_q, len_k in zip(seqlens_q, seqlens_k, strict=True):
        block = torch.ones(len_q, len_k, dtype=torch.bool, device=device)
        if causal is not None:
            block = causal_mask(len_q, len_k, causal, device=device)
        mask[q0 : q0 + len_q, k0 : k0 + len_k] = block
        q0, k0 = q0 + len_q, k0 + len_k
    return mask


def masked_attention_ref(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float | None = None
) -> torch.Tensor:
    """Packed attention under one materialized bool [total_q, total_k] mask (e.g. block_diagonal_mask)."""
    return attention_ref(q, k, v, causal=False, scale=scale, mask=mask)


# Paged references (slot mappings, fp8 scales, block tables) follow below.


def store_kv_ref(
    k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: torch.Tensor
) -> None:
    """Write token i's k[i] / v[i] ([Hkv, D]) into slot slot_mapping[i] of the paged caches; slots < 0 skipped."""
    block_size = k_cache.shape[1]
    for i, slot in enumerate(slot_mapping.tolist()):
        if slot < 0:  # padding token (e.g. a CUDA-graph pad): nothing to store
            continue
        k_cache[slot // block_size, slot % block_size] = k[i]
        v_cache[slot // block_size, slot % block_size] = v[i]


def dequantize_ref(x: torch.Tensor, scale: torch.Tensor | None) -> torch.Tensor:
    """Cache rows [..., Hkv, D] as fp32: x.float() * scale, scale one per layer ([] / [1]) or per KV head ([Hkv])."""
    return x.float() if scale is None else x.float() * scale.float().reshape(-1, 1)


def paged_varlen_attention_ref(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    seq_lens: torch.Tensor,
    block_tables: torch.Tensor,
    causal: bool = True,
    scale: float | None = None,
    sliding_window: int | None = None,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """Paged attention for several queries per sequence, one query at a time: q [total_q, Hq, D] -> same shape.

    Sequence i's len_q = cu_seqlens_q[i+1] - cu_seqlens_q[i] queries are its last tokens, so its query j sits
    at position p = seq_lens[i] - len_q + j. It sees key t iff t <= p (causal; every t < seq_lens[i] when not
    causal) and t >= p - sliding_window + 1 (with a window; transformers' Mistral mask: kv_idx > q_idx - W).
    Each visible key is looked up token by token (slot = table[t // block_size] * block_size + t % block_size),
    dequantized (x.float() * scale) when scales are given, and `attention_ref` attends to exactly those keys.
    """
    block_size = k_cache.shape[1]
    starts, lens = cu_seqlens_q.tolist(), seq_lens.tolist()
    out = torch.zeros(q.shape[0], q.shape[1], v_cache.shape[-1], dtype=q.dtype, device=q.device)
    for i, seq_len in enumerate(lens):
        len_q = starts[i + 1] - starts[i]
        for j in range(len_q):
            p = seq_len - len_q + j
            lo = 0 if sliding_window is None else max(0, p - sliding_window + 1)
            hi = p + 1 if causal else seq_len
            blocks = [int(block_tables[i, t // block_size]) for t in range(lo, hi)]
            k = torch.stack([k_cache[b, t % block_size] for b, t in zip(blocks, range(lo, hi), strict=True)])
            v = torch.stack([v_cache[b, t % block_size] for b, t in zip(blocks, range(lo, hi), strict=True)])
            row = starts[i] + j
            k, v = dequantize_ref(k, k_scale), dequantize_ref(v, v_scale)  # [n, Hkv, D] fp32
            out[row] = attention_ref(q[row : row + 1], k, v, causal=False, scale=scale)[0]
    return out
