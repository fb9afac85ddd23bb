"""The per-step attention plan: one step's metadata, validated once, plus what the backend needs from it.

A model step runs `store_kv` and `paged_varlen_attention` once per layer over the same metadata
(cu_seqlens_q, seq_lens, block_tables, slot_mapping) and caches of one layout. `kernels.ops.plan_attention`
validates all of it once and resolves the backend; the result, an `AttentionPlan`, is passed to every layer's
calls (`plan=`), which then only check, without reading the device, that they were given the plan's own
metadata tensors and a cache, q and scales of the layout the plan was validated for (`check_plan_store`,
`check_plan_attention`). For the torch backend the plan also holds the step's `VarlenIndex` (the grouping of
the sequences and the decode rows' gather index), so no layer rebuilds it; the Triton kernels read the
metadata themselves. A plan holds no cache: only the step's own tensors, what its validation read from them
and the layouts it checked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from kernels.backend import BACKENDS
from kernels.checks_paged import check_triton_store_scales
from kernels.paged_varlen_attention_torch import VarlenIndex

REBUILD = (
    "build the plan with kernels.ops.plan_attention(...) from this step's metadata and a cache of this layout "
    "(every layer whose cache has the same shape, dtype, device and strides shares one plan)"
)


class TensorLayout(NamedTuple):
    """What a plan checks of a tensor without reading it: shape, dtype, device and strides."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device
    stride: tuple[int, ...]

    @classmethod
    def of(cls, t: torch.Tensor) -> TensorLayout:
        """The layout of tensor t."""
        return cls(tuple(t.shape), t.dtype, t.device, tuple(t.stride()))

    def holds(self, t: object) -> bool:
        """t is a tensor of this layout: TensorLayout.of(t) == self, compared field by field without building
        the tuple (every layer's calls check their caches against the plan's layouts)."""
        return (
            isinstance(t, torch.Tensor)
            and t.shape == self.shape
            and t.dtype == self.dtype
            and t.stride() == self.stride
            and t.device == self.device
        )


@dataclass(frozen=True, slots=True)
class AttentionPlan:
    """One step's validated attention metadata (kernels.ops.plan_attention builds it; treat it as read-only).

    backend        "torch" or "triton": the backend every call with this plan runs on (resolved from "auto")
    cu_seqlens_q   int32 [S + 1]  prefix sums of each sequence's query (new token) count
    seq_lens       int32 [S]      tokens of each sequence in the cache once this step's K/V are stored
    block_tables   int32 [S, max_blocks]  physical block of each sequence's logical blocks
    max_seqlen_q   int            the longest query run (a bound; >= every len_q)
    slot_mapping   int32/int64 [T] or None  cache slot of each new token (< 0: not stored); None for a plan
                                  that only serves attention
    causal         bool           bottom-right causal attention
    sliding_window int or None    keys p - W + 1 .. p for the query at position p (None: no window)
    num_heads      int            query heads Hq of q
    q_dtype        torch.dtype    q's dtype (float32, float16 or bfloat16)
    num_tokens     int            T = cu_seqlens_q[-1], the packed query tokens (q's and k/v's rows)
    starts_q       list[int]      cu_seqlens_q as a Python list (read once, at validation)
    lens           list[int]      seq_lens as a Python list
    k_layout       TensorLayout   the K cache's (shape, dtype, device, strides) the plan was validated for
    v_layout       TensorLayout   the V cache's
    k_scale_layout TensorLayout or None  an fp8 cache's k_scale layout (None: not an fp8 cache)
    v_scale_layout TensorLayout or None  its v_scale layout
    all_slots_live bool           no slot is negative (store_kv then needs no mask)
    index          VarlenIndex or None  the torch backend's step index (None for Triton)
    """

    backend: str
    cu_seqlens_q: torch.Tensor
    seq_lens: torch.Tensor
    block_tables: torch.Tensor
    max_seqlen_q: int
    slot_mapping: torch.Tensor | None
    causal: bool
    sliding_window: int | None
    num_heads: int
    q_dtype: torch.dtype
    num_tokens: int
    starts_q: list[int]
    lens: list[int]
    k_layout: TensorLayout
    v_layout: TensorLayout
    k_scale_layout: TensorLayout | None
    v_scale_layout: TensorLayout | None
    all_slots_live: bool
    index: VarlenIndex | None

    @property
    def num_kv_heads(self) -> int:
        """Hkv, the cache's KV heads."""
        return self.k_layout.shape[2]

    @property
    def head_dim(self) -> int:
        """D, the cache's head dim (q's too)."""
        return self.k_layout.shape[3]


def _check_common(
    plan: object, k_cache: object, v_cache: object, backend: object, k_scale: object, v_scale: object
) -> AttentionPlan:
    """The plan is an AttentionPlan for this backend, these caches' layout and these scales' layout."""
    if not isinstance(plan, AttentionPlan):
        raise ValueError(f"plan must be an AttentionPlan from kernels.ops.plan_attention, got {type(plan).__name__}")
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r} is not supported; use one of {', '.join(map(repr, BACKENDS))}")
    if backend not in ("auto", plan.backend):
        raise ValueError(
            f"backend={backend!r} but the plan was built for backend {plan.backend!r}; pass backend='auto' (or "
            f"{plan.backend!r}), or build the plan with plan_attention(..., backend={backend!r})"
        )
    for name, cache, layout in (("k_cache", k_cache, plan.k_layout), ("v_cache", v_cache, plan.v_layout)):
        if not layout.holds(cache):
            got = TensorLayout.of(cache) if isinstance(cache, torch.Tensor) else type(cache).__name__
            raise ValueError(f"{name} is {got} but the plan was built for a cache {layout}; {REBUILD}")
    for name, s, layout in (("k_scale", k_scale, plan.k_scale_layout), ("v_scale", v_scale, plan.v_scale_layout)):
        if layout is None and s is not None:
            raise ValueError(f"{name} was given but the plan's cache is {plan.k_layout.dtype}: drop {name}")
        if layout is not None and not layout.holds(s):
            got = TensorLayout.of(s) if isinstance(s, torch.Tensor) else s
            raise ValueError(
                f"{name} is {got} but the plan was built for an fp8 cache with {name} {layout}; pass this "
                f"layer's {name} (every layer's scales of one layout), or {REBUILD}"
            )
    return plan


def _check_rows(name: str, x: object, shape: tuple[int, ...], plan: AttentionPlan) -> torch.Tensor:
    """x is a tensor of `shape` on the plan's device, unit stride along the head dim for Triton."""
    if not isinstance(x, torch.Tensor) or tuple(x.shape) != shape or x.device != plan.k_layout.device:
        got = f"{tuple(x.shape)} on {x.device}" if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(
            f"{name} is {got} but the plan's step packs {plan.num_tokens} tokens: {name} must be {list(shape)} on "
            f"{plan.k_layout.device}; pass this step's {name}, or {REBUILD}"
        )
    if plan.backend == "triton" and x.numel() > 0 and x.stride(-1) != 1:
        raise ValueError(f"{name}.stride(-1) is {x.stride(-1)} but must be 1 for Triton; pass {name}.contiguous()")
    return x


def check_plan_store(
    plan: object,
    k: object,
    v: object,
    k_cache: object,
    v_cache: object,
    slot_mapping: object,
    backend: object,
    k_scale: object,
    v_scale: object,
) -> AttentionPlan:
    """store_kv's call matches its plan (no device read): the plan's slot mapping, caches and scales of its
    layout, k and v [T, Hkv, D] of the cache's dtype (any float dtype for an fp8 cache)."""
    plan = _check_common(plan, k_cache, v_cache, backend, k_scale, v_scale)
    if plan.slot_mapping is None:
        raise ValueError(
            "the plan was built without a slot_mapping (attention only); build it with "
            "plan_attention(..., slot_mapping, ...) to store K/V with it"
        )
    if slot_mapping is not plan.slot_mapping:
        raise ValueError(
            "slot_mapping is not the tensor the plan was built from; pass plan.slot_mapping, or " + REBUILD
        )
    rows = (plan.num_tokens, plan.num_kv_heads, plan.head_dim)
    k, v = _check_rows("k", k, rows, plan), _check_rows("v", v, rows, plan)
    cache_dtype = plan.k_layout.dtype
    allowed = (torch.float32, torch.float16, torch.bfloat16) if plan.k_scale_layout is not None else (cache_dtype,)
    if k.dtype != v.dtype or k.dtype not in allowed:
        raise ValueError(
            f"k, v have dtypes {k.dtype}, {v.dtype} but the cache is {cache_dtype}; cast them to "
            f"{'one float dtype' if plan.k_scale_layout is not None else cache_dtype}"
        )
    if plan.backend == "triton":
        check_triton_store_scales(k_scale, v_scale)
    return plan


def check_plan_attention(
    plan: object,
    q: object,
    k_cache: object,
    v_cache: object,
    cu_seqlens_q: object,
    seq_lens: object,
    block_tables: object,
    max_seqlen_q: object,
    causal: object,
    sliding_window: object,
    backend: object,
    k_scale: object,
    v_scale: object,
) -> AttentionPlan:
    """paged_varlen_attention's call matches its plan (no device read): the plan's own metadata tensors, its
    max_seqlen_q, causal and window, q [T, Hq, D] of its dtype, caches and scales of its layout."""
    plan = _check_common(plan, k_cache, v_cache, backend, k_scale, v_scale)
    for name, t, own in (
        ("cu_seqlens_q", cu_seqlens_q, plan.cu_seqlens_q),
        ("seq_lens", seq_lens, plan.seq_lens),
        ("block_tables", block_tables, plan.block_tables),
    ):
        if t is not own:
            raise ValueError(f"{name} is not the tensor the plan was built from; pass plan.{name}, or {REBUILD}")
    for name, value, own in (
        ("max_seqlen_q", max_seqlen_q, plan.max_seqlen_q),
        ("causal", causal, plan.causal),
        ("sliding_window", sliding_window, plan.sliding_window),
    ):
        if type(value) is not type(own) or value != own:
            raise ValueError(
                f"{name}={value!r} but the plan was built with {name}={own!r}; pass plan.{name}, or {REBUILD}"
            )
    q = _check_rows("q", q, (plan.num_tokens, plan.num_heads, plan.head_dim), plan)
    if q.dtype != plan.q_dtype:
        raise ValueError(
            f"q has dtype {q.dtype} but the plan was built for q_dtype={plan.q_dtype}; cast q, or build the plan "
            f"with plan_attention(..., q_dtype={q.dtype})"
        )
    return plan
