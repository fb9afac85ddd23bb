"""Decode rows of the paged varlen torch twin: one query per sequence over all of its paged keys, in plain torch.

A helper of kernels/paged_varlen_attention_torch.py (its decode rows: len_q = 1, no sliding window, a cache in
q's dtype), not a kernel of its own. Torch has no attention op that reads through a block table
(PagedAttention, Kwon et al., SOSP 2023). In fp32 on CPU two sparse ops read the cache rows in place instead,
nothing gathered: the scores are `torch.sparse.sampled_addmm` (one dot product per query row and token, at the
token's cache row) and the values' weighted sum is `F.embedding_bag` (mode "sum", the softmax weights as
per-sample weights). K/V are never repeated for grouped-query attention (Ainslie et al., 2023): query head
j of a KV group reads that group's rows. Other dtypes and devices gather K/V first, chunk by chunk when the
batch is large, each chunk attended while still in cache and merged by its log-sum-exp (the split-K of
flash-decoding, Dao et al., 2023). What depends only on the step is a TokenSlots index (`token_slots`), built
once per step inside the step's VarlenIndex.
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

import torch
import torch.nn.functional as F

# torch warns once per process, at its first sparse CSR tensor, that CSR support is in beta: spend it here.
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    torch.sparse_csr_tensor(torch.tensor([0]), torch.tensor([0])[:0], torch.zeros(0), (0, 0), check_invariants=False)

# The gather path's target bytes of gathered K (and of V) per chunk: big enough to amortize per-op costs, small
# enough that the copy is still in cache when SDPA reads it (at 8 x 1024 tokens x 8 KV heads x 128 fp32 on a
# 2-core Xeon, paged/contiguous was 1.36-1.40 with 4 MiB, 1.20-1.24 with 8 MiB, 1.45 with 16 MiB). Not kept
# there, no gain: gathering whole blocks, chunk cuts at sequence ends, sorting sequences by length.
TORCH_CHUNK_BYTES = 8 << 20

# Returns (output, logsumexp); the log-sum-exp lets chunk results merge exactly. A private op, so the torch
# path falls back to one whole gather when a torch build lacks it.
_FLASH_CPU = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)

# Up to this many padding entries (query rows x padded positions) in the [S * Hq, max_len] score matrix the
# sparse path scores and sums the padding too (a padding position re-reads its row's first token, already in
# cache) and masks it; above it only the real tokens are scored and summed, for a costlier step index (two
# more per-sequence slicings) and two index ops more per layer (the scores padded for the softmax, the
# weights compacted back). Measured at one thread: at bench.paged_decode's shape (8 sequences of 278-1024
# tokens, 32 heads of 128: 99k padding entries, 38% of the matrix) the real tokens alone took 0.71x the
# padded attention; with the demo model (4 layers, 4 / 2 heads of 64, 12 sequences of 20-200 tokens: 4-12k
# entries) they made generate 12% slower, the per-step index costing more than the 2-14 us a layer saved.
# (Before, the real-token path still summed the padded values and was taken only above 75% padding.)
SPARSE_MAX_PADDING_ENTRIES = 32768


class SparseIndex(NamedTuple):
    """The sparse path's index for one head layout (R = S * Hq query rows; row s * Hq + j is query head j of
    sequence s and reads cache row slot * Hkv + j // G of the cache's flat [num_slots * Hkv, D] view).

    crow int64 [R + 1], cols int64 [nnz], zeros float32 [nnz]: the CSR pattern, the padded rows or (with pad)
    the real tokens only; rows int64 [nnz], offsets int64 [R]: the cache rows the values are summed over
    (the pattern's own columns and row starts); pad int64 [R * max_len]: padded position -> real score, or
    None; real int64 [nnz]: real score -> padded position (pad's inverse), or None; bias float32
    [S, 1, max_len]: 0 at real tokens, -inf at padding, or None when there is none; patterns: the CSR
    pattern tensor per score-matrix size, built by the step's first layer and reused by the others (every
    layer's cache has the same number of rows)."""

    num_heads: int
    num_kv_heads: int
    crow: torch.Tensor
    cols: torch.Tensor
    zeros: torch.Tensor
    rows: torch.Tensor
    offsets: torch.Tensor
    pad: torch.Tensor | None
    real: torch.Tensor | None
    bias: torch.Tensor | None
    patterns: dict[tuple[int, int], torch.Tensor]


class TokenSlots(NamedTuple):
    """Per-step gather index of the decode rows: the same for every layer, so the step's plan builds it once.

    slots  int64 [num_seqs, max_len]  cache slot of every token position (padding re-reads the first token)
    bias   float32 [num_seqs, 1, 1, max_len]  0 at real tokens, -inf at padding (SDPA's additive mask)
    max_len int                       max(seq_lens), the padded context length
    block_size int                    the cache's block size the slots were computed for
    sparse    SparseIndex | None      the sparse path's index (built for a head layout: `heads`), else None
    """

    slots: torch.Tensor
    bias: torch.Tensor
    max_len: int
    block_size: int
    sparse: SparseIndex | None = None


def token_slots(
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    block_size: int,
    heads: tuple[int, int] | None = None,
    lens: list[int] | None = None,
) -> TokenSlots:
    """The gather index of a decode batch whose sequences all hold at least one token (one device read of
    seq_lens unless `lens` holds them); reusable by every layer. heads: the (Hq, Hkv) of the layers that will
    use it to build the sparse path's index too (kernels.ops.plan_attention passes them where
    `sparse_decode_applies`); None: the gather path."""
    lens = seq_lens.tolist() if lens is None else lens
    max_len, device = max(lens), block_tables.device
    num_blocks = -(-max_len // block_size)
    offsets = torch.arange(block_size, device=device)
    # [S, blocks, block_size] -> [S, max_len]: the first slot of each block plus the offsets within it.
    slots = (block_tables[:, :num_blocks, None].long() * block_size + offsets).flatten(1)
    if num_blocks * block_size != max_len:
        slots = slots[:, :max_len]
    # The additive mask SDPA would otherwise build in every call (i.e. in every layer): 0 at real tokens.
    bias = torch.zeros(len(lens), 1, 1, max_len, device=device)  # [S, 1, 1, max_len] float32
    if min(lens) < max_len:
        valid = torch.arange(max_len, device=device) < seq_lens[:, None]  # [num_seqs, max_len]
        # Positions past seq_len re-read the sequence's first token: a finite value that the mask then hides
        # (a NaN under a -inf mask would still poison the softmax).
        slots = torch.where(valid, slots, slots[:, :1])
        bias.masked_fill_(~valid[:, None, None, :], float("-inf"))
    sparse = _sparse_index(slots, bias, seq_lens, lens, heads) if heads is not None else None
    return TokenSlots(slots, bias, max_len, block_size, sparse)


def _sparse_index(
    slots: torch.Tensor, bias: torch.Tensor, seq_lens: torch.Tensor, lens: list[int], heads: tuple[int, int]
) -> SparseIndex:
    """The SparseIndex of token_slots' padded slots [S, max_len] for (Hq, Hkv) heads."""
    num_heads, num_kv_heads = heads
    num_seqs, max_len = slots.shape
    num_rows, device = num_seqs * num_heads, slots.device
    kv_head = (torch.arange(num_heads, device=device) // (num_heads // num_kv_heads))[:, None]  # [Hq, 1]
    rows = (slots * num_kv_heads)[:, None, :] + kv_head  # [S, Hq, max_len]: row (s, j), padded
    padding = num_heads * (num_seqs * max_len - sum(lens))  # padding entries of the score matrix
    if padding <= SPARSE_MAX_PADDING_ENTRIES:  # the padded rows are the pattern; padding scores are masked
        crow = torch.arange(0, num_rows * max_len + 1, max_len, device=device)
        cols, pad, real = rows.view(-1), None, None
        row_bias = bias.view(num_seqs, 1, max_len) if padding else None
    else:
        # One slice per sequence: as fast as any mask op here, and its cost follows the tokens, not the padding.
        cols = torch.cat([rows[i, :, :n].reshape(-1) for i, n in enumerate(lens)])  # [nnz], row by row
        seq_lens = seq_lens.long()
        base = num_heads * (seq_lens.cumsum(0) - seq_lens)  # [S]: the first score of each sequence's rows
        row_start = base[:, None] + torch.arange(num_heads, device=device) * seq_lens[:, None]  # [S, Hq]
        crow = torch.cat([row_start.view(-1), torch.tensor([len(cols)], device=device)])
        # Padded position (s, j, l) -> score row_start[s, j] + min(l, len_s - 1).
        last = torch.minimum(torch.arange(max_len, device=device), seq_lens[:, None] - 1)  # [S, max_len]
        pad = (row_start[:, :, None] + last[:, None, :]).view(-1)  # [R * max_len]
        row_bias = bias.view(num_seqs, 1, max_len)
        padded = torch.arange(num_rows * max_len, device=device).view(num_seqs, num_heads, max_len)
        real = torch.cat([padded[i, :, :n].reshape(-1) for i, n in enumerate(lens)])  # [nnz], ordered as cols
    zeros = torch.zeros(cols.numel(), device=device)
    return SparseIndex(num_heads, num_kv_heads, crow, cols, zeros, cols, crow[:-1], pad, real, row_bias, {})


def decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    index: TokenSlots,
    seq_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """One query per sequence, q [S, Hq, D], over all seq_lens[s] >= 1 of its paged keys -> [S, Hq, Dv].

    index: `token_slots(block_tables, seq_lens, block_size, heads)` of these sequences; its sparse index (fp32
    on CPU, see sparse_decode_applies) reads the cache in place, otherwise K/V are gathered (in chunks merged by
    log-sum-exp when large).
    """
    if index.sparse is not None:
        if index.sparse.num_heads != q.shape[1]:
            raise ValueError(
                f"the decode index's sparse path was built for {index.sparse.num_heads} query heads but q has "
                f"{q.shape[1]}; build it with token_slots(..., heads=(q.shape[1], num_kv_heads))"
            )
        return _attend_sparse(q, k_cache, v_cache, index.sparse, scale)  # [S, Hq, Dv]
    return _attend_by_gather(q, k_cache, v_cache, index, seq_lens, scale)


def _attend_by_gather(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, index: TokenSlots, seq_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:  # fmt: skip
    """The gather path: K/V copied out of the blocks, then SDPA (in chunks merged by LSE when large)."""
    num_seqs, num_q_heads, head_dim = q.shape
    num_kv_heads, head_dim_v = k_cache.shape[2], v_cache.shape[-1]
    slots, bias = index.slots, index.bias if index.bias.dtype == q.dtype else index.bias.to(q.dtype)
    flat_k = k_cache.reshape(-1, num_kv_heads, head_dim)  # [num_slots, Hkv, D]
    flat_v = v_cache.reshape(-1, num_kv_heads, head_dim_v)  # [num_slots, Hkv, Dv]
    # GQA without repeating K/V: the query heads of one KV group become that group's query rows.
    qg = q.reshape(num_seqs, num_kv_heads, num_q_heads // num_kv_heads, head_dim)  # [S, Hkv, G, D]
    chunk = max(64, TORCH_CHUNK_BYTES // (num_seqs * num_kv_heads * head_dim * k_cache.element_size()))
    if _FLASH_CPU is None or q.device.type != "cpu" or index.max_len <= chunk:
        out = _attend_gathered(qg, flat_k, flat_v, slots, bias, scale)  # [S, Hkv, G, Dv]
    else:
        out = _attend_chunked(qg, flat_k, flat_v, slots, bias, seq_lens, scale, chunk)
    return out.reshape(num_seqs, num_q_heads, head_dim_v)


def sparse_decode_applies(q_dtype: torch.dtype, k_cache: torch.Tensor, v_cache: torch.Tensor) -> bool:
    """Whether the decode rows take the sparse path: fp32 on CPU (the dtype sampled_addmm and the embedding_bag fast
    path cover) over caches with a flat [num_slots * Hkv, D] view."""
    return (
        k_cache.device.type == "cpu"
        and q_dtype == k_cache.dtype == v_cache.dtype == torch.float32
        and k_cache.is_contiguous()
        and v_cache.is_contiguous()
    )


def _attend_sparse(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, index: SparseIndex, scale: float
) -> torch.Tensor:
    """Scores at each real token's cache row, softmax over each sequence's tokens, values summed in place."""
    num_seqs, num_heads, head_dim = q.shape
    flat_k = k_cache.view(-1, head_dim)  # [num_slots * Hkv, D]: row slot * Hkv + h
    flat_v = v_cache.view(-1, v_cache.shape[-1])
    # Columns are neither sorted nor distinct within a row (shuffled blocks, repeated padding) as CSR's
    # invariants ask: sampled_addmm's CPU kernel computes every entry on its own (the kernel tests cover both).
    size = (num_seqs * num_heads, len(flat_k))
    pattern = index.patterns.get(size)
    if pattern is None:  # the step's first layer; the others reuse it (the pattern depends only on the step)
        pattern = torch.sparse_csr_tensor(index.crow, index.cols, index.zeros, size=size, check_invariants=False)
        index.patterns[size] = pattern
    scores = torch.sparse.sampled_addmm(pattern, q.reshape(-1, head_dim), flat_k.t(), beta=0.0, alpha=scale)
    scores = scores.values()  # [nnz]: q_r . k at every real token of row r
    if index.pad is not None:
        scores = scores.index_select(0, index.pad)  # [R * max_len]: padding repeats a real score
    scores = scores.view(num_seqs, num_heads, -1)
    if index.bias is not None:
        scores = scores.add_(index.bias)  # -inf at padding
    probs = torch.softmax(scores, dim=-1).view(-1)  # padding weighs exactly 0
    if index.real is not None:
        probs = probs.index_select(0, index.real)  # [nnz]: the real tokens' weights, row by row
    out = F.embedding_bag(index.rows, flat_v, index.offsets, mode="sum", per_sample_weights=probs)
    return out.view(num_seqs, num_heads, -1)


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
