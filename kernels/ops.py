"""Public kernel entry points: validate the inputs, pick a backend, dispatch. Nothing else lives here.

Vocabulary follows flash-attn's `flash_attn_varlen_func` (packed tokens + `cu_seqlens`) and vLLM's
PagedAttention (`block_tables`, `seq_lens`, `slot_mapping`; Kwon et al., SOSP 2023). Every error a caller
can cause is a ValueError that names the bad value and the fix, raised here, before any kernel runs, so
neither backend ever sees malformed metadata (which on a GPU would mean silent out-of-bounds reads).

Each kernel X has a Triton launcher `X_triton` in kernels/X.py and a plain-torch twin `X_torch` in
kernels/X_torch.py (the CPU production path): varlen_attention, paged_varlen_attention, store_kv;
paged_attention, the decode-only API, is paged_varlen_attention with one query per sequence. The checks
live in kernels/checks.py and kernels/plan.py. Triton modules are imported lazily so this file works
without triton installed.

A model step validates its metadata once: `plan_attention` checks the step (one device read, or none with a
`HostStep`) and returns an AttentionPlan (kernels/plan.py) that carries the step's tensors; every layer then
calls `store_kv_planned(k, v, cache, plan)` and `paged_varlen_attention_planned(q, cache, plan, scale=...)`,
which check, without reading the device, only what is the layer's own (its cache's layout, q, k, v). The
public `store_kv` and `paged_varlen_attention` build a plan for their one call and take that same path.
"""

from __future__ import annotations

import itertools

import torch

from kernels.backend import resolve_backend
from kernels.checks import (
    check_cu_tensor,
    check_heads,
    check_int_tensor,
    check_last_stride,
    check_max_seqlen,
    check_offsets,
    check_same,
    check_scale,
    check_tensor,
    check_triton_store_scales,
    default_scale,
)
from kernels.fp8 import FP8_DTYPE, calibrate_scale
from kernels.paged_varlen_attention_torch import paged_varlen_attention_torch
from kernels.plan import AttentionPlan, HostStep, KVCache, check_call, check_rows, plan_step, plan_store
from kernels.store_kv_torch import store_kv_torch
from kernels.varlen_attention_torch import varlen_attention_torch


# --------------------------------------------------------------------------------------------- varlen
def varlen_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    causal: bool = False,
    scale: float | None = None,
    backend: str = "auto",
    *,
    check: bool = True,
) -> torch.Tensor:
    """Packed variable-length attention: q [total_q, Hq, D], k/v [total_k, Hkv, D] -> [total_q, Hq, D].

    Sequence i owns rows cu_seqlens_q[i]:cu_seqlens_q[i+1] of q and cu_seqlens_k[i]:cu_seqlens_k[i+1] of
    k/v. `causal` is bottom-right aligned; rows that see no key are zeros.

    check=False skips every input check and dispatches straight to the backend: only for inputs an earlier
    call already validated (a model layer reusing its step's metadata); malformed inputs are then undefined.
    """
    if check:
        args = (q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, scale, backend)
        scale, backend, starts = _check_varlen(*args)
    else:
        scale, backend, starts = default_scale(scale, q.shape[2]), resolve_backend(backend, q.device), None
    if backend == "triton":
        from kernels.varlen_attention import varlen_attention_triton

        return varlen_attention_triton(
            q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=causal, scale=scale
        )
    if starts is None:
        starts = _read_offsets(cu_seqlens_q, cu_seqlens_k)
    return varlen_attention_torch(q, k, v, starts[0], starts[1], causal=causal, scale=scale)


def _read_offsets(cu_q: torch.Tensor, cu_k: torch.Tensor) -> tuple[list[int], list[int]]:
    """cu_seqlens_q and cu_seqlens_k as Python lists, read in one device sync."""
    offsets = torch.cat([cu_q, cu_k]).tolist()
    return offsets[: cu_q.numel()], offsets[cu_q.numel() :]


def _check_varlen(
    q: object,
    k: object,
    v: object,
    cu_seqlens_q: object,
    cu_seqlens_k: object,
    max_seqlen_q: object,
    max_seqlen_k: object,
    causal: object,
    scale: object,
    backend: str,
) -> tuple[float, str, tuple[list[int], list[int]]]:
    """Validate varlen_attention's inputs; returns the scale, the backend and the offsets as Python lists."""
    q = check_tensor("q", q, 3, "[total_q, num_heads, head_dim]")
    k = check_tensor("k", k, 3, "[total_k, num_kv_heads, head_dim]")
    v = check_tensor("v", v, 3, "[total_k, num_kv_heads, head_dim]")
    check_same("q, k, v", [q, k, v])
    if k.shape != v.shape:
        raise ValueError(f"k has shape {tuple(k.shape)} but v has {tuple(v.shape)}; they must match")
    if k.shape[2] != q.shape[2]:
        raise ValueError(f"q has head_dim {q.shape[2]} but k has {k.shape[2]}; they must match")
    check_heads(q.shape[1], k.shape[1], q.shape[2])
    if not isinstance(causal, bool):
        raise ValueError(f"causal={causal!r} must be True or False")
    scale = check_scale(scale, q.shape[2])
    cu_q = check_cu_tensor("cu_seqlens_q", cu_seqlens_q, q.device)
    cu_k = check_cu_tensor("cu_seqlens_k", cu_seqlens_k, q.device)
    starts_q, starts_k = _read_offsets(cu_q, cu_k)
    check_offsets("cu_seqlens_q", starts_q, q.shape[0])
    check_offsets("cu_seqlens_k", starts_k, k.shape[0])
    if len(starts_q) != len(starts_k):
        raise ValueError(
            f"cu_seqlens_q describes {len(starts_q) - 1} sequences but cu_seqlens_k {len(starts_k) - 1}; "
            "give both one offset per sequence plus the total"
        )
    check_max_seqlen("max_seqlen_q", max_seqlen_q, starts_q)
    check_max_seqlen("max_seqlen_k", max_seqlen_k, starts_k)
    backend = resolve_backend(backend, q.device)
    if backend == "triton":
        check_last_stride(q=q, k=k, v=v)
    return scale, backend, (starts_q, starts_k)


# ---------------------------------------------------------------------------------------------- paged
def paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float | None = None,
    backend: str = "auto",
) -> torch.Tensor:
    """Decode attention through block tables, q [num_seqs, Hq, D] -> [num_seqs, Hq, D]: paged_varlen_attention
    with one query per sequence (kept for callers of the decode-only API; there is no separate kernel).

    Sequence i's one query is its last token and sees all of its seq_lens[i] keys; token t lives in
    k_cache[block_tables[i, t // block_size], t % block_size]. A sequence with seq_lens 0 has no query and
    outputs zeros. Reads seq_lens once to pack the queries, then validates like paged_varlen_attention.
    """
    q = check_tensor("q", q, 3, "[num_seqs, num_heads, head_dim]")
    seq_lens = check_int_tensor("seq_lens", seq_lens, 1, "int32 [num_seqs]", q.device, q.shape[0])
    lens = seq_lens.tolist()
    live = [i for i, n in enumerate(lens) if n > 0]  # the others get no query (negative: refused below)
    cu = torch.tensor([0, *itertools.accumulate(int(n > 0) for n in lens)], dtype=torch.int32, device=q.device)
    rows = None if len(live) == len(lens) else torch.tensor(live, dtype=torch.long, device=q.device)
    q_live = q if rows is None else q.index_select(0, rows)
    out = paged_varlen_attention(q_live, k_cache, v_cache, cu, seq_lens, block_tables, 1, True, scale, None, backend)
    return out if rows is None else out.new_zeros(q.shape[0], *out.shape[1:]).index_copy_(0, rows, out)


# ------------------------------------------------------------------------------------------------ plan
def plan_attention(
    cu_seqlens_q: torch.Tensor,
    seq_lens: torch.Tensor,
    block_tables: torch.Tensor,
    max_seqlen_q: int,
    slot_mapping: torch.Tensor | None,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    *,
    num_heads: int,
    q_dtype: torch.dtype,
    causal: bool = True,
    sliding_window: int | None = None,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
    backend: str = "auto",
    host_step: HostStep | None = None,
) -> AttentionPlan:
    """Validate one step's metadata once and plan its attention: every layer then passes the plan (which
    carries these tensors) and its own cache to `store_kv_planned` and `paged_varlen_attention_planned`.

    The metadata is paged_varlen_attention's (cu_seqlens_q, seq_lens, block_tables, max_seqlen_q) and
    store_kv's slot_mapping (one slot per query token, in range, none twice; negative: not stored; None for a
    plan that only serves attention); k_cache / v_cache are one layer's cache [num_blocks, block_size, Hkv, D]
    (any layer whose cache has the same shape, dtype, device and strides may use the plan); num_heads and
    q_dtype describe q; k_scale / v_scale one layer's fp8 scales (0: not calibrated yet). The values are
    checked in one device read; host_step: a `HostStep`, the Python lists the four metadata tensors were made
    from (a step builder has them): the same checks then run on those lists and nothing is read back from
    the device but an fp8 cache's scales. For the torch backend the plan also holds the step's index (the
    grouping, the decode gather, the sparse path). Every error is a ValueError naming the value and the fix.
    """
    return plan_step(
        cu_seqlens_q, seq_lens, block_tables, max_seqlen_q, slot_mapping, KVCache(k_cache, v_cache, k_scale, v_scale),
        num_heads=num_heads, q_dtype=q_dtype, causal=causal, sliding_window=sliding_window, backend=backend,
        host_step=host_step,
    )  # fmt: skip


# --------------------------------------------------------------------------------------- paged varlen
def paged_varlen_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    seq_lens: torch.Tensor,
    block_tables: torch.Tensor,
    max_seqlen_q: int,
    causal: bool = True,
    scale: float | None = None,
    sliding_window: int | None = None,
    backend: str = "auto",
    *,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """Attention of several queries per sequence over a paged cache (vLLM V1's unified attention): every step
    kind in one call (prefill, chunked prefill, prefix-cache hits, decode as len_q = 1, and mixes).

    q [total_q, Hq, D]; k_cache/v_cache [num_blocks, block_size, Hkv, D] (q's dtype, or torch.float8_e4m3fn
    with k_scale/v_scale); cu_seqlens_q int32 [B + 1]; seq_lens int32 [B]; block_tables int32 [B, max_blocks].
    Sequence i's len_q = cu_seqlens_q[i+1] - cu_seqlens_q[i] queries are its LAST len_q tokens, at positions
    p = seq_lens[i] - len_q .. seq_lens[i] - 1, and their K/V must already be in the cache (store_kv first).
    Token t lives in k_cache[block_tables[i, t // block_size], t % block_size]. Query p sees key t iff t <= p
    (bottom-right causal; causal=False: every t < seq_lens[i]) and, with sliding_window=W (needs causal),
    t >= p - W + 1 (transformers' Mistral). -> [total_q, Hq, Dv] in q's dtype, Dv = v_cache's head dim: D, or
    narrower when v_cache is a view of the first Dv columns of k_cache's rows (MLA's latent cache, whose K row
    is latent + rope key and whose V is the latent).

    Block-table contract: only entries first .. ceil(seq_lens[i] / block_size) - 1 are read, where first =
    max(0, seq_lens[i] - len_q - W + 1) // block_size with a window (0 without); entries before `first`
    (blocks freed behind the window), after the last block, and whole rows of sequences with len_q = 0 may
    hold anything (-1, freed ids); slots past seq_lens[i] may hold NaN. Neither is ever read.
    fp8: k_scale/v_scale are float32 tensors of shape [] / [1] (one per layer) or [Hkv] (per KV head); the
    cache holds x / scale and the kernels attend to cache.float() * scale.
    The call plans itself (plan_attention's checks, one device read) and attends through that plan.
    """
    q = check_tensor("q", q, 3, "[total_q, num_heads, head_dim]")
    cache = KVCache(k_cache, v_cache, k_scale, v_scale)
    plan = plan_step(
        cu_seqlens_q, seq_lens, block_tables, max_seqlen_q, None, cache, num_heads=q.shape[1], q_dtype=q.dtype,
        causal=causal, sliding_window=sliding_window, backend=backend, total_q=q.shape[0],
    )  # fmt: skip
    return paged_varlen_attention_planned(q, cache, plan, scale=scale)


def paged_varlen_attention_planned(
    q: torch.Tensor, cache: KVCache, plan: AttentionPlan, *, scale: float | None = None
) -> torch.Tensor:
    """paged_varlen_attention of one layer through its step's plan: q [plan.num_tokens, plan.num_heads, D] in
    plan.q_dtype over `cache` (this layer's KVCache, of the layout the plan was built for) -> [T, Hq, Dv]
    (Dv = the V cache's head dim: D, or a narrower V view of the K rows as MLA's latent cache has).
    Checks only q, the cache's layout and the scale (no device read)."""
    k_cache, v_cache, k_scale, v_scale = check_call(plan, cache, store=False)
    q = check_rows("q", q, plan.num_heads, plan, "the plan's step packs {} tokens (cu_seqlens_q[-1])")
    if q.dtype != plan.q_dtype:
        raise ValueError(
            f"q has dtype {q.dtype} but the plan was built for q_dtype={plan.q_dtype}; cast q, or build the plan "
            f"with plan_attention(..., q_dtype={q.dtype})"
        )
    scale = check_scale(scale, q.shape[2])
    if plan.backend == "triton":
        from kernels.paged_varlen_attention import paged_varlen_attention_triton

        return paged_varlen_attention_triton(
            q, k_cache, v_cache, plan.cu_seqlens_q, plan.seq_lens, plan.block_tables, plan.max_seqlen_q,
            plan.causal, scale, plan.sliding_window, k_scale, v_scale,
        )  # fmt: skip
    return paged_varlen_attention_torch(
        q, k_cache, v_cache, plan.block_tables, plan.causal, scale, plan.sliding_window, k_scale, v_scale, plan.index
    )


# -------------------------------------------------------------------------------------------- store
def store_kv(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    backend: str = "auto",
    *,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
) -> None:
    """Write k/v [num_tokens, Hkv, D] into the paged caches in place at slot_mapping (slot < 0 is skipped).

    fp8 cache (torch.float8_e4m3fn): k_scale / v_scale (float32, shape [] / [1]; the torch backend also takes
    [Hkv]) are the scales the values are quantized with: the cache holds clamp(x / scale, +-448). A scale that
    holds 0 is not calibrated yet: it is set here, on the device, from the values written (kernels/fp8.py:
    calibrate_scale: amax * FP8_HEADROOM / 448), and stays fixed from then on.
    The call plans itself (the slots and scales, one device read) and stores through that plan.
    """
    cache = KVCache(k_cache, v_cache, k_scale, v_scale)
    store_kv_planned(k, v, cache, plan_store(slot_mapping, cache, backend))


def store_kv_planned(k: torch.Tensor, v: torch.Tensor, cache: KVCache, plan: AttentionPlan) -> None:
    """store_kv of one layer through its step's plan: k/v [plan.num_tokens, Hkv, D] into `cache` (this layer's
    KVCache, of the layout the plan was built for) at plan.slot_mapping. Checks only k, v and the cache's
    layout (no device read)."""
    k_cache, v_cache, k_scale, v_scale = check_call(plan, cache, store=True)
    k = check_tensor("k", k, 3, "[num_tokens, num_kv_heads, head_dim]")
    v = check_tensor("v", v, 3, "[num_tokens, num_kv_heads, head_dim]")
    if k.shape[:2] != v.shape[:2] or v.shape[2] != plan.head_dim_v:
        raise ValueError(f"k has shape {tuple(k.shape)} but v has {tuple(v.shape)}; they must match")
    if k.shape[1:] != (plan.num_kv_heads, plan.head_dim):
        raise ValueError(
            f"k rows are [{k.shape[1]}, {k.shape[2]}] (heads, head_dim) but the cache holds "
            f"[{plan.num_kv_heads}, {plan.head_dim}]; they must match"
        )
    check_rows("k", k, plan.num_kv_heads, plan, "slot_mapping has {} slots")
    check_rows("v", v, plan.num_kv_heads, plan, "slot_mapping has {} slots", plan.head_dim_v)
    fp8 = k_cache.dtype == FP8_DTYPE
    if k.dtype != v.dtype or k.dtype not in (
        (torch.float32, torch.float16, torch.bfloat16) if fp8 else (k_cache.dtype,)
    ):
        raise ValueError(
            f"k, v have dtypes {k.dtype}, {v.dtype} but the cache is {k_cache.dtype}; cast them to "
            f"{'one float dtype' if fp8 else k_cache.dtype}"
        )
    slot_mapping, all_live = plan.slot_mapping, plan.all_slots_live
    if plan.backend == "triton":
        check_triton_store_scales(k_scale, v_scale)
    if fp8:
        written = None if all_live else slot_mapping >= 0
        calibrate_scale(k_scale, k, written)
        calibrate_scale(v_scale, v, written)
    if plan.backend == "triton":
        from kernels.store_kv import store_kv_triton

        store_kv_triton(k, v, k_cache, v_cache, slot_mapping, k_scale, v_scale)
    else:
        store_kv_torch(k, v, k_cache, v_cache, slot_mapping, k_scale, v_scale, all_live)
