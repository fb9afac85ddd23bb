"""`memory_efficient_attention`: xformers' front door over KV Lab's packed varlen kernels.

Accepts xformers' layouts (`xformers.ops.memory_efficient_attention`, Lefaudeux et al.):
- BMK   [B, M, K]          one head;
- BMHK  [B, M, H, K]       H heads; key/value may carry 1 head, a divisor of H (GQA), or H expanded with stride 0;
- BMGHK [B, M, G, H, K]    G KV groups of H query heads each; key/value carry the H dim as size 1 or expanded
                           with stride 0 - the pattern Llama- and Mistral-class inference code uses for GQA.
K/V that arrive expanded are read through a stride-0 view and never copied per query head: the kernel maps
query head h to KV head h // (Hq // Hkv). Without a bias every batch row is one sequence; with a
block-diagonal bias (engine.attention.attn_bias) B must be 1 and the packed dims must match the bias totals.
"""

from __future__ import annotations

from itertools import accumulate

import torch

from engine.attention.attn_bias import BLOCK_DIAGONAL_BIASES, BlockDiagonalMask
from kernels.checks import check_scale
from kernels.ops import varlen_attention

LAYOUTS = {3: "BMK [B, M, K]", 4: "BMHK [B, M, H, K]", 5: "BMGHK [B, M, G, H, K]"}


def _kv_heads(x: torch.Tensor) -> torch.Tensor:
    """Key/value -> [B * N, Hkv, K] with unit stride on K, collapsing a size-1 or stride-0 query-head dim.

    No copy unless K itself is strided. (select / narrow / reshape rather than indexing: this runs on every
    call, and on CPU a decode-sized call is short enough for Python overhead to show.)
    """
    shape = x.shape
    if x.dim() == 3:
        x = x.reshape(shape[0] * shape[1], 1, shape[2])  # [B * N, 1, K]
    elif x.dim() == 4:
        if shape[2] > 1 and x.stride(2) == 0:
            x = x.narrow(2, 0, 1)  # [B, N, 1, K]: MQA expanded over query heads
        x = x.reshape(shape[0] * shape[1], x.shape[2], shape[3])
    elif shape[3] == 1 or x.stride(3) == 0:
        x = x.select(3, 0).reshape(shape[0] * shape[1], shape[2], shape[4])  # one KV head per group
    else:
        x = x.reshape(shape[0] * shape[1], shape[2] * shape[3], shape[4])  # heads materialized per query head
    return x if x.stride(-1) == 1 else x.contiguous()


def _packed_query(x: torch.Tensor) -> torch.Tensor:
    """Query in any layout -> [B * M, heads, K] (a view when possible) with unit stride on K for the kernels."""
    shape = x.shape
    heads = 1 if x.dim() == 3 else shape[2] if x.dim() == 4 else shape[2] * shape[3]
    x = x.reshape(shape[0] * shape[1], heads, shape[-1])
    return x if x.stride(-1) == 1 else x.contiguous()


def _uniform_offsets(batch: int, length: int, device: torch.device) -> torch.Tensor:
    """cu_seqlens [0, L, 2L, ..., B * L] (int32) of B sequences of L tokens each."""
    if length == 0:
        return torch.zeros(batch + 1, dtype=torch.int32, device=device)
    return torch.arange(0, (batch + 1) * length, length, dtype=torch.int32, device=device)


def _block_plan(bias: BlockDiagonalMask) -> list[tuple[bool, list[tuple[int, int, int, int]]]]:
    """Split the bias into at most two varlen calls: (causal, [(q0, q1, k0, k1), ...]).

    The kernels are bottom-right causal. A top-left block (len_q, len_k) equals a square causal block over
    the first min(len_q, len_k) queries and keys, plus - when len_q > len_k - its remaining queries seeing
    every key (non-causal). Keys past len_q are invisible to every top-left query.
    """
    blocks = list(zip(bias.q_seqinfo.intervals(), bias.k_seqinfo.intervals(), strict=True))
    if bias.CAUSAL is None:
        return [(False, [(q0, q1, k0, k1) for (q0, q1), (k0, k1) in blocks])]
    if bias.CAUSAL == "bottom_right" or all(q1 - q0 == k1 - k0 for (q0, q1), (k0, k1) in blocks):
        return [(True, [(q0, q1, k0, k1) for (q0, q1), (k0, k1) in blocks])]
    causal, full = [], []
    for (q0, q1), (k0, k1) in blocks:
        m = min(q1 - q0, k1 - k0)
        causal.append((q0, q0 + m, k0, k0 + m))
        if q1 - q0 > m:
            full.append((q0 + m, q1, k0, k1))
    return [(True, causal), (False, full)]


def _gather(x: torch.Tensor, spans: list[tuple[int, int]]) -> torch.Tensor:
    """Rows of the given spans, concatenated; the tensor itself when the spans tile it in order."""
    contiguous = spans[0][0] == 0 and spans[-1][1] == x.shape[0]
    contiguous = contiguous and all(spans[i][1] == spans[i + 1][0] for i in range(len(spans) - 1))
    return x if contiguous else torch.cat([x[a:b] for a, b in spans])


def _run_blocks(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    blocks: list[tuple[int, int, int, int]],
    causal: bool,
    scale: float | None,
    backend: str,
) -> torch.Tensor:
    """One varlen call over the given (q0, q1, k0, k1) blocks; returns outputs for their query rows in order."""
    lens_q = [q1 - q0 for q0, q1, _, _ in blocks]
    lens_k = [k1 - k0 for _, _, k0, k1 in blocks]
    cu_q = torch.tensor([0, *accumulate(lens_q)], dtype=torch.int32, device=q.device)
    cu_k = torch.tensor([0, *accumulate(lens_k)], dtype=torch.int32, device=q.device)
    qs = _gather(q, [(q0, q1) for q0, q1, _, _ in blocks])
    ks = _gather(k, [(k0, k1) for _, _, k0, k1 in blocks])
    vs = _gather(v, [(k0, k1) for _, _, k0, k1 in blocks])
    return varlen_attention(
        qs, ks, vs, cu_q, cu_k, max(lens_q), max(lens_k), causal=causal, scale=scale, backend=backend
    )


def _check_layouts(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, p: float) -> None:
    """Raise a ValueError naming the first mismatch between the query, key and value layouts."""
    for name, x in (("query", query), ("key", key), ("value", value)):
        if not isinstance(x, torch.Tensor) or x.dim() not in LAYOUTS:
            shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"{name} has shape {shape}; use one of {', '.join(LAYOUTS.values())}")
    if not query.dim() == key.dim() == value.dim():
        raise ValueError(
            f"query, key, value have {query.dim()}, {key.dim()}, {value.dim()} dims; use one layout for all three"
        )
    if p != 0.0:
        raise ValueError(f"p={p}: dropout is not supported (inference only); pass p=0.0")
    if key.shape != value.shape:
        raise ValueError(f"key has shape {tuple(key.shape)} but value {tuple(value.shape)}; they must match")
    if key.shape[0] != query.shape[0]:
        raise ValueError(f"query has batch {query.shape[0]} but key has {key.shape[0]}; they must match")
    if query.dim() == 5 and key.shape[2] != query.shape[2]:
        raise ValueError(f"query has G={query.shape[2]} groups but key has {key.shape[2]}; they must match")
    if query.dim() == 5 and key.shape[3] not in (1, query.shape[3]):
        raise ValueError(
            f"key's H dim is {key.shape[3]} but query has H={query.shape[3]}; use size 1 or expand it (stride 0)"
        )
    if key.shape[-1] != query.shape[-1]:
        raise ValueError(f"query has K={query.shape[-1]} but key has {key.shape[-1]}; head dims must match")


def _attend_block_diagonal(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_bias: BlockDiagonalMask,
    batch: int,
    scale: float | None,
    backend: str,
) -> torch.Tensor:
    """Packed q [M, Hq, K] over k/v [N, Hkv, K] under a block-diagonal bias -> [M, Hq, K]."""
    total_q, total_k = attn_bias.q_seqinfo.seqstart_py[-1], attn_bias.k_seqinfo.seqstart_py[-1]
    if batch != 1:
        raise ValueError(f"a block-diagonal attn_bias needs B == 1 (sequences packed along M); got B={batch}")
    if q.shape[0] != total_q or k.shape[0] != total_k:
        raise ValueError(
            f"query/key have M={q.shape[0]}, N={k.shape[0]} but the bias packs {total_q} queries and {total_k} "
            "keys; they must match"
        )
    out = torch.zeros_like(q)
    for causal, blocks in _block_plan(attn_bias):
        if not blocks:
            continue
        result = _run_blocks(q, k, v, blocks, causal, scale, backend)
        if result.shape[0] == total_q:
            out = result  # blocks are disjoint and in order, so this call covered every query row
        else:
            out[torch.cat([torch.arange(q0, q1, device=q.device) for q0, q1, _, _ in blocks])] = result
    return out


def memory_efficient_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_bias: BlockDiagonalMask | None = None,
    scale: float | None = None,
    *,
    p: float = 0.0,
    backend: str = "auto",
) -> torch.Tensor:
    """Attention in xformers' layouts; output has the query's layout. Default scale K ** -0.5.

    scale must be a finite number > 0 (checked here, before any call: a bias whose blocks are all empty makes
    no kernel call that would check it)."""
    _check_layouts(query, key, value, p)
    check_scale(scale, max(query.shape[-1], 1))
    batch, len_q = query.shape[:2]
    len_k = key.shape[1]
    q, k, v = _packed_query(query), _kv_heads(key), _kv_heads(value)  # [B * M, Hq, K], [B * N, Hkv, K]
    if k.shape != v.shape:
        raise ValueError(
            "key and value carry their heads differently (one expanded, one not); expand both the same way"
        )
    if q.shape[1] < 1 or k.shape[1] < 1:
        raise ValueError(
            f"query has {q.shape[1]} heads and key {k.shape[1]}; attention needs at least one of each "
            "(H >= 1 in BMHK / BMGHK, G >= 1 in BMGHK)"
        )
    if q.shape[1] % k.shape[1] != 0:
        raise ValueError(f"query has {q.shape[1]} heads but key has {k.shape[1]}; query heads must be a multiple")

    if attn_bias is None:
        offsets_q = _uniform_offsets(batch, len_q, q.device)
        offsets_k = _uniform_offsets(batch, len_k, q.device)
        out = varlen_attention(q, k, v, offsets_q, offsets_k, len_q, len_k, causal=False, scale=scale, backend=backend)
    elif isinstance(attn_bias, BLOCK_DIAGONAL_BIASES):
        out = _attend_block_diagonal(q, k, v, attn_bias, batch, scale, backend)
    else:
        raise ValueError(
            f"attn_bias of type {type(attn_bias).__name__} is not supported; use None, BlockDiagonalMask, "
            "BlockDiagonalCausalMask or BlockDiagonalCausalFromBottomRightMask"
        )
    return out.reshape(query.shape)  # back to BMK / BMHK / BMGHK
