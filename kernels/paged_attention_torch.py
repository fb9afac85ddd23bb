"""Paged decode attention in plain torch: the CPU production path (and a fallback on any device).

Same contract as kernels/paged_attention.py (PagedAttention, Kwon et al., SOSP 2023). Torch has no op that
attends through a block table, so keys and values are gathered into a contiguous buffer first. Gathering a
whole batch at once then reading it back in SDPA costs two extra passes over memory; instead the tokens are
gathered chunk by chunk, each chunk attended while it is still in cache, and the chunks merged by their
log-sum-exp (the split-K of flash-decoding, Dao et al., 2023). A sequence takes part only in the chunks
that hold its tokens. Grouped-query attention (Ainslie et al., 2023) never repeats K/V: a group's query
heads act as that group's query rows.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

# Target bytes of gathered K (and of V) per chunk: big enough to amortize per-op costs, small enough that the
# gathered copy is still in cache when SDPA reads it. On a quiet 2-core Xeon (2 MiB L2 per core, large
# shared L3), at 8 sequences x 1024 tokens x 8 KV heads x 128 fp32 and 2 threads, paged/contiguous SDPA time
# was 1.36-1.40 with 4 MiB chunks, 1.20-1.24 with 8 MiB, 1.45 with 16 MiB (fewer chunks pad more: a chunk
# spans every sequence still running at its start) and 3.7 with 32 MiB (bench/paged_decode.py).
# Measured on the same box and not kept (no gain beyond the +-3% noise): gathering whole blocks instead of
# token rows (the copy is bandwidth-bound either way), chunk cuts placed at sequence ends to skip padding
# (each extra chunk costs more than the padding it saves), and sorting sequences so live rows are a prefix.
TORCH_CHUNK_BYTES = 8 << 20

# Returns (output, logsumexp); the log-sum-exp lets chunk results merge exactly. A private op, so the torch
# path falls back to one whole gather when a torch build lacks it.
_FLASH_CPU = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)


class TokenSlots(NamedTuple):
    """Per-step gather index for paged decode: the same for every layer, so a caller can build it once.

    slots  int64 [num_seqs, max_len]  cache slot of every token position (padding re-reads a real slot)
    valid  bool  [num_seqs, max_len]  which positions hold a real token
    bias   float32 [num_seqs, 1, 1, max_len]  0 at real tokens, -inf at padding (SDPA's additive mask)
    max_len int                       max(seq_lens), the padded context length
    any_empty bool                    some sequence has seq_len 0 (its output must be zeroed)
    block_size int                    the cache's block size the slots were computed for
    groups    ((rows, slots, bias), ...)  empty, or the batch cut in two by length: `rows` int64 sequence
                                      indices, `slots`/`bias` trimmed to that group's longest sequence
    """

    slots: torch.Tensor
    valid: torch.Tensor
    bias: torch.Tensor
    max_len: int
    any_empty: bool
    block_size: int
    groups: tuple[tuple[torch.Tensor, torch.Tensor, torch.Tensor], ...] = ()


# Cut a decode batch into a short and a long group when that removes at least this share of the padded
# [num_seqs, max_len] gather (two gathers and SDPA calls instead of one cost a few tens of microseconds).
SPLIT_MIN_SAVING = 0.2


def token_slots(block_tables: torch.Tensor, seq_lens: torch.Tensor, block_size: int) -> TokenSlots:
    """The gather index of a decode batch (one device read of seq_lens); reusable by every layer."""
    lens = seq_lens.tolist()
    max_len = max(max(lens, default=0), 0)
    pos = torch.arange(max_len, device=block_tables.device)  # [max_len]
    blocks = block_tables.long()[:, pos // block_size]  # [num_seqs, max_len] physical block of each position
    slots = blocks * block_size + pos % block_size
    valid = pos[None, :] < seq_lens.long()[:, None]  # [num_seqs, max_len]
    if max_len:
        # Positions past seq_len re-read the sequence's first token: a finite value that the mask then hides
        # (a NaN under a -inf mask would still poison the softmax). Empty sequences read slot 0; the caller
        # zeroes their output.
        first = torch.where(seq_lens > 0, slots[:, 0], 0)  # [num_seqs]
        slots = torch.where(valid, slots, first[:, None])
    # The additive mask SDPA would otherwise build from `valid` in every call (i.e. in every layer).
    bias = torch.zeros(valid.shape, dtype=torch.float32, device=valid.device).masked_fill_(~valid, float("-inf"))
    bias = bias[:, None, None, :]  # [S, 1, 1, max_len]
    return TokenSlots(slots, valid, bias, max_len, min(lens, default=0) <= 0, block_size, _groups(lens, slots, bias))


def _groups(
    lens: list[int], slots: torch.Tensor, bias: torch.Tensor
) -> tuple[tuple[torch.Tensor, torch.Tensor, torch.Tensor], ...]:
    """Split sequences by length into two groups when it cuts the padded gather enough; () otherwise.

    Sequences sorted by length, the cut c minimizes c * len[c-1] + (n - c) * max_len: the tokens gathered.
    """
    n = len(lens)
    if n < 4 or min(lens) <= 0:
        return ()
    order = sorted(range(n), key=lens.__getitem__)
    longest = lens[order[-1]]
    cost, cut = min((c * lens[order[c - 1]] + (n - c) * longest, c) for c in range(1, n))
    if cost > (1 - SPLIT_MIN_SAVING) * n * longest:
        return ()
    groups = []
    for rows in (order[:cut], order[cut:]):
        length = max(lens[i] for i in rows)
        index = torch.tensor(rows, device=slots.device)
        groups.append((index, slots[index, :length], bias[index, ..., :length]))
    return tuple(groups)


def paged_attention_torch(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    index: TokenSlots | None = None,
) -> torch.Tensor:
    """Plain-torch paged decode attention (any device); inputs as validated by kernels.ops.paged_attention.

    `index`: optional `token_slots(block_tables, seq_lens, block_size)` of this very batch, built once per
    step and shared by the layers (it only depends on the block tables and lengths, not on the cache).
    """
    num_seqs, num_q_heads, head_dim = q.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    head_dim_v = v_cache.shape[-1]
    if index is None:
        index = token_slots(block_tables, seq_lens, block_size)
    elif (
        index.block_size != block_size
        or index.slots.shape != (num_seqs, index.max_len)
        or index.bias.shape != (num_seqs, 1, 1, index.max_len)
    ):
        raise ValueError(
            f"index holds slots {tuple(index.slots.shape)} (block size {index.block_size}) for {num_seqs} "
            f"sequences in blocks of {block_size}; build it with token_slots(block_tables, seq_lens, block_size) "
            "of this batch"
        )
    max_len = index.max_len
    if num_seqs == 0 or max_len == 0:
        return torch.zeros(num_seqs, num_q_heads, head_dim_v, dtype=q.dtype, device=q.device)
    slots, bias = index.slots, index.bias if index.bias.dtype == q.dtype else index.bias.to(q.dtype)
    flat_k = k_cache.reshape(-1, num_kv_heads, head_dim)  # [num_slots, Hkv, D]
    flat_v = v_cache.reshape(-1, num_kv_heads, head_dim_v)  # [num_slots, Hkv, Dv]
    # GQA without repeating K/V: the query heads of one KV group become that group's query rows.
    qg = q.reshape(num_seqs, num_kv_heads, num_q_heads // num_kv_heads, head_dim)  # [S, Hkv, G, D]
    chunk = max(64, TORCH_CHUNK_BYTES // (num_seqs * num_kv_heads * head_dim * k_cache.element_size()))
    if index.groups and max_len <= chunk:
        # Short and long sequences gathered separately: less padding to copy and to attend over.
        out = qg.new_empty(*qg.shape[:3], head_dim_v)  # [S, Hkv, G, Dv]; every row is written below
        for rows, group_slots, group_bias in index.groups:
            group_bias = group_bias if group_bias.dtype == q.dtype else group_bias.to(q.dtype)
            out[rows] = _attend_gathered(qg[rows], flat_k, flat_v, group_slots, group_bias, scale)
    elif _FLASH_CPU is None or q.device.type != "cpu" or max_len <= chunk:
        out = _attend_gathered(qg, flat_k, flat_v, slots, bias, scale)  # [S, Hkv, G, Dv]
    else:
        out = _attend_chunked(qg, flat_k, flat_v, slots, bias, seq_lens, scale, chunk)
    out = out.reshape(num_seqs, num_q_heads, head_dim_v)
    if not index.any_empty:
        return out
    # Empty sequences attended to nothing (and may have read a NaN slot): their output is zeros.
    return torch.where(seq_lens[:, None, None] > 0, out, torch.zeros((), dtype=out.dtype, device=out.device))


def _gather(flat: torch.Tensor, slots: torch.Tensor, buf: torch.Tensor | None = None) -> torch.Tensor:
    """Rows of `flat` [num_slots, Hkv, D] at `slots` [S, L] -> [S, Hkv, L, D] (a transposed view).

    With `buf` (at least S * L rows), the rows are copied into its front instead of a new tensor.
    """
    num_seqs, length = slots.shape
    index = slots.reshape(-1)
    if buf is None:
        rows = flat.index_select(0, index)  # [S * L, Hkv, D]
    else:
        rows = torch.index_select(flat, 0, index, out=buf[: index.numel()])
    return rows.view(num_seqs, length, flat.shape[1], flat.shape[2]).transpose(1, 2)


def _attend_gathered(
    qg: torch.Tensor, flat_k: torch.Tensor, flat_v: torch.Tensor, slots: torch.Tensor, bias: torch.Tensor, scale: float
) -> torch.Tensor:
    """One gather of every sequence's K/V, one SDPA call under the length mask (bias) -> [S, Hkv, G, Dv]."""
    k, v = _gather(flat_k, slots), _gather(flat_v, slots)  # [S, Hkv, L, D]
    return F.scaled_dot_product_attention(qg, k, v, attn_mask=bias, scale=scale)


def _attend_chunked(
    qg: torch.Tensor,
    flat_k: torch.Tensor,
    flat_v: torch.Tensor,
    slots: torch.Tensor,
    bias: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    chunk: int,
) -> torch.Tensor:
    """Split-K over token chunks: attend to each gathered chunk while it is cache-hot, merge by log-sum-exp.

    A sequence that ends before a chunk takes no part in it: nothing is gathered or computed for it there.
    """
    num_seqs, num_kv_heads, group, _ = qg.shape
    max_len = slots.shape[1]
    starts = list(range(0, max_len, chunk))
    outs = torch.zeros(len(starts), num_seqs, num_kv_heads, group, flat_v.shape[-1], device=qg.device)
    lses = torch.full((len(starts), num_seqs, num_kv_heads, group), float("-inf"), device=qg.device)
    # One K and one V buffer reused by every chunk: a fresh multi-MiB tensor per chunk costs page faults
    # (the allocator hands big blocks back to the OS on free), which measured 7x slower than the copy itself.
    k_buf = flat_k.new_empty(num_seqs * chunk, *flat_k.shape[1:])
    v_buf = flat_v.new_empty(num_seqs * chunk, *flat_v.shape[1:])
    for i, start in enumerate(starts):
        end = min(start + chunk, max_len)
        live = (seq_lens > start).nonzero().squeeze(1)  # sequences with a token in this chunk
        rows = slice(None) if live.numel() == num_seqs else live  # a slice keeps the common case copy-free
        chunk_slots = slots[rows, start:end]
        k = _gather(flat_k, chunk_slots, k_buf)  # [live, Hkv, c, D]
        v = _gather(flat_v, chunk_slots, v_buf)
        out, lse = _FLASH_CPU(qg[rows], k, v, attn_mask=bias[rows, ..., start:end], scale=scale)
        outs[i, rows] = out.float()  # chunks merge in fp32 whatever the cache dtype
        lses[i, rows] = lse.float()  # finite: every live sequence has at least one token here
    weights = torch.softmax(lses, dim=0)  # [C, S, Hkv, G]; chunks a sequence skipped weigh 0
    return (outs * weights[..., None]).sum(dim=0).to(qg.dtype)  # [S, Hkv, G, Dv]
