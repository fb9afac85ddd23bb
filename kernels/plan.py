"""The attention plan: one step's paged metadata, validated once, and the one validation path of the paged ops.

A model step runs `store_kv` and `paged_varlen_attention` once per layer over the same metadata
(cu_seqlens_q, seq_lens, block_tables, slot_mapping) and caches of one layout. `plan_step` validates all of
it once and resolves the backend; the `AttentionPlan` it returns carries the step's tensors, so a layer
hands over only its own data: `store_kv_planned(k, v, cache, plan)` and
`paged_varlen_attention_planned(q, cache, plan, scale=...)` (kernels.ops). Those calls check, without
reading the device, what can differ per layer (`check_call`: its cache's layout, scales, q or k/v rows).
A public call without a plan builds one with these same functions (`plan_step`, or `plan_store` for a
store of slots only), so every call takes the same path. The step's values are checked on the host, in
one device read, or, with a `HostStep` (the lists a step builder made the tensors from), with none but an
fp8 cache's scales. For the torch backend the plan also holds the step's `VarlenIndex`, so no layer
rebuilds it; the Triton kernels read the metadata themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from kernels.backend import resolve_backend
from kernels.checks import (
    FLOAT_DTYPES,
    check_cache,
    check_cu_tensor,
    check_heads,
    check_int_tensor,
    check_kv_scale_layout,
    check_last_stride,
    check_lengths,
    check_max_seqlen,
    check_offsets,
    check_read_blocks,
    check_slot_tensor,
    check_slots,
    check_window,
    raise_bad_scales,
    scales_bad,
)
from kernels.fp8 import FP8_DTYPE
from kernels.paged_decode_torch import sparse_decode_applies
from kernels.paged_varlen_attention_torch import VarlenIndex, paged_varlen_index
from kernels.validate import check_int

REBUILD = (
    "build the plan with kernels.ops.plan_attention(...) from this step's metadata and a cache of this layout "
    "(every layer whose cache has the same shape, dtype, device and strides shares one plan)"
)


class KVCache(NamedTuple):
    """One layer's paged cache: K and V [num_blocks, block_size, Hkv, D] and, for an fp8 cache, their float32
    scales (shape [] / [1], or [Hkv]; 0 until the first store sets them); None for a full-precision cache.
    Any 4-tuple in this order serves (the engine's LayerKV is one)."""

    k: torch.Tensor
    v: torch.Tensor
    k_scale: torch.Tensor | None = None
    v_scale: torch.Tensor | None = None


class HostStep(NamedTuple):
    """The Python lists a step's metadata tensors were made from (each tensor is torch.tensor(list)): with them
    `plan_step` checks the step's values without reading the device (the lists are the caller's word).

    cu_seqlens_q  [S + 1] ints;  seq_lens  [S] ints;  block_tables  S rows of max_blocks ints (padded as the
    tensor is);  slot_mapping  [T] ints, or None when the step has no slot mapping (attention only)."""

    cu_seqlens_q: list[int]
    seq_lens: list[int]
    block_tables: list[list[int]]
    slot_mapping: list[int] | None


class TensorLayout(NamedTuple):
    """What a plan checks of a tensor without reading it: shape, dtype, device and strides."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device
    stride: tuple[int, ...]

    @classmethod
    def of(cls, t: torch.Tensor | None) -> TensorLayout | None:
        """The layout of tensor t (None for None)."""
        return None if t is None else cls(tuple(t.shape), t.dtype, t.device, tuple(t.stride()))

    def holds(self, t: object) -> bool:
        """t is a tensor of this layout, compared field by field without building the tuple (every layer's
        calls check their caches against the plan's layouts)."""
        return (
            isinstance(t, torch.Tensor)
            and t.shape == self.shape
            and t.dtype == self.dtype
            and t.stride() == self.stride
            and t.device == self.device
        )


@dataclass(frozen=True, slots=True)
class AttentionPlan:
    """One step's validated metadata (kernels.ops.plan_attention builds it; treat it as read-only).

    backend        "torch" or "triton": the backend every call with this plan runs on (resolved from "auto")
    slot_mapping   int32/int64 [T] or None  cache slot of each new token (< 0: not stored); None: attention only
    all_slots_live bool           no slot is negative (store_kv then needs no mask)
    num_tokens     int            T, the packed new tokens (q's and k/v's rows)
    k_layout, v_layout            TensorLayout of the K and V caches the plan was validated for
    k_scale_layout, v_scale_layout  an fp8 cache's scale layouts (None: not an fp8 cache)
    cu_seqlens_q   int32 [S + 1]  prefix sums of each sequence's query count (None: a plan of slots only,
                                  as store_kv without a plan builds one)
    seq_lens       int32 [S]      tokens of each sequence in the cache once this step's K/V are stored
    block_tables   int32 [S, max_blocks]  physical block of each sequence's logical blocks
    max_seqlen_q   int            the longest query run (a bound; >= every len_q)
    causal         bool           bottom-right causal attention
    sliding_window int or None    keys p - W + 1 .. p for the query at position p (None: no window)
    num_heads      int            query heads Hq of q
    q_dtype        torch.dtype    q's dtype (float32, float16 or bfloat16)
    starts_q, lens list[int]      cu_seqlens_q and seq_lens as Python lists (read once, at validation)
    index          VarlenIndex or None  the torch backend's step index (None for Triton)
    """

    backend: str
    slot_mapping: torch.Tensor | None
    all_slots_live: bool
    num_tokens: int
    k_layout: TensorLayout
    v_layout: TensorLayout
    k_scale_layout: TensorLayout | None
    v_scale_layout: TensorLayout | None
    cu_seqlens_q: torch.Tensor | None = None
    seq_lens: torch.Tensor | None = None
    block_tables: torch.Tensor | None = None
    max_seqlen_q: int = 0
    causal: bool = True
    sliding_window: int | None = None
    num_heads: int = 0
    q_dtype: torch.dtype | None = None
    starts_q: list[int] | None = None
    lens: list[int] | None = None
    index: VarlenIndex | None = None

    @property
    def num_kv_heads(self) -> int:
        """Hkv, the cache's KV heads."""
        return self.k_layout.shape[2]

    @property
    def head_dim(self) -> int:
        """D, the cache's head dim (q's too)."""
        return self.k_layout.shape[3]

    @property
    def head_dim_v(self) -> int:
        """Dv, the value cache's head dim (the output's): D, or MLA's kv_lora_rank for a latent cache."""
        return self.v_layout.shape[3]


def _as_cache(cache: object) -> KVCache:
    """cache as a KVCache (any 4-tuple k, v, k_scale, v_scale, such as the engine's LayerKV)."""
    try:
        return KVCache(*cache)
    except TypeError:
        raise ValueError(
            f"cache must be a kernels.plan.KVCache(k, v, k_scale, v_scale) (the engine's LayerKV), got "
            f"{type(cache).__name__}"
        ) from None


def _check_caches(cache: object) -> KVCache:
    """cache is (k, v, k_scale, v_scale): equal 4-D caches of one float or fp8 dtype on one device, with the
    scales an fp8 cache needs (and none for another)."""
    cache = _as_cache(cache)
    k_cache, v_cache = check_cache(cache.k, cache.v)
    if v_cache.device != k_cache.device:
        raise ValueError(
            f"k_cache is on {k_cache.device} but v_cache on {v_cache.device}; keep both caches on one device"
        )
    if v_cache.dtype != k_cache.dtype or k_cache.dtype not in (*FLOAT_DTYPES, FP8_DTYPE):
        raise ValueError(
            f"k_cache, v_cache have dtypes {k_cache.dtype}, {v_cache.dtype}; store both as float32, float16, "
            "bfloat16 or torch.float8_e4m3fn (with k_scale / v_scale)"
        )
    check_kv_scale_layout(k_cache, cache.k_scale, cache.v_scale)
    return cache


def _check_host_step(host_step: object, cu: torch.Tensor, block_tables: torch.Tensor, slots: torch.Tensor | None):
    """host_step is a HostStep whose lists have the shapes of the step's tensors (their values are the
    caller's word: the lists the tensors were made from)."""
    num_seqs, width = block_tables.shape
    ok = isinstance(host_step, tuple) and len(host_step) == 4
    if ok:
        cu_l, lens_l, tables_l, slots_l = host_step
        ok = (
            type(cu_l) is list
            and type(lens_l) is list
            and type(tables_l) is list
            and len(cu_l) == num_seqs + 1
            and len(lens_l) == num_seqs == len(tables_l)
            and all(type(row) is list and len(row) == width for row in tables_l)
            and (slots_l is None if slots is None else type(slots_l) is list and len(slots_l) == slots.shape[0])
        )
    if not ok:
        raise ValueError(
            "host_step must be HostStep(cu_seqlens_q.tolist(), seq_lens.tolist(), block_tables.tolist(), "
            "slot_mapping.tolist() or None) of this step: the lists the tensors were made from, or None"
        )
    return HostStep(*host_step)


def _read(tensors: list[torch.Tensor], cache: KVCache) -> tuple[list[np.ndarray], bool]:
    """The tensors' values as int64 arrays and whether the fp8 scales are bad, in one device read."""
    parts = [t.reshape(-1).long() for t in tensors]
    if cache.k_scale is not None:
        parts.append(scales_bad(cache.k_scale, cache.v_scale))
    flat = torch.cat(parts).cpu().numpy()  # the one device read
    sizes = np.cumsum([t.numel() for t in tensors])
    arrays = np.split(flat, sizes)
    return [a.reshape(t.shape) for a, t in zip(arrays, tensors, strict=False)], bool(arrays[-1].any())


def _check_scale_values(cache: KVCache, bad: bool) -> None:
    """The error for an fp8 cache's scales that _read or scales_bad found bad."""
    if cache.k_scale is not None and bad:
        raise_bad_scales(cache.k_scale, cache.v_scale)


def _layouts(cache: KVCache) -> dict:
    """The plan's layout fields of a cache."""
    return {
        "k_layout": TensorLayout.of(cache.k),
        "v_layout": TensorLayout.of(cache.v),
        "k_scale_layout": TensorLayout.of(cache.k_scale),
        "v_scale_layout": TensorLayout.of(cache.v_scale),
    }


def plan_step(
    cu_seqlens_q: object,
    seq_lens: object,
    block_tables: object,
    max_seqlen_q: object,
    slot_mapping: object,
    cache: object,
    *,
    num_heads: object,
    q_dtype: object,
    causal: object,
    sliding_window: object,
    backend: str,
    host_step: object = None,
    total_q: int | None = None,
) -> AttentionPlan:
    """Validate one step's metadata, slot mapping (None: attention only), cache and fp8 scales; plan it.

    total_q: q's row count when the caller has q (cu_seqlens_q must end there). host_step: a HostStep, whose
    lists are checked instead of the tensors' values (no device read but an fp8 cache's scales).
    """
    cache = _check_caches(cache)
    k_cache, v_cache = cache.k, cache.v
    device = k_cache.device
    num_blocks, block_size, num_kv_heads, head_dim = k_cache.shape
    if q_dtype not in FLOAT_DTYPES:
        raise ValueError(f"q has dtype {q_dtype}; use float32, float16 or bfloat16")
    if k_cache.dtype not in (q_dtype, FP8_DTYPE):
        raise ValueError(
            f"q, k_cache, v_cache have dtypes {q_dtype}, {k_cache.dtype}, {v_cache.dtype}; the caches must both "
            f"be {q_dtype} (q's dtype) or both torch.float8_e4m3fn with k_scale / v_scale"
        )
    num_heads = check_int("num_heads", num_heads, minimum=None, kind="a Python int", hint="q.shape[1], the query heads")
    check_heads(num_heads, num_kv_heads, head_dim, kv_name="k_cache")
    if not isinstance(causal, bool):
        raise ValueError(f"causal={causal!r} must be True or False")
    window = check_window(sliding_window, causal)
    cu = check_cu_tensor("cu_seqlens_q", cu_seqlens_q, device)
    num_seqs = cu.numel() - 1
    seq_lens = check_int_tensor("seq_lens", seq_lens, 1, "int32 [num_seqs]", device, num_seqs)
    block_tables = check_int_tensor(
        "block_tables", block_tables, 2, "int32 [num_seqs, max_blocks_per_seq]", device, num_seqs
    )
    slot_mapping = None if slot_mapping is None else check_slot_tensor(slot_mapping, device)
    tensors = [cu, seq_lens, block_tables] + ([] if slot_mapping is None else [slot_mapping])
    if host_step is not None:
        host_step = _check_host_step(host_step, cu, block_tables, slot_mapping)
    backend = resolve_backend(backend, device)
    if backend == "triton":
        check_last_stride(k_cache=k_cache, v_cache=v_cache)
    if host_step is None:
        values, bad_scales = _read(tensors, cache)
        starts, lens, tables = values[0].tolist(), values[1].tolist(), values[2]
        slots = values[3] if slot_mapping is not None else None
    else:  # the caller's lists: nothing read back but the scales' flag
        starts, lens = host_step.cu_seqlens_q, host_step.seq_lens
        tables = np.array(host_step.block_tables, dtype=np.int64).reshape(block_tables.shape)
        slots = None if slot_mapping is None else np.array(host_step.slot_mapping, dtype=np.int64)
        bad_scales = cache.k_scale is not None and bool(scales_bad(cache.k_scale, cache.v_scale))
    check_offsets("cu_seqlens_q", starts, starts[-1] if total_q is None else total_q)
    max_seqlen_q = check_max_seqlen("max_seqlen_q", max_seqlen_q, starts)
    check_lengths(starts, lens, block_tables.shape[1] * block_size)
    check_read_blocks(starts, lens, tables, num_blocks, block_size, window)
    all_live = True
    if slot_mapping is not None:
        if slot_mapping.shape[0] != starts[-1]:
            raise ValueError(
                f"slot_mapping has {slot_mapping.shape[0]} slots but cu_seqlens_q packs {starts[-1]} query "
                "tokens; give one slot per new token (negative: not stored)"
            )
        all_live = check_slots(slots, num_blocks, block_size)
    _check_scale_values(cache, bad_scales)
    index = None
    if backend == "torch":
        heads = (num_heads, num_kv_heads) if sparse_decode_applies(q_dtype, k_cache, v_cache) else None
        kv_fp8 = k_cache.dtype == FP8_DTYPE
        index = paged_varlen_index(cu, seq_lens, block_tables, block_size, heads, window, kv_fp8, (starts, lens))
    return AttentionPlan(
        backend, slot_mapping, all_live, starts[-1], **_layouts(cache), cu_seqlens_q=cu, seq_lens=seq_lens,
        block_tables=block_tables, max_seqlen_q=max_seqlen_q, causal=causal, sliding_window=window,
        num_heads=num_heads, q_dtype=q_dtype, starts_q=starts, lens=lens, index=index,
    )  # fmt: skip


def plan_store(slot_mapping: object, cache: object, backend: str) -> AttentionPlan:
    """The plan of a store without attention metadata (store_kv without a plan): the cache, its scales and
    the slots (in range, none twice; negative: skipped), in one device read."""
    cache = _check_caches(cache)
    slot_mapping = check_slot_tensor(slot_mapping, cache.k.device)
    backend = resolve_backend(backend, cache.k.device)
    if backend == "triton":
        check_last_stride(k_cache=cache.k, v_cache=cache.v)
    (slots,), bad_scales = _read([slot_mapping], cache)
    all_live = check_slots(slots, *cache.k.shape[:2])
    _check_scale_values(cache, bad_scales)
    return AttentionPlan(backend, slot_mapping, all_live, slot_mapping.shape[0], **_layouts(cache))


def check_call(plan: object, cache: object, *, store: bool) -> KVCache:
    """A layer's call matches its plan (no device read): an AttentionPlan for this use whose cache layout and
    scale layouts are this layer's cache's."""
    if not isinstance(plan, AttentionPlan):
        raise ValueError(f"plan must be an AttentionPlan from kernels.ops.plan_attention, got {type(plan).__name__}")
    if store and plan.slot_mapping is None:
        raise ValueError(
            "the plan was built without a slot_mapping (attention only); build it with "
            "plan_attention(..., slot_mapping, ...) to store K/V with it"
        )
    if not store and plan.cu_seqlens_q is None:
        raise ValueError("the plan holds slots only (a store's); build it with plan_attention(...) to attend with it")
    cache = _as_cache(cache)
    for name, t, layout in (("k_cache", cache.k, plan.k_layout), ("v_cache", cache.v, plan.v_layout)):
        if not layout.holds(t):
            got = TensorLayout.of(t) if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"{name} is {got} but the plan was built for a cache {layout}; {REBUILD}")
    for name, s, layout in (
        ("k_scale", cache.k_scale, plan.k_scale_layout),
        ("v_scale", cache.v_scale, plan.v_scale_layout),
    ):
        if layout is None and s is not None:
            raise ValueError(f"{name} was given but the plan's cache is {plan.k_layout.dtype}: drop {name}")
        if layout is not None and not layout.holds(s):
            got = TensorLayout.of(s) if isinstance(s, torch.Tensor) else s
            raise ValueError(
                f"{name} is {got} but the plan was built for an fp8 cache with {name} {layout}; pass this "
                f"layer's {name} (every layer's scales of one layout), or {REBUILD}"
            )
    return cache


def check_rows(
    name: str, x: object, heads: int, plan: AttentionPlan, what: str, head_dim: int | None = None
) -> torch.Tensor:
    """x is a [plan.num_tokens, heads, D] tensor on the plan's device (unit stride along D for Triton);
    `what` ("slot_mapping has {} slots") names the plan's token count in the error; head_dim: D (default the
    K cache's; a value row passes the V cache's)."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor [num_tokens, heads, head_dim], got {type(x).__name__}")
    if x.dim() != 3:
        raise ValueError(f"{name} has shape {tuple(x.shape)} but must be 3-D [num_tokens, heads, head_dim]")
    want, cache = (plan.head_dim, "k_cache") if head_dim is None else (head_dim, "v_cache")
    if x.shape[2] != want:
        raise ValueError(f"{name} has head_dim {x.shape[2]} but {cache} has {want}; they must match")
    if x.shape[0] != plan.num_tokens:
        raise ValueError(f"{what.format(plan.num_tokens)} but {name} has {x.shape[0]} tokens; give one each")
    if x.shape[1] != heads:
        raise ValueError(
            f"{name} has {x.shape[1]} heads but the plan was built for {heads}; pass this step's {name}, or {REBUILD}"
        )
    if x.device != plan.k_layout.device:
        raise ValueError(f"{name} is on {x.device} but the cache is on {plan.k_layout.device}; move it there")
    if plan.backend == "triton" and x.numel() > 0 and x.stride(-1) != 1:
        raise ValueError(f"{name}.stride(-1) is {x.stride(-1)} but must be 1 for Triton; pass {name}.contiguous()")
    return x
