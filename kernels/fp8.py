"""fp8 (float8 e4m3) KV cache numerics: the dtype, its range, how a layer's scale is calibrated, quantization.

vLLM's `kv_cache_dtype="fp8"`: the cache holds `clamp(x / scale, +-448)` as `torch.float8_e4m3fn`, one byte per
value, with one float32 scale per layer (shape [] / [1]) or per KV head ([Hkv]); the attention kernels read
`cache.float() * scale`. A scale is a tensor, so it can be set on the device with no host sync: a scale that
holds 0 is "not calibrated yet", and `store_kv` (kernels/ops.py) sets it from the first values it writes
(`calibrate_scale`), after which it stays fixed, so tokens already stored stay decodable.
"""

from __future__ import annotations

import torch

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = float(torch.finfo(FP8_DTYPE).max)  # 448: the largest finite e4m3 value
# The first write's amax maps to 448 / FP8_HEADROOM: later values up to FP8_HEADROOM times larger still fit.
FP8_HEADROOM = 4.0


def quantize_fp8(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x [..., Hkv, D] / scale saturated to the e4m3 range, as float8_e4m3fn (past +-448 clamps, never inf).

    scale: one per tensor (shape [] / [1]) or one per KV head ([Hkv])."""
    return (x.float() / scale.float().reshape(-1, 1)).clamp_(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)


def calibrate_scale(scale: torch.Tensor, x: torch.Tensor, written: torch.Tensor | None = None) -> None:
    """Set an unset (0) fp8 scale in place from the values x about to be quantized with it; a set scale stays.

    The new scale is amax(|x|) * FP8_HEADROOM / 448, or 1.0 when that is 0 or not finite (an all-zero first
    write must not leave a 0 scale, which x / 0 would turn into NaN). scale: one element (amax over all of x) or
    one per KV head ([Hkv], x [..., Hkv, D]: amax per head). written: optional bool [num_tokens] (x's first dim),
    the tokens that are really stored (slot >= 0): the others do not count, and a write that stores nothing
    leaves the scale unset. Runs on x's device with no host sync, so it is cheap enough for every write.
    """
    if x.numel() == 0:
        return
    mags = x.detach().abs()
    if written is not None:
        mags = mags.masked_fill(~written.reshape(-1, *([1] * (x.dim() - 1))), 0)
    per_head = scale.numel() != 1
    amax = mags.movedim(-2, 0).reshape(mags.shape[-2], -1).amax(1) if per_head else mags.amax().reshape(1)
    fresh = amax.float() * (FP8_HEADROOM / FP8_MAX)
    fresh = torch.where((fresh > 0) & fresh.isfinite(), fresh, torch.ones_like(fresh))
    if written is not None:  # nothing stored: nothing to calibrate from
        fresh = torch.where(written.any(), fresh, torch.zeros_like(fresh))
    scale.copy_(torch.where(scale > 0, scale, fresh.reshape(scale.shape)))
