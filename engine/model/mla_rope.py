"""DeepSeek's rotary embedding for the decoupled rope key: YaRN frequencies and interleaved pairs.

MLA rotates only `qk_rope_head_dim` columns of each query head and the one shared rope key. DeepSeek's
checkpoints rotate interleaved pairs (x0, x1), (x2, x3), ... by one frequency each; gathering the even columns
then the odd ones turns that into the two-halves layout engine/model/rope.py rotates, and the rotated result is
left in that layout, as transformers' DeepseekV3 `apply_rotary_pos_emb_interleave` leaves it (queries and keys
share the permutation, so their dot products are the same). Context extension uses YaRN (Peng et al., 2023,
arXiv 2309.00071): frequencies blended between interpolated and extrapolated by a linear ramp over the
rotation counts beta_fast .. beta_slow, and cos / sin multiplied by an attention factor, as transformers'
`_compute_yarn_parameters` does.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from engine.model.mla_config import yarn_mscale
from engine.model.rope import rope_inv_freq


def _rope_type(rope_scaling: dict[str, Any] | None) -> str:
    return "default" if rope_scaling is None else rope_scaling.get("rope_type", rope_scaling.get("type", "default"))


def mla_inv_freq(dim: int, theta: float, rope_scaling: dict[str, Any] | None) -> torch.Tensor:
    """fp32 [dim // 2] inverse frequencies of the rope key: plain, or YaRN-blended."""
    if _rope_type(rope_scaling) != "yarn":
        return rope_inv_freq(dim, theta, rope_scaling)
    factor = float(rope_scaling["factor"])
    original = float(rope_scaling["original_max_position_embeddings"])
    beta_fast = rope_scaling.get("beta_fast") or 32
    beta_slow = rope_scaling.get("beta_slow") or 1

    def correction_dim(rotations: float) -> float:  # the dim whose wavelength turns `rotations` times in context
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if rope_scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    high = high + 0.001 if low == high else high  # a zero-width ramp would divide by zero
    ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    extrapolated = rope_inv_freq(dim, theta)  # [dim / 2]
    keep = 1 - ramp  # 1: high frequencies kept as trained; 0: low ones interpolated by the factor
    return extrapolated / factor * (1 - keep) + extrapolated * keep


def mla_attention_factor(rope_scaling: dict[str, Any] | None) -> float:
    """The factor YaRN multiplies cos and sin by (1.0 without YaRN)."""
    if _rope_type(rope_scaling) != "yarn":
        return 1.0
    if rope_scaling.get("attention_factor") is not None:
        return float(rope_scaling["attention_factor"])
    factor = float(rope_scaling["factor"])
    mscale, mscale_all_dim = rope_scaling.get("mscale"), rope_scaling.get("mscale_all_dim")
    if mscale and mscale_all_dim:
        return yarn_mscale(factor, float(mscale)) / yarn_mscale(factor, float(mscale_all_dim))
    return yarn_mscale(factor)


def deinterleave(x: torch.Tensor) -> torch.Tensor:
    """[..., D] with pairs (x0, x1), (x2, x3), ... -> [x0, x2, ..., x1, x3, ...] (the two-halves layout)."""
    return torch.cat((x[..., 0::2], x[..., 1::2]), dim=-1)
