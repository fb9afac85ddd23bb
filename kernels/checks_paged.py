"""Input checks of the paged kernels.ops entry points: a step's metadata, slot mapping, fp8 scales and window.

Each raises a ValueError naming the value and the fix, before any kernel runs, so neither backend ever reads
a block-table entry it should not or writes a slot twice (on a GPU that would be a silent out-of-bounds read
or a race). `check_step` validates one step for kernels.ops.plan_attention; its data-dependent checks (offsets,
lengths, the block-table entries that will be read, the slots, the scales' values) share one device read, or,
when the caller hands in the Python lists it made the tensors from (`HostStep`, as the engine's step builder
does), run on those lists: the same checks and errors, and no read back but an fp8 cache's scales.
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
    check_tensor,
)
from kernels.fp8 import FP8_DTYPE


class StepCheck(NamedTuple):
    """What check_step hands the plan builder: the backend, the step's metadata read back in its one device
    read (cu_seqlens_q and seq_lens as Python lists) and whether every slot is stored (none negative)."""

    backend: str
    starts_q: list[int]
    seq_lens: list[int]
    all_slots_live: bool


class HostStep(NamedTuple):
    """The Python lists a step's metadata tensors were made from (each tensor is torch.tensor(list)): handed to
    check_step (kernels.ops.plan_attention(..., host_step=)), its checks run on them instead of a device read.

    cu_seqlens_q  [S + 1] ints;  seq_lens  [S] ints;  block_tables  S rows of max_blocks ints (padded as the
    tensor is);  slot_mapping  [T] ints, or None when the step has no slot mapping (attention only)."""

    cu_seqlens_q: list[int]
    seq_lens: list[int]
    block_tables: list[list[int]]
    slot_mapping: list[int] | None


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


# ------------------------------------------------------------------------------------------- fp8 scales
def check_kv_scale_layout(k_cache: torch.Tensor, k_scale: object, v_scale: object, device: torch.device) -> None:
    """fp8 caches need both scales (float32 tensors on `device`, one per layer or one per KV head); others none.

    No device read: the values are checked by `kv_scales_bad` (0 is allowed: not calibrated yet)."""
    num_kv_heads = k_cache.shape[2]
    if k_cache.dtype != FP8_DTYPE:
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
                f"[{num_kv_heads}]>, the scale the cache is quantized with (stored value = x / {name}; a scale "
                "holding 0 is set by the first store_kv)"
            )
        if not isinstance(s, torch.Tensor) or s.dtype != torch.float32:
            raise ValueError(f"{name} must be a float32 torch.Tensor, got {getattr(s, 'dtype', type(s).__name__)}")
        if s.device != device:
            raise ValueError(f"{name} is on {s.device} but the cache is on {device}; move {name} to {device}")
        if s.numel() != 1 and tuple(s.shape) != (num_kv_heads,):
            raise ValueError(
                f"{name} has shape {tuple(s.shape)}; pass one scale per layer (shape [] or [1]) or one per "
                f"KV head (shape [{num_kv_heads}])"
            )


def kv_scales_bad(k_scale: torch.Tensor, v_scale: torch.Tensor) -> torch.Tensor:
    """0-D bool tensor, True when a scale is negative, NaN or infinite (0, not calibrated yet, is fine): no sync."""
    both = torch.cat([k_scale.reshape(-1), v_scale.reshape(-1)])
    return ~(torch.isfinite(both) & (both >= 0)).all()


def raise_bad_scales(k_scale: torch.Tensor, v_scale: torch.Tensor) -> None:
    """The ValueError for scales `kv_scales_bad` refused."""
    values = torch.cat([k_scale.reshape(-1), v_scale.reshape(-1)]).tolist()
    raise ValueError(
        f"k_scale / v_scale hold {values}; scales must be finite and >= 0 (0 means not calibrated yet: "
        "store_kv sets it from the first values it writes)"
    )


def check_kv_scales(k_cache: torch.Tensor, k_scale: object, v_scale: object, device: torch.device) -> None:
    """check_kv_scale_layout, then the scales' values (one device read)."""
    check_kv_scale_layout(k_cache, k_scale, v_scale, device)
    if k_scale is not None and bool(kv_scales_bad(k_scale, v_scale)):
        raise_bad_scales(k_scale, v_scale)


def check_triton_store_scales(k_scale: torch.Tensor | None, v_scale: torch.Tensor | None) -> None:
    """The Triton store takes one scale per layer; per-KV-head scales are the torch backend's."""
    for name, s in (("k_scale", k_scale), ("v_scale", v_scale)):
        if s is not None and s.numel() != 1:
            raise ValueError(
                f"{name} has shape {tuple(s.shape)} but the Triton store_kv takes one scale per layer (shape [] "
                "or [1]); pass one scale per layer, or backend='torch' for per-KV-head scales"
            )


# ------------------------------------------------------------------------------------------------ slots
def check_slot_tensor(slot_mapping: object, device: torch.device, other: str) -> torch.Tensor:
    """slot_mapping is a 1-D int32 / int64 tensor on `device` (the device of `other`, named in the error)."""
    slot_mapping = check_tensor("slot_mapping", slot_mapping, 1, "int32/int64 [num_tokens]")
    if slot_mapping.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"slot_mapping has dtype {slot_mapping.dtype}; pass slot_mapping.to(torch.int64)")
    if slot_mapping.device != device:
        raise ValueError(f"slot_mapping is on {slot_mapping.device} but {other} is on {device}; move it to {device}")
    return slot_mapping


def slot_stats(slot_mapping: torch.Tensor) -> torch.Tensor:
    """int64 [3] on the mapping's device, no sync: the largest slot, a live slot written twice (-1 if none) and
    the number of skipped (negative) slots. One sort: duplicates are neighbours."""
    if slot_mapping.numel() == 0:
        return torch.tensor([-1, -1, 0], device=slot_mapping.device)
    ordered = slot_mapping.long().sort().values
    twice = torch.where((ordered[1:] == ordered[:-1]) & (ordered[1:] >= 0), ordered[1:], -1)
    twice = twice.max() if twice.numel() else ordered.new_full((), -1)
    return torch.stack([ordered[-1], twice, (ordered < 0).sum()])


def slot_stats_host(slots: list[int]) -> list[int]:
    """slot_stats of a host list: [largest slot, largest live slot written twice (-1 if none), skipped slots]."""
    if not slots:
        return [-1, -1, 0]
    twice = -1
    if len(set(slots)) != len(slots):
        ordered = sorted(slots)
        twice = max((b for a, b in zip(ordered[:-1], ordered[1:], strict=True) if a == b and b >= 0), default=-1)
    skipped = sum(1 for s in slots if s < 0) if min(slots) < 0 else 0
    return [max(slots), twice, skipped]


def check_slots(stats: list[int], num_blocks: int, block_size: int) -> bool:
    """Every live slot names a cache slot and none is written twice; returns whether no slot is skipped."""
    largest, twice, skipped = stats
    num_slots = num_blocks * block_size
    if largest >= num_slots:
        raise ValueError(
            f"slot_mapping holds slot {largest} but the cache has {num_blocks} blocks x {block_size} = "
            f"{num_slots} slots; slots must be < {num_slots} (or negative to skip)"
        )
    if twice >= 0:
        raise ValueError(f"slot_mapping writes the same slot twice (slot {twice}); each new token needs its own slot")
    return skipped == 0


def check_store(
    k: object, v: object, k_cache: object, v_cache: object, slot_mapping: object, backend: str, k_scale, v_scale
) -> tuple[str, bool]:
    """Validate store_kv's inputs (matching shapes, one in-range slot per token, none twice, the fp8 scales) in
    one device read; returns the backend and whether every slot is stored (none negative)."""
    k = check_tensor("k", k, 3, "[num_tokens, num_kv_heads, head_dim]")
    v = check_tensor("v", v, 3, "[num_tokens, num_kv_heads, head_dim]")
    k_cache, v_cache = check_cache(k_cache, v_cache)
    if k_cache.dtype == FP8_DTYPE:  # float K/V quantized into an fp8 cache
        check_same("k, v", [k, v])
        if v_cache.dtype != k_cache.dtype or {k_cache.device, v_cache.device} != {k.device}:
            raise ValueError(
                f"k_cache is {k_cache.dtype} on {k_cache.device}, v_cache {v_cache.dtype} on {v_cache.device}; "
                f"both must be float8_e4m3fn on k's device ({k.device})"
            )
    else:
        check_same("k, v, k_cache, v_cache", [k, v, k_cache, v_cache])
    if k.shape != v.shape:
        raise ValueError(f"k has shape {tuple(k.shape)} but v has {tuple(v.shape)}; they must match")
    num_blocks, block_size, num_kv_heads, head_dim = k_cache.shape
    if k.shape[1:] != (num_kv_heads, head_dim):
        raise ValueError(
            f"k rows are [{k.shape[1]}, {k.shape[2]}] (heads, head_dim) but the cache holds "
            f"[{num_kv_heads}, {head_dim}]; they must match"
        )
    check_kv_scale_layout(k_cache, k_scale, v_scale, k.device)
    slot_mapping = check_slot_tensor(slot_mapping, k.device, "k")
    if slot_mapping.shape[0] != k.shape[0]:
        raise ValueError(f"slot_mapping has {slot_mapping.shape[0]} slots but k has {k.shape[0]} tokens; give one each")
    backend = resolve_backend(backend, k.device)
    if backend == "triton":
        check_last_stride(k=k, v=v, k_cache=k_cache, v_cache=v_cache)
        check_triton_store_scales(k_scale, v_scale)
    parts = [slot_stats(slot_mapping)]
    if k_scale is not None:
        parts.append(kv_scales_bad(k_scale, v_scale).long().view(1))
    values = torch.cat(parts).tolist()  # the one device read
    all_live = check_slots(values[:3], num_blocks, block_size)
    if k_scale is not None and values[3]:
        raise_bad_scales(k_scale, v_scale)
    return backend, all_live


# ------------------------------------------------------------------------------------------------- step
def check_window(sliding_window: object, causal: bool) -> int | None:
    """None (full attention) or a positive int window, which needs causal attention."""
    if sliding_window is None:
        return None
    if isinstance(sliding_window, bool) or not isinstance(sliding_window, int) or sliding_window < 1:
        raise ValueError(f"sliding_window={sliding_window!r} must be a positive int (tokens) or None for no window")
    if not causal:
        raise ValueError(f"sliding_window={sliding_window} needs causal=True (Mistral's causal window)")
    return sliding_window


def check_cache_for_queries(
    k_cache: object, v_cache: object, num_heads: object, q_dtype: object
) -> tuple[torch.Tensor, torch.Tensor]:
    """The caches hold q_dtype (or fp8) values in heads that num_heads query heads can share (GQA)."""
    k_cache, v_cache = check_cache(k_cache, v_cache)
    if v_cache.device != k_cache.device:
        raise ValueError(
            f"k_cache is on {k_cache.device} but v_cache on {v_cache.device}; keep both caches on one device"
        )
    if q_dtype not in FLOAT_DTYPES:
        raise ValueError(f"q has dtype {q_dtype}; use float32, float16 or bfloat16")
    if k_cache.dtype != v_cache.dtype or k_cache.dtype not in (q_dtype, FP8_DTYPE):
        raise ValueError(
            f"q, k_cache, v_cache have dtypes {q_dtype}, {k_cache.dtype}, {v_cache.dtype}; the caches must both "
            f"be {q_dtype} (q's dtype) or both torch.float8_e4m3fn with k_scale / v_scale"
        )
    if isinstance(num_heads, bool) or not isinstance(num_heads, int):
        raise ValueError(f"num_heads={num_heads!r} must be a Python int (q.shape[1], the query heads)")
    check_heads(num_heads, k_cache.shape[2], k_cache.shape[3], kv_name="k_cache")
    return k_cache, v_cache


def check_queries(q: object, k_cache: object, v_cache: object) -> None:
    """q is a float [total_q, Hq, D] tensor on the caches' device with their head dim (the rest: check_step)."""
    q = check_tensor("q", q, 3, "[total_q, num_heads, head_dim]")
    k_cache, v_cache = check_cache(k_cache, v_cache)
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}; move it to {q.device}")
    if q.dtype not in FLOAT_DTYPES:
        raise ValueError(f"q has dtype {q.dtype}; use float32, float16 or bfloat16")
    if q.shape[2] != k_cache.shape[3]:
        raise ValueError(f"q has head_dim {q.shape[2]} but k_cache has {k_cache.shape[3]}; they must match")


def check_host(host: object, num_seqs: int) -> tuple[list[int], list[int]] | None:
    """None, or (cu_seqlens_q, seq_lens) as two lists of ints: the caller's copies of this step's metadata."""
    if host is None:
        return None
    ok = isinstance(host, (tuple, list)) and len(host) == 2 and all(isinstance(h, (list, tuple)) for h in host)
    if not ok or len(host[0]) != num_seqs + 1 or len(host[1]) != num_seqs:
        raise ValueError(
            "host must be (cu_seqlens_q.tolist(), seq_lens.tolist()) of this step: two lists of "
            f"{num_seqs + 1} and {num_seqs} ints, or None"
        )
    return list(host[0]), list(host[1])


def check_host_step(
    host_step: object,
    cu: torch.Tensor,
    seq_lens: torch.Tensor,
    block_tables: torch.Tensor,
    slot_mapping: torch.Tensor | None,
) -> HostStep | None:
    """None, or a HostStep whose lists have the shapes of the step's tensors (their values are the caller's
    word: the lists the tensors were made from)."""
    if host_step is None:
        return None
    num_seqs, width = block_tables.shape
    ok = isinstance(host_step, tuple) and len(host_step) == 4
    if ok:
        cu_l, lens_l, tables_l, slots_l = host_step
        ok = (
            isinstance(cu_l, list)
            and isinstance(lens_l, list)
            and isinstance(tables_l, list)
            and len(cu_l) == cu.numel()
            and len(lens_l) == seq_lens.shape[0]
            and len(tables_l) == num_seqs
            and all(isinstance(row, list) and len(row) == width for row in tables_l)
            and (
                slots_l is None
                if slot_mapping is None
                else isinstance(slots_l, list) and len(slots_l) == slot_mapping.shape[0]
            )
        )
    if not ok:
        raise ValueError(
            "host_step must be HostStep(cu_seqlens_q.tolist(), seq_lens.tolist(), block_tables.tolist(), "
            "slot_mapping.tolist() or None) of this step: the lists the tensors were made from, or None"
        )
    return HostStep(*host_step)


def check_step(
    cu_seqlens_q: object,
    seq_lens: object,
    block_tables: object,
    max_seqlen_q: object,
    slot_mapping: object,
    k_cache: object,
    v_cache: object,
    num_heads: object,
    q_dtype: object,
    causal: object,
    sliding_window: object,
    k_scale: object,
    v_scale: object,
    backend: str,
    host: object = None,
    total_q: int | None = None,
    host_step: object = None,
) -> StepCheck:
    """Validate one step's metadata, slot mapping (None: attention only), cache layout and fp8 scales.

    The data-dependent checks share one device read. total_q: the packed query count when the caller has q
    (cu_seqlens_q must end there); host: the caller's lists of cu_seqlens_q and seq_lens, checked against it.
    host_step: a HostStep, the lists the metadata tensors were made from: the same checks run on them, with
    no device read but an fp8 cache's scales (host must then be None).
    """
    k_cache, v_cache = check_cache_for_queries(k_cache, v_cache, num_heads, q_dtype)
    device = k_cache.device
    num_blocks, block_size, _, _ = k_cache.shape
    if not isinstance(causal, bool):
        raise ValueError(f"causal={causal!r} must be True or False")
    window = check_window(sliding_window, causal)
    check_kv_scale_layout(k_cache, k_scale, v_scale, device)
    cu = check_cu_tensor("cu_seqlens_q", cu_seqlens_q, device)
    num_seqs = cu.numel() - 1
    seq_lens = check_int_tensor("seq_lens", seq_lens, 1, "int32 [num_seqs]", device, num_seqs)
    block_tables = check_int_tensor(
        "block_tables", block_tables, 2, "int32 [num_seqs, max_blocks_per_seq]", device, num_seqs
    )
    if slot_mapping is not None:
        slot_mapping = check_slot_tensor(slot_mapping, device, "the cache")
    host = check_host(host, num_seqs)
    host_step = check_host_step(host_step, cu, seq_lens, block_tables, slot_mapping)
    if host is not None and host_step is not None:
        raise ValueError("pass host or host_step, not both (host_step holds host's lists)")
    backend = resolve_backend(backend, device)
    if backend == "triton":
        check_last_stride(k_cache=k_cache, v_cache=v_cache)
    if host_step is None:
        parts = [
            cu.long(),
            seq_lens.long(),
            first_read_block_bad(cu, seq_lens, block_tables, num_blocks, block_size, window),
        ]
        if slot_mapping is not None:
            parts.append(slot_stats(slot_mapping))
        if k_scale is not None:
            parts.append(kv_scales_bad(k_scale, v_scale).long())
        values = torch.cat([p.view(-1) for p in parts]).tolist()  # the one device read
        starts, lens = values[: num_seqs + 1], values[num_seqs + 1 : 2 * num_seqs + 1]
        first, rest = values[2 * num_seqs + 1], values[2 * num_seqs + 2 :]
    else:  # the same values from the caller's lists: no device read but the scales'
        starts, lens = list(host_step.cu_seqlens_q), list(host_step.seq_lens)
        first = first_read_block_bad_host(starts, lens, host_step.block_tables, num_blocks, block_size, window)
        rest = [] if slot_mapping is None else slot_stats_host(host_step.slot_mapping)
        if k_scale is not None:
            rest.append(int(kv_scales_bad(k_scale, v_scale)))
    if host is not None and host != (starts, lens):
        raise ValueError(
            "host holds other lengths than cu_seqlens_q / seq_lens on the device; pass "
            "host=(cu_seqlens_q.tolist(), seq_lens.tolist()) of this very step, or host=None"
        )
    check_offsets("cu_seqlens_q", starts, starts[-1] if total_q is None else total_q)
    check_max_seqlen("max_seqlen_q", max_seqlen_q, starts)
    check_lengths(starts, lens, block_tables.shape[1] * block_size)
    if first < block_tables.numel():
        seq, col = divmod(first, block_tables.shape[1])
        entry = int(block_tables[seq, col]) if host_step is None else host_step.block_tables[seq][col]
        raise ValueError(
            f"block_tables[{seq}, {col}] = {entry} is outside the cache's {num_blocks} "
            f"blocks; entries of blocks the sequence's queries read (from the block holding its first query's "
            f"window start to its last token) must be in [0, {num_blocks})"
        )
    all_live = True
    if slot_mapping is not None:
        if slot_mapping.shape[0] != starts[-1]:
            raise ValueError(
                f"slot_mapping has {slot_mapping.shape[0]} slots but cu_seqlens_q packs {starts[-1]} query "
                "tokens; give one slot per new token (negative: not stored)"
            )
        all_live = check_slots(rest[:3], num_blocks, block_size)
    if k_scale is not None and rest[-1]:
        raise_bad_scales(k_scale, v_scale)
    return StepCheck(backend, starts, lens, all_live)


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
    if block_tables.numel() == 0:
        return torch.zeros((), dtype=torch.long, device=device)
    lens = seq_lens.long()
    len_q = (cu[1:] - cu[:-1]).long()
    first = torch.zeros_like(lens) if window is None else (lens - len_q - window + 1).clamp(min=0) // block_size
    last = torch.where(len_q > 0, (lens + block_size - 1) // block_size, 0)
    cols = torch.arange(block_tables.shape[1], device=device)[None, :]
    read = (cols >= first[:, None]) & (cols < last[:, None])
    bad = read & ((block_tables < 0) | (block_tables >= num_blocks))
    flat = torch.arange(bad.numel(), device=device)
    return torch.where(bad.flatten(), flat, bad.numel()).min()


def first_read_block_bad_host(
    starts: list[int],
    lens: list[int],
    tables: list[list[int]],
    num_blocks: int,
    block_size: int,
    window: int | None,
) -> int:
    """first_read_block_bad of the host lists: the flat index of the first entry a sequence reads that names
    no cache block (rows x columns when there is none); the same columns, clamped to the table."""
    width = len(tables[0]) if tables else 0
    if width == 0 or (min(map(min, tables)) >= 0 and max(map(max, tables)) < num_blocks):
        return len(tables) * width  # every entry names a cache block, so every entry read does
    for i, (row, seq_len) in enumerate(zip(tables, lens, strict=True)):
        len_q = starts[i + 1] - starts[i]
        if len_q <= 0:
            continue
        lo = 0 if window is None else max(0, seq_len - len_q - window + 1) // block_size
        hi = min(width, (seq_len + block_size - 1) // block_size)
        if hi <= lo:
            continue
        read = row[lo:hi]
        if min(read) < 0 or max(read) >= num_blocks:
            col = next(c for c in range(lo, hi) if not 0 <= row[c] < num_blocks)
            return i * width + col
    return len(tables) * width


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
