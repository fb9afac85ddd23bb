"""Input checks shared by the kernels.ops entry points: each raises a ValueError naming the value and the fix.

They run before any kernel, so neither backend ever sees malformed metadata (on a GPU that would mean
silent out-of-bounds reads). Data-dependent checks are the caller's job to batch into one device sync.
"""

from __future__ import annotations

import torch

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
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name}={value!r} must be a Python int (the longest sequence, here {actual})")
    if value < actual:
        raise ValueError(f"{name}={value} but the longest sequence has {actual} tokens; pass {name}={actual}")
    return value


def check_cache(k_cache: object, v_cache: object) -> tuple[torch.Tensor, torch.Tensor]:
    """Paged caches are 4-D [num_blocks, block_size, num_kv_heads, head_dim] of equal shape, with at least one
    slot per block, one KV head and one element per head (a 0 there would divide by zero or read nothing)."""
    layout = "[num_blocks, block_size, num_kv_heads, head_dim]"
    k_cache = check_tensor("k_cache", k_cache, 4, layout)
    v_cache = check_tensor("v_cache", v_cache, 4, layout)
    if k_cache.shape != v_cache.shape:
        raise ValueError(
            f"k_cache has shape {tuple(k_cache.shape)} but v_cache {tuple(v_cache.shape)}; they must match"
        )
    for dim, name in ((1, "block_size"), (2, "num_kv_heads"), (3, "head_dim")):
        if k_cache.shape[dim] < 1:
            raise ValueError(
                f"k_cache has {name}={k_cache.shape[dim]} (shape {tuple(k_cache.shape)}); a paged cache "
                f"{layout} needs {name} >= 1"
            )
    return k_cache, v_cache
