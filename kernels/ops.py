"""Public kernel entry points: validate the inputs, pick a backend, dispatch. Nothing else lives here.

Vocabulary follows flash-attn's `flash_attn_varlen_func` (packed tokens + `cu_seqlens`) and vLLM's
PagedAttention (`block_tables`, `seq_lens`, `slot_mapping`; Kwon et al., SOSP 2023). Every error a caller
can cause is a ValueError that names the bad value and the fix, raised here, before any kernel runs, so
neither backend ever sees malformed metadata (which on a GPU would mean silent out-of-bounds reads).

Each kernel X has a Triton launcher `X_triton` in kernels/X.py and a plain-torch twin `X_torch` in
kernels/X_torch.py (the CPU production path): varlen_attention, paged_varlen_attention, store_kv;
paged_attention, the decode-only API, is paged_varlen_attention with one query per sequence. The checks
live in kernels/checks.py and kernels/checks_paged.py. Triton modules are imported lazily so this file works
without triton installed.

A model step validates its metadata once: `plan_attention` checks the step (one device read) and returns an
AttentionPlan (kernels/plan.py) that every layer passes to `store_kv` and `paged_varlen_attention` (`plan=`);
those calls then only check, without reading the device, that they match the plan.
"""

from __future__ import annotations

import itertools

import torch

from kernels.backend import resolve_backend
from kernels.checks import (
    check_cu_tensor,
    check_heads,
    check_last_stride,
    check_max_seqlen,
    check_offsets,
    check_same,
    check_scale,
    check_tensor,
    default_scale,
)
from kernels.checks_paged import HostStep, StepCheck, check_int_tensor, check_queries, check_step, check_store
from kernels.fp8 import FP8_DTYPE, calibrate_scale
from kernels.paged_decode_torch import sparse_decode_applies
from kernels.paged_varlen_attention_torch import paged_varlen_attention_torch, paged_varlen_index
from kernels.plan import AttentionPlan, TensorLayout, check_plan_attention, check_plan_store
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
    host: tuple[list[int], list[int]] | None = None,
    host_step: HostStep | None = None,
) -> AttentionPlan:
    """Validate one step's metadata once and plan its attention: pass the plan to every layer's store_kv and
    paged_varlen_attention (`plan=`), which then skip their own validation.

    The metadata is paged_varlen_attention's (cu_seqlens_q, seq_lens, block_tables, max_seqlen_q) and
    store_kv's slot_mapping (one slot per query token, in range, none twice; negative: not stored; None for a
    plan that only serves attention); k_cache / v_cache are one layer's cache [num_blocks, block_size, Hkv, D]
    (any layer whose cache has the same shape, dtype, device and strides may use the plan); num_heads and
    q_dtype describe q; k_scale / v_scale one layer's fp8 scales (0: not calibrated yet). The data-dependent
    checks share one device read; host (cu_seqlens_q.tolist(), seq_lens.tolist()) is checked against it.
    host_step: a `HostStep`, the Python lists the four metadata tensors were made from (a step builder has
    them): the same checks, with the same errors, then run on those lists and nothing is read back from the
    device but an fp8 cache's scales (pass host or host_step, not both). For the torch backend the plan also
    holds the step's index (the grouping, the decode gather, the sparse path). Every error is a ValueError
    naming the value and the fix.
    """
    step = check_step(
        cu_seqlens_q, seq_lens, block_tables, max_seqlen_q, slot_mapping, k_cache, v_cache, num_heads, q_dtype,
        causal, sliding_window, k_scale, v_scale, backend, host, host_step=host_step,
    )  # fmt: skip
    return _build_plan(
        step, cu_seqlens_q, seq_lens, block_tables, max_seqlen_q, slot_mapping, k_cache, v_cache, num_heads,
        q_dtype, causal, sliding_window, k_scale, v_scale,
    )  # fmt: skip


def _build_plan(
    step: StepCheck,
    cu_seqlens_q: torch.Tensor,
    seq_lens: torch.Tensor,
    block_tables: torch.Tensor,
    max_seqlen_q: int,
    slot_mapping: torch.Tensor | None,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    num_heads: int,
    q_dtype: torch.dtype,
    causal: bool,
    sliding_window: int | None,
    k_scale: torch.Tensor | None,
    v_scale: torch.Tensor | None,
) -> AttentionPlan:
    """The AttentionPlan of a validated step (and the torch backend's index)."""
    index = None
    if step.backend == "torch":
        sparse = sparse_decode_applies(q_dtype, k_cache, v_cache)
        heads = (num_heads, k_cache.shape[2]) if sparse else None
        kv_fp8 = k_cache.dtype == FP8_DTYPE
        host = (step.starts_q, step.seq_lens)
        index = paged_varlen_index(
            cu_seqlens_q, seq_lens, block_tables, k_cache.shape[1], heads, sliding_window, kv_fp8, host
        )
    fp8 = k_scale is not None
    return AttentionPlan(
        backend=step.backend,
        cu_seqlens_q=cu_seqlens_q,
        seq_lens=seq_lens,
        block_tables=block_tables,
        max_seqlen_q=max_seqlen_q,
        slot_mapping=slot_mapping,
        causal=causal,
        sliding_window=sliding_window,
        num_heads=num_heads,
        q_dtype=q_dtype,
        num_tokens=step.starts_q[-1],
        starts_q=step.starts_q,
        lens=step.seq_lens,
        k_layout=TensorLayout.of(k_cache),
        v_layout=TensorLayout.of(v_cache),
        k_scale_layout=TensorLayout.of(k_scale) if fp8 else None,
        v_scale_layout=TensorLayout.of(v_scale) if fp8 else None,
        all_slots_live=step.all_slots_live,
        index=index,
    )


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
    plan: AttentionPlan | None = None,
) -> torch.Tensor:
    """Attention of several queries per sequence over a paged cache (vLLM V1's unified attention): every step
    kind in one call (prefill, chunked prefill, prefix-cache hits, decode as len_q = 1, and mixes).

    q [total_q, Hq, D]; k_cache/v_cache [num_blocks, block_size, Hkv, D] (q's dtype, or torch.float8_e4m3fn
    with k_scale/v_scale); cu_seqlens_q int32 [B + 1]; seq_lens int32 [B]; block_tables int32 [B, max_blocks].
    Sequence i's len_q = cu_seqlens_q[i+1] - cu_seqlens_q[i] queries are its LAST len_q tokens, at positions
    p = seq_lens[i] - len_q .. seq_lens[i] - 1, and their K/V must already be in the cache (store_kv first).
    Token t lives in k_cache[block_tables[i, t // block_size], t % block_size]. Query p sees key t iff t <= p
    (bottom-right causal; causal=False: every t < seq_lens[i]) and, with sliding_window=W (needs causal),
    t >= p - W + 1 (transformers' Mistral). -> [total_q, Hq, D] in q's dtype.

    Block-table contract: only entries first .. ceil(seq_lens[i] / block_size) - 1 are read, where first =
    max(0, seq_lens[i] - len_q - W + 1) // block_size with a window (0 without); entries before `first`
    (blocks freed behind the window), after the last block, and whole rows of sequences with len_q = 0 may
    hold anything (-1, freed ids); slots past seq_lens[i] may hold NaN. Neither is ever read.
    fp8: k_scale/v_scale are float32 tensors of shape [] / [1] (one per layer) or [Hkv] (per KV head); the
    cache holds x / scale and the kernels attend to cache.float() * scale.
    plan: this step's `plan_attention(...)`; the metadata must then be the plan's own tensors and the caches,
    q and scales of the layout it was validated for (checked without a device read). Without a plan the call
    validates everything itself (one device read) and plans for this call alone.
    """
    if plan is None:
        check_queries(q, k_cache, v_cache)
        scale = check_scale(scale, q.shape[2])
        args = (cu_seqlens_q, seq_lens, block_tables, max_seqlen_q, None, k_cache, v_cache, q.shape[1], q.dtype)
        step = check_step(*args, causal, sliding_window, k_scale, v_scale, backend, None, q.shape[0])
        plan = _build_plan(step, *args, causal, sliding_window, k_scale, v_scale)
    else:
        check_plan_attention(
            plan, q, k_cache, v_cache, cu_seqlens_q, seq_lens, block_tables, max_seqlen_q, causal, sliding_window,
            backend, k_scale, v_scale,
        )  # fmt: skip
        scale = check_scale(scale, q.shape[2])
    if plan.backend == "triton":
        from kernels.paged_varlen_attention import paged_varlen_attention_triton

        return paged_varlen_attention_triton(
            q, k_cache, v_cache, cu_seqlens_q, seq_lens, block_tables, max_seqlen_q, causal, scale,
            sliding_window, k_scale, v_scale,
        )  # fmt: skip
    return paged_varlen_attention_torch(
        q, k_cache, v_cache, block_tables, causal, scale, sliding_window, k_scale, v_scale, plan.index
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
    plan: AttentionPlan | None = None,
) -> None:
    """Write k/v [num_tokens, Hkv, D] into the paged caches in place at slot_mapping (slot < 0 is skipped).

    fp8 cache (torch.float8_e4m3fn): k_scale / v_scale (float32, shape [] / [1]; the torch backend also takes
    [Hkv]) are the scales the values are quantized with: the cache holds clamp(x / scale, +-448). A scale that
    holds 0 is not calibrated yet: it is set here, on the device, from the values written (kernels/fp8.py:
    calibrate_scale: amax * FP8_HEADROOM / 448), and stays fixed from then on.
    plan: this step's `plan_attention(...)`; slot_mapping must then be plan.slot_mapping and the caches and
    scales of the layout the plan was validated for (checked without a device read). Without a plan the call
    validates everything itself (one device read).
    """
    if plan is None:
        backend, all_live = check_store(k, v, k_cache, v_cache, slot_mapping, backend, k_scale, v_scale)
    else:
        check_plan_store(plan, k, v, k_cache, v_cache, slot_mapping, backend, k_scale, v_scale)
        backend, all_live = plan.backend, plan.all_slots_live
    if k_cache.dtype == FP8_DTYPE:
        written = None if all_live else slot_mapping >= 0
        calibrate_scale(k_scale, k, written)
        calibrate_scale(v_scale, v, written)
    if backend == "triton":
        from kernels.store_kv import store_kv_triton

        store_kv_triton(k, v, k_cache, v_cache, slot_mapping, k_scale, v_scale)
    else:
        store_kv_torch(k, v, k_cache, v_cache, slot_mapping, k_scale, v_scale, all_live)
