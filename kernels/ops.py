"""Public kernel entry points: validate the inputs, pick a backend, dispatch. Nothing else lives here.

Vocabulary follows flash-attn's `flash_attn_varlen_func` (packed tokens + `cu_seqlens`) and vLLM's
PagedAttention (`block_tables`, `seq_lens`, `slot_mapping`; Kwon et al., SOSP 2023). Every error a caller
can cause is a ValueError that names the bad value and the fix, raised here, before any kernel runs, so
neither backend ever sees malformed metadata (which on a GPU would mean silent out-of-bounds reads).

Each kernel X has a Triton launcher `X_triton` in kernels/X.py and a plain-torch twin `X_torch` in
kernels/X_torch.py (the CPU production path): varlen_attention, paged_attention, paged_varlen_attention,
store_kv. The checks live in kernels/checks.py and kernels/checks_paged.py. Triton modules are imported
lazily so this file works without triton installed.

`check=False` skips validation: for a caller (a model layer) whose step metadata and cache layout an
earlier call already validated, so each layer pays only for the dispatch.
"""

from __future__ import annotations

import torch

from kernels.backend import resolve_backend
from kernels.checks import (
    check_cache,
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
from kernels.checks_paged import check_kv_scales, check_paged, check_paged_varlen
from kernels.paged_attention_torch import TokenSlots, paged_attention_torch
from kernels.paged_varlen_attention_torch import VarlenIndex, paged_varlen_attention_torch
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
    index: TokenSlots | None = None,
    *,
    check: bool = True,
) -> torch.Tensor:
    """Decode attention through block tables: q [num_seqs, Hq, D] -> [num_seqs, Hq, D].

    Sequence i's token t lives in k_cache[block_tables[i, t // block_size], t % block_size]; only the first
    seq_lens[i] tokens are read. A sequence with seq_lens 0 outputs zeros.

    index: optional `token_slots(block_tables, seq_lens, block_size)` of this batch for the torch backend (a
    model builds it once per step and shares it between its layers); the Triton kernel reads the tables itself.
    check=False skips every input check and dispatches straight to the backend: only for a batch whose block
    tables, lengths and cache layout an earlier call already validated; malformed inputs are then undefined.
    """
    if check:
        scale, backend = check_paged(q, k_cache, v_cache, block_tables, seq_lens, scale, backend)
    else:
        scale, backend = default_scale(scale, q.shape[2]), resolve_backend(backend, q.device)
    if backend == "triton":
        from kernels.paged_attention import paged_attention_triton

        return paged_attention_triton(q, k_cache, v_cache, block_tables, seq_lens, scale)
    return paged_attention_torch(q, k_cache, v_cache, block_tables, seq_lens, scale, index=index)


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
    index: VarlenIndex | None = None,
    check: bool = True,
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
    cache holds x / scale and the kernels attend to cache.float() * scale. index: the step's
    `paged_varlen_index(...)` (kernels/paged_varlen_attention_torch.py) for the torch backend, built once per step.
    check=False skips every input check: only for a step whose metadata an earlier call already validated.
    """
    if check:
        args = (q, k_cache, v_cache, cu_seqlens_q, seq_lens, block_tables, max_seqlen_q, causal, scale)
        scale, backend, *host = check_paged_varlen(*args, sliding_window, backend, k_scale, v_scale)
    else:
        scale, backend, host = default_scale(scale, q.shape[2]), resolve_backend(backend, q.device), None
    if backend == "triton":
        from kernels.paged_varlen_attention import paged_varlen_attention_triton

        return paged_varlen_attention_triton(
            q, k_cache, v_cache, cu_seqlens_q, seq_lens, block_tables, max_seqlen_q, causal, scale,
            sliding_window, k_scale, v_scale,
        )  # fmt: skip
    return paged_varlen_attention_torch(
        q, k_cache, v_cache, cu_seqlens_q, seq_lens, block_tables, causal, scale, sliding_window, k_scale, v_scale,
        host=host, index=index,
    )  # fmt: skip


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
    check: bool = True,
) -> None:
    """Write k/v [num_tokens, Hkv, D] into the paged caches in place at slot_mapping (slot < 0 is skipped).

    fp8 cache (torch.float8_e4m3fn): k_scale / v_scale (float32, shape [] / [1]; the torch backend also takes
    [Hkv]) are the scales the values are quantized with: the cache holds clamp(x / scale, +-448).
    check=False skips every input check and dispatches straight to the backend: only for a slot mapping and
    cache layout an earlier call already validated; malformed inputs are then undefined.
    """
    if check:
        backend = _check_store(k, v, k_cache, v_cache, slot_mapping, backend)
        check_kv_scales(k_cache, k_scale, v_scale, k.device)
    else:
        backend = resolve_backend(backend, k.device)
    if backend == "triton":
        from kernels.store_kv import store_kv_triton

        store_kv_triton(k, v, k_cache, v_cache, slot_mapping, k_scale, v_scale)
    else:
        store_kv_torch(k, v, k_cache, v_cache, slot_mapping, k_scale, v_scale)


def _check_store(k: object, v: object, k_cache: object, v_cache: object, slot_mapping: object, backend: str) -> str:
    """Validate store_kv's inputs (matching shapes, one in-range slot per token, none twice); returns the backend."""
    k = check_tensor("k", k, 3, "[num_tokens, num_kv_heads, head_dim]")
    v = check_tensor("v", v, 3, "[num_tokens, num_kv_heads, head_dim]")
    k_cache, v_cache = check_cache(k_cache, v_cache)
    if k_cache.dtype == torch.float8_e4m3fn:  # float K/V quantized into an fp8 cache (scales: check_kv_scales)
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
    slot_mapping = check_tensor("slot_mapping", slot_mapping, 1, "int32/int64 [num_tokens]")
    if slot_mapping.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"slot_mapping has dtype {slot_mapping.dtype}; pass slot_mapping.to(torch.int64)")
    if slot_mapping.device != k.device:
        raise ValueError(f"slot_mapping is on {slot_mapping.device} but k is on {k.device}; move it to {k.device}")
    if slot_mapping.shape[0] != k.shape[0]:
        raise ValueError(f"slot_mapping has {slot_mapping.shape[0]} slots but k has {k.shape[0]} tokens; give one each")
    num_slots = num_blocks * block_size
    # One read-back of the (per-step, small) mapping; plain Python is faster than a chain of tiny torch ops.
    live = [s for s in slot_mapping.tolist() if s >= 0]
    if live and max(live) >= num_slots:
        raise ValueError(
            f"slot_mapping holds slot {max(live)} but the cache has {num_blocks} blocks x {block_size} = "
            f"{num_slots} slots; slots must be < {num_slots} (or negative to skip)"
        )
    if len(set(live)) != len(live):
        raise ValueError("slot_mapping writes the same slot twice; each new token needs its own slot")
    backend = resolve_backend(backend, k.device)
    if backend == "triton":
        check_last_stride(k=k, v=v, k_cache=k_cache, v_cache=v_cache)
    return backend
