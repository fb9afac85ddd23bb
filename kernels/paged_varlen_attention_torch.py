"""Paged attention for several queries per sequence in plain torch: the CPU production path (any device).

Same contract as kernels/paged_varlen_attention.py (vLLM V1's unified attention; flash-attn's varlen call with a
`block_table`): sequence i's queries are its last len_q = cu_seqlens_q[i+1] - cu_seqlens_q[i] tokens of
seq_lens[i], keys are read through its block-table row, causal is bottom-right aligned and a sliding window W
lets the query at position p see keys p - W + 1 .. p. Inputs as validated by kernels.ops.paged_varlen_attention.

Torch has no attention op that reads through a block table, so each sequence's keys are gathered, but only the
token range its queries can see (from its first query's window start to its last token: no unused slot, no
block outside the window), then SDPA runs on the gathered rows:
- decode rows (len_q = 1) without a window in the cache's own dtype go to kernels/paged_decode_torch.py's
  batched decode path (sparse ops that read the cache in place, in fp32 on CPU) in one call;
- other decode rows are gathered into one padded [S, Lmax] batch under a key-padding mask, one SDPA;
- sequences with several queries are grouped by (len_q, keys): each group is one gather and one SDPA under
  one [len_q, keys] band mask (is_causal when it is exactly the square causal mask), never [total, total].
GQA uses SDPA's enable_gqa (or the decode path's query-row grouping): K/V heads are never repeated. The V
cache may have a narrower head dim Dv than K (MLA's latent cache: V is a view of the first kv_lora_rank
columns of the K rows); the output is [total_q, Hq, Dv].
An fp8 cache is dequantized after the gather (x.float() * scale) and attended in fp32. What depends only on
the step (the grouping, the decode rows' gather index) is a VarlenIndex, built once per step by
`paged_varlen_index` inside kernels.ops.plan_attention and shared by every layer through the plan.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from kernels.paged_decode_torch import TokenSlots, decode_attention, token_slots


def key_start(seq_len: int, len_q: int, window: int | None) -> int:
    """First key any of the sequence's queries sees: its first query's window start (0 without a window)."""
    return 0 if window is None else max(0, seq_len - len_q - window + 1)


def band_mask(len_q: int, len_k: int, causal: bool, window: int | None, device: torch.device) -> torch.Tensor | None:
    """Bool [len_q, len_k] mask (True = visible) over keys k0 .. seq_len - 1, or None when every key is visible.

    Query j sits at key index j + len_k - len_q (bottom-right); it sees keys up to itself (causal) and from
    itself - window + 1 on.
    """
    diag = len_k - len_q
    if not causal or (len_q == 1 and (window is None or len_k <= window)):
        return None
    mask = torch.ones(len_q, len_k, dtype=torch.bool, device=device).tril(diag)
    return mask if window is None else mask.triu(diag - window + 1)


def _gather(cache: torch.Tensor, block_tables: torch.Tensor, seqs: torch.Tensor, tok: torch.Tensor) -> torch.Tensor:
    """Cache rows of tokens tok[g, j] (positions within sequence seqs[g]) -> [G, L, Hkv, D].

    Only the table entries of those tokens are read; callers pass tokens that exist (< seq_len, in the window)."""
    block_size = cache.shape[1]
    blocks = block_tables[seqs[:, None], tok // block_size].long()  # [G, L]
    slots = (blocks * block_size + tok % block_size).view(-1)
    if cache.is_contiguous():
        rows = cache.view(-1, *cache.shape[2:]).index_select(0, slots)
    else:  # a strided cache has no flat view: index (block, offset) instead
        rows = cache[slots // block_size, slots % block_size]
    return rows.view(*tok.shape, *cache.shape[2:])


def _gather_range(
    cache: torch.Tensor, block_tables: torch.Tensor, seqs: list[int], k0s: list[int], length: int
) -> torch.Tensor:
    """Tokens k0s[g] .. k0s[g] + length - 1 of sequences seqs -> [G, length, Hkv, D].

    When every range starts at the same offset within its block (always without a window), whole blocks are
    copied (one index_select over the G x blocks table entries: a few large row copies, 3x faster than one
    index per token at 16-token blocks) and the range sliced out; otherwise token by token."""
    block_size, device = cache.shape[1], cache.device
    offsets = {k0 % block_size for k0 in k0s}
    if len(offsets) != 1:
        tok = torch.tensor(k0s, device=device)[:, None] + torch.arange(length, device=device)
        return _gather(cache, block_tables, torch.tensor(seqs, device=device), tok)
    off = offsets.pop()
    nb = -(-(off + length) // block_size)  # blocks the range touches, all within the sequence
    if len(seqs) == 1:
        first = k0s[0] // block_size
        ids = block_tables[seqs[0], first : first + nb]
    else:
        first = torch.tensor([k0 // block_size for k0 in k0s], device=device)
        ids = block_tables[torch.tensor(seqs, device=device)[:, None], first[:, None] + torch.arange(nb, device=device)]
    rows = cache.index_select(0, ids.reshape(-1)).view(len(seqs), nb * block_size, *cache.shape[2:])
    return rows[:, off : off + length]


def _dequant(x: torch.Tensor, scale: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
    """fp8 rows [..., Hkv, D] -> x.float() * scale (one per layer or per KV head); others cast to `dtype`."""
    if scale is None:
        return x if x.dtype == dtype else x.to(dtype)
    return x.float() * scale.reshape(-1, 1)


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask, is_causal: bool, scale: float) -> torch.Tensor:
    """q [G, Lq, Hq, D], k/v [G, Lk, Hkv, D] (4-D: CPU SDPA's flash kernel) -> [G, Lq, Hq, D]."""
    return F.scaled_dot_product_attention(
        q.transpose(1, 2),
        k.transpose(1, 2),
        v.transpose(1, 2),
        attn_mask=mask,
        is_causal=is_causal,
        scale=scale,
        enable_gqa=k.shape[2] != q.shape[2],
    ).transpose(1, 2)


class VarlenIndex(NamedTuple):
    """One step's index for paged_varlen_attention_torch. It depends only on the step's lengths and block tables
    and on which decode path the cache takes, so the step's plan builds it once (`paged_varlen_index`, inside
    kernels.ops.plan_attention) and every layer reuses it.

    starts_q: cu_seqlens_q as a Python list; decode: the len_q = 1 sequences; groups: (len_q, keys) ->
    [(sequence, first key)] of the others; decode_rows: the decode sequences' q rows (None when every sequence
    decodes); decode_lens: their seq_lens; decode_slots: the paged decode path's TokenSlots (a full-precision
    cache without a window) or None; decode_tok / decode_mask: the padded decode path's token positions
    [S, Lmax] and key-padding mask (with a window or an fp8 cache; None otherwise).
    """

    starts_q: list[int]
    decode: list[int]
    groups: dict[tuple[int, int], list[tuple[int, int]]]
    decode_rows: torch.Tensor | None
    decode_lens: torch.Tensor
    decode_slots: TokenSlots | None
    decode_tok: torch.Tensor | None
    decode_mask: torch.Tensor | None


def paged_varlen_index(
    cu_seqlens_q: torch.Tensor,
    seq_lens: torch.Tensor,
    block_tables: torch.Tensor,
    block_size: int,
    heads: tuple[int, int] | None = None,
    sliding_window: int | None = None,
    kv_fp8: bool = False,
    host: tuple[list[int], list[int]] | None = None,
) -> VarlenIndex:
    """The step index of a batch (one device read of cu_seqlens_q and seq_lens unless `host` holds them).

    Decode rows take the paged decode path (TokenSlots) without a window and with a full-precision cache, the
    padded gather (positions and mask) otherwise; heads (Hq, Hkv): build the decode path's sparse index for
    those heads (kernels.ops.plan_attention passes them where the sparse path applies), None: its gather path."""
    if host is None:
        values = torch.cat([cu_seqlens_q, seq_lens]).tolist()
        host = values[: cu_seqlens_q.numel()], values[cu_seqlens_q.numel() :]
    starts, lens = host
    decode, groups = [], {}
    for i, seq_len in enumerate(lens):
        len_q = starts[i + 1] - starts[i]
        if len_q == 1:
            decode.append(i)
        elif len_q > 1:
            k0 = key_start(seq_len, len_q, sliding_window)
            groups.setdefault((len_q, seq_len - k0), []).append((i, k0))
    device = block_tables.device
    rows, tables, dlens, slots, tok, mask = None, block_tables, seq_lens, None, None, None
    if decode and len(decode) != len(lens):
        rows = torch.tensor([starts[i] for i in decode], device=device)
        chosen = torch.tensor(decode, device=device)
        tables, dlens = block_tables.index_select(0, chosen), seq_lens.index_select(0, chosen)
    if decode and (sliding_window is not None or kv_fp8):
        tok, mask = _decode_positions(decode, lens, sliding_window, device)
    elif decode:
        slots = token_slots(tables, dlens, block_size, heads, [lens[i] for i in decode])
    return VarlenIndex(starts, decode, groups, rows, dlens, slots, tok, mask)


def _decode_positions(decode: list[int], lens: list[int], window: int | None, device: torch.device):
    """Token positions [S, Lmax] of the decode rows' visible keys (padding re-reads the first one, a real
    token, never NaN) and the key-padding mask [S, 1, 1, Lmax] (None without padding)."""
    k0s = [key_start(lens[i], 1, window) for i in decode]
    len_ks = [lens[i] - k0 for i, k0 in zip(decode, k0s, strict=True)]
    max_k = max(len_ks)
    valid = torch.arange(max_k, device=device) < torch.tensor(len_ks, device=device)[:, None]  # [S, max_k]
    tok = torch.tensor(k0s, device=device)[:, None] + torch.where(valid, torch.arange(max_k, device=device), 0)
    return tok, (None if min(len_ks) == max_k else valid[:, None, None, :])


def paged_varlen_attention_torch(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    causal: bool,
    scale: float,
    sliding_window: int | None,
    k_scale: torch.Tensor | None,
    v_scale: torch.Tensor | None,
    index: VarlenIndex,
) -> torch.Tensor:
    """q [total_q, Hq, D] -> [total_q, Hq, Dv]; inputs as validated by kernels.ops.plan_attention, whose plan
    holds `index` (this step's `paged_varlen_index`, built for this cache's dtype and window)."""
    # [total_q, Hq, Dv]: every row belongs to a sequence with len_q >= 1 and is written below
    out = q.new_empty(*q.shape[:2], v_cache.shape[-1])
    if index.decode:
        res = _attend_decode(q, k_cache, v_cache, block_tables, index, scale, k_scale, v_scale)
        if index.decode_rows is None:
            if not index.groups:
                return res
            out.copy_(res)
        else:
            out.index_copy_(0, index.decode_rows, res)
    for (len_q, len_k), members in index.groups.items():
        _attend_group(out, q, k_cache, v_cache, block_tables, index.starts_q, members, len_q, len_k, causal, scale,
                      sliding_window, k_scale, v_scale)  # fmt: skip
    return out


def _attend_decode(q, k_cache, v_cache, block_tables, index: VarlenIndex, scale, k_scale, v_scale) -> torch.Tensor:
    """Every len_q = 1 sequence in one batched call; its one query sees its window (or all) of its keys."""
    qd = q if index.decode_rows is None else q.index_select(0, index.decode_rows)  # [S, Hq, D]
    if index.decode_slots is not None:  # no window, full-precision cache: the paged decode path
        return decode_attention(qd, k_cache, v_cache, index.decode_slots, index.decode_lens, scale)  # [S, Hq, D]
    seqs = torch.tensor(index.decode, device=q.device)
    dtype = torch.float32 if k_scale is not None else q.dtype
    k = _dequant(_gather(k_cache, block_tables, seqs, index.decode_tok), k_scale, dtype)  # [S, max_k, Hkv, D]
    v = _dequant(_gather(v_cache, block_tables, seqs, index.decode_tok), v_scale, dtype)
    return _sdpa(qd[:, None].to(dtype), k, v, index.decode_mask, False, scale)[:, 0].to(q.dtype)


def _attend_group(out, q, k_cache, v_cache, block_tables, starts_q, members, len_q, len_k, causal, scale, window,
                  k_scale, v_scale) -> None:  # fmt: skip
    """Sequences with the same (len_q, keys): one gather of their key ranges and one SDPA under one mask."""
    device = q.device
    seqs, k0s = [i for i, _ in members], [k0 for _, k0 in members]
    dtype = torch.float32 if k_scale is not None else q.dtype
    k = _dequant(_gather_range(k_cache, block_tables, seqs, k0s, len_k), k_scale, dtype)  # [G, len_k, Hkv, D]
    v = _dequant(_gather_range(v_cache, block_tables, seqs, k0s, len_k), v_scale, dtype)
    square_causal = causal and window is None and len_q == len_k
    mask = None if square_causal else band_mask(len_q, len_k, causal, window, device)
    if len(members) == 1:
        q0 = starts_q[members[0][0]]
        res = _sdpa(q[None, q0 : q0 + len_q].to(dtype), k, v, mask, square_causal, scale)
        out[q0 : q0 + len_q] = res[0].to(q.dtype)
        return
    first = torch.tensor([starts_q[i] for i, _ in members], device=device)
    rows = first[:, None] + torch.arange(len_q, device=device)
    rows = rows.view(-1)
    qg = q.index_select(0, rows).view(len(members), len_q, *q.shape[1:]).to(dtype)
    res = _sdpa(qg, k, v, mask, square_causal, scale)
    out.index_copy_(0, rows, res.reshape(-1, *out.shape[1:]).to(q.dtype))
