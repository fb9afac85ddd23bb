"""Input checks of the paged kernels.ops entry points (block tables, lengths, fp8 scales, sliding windows).

Each raises a ValueError naming the value and the fix, before any kernel runs, so neither backend ever reads
a block-table entry it should not (on a GPU that would be a silent out-of-bounds read). The data-dependent
checks of one call share one device sync.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from kernels.backend import resolve_backend
from kernels.checks import (
    FLOAT_DTYPES,
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

FP8_DTYPES = (torch.float8_e4m3fn,)


class VarlenPlan(NamedTuple):
    """What check_paged_varlen hands the dispatcher: the softmax scale, the backend, and the step's metadata
    read back once (cu_seqlens_q and seq_lens as Python lists) for the torch twin."""

    scale: float
    backend: str
    starts_q: list[int]
    seq_lens: list[int]


def check_int_tensor(name: str, t: object, ndim: int, layout: str, device: torch.device, rows: int) -> torch.Tensor:
    """An int32 tensor of `ndim` dims on `device` with one row per sequence."""
    t = check_tensor(name, t, ndim, layout)
    if t.dtype != torch.int32:
        raise ValueError(f"{name} has dtype {t.dtype}; pass {name}.to(torch.int32)")
    if t.device != device:
        raise ValueError(f"{name} is on {t.device} but q is on {device}; move {name} to {device}")
    if t.shape[0] != rows:
        raise ValueError(f"{name} has {t.shape[0]} rows but there are {rows} sequences; give one row per sequence")
    return t


def check_block_tables(block_tables: torch.Tensor, seq_lens: torch.Tensor, num_blocks: int, block_size: int) -> None:
    """Lengths fit their table rows and every table entry a sequence uses names a cache block (one sync)."""
    device = block_tables.device
    capacity = block_tables.shape[1] * block_size
    # Only the blocks a sequence actually uses must be valid; padding entries past them are never read.
    blocks_used = (seq_lens.long() + block_size - 1) // block_size  # [num_seqs]
    used = torch.arange(block_tables.shape[1], device=device)[None, :] < blocks_used[:, None]
    bad = used & ((block_tables < 0) | (block_tables >= num_blocks))  # [num_seqs, max_blocks_per_seq]
    first_bad = torch.where(bad.flatten(), torch.arange(bad.numel(), device=device), bad.numel()).min()
    lo, hi, first = torch.stack([seq_lens.min().long(), seq_lens.max().long(), first_bad]).tolist()  # one sync
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


def check_paged(
    q: object, k_cache: object, v_cache: object, block_tables: object, seq_lens: object, scale: object, backend: str
) -> tuple[float, str]:
    """Validate paged_attention's inputs (one device sync for the data-dependent checks); returns scale, backend."""
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
    if num_seqs:
        check_block_tables(block_tables, seq_lens, num_blocks, block_size)
    backend = resolve_backend(backend, q.device)
    if backend == "triton":
        check_last_stride(q=q, k_cache=k_cache, v_cache=v_cache)
    return scale, backend


def check_kv_scales(k_cache: torch.Tensor, k_scale: object, v_scale: object, device: torch.device) -> None:
    """fp8 caches need both scales (float32, one per layer or one per KV head, finite and > 0); others none."""
    num_kv_heads = k_cache.shape[2]
    if k_cache.dtype not in FP8_DTYPES:
        for name, s in (("k_scale", k_scale), ("v_scale", v_scale)):
            if s is not None:
                raise ValueError(
                    f"{name} was given but the cache is {k_cache.dtype}; scales are only for float8_e4m3fn "
                    f"caches: drop {name} (or store the cache as torch.float8_e4m3fn)"
                )
        return
    for name, s in (("k_scale", k_scale), ("v_scale", v_scale)):
        if s is None:
            raise ValueError(
                f"the cache is {k_cache.dtype} but {name} is None; pass {name}=<float32 tensor, shape [] or "
                f"[{num_kv_heads}]>, the scale the cache was quantized with (stored value = x / {name})"
            )
        if not isinstance(s, torch.Tensor) or s.dtype != torch.float32:
            raise ValueError(f"{name} must be a float32 torch.Tensor, got {getattr(s, 'dtype', type(s).__name__)}")
        if s.device != device:
            raise ValueError(f"{name} is on {s.device} but q is on {device}; move {name} to {device}")
        if s.numel() != 1 and tuple(s.shape) != (num_kv_heads,):
            raise ValueError(
                f"{name} has shape {tuple(s.shape)}; pass one scale per layer (shape [] or [1]) or one per "
                f"KV head (shape [{num_kv_heads}])"
            )
    both = torch.cat([k_scale.reshape(-1), v_scale.reshape(-1)])
    if not bool(torch.isfinite(both).all() & (both > 0).all()):
        raise ValueError(f"k_scale / v_scale hold {both.tolist()}; scales must be finite and > 0")


def check_window(sliding_window: object, causal: bool) -> int | None:
    """None (full attention) or a positive int window, which needs causal attention."""
    if sliding_window is None:
        return None
    if isinstance(sliding_window, bool) or not isinstance(sliding_window, int) or sliding_window < 1:
        raise ValueError(f"sliding_window={sliding_window!r} must be a positive int (tokens) or None for no window")
    if not causal:
        raise ValueError(f"sliding_window={sliding_window} needs causal=True (Mistral's causal window)")
    return sliding_window


def check_paged_varlen(
    q: object,
    k_cache: object,
    v_cache: object,
    cu_seqlens_q: object,
    seq_lens: object,
    block_tables: object,
    max_seqlen_q: object,
    causal: object,
    scale: object,
    sliding_window: object,
    backend: str,
    k_scale: object,
    v_scale: object,
) -> VarlenPlan:
    """Validate paged_varlen_attention's inputs; the data-dependent checks share one device sync."""
    q = check_tensor("q", q, 3, "[total_q, num_heads, head_dim]")
    k_cache, v_cache = check_cache(k_cache, v_cache)
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}; move it to {q.device}")
    if q.dtype not in FLOAT_DTYPES:
        raise ValueError(f"q has dtype {q.dtype}; use float32, float16 or bfloat16")
    if k_cache.dtype != v_cache.dtype or k_cache.dtype not in (q.dtype, *FP8_DTYPES):
        raise ValueError(
            f"q, k_cache, v_cache have dtypes {q.dtype}, {k_cache.dtype}, {v_cache.dtype}; the caches must both "
            f"be {q.dtype} (q's dtype) or both torch.float8_e4m3fn with k_scale / v_scale"
        )
    num_blocks, block_size, num_kv_heads, head_dim = k_cache.shape
    if q.shape[2] != head_dim:
        raise ValueError(f"q has head_dim {q.shape[2]} but k_cache has {head_dim}; they must match")
    check_heads(q.shape[1], num_kv_heads, head_dim, kv_name="k_cache")
    if not isinstance(causal, bool):
        raise ValueError(f"causal={causal!r} must be True or False")
    window = check_window(sliding_window, causal)
    scale = check_scale(scale, head_dim)
    check_kv_scales(k_cache, k_scale, v_scale, q.device)
    cu = check_cu_tensor("cu_seqlens_q", cu_seqlens_q, q.device)
    num_seqs = cu.numel() - 1
    seq_lens = check_int_tensor("seq_lens", seq_lens, 1, "int32 [num_seqs]", q.device, num_seqs)
    block_tables = check_int_tensor(
        "block_tables", block_tables, 2, "int32 [num_seqs, max_blocks_per_seq]", q.device, num_seqs
    )
    first_bad = first_read_block_bad(cu, seq_lens, block_tables, num_blocks, block_size, window)
    host = torch.cat([cu.long(), seq_lens.long(), first_bad.view(1)]).tolist()  # the one sync
    starts, lens, first = host[: num_seqs + 1], host[num_seqs + 1 : -1], host[-1]
    check_offsets("cu_seqlens_q", starts, q.shape[0])
    check_max_seqlen("max_seqlen_q", max_seqlen_q, starts)
    check_lengths(starts, lens, block_tables.shape[1] * block_size)
    if first < block_tables.numel():
        seq, col = divmod(first, block_tables.shape[1])
        raise ValueError(
            f"block_tables[{seq}, {col}] = {int(block_tables[seq, col])} is outside the cache's {num_blocks} "
            f"blocks; entries of blocks the sequence's queries read (from the block holding its first query's "
            f"window start to its last token) must be in [0, {num_blocks})"
        )
    backend = resolve_backend(backend, q.device)
    if backend == "triton":
        check_last_stride(q=q, k_cache=k_cache, v_cache=v_cache)
    return VarlenPlan(scale, backend, starts, lens)


def first_read_block_bad(
    cu: torch.Tensor,
    seq_lens: torch.Tensor,
    block_tables: torch.Tensor,
    num_blocks: int,
    block_size: int,
    window: int | None,
) -> torch.Tensor:
    """Flat index of the first block-table entry that a sequence reads but that names no cache block
    (block_tables.numel() when there is none), as a 0-D int64 tensor: no sync here.

    Sequence i reads columns [first_block, last_block) with first_block = max(0, p0 - window + 1) //
    block_size (0 without a window), p0 = seq_lens[i] - len_q the position of its first query, and
    last_block = ceil(seq_lens[i] / block_size); a sequence with no queries reads nothing. Lengths that
    do not fit are reported by check_lengths, so columns are clamped to the table here.
    """
    device = block_tables.device
    lens = seq_lens.long()
    len_q = (cu[1:] - cu[:-1]).long()
    first = torch.zeros_like(lens) if window is None else (lens - len_q - window + 1).clamp(min=0) // block_size
    last = torch.where(len_q > 0, (lens + block_size - 1) // block_size, 0)
    cols = torch.arange(block_tables.shape[1], device=device)[None, :]
    read = (cols >= first[:, None]) & (cols < last[:, None])
    bad = read & ((block_tables < 0) | (block_tables >= num_blocks))
    flat = torch.arange(bad.numel(), device=device)
    return torch.where(bad.flatten(), flat, bad.numel()).min() if bad.numel() else torch.zeros((), dtype=torch.long)


def check_lengths(starts: list[int], lens: list[int], capacity: int) -> None:
    """Each sequence's queries are its last tokens: 0 <= len_q <= seq_len <= the table row's capacity."""
    for i, seq_len in enumerate(lens):
        len_q = starts[i + 1] - starts[i]
        if seq_len < 0:
            raise ValueError(f"seq_lens[{i}] = {seq_len} is negative; lengths must be >= 0")
        if len_q > seq_len:
            raise ValueError(
                f"sequence {i} has {len_q} queries but seq_lens[{i}] = {seq_len}; queries are the sequence's last "
                "tokens, so seq_lens must count them (store their K/V first, then attend)"
            )
        if seq_len > capacity:
            raise ValueError(
                f"seq_lens[{i}] = {seq_len} but a block table row holds {capacity} slots; widen block_tables "
                "or shorten the sequence"
            )
