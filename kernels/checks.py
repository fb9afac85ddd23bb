"""Input checks of the kernels.ops entry points: each raises a ValueError naming the value and the fix.

They run before any kernel, so neither backend ever sees malformed metadata (on a GPU that would mean
silent out-of-bounds reads or racing writes). Tensor checks read no values; a step's values (offsets,
lengths, the block-table entries that will be read, the slots) are checked on the host, once per step, by
kernels/plan.py, on arrays read in one device read or handed in as the lists the tensors were made from.
"""

from __future__ import annotations

import numpy as np
import torch

from kernels.fp8 import FP8_DTYPE
from kernels.validate import check_int

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
MAX_HEAD_DIM = 256  # the Triton kernels keep one head row in registers; 256 covers every Llama-class model


def check_tensor(name: str, x: object, ndim: int, layout: str) -> torch.Tensor:
    """`x` is a tensor with `ndim` dims (`layout` is named in the error)."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor {layout}, got {type(x).__name__}")
    if x.dim() != ndim:
        raise ValueError(f"{name} has shape {tuple(x.shape)} but must be {ndim}-D {layout}")
    return x


def check_same(names: str, tensors: list[torch.Tensor]) -> None:
    """All tensors share dtype and device; dtype is a supported float type."""
    first = tensors[0]
    for t in tensors:
        if t.device != first.device:
            devices = ", ".join(str(x.device) for x in tensors)
            raise ValueError(f"{names} are on devices {devices}; move them to one device")
        if t.dtype != first.dtype:
            dtypes = ", ".join(str(x.dtype) for x in tensors)
            raise ValueError(f"{names} have dtypes {dtypes}; cast them to one dtype")
    if first.dtype not in FLOAT_DTYPES:
        raise ValueError(f"{names} have dtype {first.dtype}; use float32, float16 or bfloat16")


def check_heads(num_heads: int, num_kv_heads: int, head_dim: int, kv_name: str = "k") -> None:
    """Hq is a multiple of Hkv (GQA), both at least 1, and the head dim is within what the kernels support."""
    if num_heads < 1 or num_kv_heads < 1:
        raise ValueError(
            f"q has {num_heads} heads and {kv_name} has {num_kv_heads}; attention needs at least one query head "
            f"and one KV head (shapes [tokens, heads >= 1, head_dim])"
        )
    if num_heads % num_kv_heads != 0:
        raise ValueError(
            f"q has {num_heads} heads but {kv_name} has {num_kv_heads}; Hq must be a multiple of Hkv (GQA groups)"
        )
    if not 1 <= head_dim <= MAX_HEAD_DIM:
        raise ValueError(f"head_dim={head_dim} is not supported; use a head dim between 1 and {MAX_HEAD_DIM}")


def check_last_stride(**tensors: torch.Tensor) -> None:
    """The Triton kernels address rows with per-dim strides but need unit stride along the head dim.

    The one stride check: kernels.ops runs it before a Triton launch and the launchers assert it again,
    so a caller that skips validation (varlen_attention's check=False, a step plan) still cannot send a strided
    head dim to a kernel.
    """
    for name, t in tensors.items():
        if t.numel() > 0 and t.stride(-1) != 1:
            raise ValueError(f"{name}.stride(-1) is {t.stride(-1)} but must be 1 for Triton; pass {name}.contiguous()")


# The kernels compute scores in float32, so a scale must be a normal float32: a smaller one rounds to a
# subnormal or to 0 (flushed to 0 where the GPU flushes subnormals), a larger one to inf; either makes
# softmax's input NaN. No model's scale is anywhere near either end.
FLOAT32_TINY = torch.finfo(torch.float32).tiny  # the smallest normal float32, 1.2e-38
FLOAT32_MAX = torch.finfo(torch.float32).max  # 3.4e38


def check_scale(scale: object, head_dim: int) -> float:
    """A finite softmax scale > 0 within float32's normal range (a Python int or float, not a bool); None
    means head_dim ** -0.5. A scale <= 0 is refused: the torch backend's causal SDPA turns its masked scores
    into NaN (-inf x 0), and a negative scale inverts attention, which no model means."""
    if scale is None:
        return default_scale(scale, head_dim)
    fix = "must be a finite number > 0 (or None for head_dim ** -0.5)"
    shown = repr(scale) if len(repr(scale)) <= 40 else f"{repr(scale)[:37]}..."
    if isinstance(scale, bool) or isinstance(scale, torch.Tensor) or not isinstance(scale, (int, float)):
        raise ValueError(f"scale={shown} {fix}; pass a Python float, e.g. scale=float(x)")
    if not scale > 0 or scale == float("inf"):  # `not >` also catches NaN
        raise ValueError(f"scale={shown} {fix}")
    if not FLOAT32_TINY <= scale <= FLOAT32_MAX:  # compares an int too big for a float exactly
        raise ValueError(
            f"scale={shown} {fix}: the kernels compute in float32, so use a scale between "
            f"{FLOAT32_TINY:.3g} and {FLOAT32_MAX:.3g}"
        )
    return float(scale)


def default_scale(scale: float | None, head_dim: int) -> float:
    """The softmax scale a kernel gets: `scale` as a float, or head_dim ** -0.5 for None (no checks)."""
    return head_dim**-0.5 if scale is None else float(scale)


def check_cu_tensor(name: str, cu: object, device: torch.device) -> torch.Tensor:
    """cu_seqlens must be a non-empty 1-D int32 tensor on q's device (values are checked by check_offsets)."""
    cu = check_tensor(name, cu, 1, "int32 [batch + 1]")
    if cu.dtype != torch.int32:
        raise ValueError(f"{name} has dtype {cu.dtype}; pass {name}.to(torch.int32)")
    if cu.device != device:
        raise ValueError(f"{name} is on {cu.device} but q is on {device}; move {name} to {device}")
    if cu.numel() < 1:
        raise ValueError(f"{name} is empty; it must hold batch + 1 offsets starting at 0")
    return cu


def check_offsets(name: str, starts: list[int], total: int) -> None:
    """Offsets start at 0, never decrease and end at the packed length."""
    if starts[0] != 0:
        raise ValueError(f"{name}[0] is {starts[0]}; offsets must start at 0")
    for i in range(len(starts) - 1):
        if starts[i + 1] < starts[i]:
            raise ValueError(
                f"{name} decreases at index {i + 1} ({starts[i]} -> {starts[i + 1]}); offsets must be non-decreasing"
            )
    if starts[-1] != total:
        raise ValueError(f"{name}[-1] is {starts[-1]} but the packed tensor has {total} tokens; they must match")


def check_max_seqlen(name: str, value: object, starts: list[int]) -> int:
    """max_seqlen is an int at least the longest sequence in the offsets (larger is allowed)."""
    actual = max((b - a for a, b in zip(starts[:-1], starts[1:], strict=True)), default=0)
    value = check_int(name, value, minimum=None, kind="a Python int", hint=f"the longest sequence, here {actual}")
    if value < actual:
        raise ValueError(f"{name}={value} but the longest sequence has {actual} tokens; pass {name}={actual}")
    return value


def check_cache(k_cache: object, v_cache: object) -> tuple[torch.Tensor, torch.Tensor]:
    """Paged caches are 4-D [num_blocks, block_size, num_kv_heads, head_dim] of equal shape but for the value
    head dim (MLA's values are the first kv_lora_rank columns of its latent+rope key rows, so v_cache may be a
    narrower view of k_cache), with at least one slot per block, one KV head and one element per head (a 0 there
    would divide by zero or read nothing)."""
    layout = "[num_blocks, block_size, num_kv_heads, head_dim]"
    k_cache = check_tensor("k_cache", k_cache, 4, layout)
    v_cache = check_tensor("v_cache", v_cache, 4, layout)
    if k_cache.shape[:3] != v_cache.shape[:3]:
        raise ValueError(
            f"k_cache has shape {tuple(k_cache.shape)} but v_cache {tuple(v_cache.shape)}; they must match "
            "(all but the last dim, the value head dim)"
        )
    for dim, name in ((1, "block_size"), (2, "num_kv_heads"), (3, "head_dim")):
        if k_cache.shape[dim] < 1:
            raise ValueError(
                f"k_cache has {name}={k_cache.shape[dim]} (shape {tuple(k_cache.shape)}); a paged cache "
                f"{layout} needs {name} >= 1"
            )
    if v_cache.shape[3] < 1:
        raise ValueError(f"v_cache has head_dim=0 (shape {tuple(v_cache.shape)}); values need head_dim >= 1")
    return k_cache, v_cache


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


def check_slot_tensor(slot_mapping: object, device: torch.device) -> torch.Tensor:
    """slot_mapping is a 1-D int32 / int64 tensor on the cache's device (its values: check_slots)."""
    slot_mapping = check_tensor("slot_mapping", slot_mapping, 1, "int32/int64 [num_tokens]")
    if slot_mapping.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"slot_mapping has dtype {slot_mapping.dtype}; pass slot_mapping.to(torch.int64)")
    if slot_mapping.device != device:
        raise ValueError(f"slot_mapping is on {slot_mapping.device} but the cache is on {device}; move it to {device}")
    return slot_mapping


def check_window(sliding_window: object, causal: bool) -> int | None:
    """None (full attention) or a positive int window, which needs causal attention."""
    if sliding_window is None:
        return None
    window = check_int("sliding_window", sliding_window, kind="a positive int", hint="tokens, or None for no window")
    if not causal:
        raise ValueError(f"sliding_window={window} needs causal=True (Mistral's causal window)")
    return window


# ------------------------------------------------------------------------------------------- fp8 scales
def check_kv_scale_layout(k_cache: torch.Tensor, k_scale: object, v_scale: object) -> None:
    """fp8 caches need both scales (float32 tensors on the cache's device, one per layer or one per KV head);
    others none. Their values are the step's one device read (`scales_bad`; 0 means not calibrated yet)."""
    num_kv_heads, device = k_cache.shape[2], k_cache.device
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


def scales_bad(k_scale: torch.Tensor, v_scale: torch.Tensor) -> torch.Tensor:
    """int64 [1], 1 when a scale is negative, NaN or infinite (0, not calibrated yet, is fine): no sync."""
    both = torch.cat([k_scale.reshape(-1), v_scale.reshape(-1)])
    return (~(torch.isfinite(both) & (both >= 0)).all()).long().view(1)


def raise_bad_scales(k_scale: torch.Tensor, v_scale: torch.Tensor) -> None:
    """The ValueError for scales `scales_bad` refused."""
    values = torch.cat([k_scale.reshape(-1), v_scale.reshape(-1)]).tolist()
    raise ValueError(
        f"k_scale / v_scale hold {values}; scales must be finite and >= 0 (0 means not calibrated yet: "
        "store_kv sets it from the first values it writes)"
    )


def check_triton_store_scales(k_scale: torch.Tensor | None, v_scale: torch.Tensor | None) -> None:
    """The Triton store takes one scale per layer; per-KV-head scales are the torch backend's."""
    for name, s in (("k_scale", k_scale), ("v_scale", v_scale)):
        if s is not None and s.numel() != 1:
            raise ValueError(
                f"{name} has shape {tuple(s.shape)} but the Triton store_kv takes one scale per layer (shape [] "
                "or [1]); pass one scale per layer, or backend='torch' for per-KV-head scales"
            )


# ------------------------------------------------------------------------------- a step's values (host)
def check_slots(slots: np.ndarray, num_blocks: int, block_size: int) -> bool:
    """Every live slot names a cache slot and none is written twice; returns whether no slot is skipped."""
    if slots.size == 0:
        return True
    num_slots = num_blocks * block_size
    largest = int(slots.max())
    if largest >= num_slots:
        raise ValueError(
            f"slot_mapping holds slot {largest} but the cache has {num_blocks} blocks x {block_size} = "
            f"{num_slots} slots; slots must be < {num_slots} (or negative to skip)"
        )
    live = np.sort(slots[slots >= 0])
    twice = live[1:][live[1:] == live[:-1]]
    if twice.size:
        raise ValueError(
            f"slot_mapping writes the same slot twice (slot {int(twice.max())}); each new token needs its own slot"
        )
    return live.size == slots.size


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


def check_read_blocks(
    starts: list[int], lens: list[int], tables: np.ndarray, num_blocks: int, block_size: int, window: int | None
) -> None:
    """Every block-table entry a sequence's queries read names a cache block (lengths already checked).

    Sequence i reads columns [first, last) with first = max(0, p0 - window + 1) // block_size (0 without a
    window), p0 = seq_lens[i] - len_q its first query's position, and last = ceil(seq_lens[i] / block_size);
    a sequence with no queries reads nothing. Other entries (freed behind the window, padding) may hold anything.
    """
    if tables.size == 0 or (tables.min() >= 0 and tables.max() < num_blocks):
        return  # every entry names a cache block, so every entry read does
    seq_lens, len_q = np.asarray(lens), np.diff(starts)
    first = np.zeros_like(seq_lens) if window is None else np.maximum(seq_lens - len_q - window + 1, 0) // block_size
    last = np.where(len_q > 0, -(-seq_lens // block_size), 0)
    cols = np.arange(tables.shape[1])[None, :]
    bad = (cols >= first[:, None]) & (cols < last[:, None]) & ((tables < 0) | (tables >= num_blocks))
    hits = np.flatnonzero(bad)
    if hits.size:
        seq, col = divmod(int(hits[0]), tables.shape[1])
        raise ValueError(
            f"block_tables[{seq}, {col}] = {int(tables[seq, col])} is outside the cache's {num_blocks} blocks; "
            "entries of blocks the sequence's queries read (from the block holding its first query's window "
            f"start to its last token) must be in [0, {num_blocks})"
        )
