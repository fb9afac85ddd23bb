"""Rotary position embeddings (RoFormer, Su et al., 2021, arXiv 2104.09864), Llama / Hugging Face layout.

The head dimension is split in two halves (not interleaved pairs): x = [x1, x2] rotates to
[x1 cos - x2 sin, x2 cos + x1 sin], the layout Llama, Mistral and Qwen2 checkpoints were trained with.
`rope_tables` builds one step's cos / sin once; every layer's `apply_rope` reuses them.
Frequencies follow `rope_scaling`: "linear" divides every frequency by `factor` (position interpolation,
Chen et al., 2023, arXiv 2306.15595); "llama3" divides only the low frequencies and blends the middle band,
as in Meta's Llama 3.1 reference code.
"""

from __future__ import annotations

import math
from typing import Any

import torch


def rope_inv_freq(head_dim: int, theta: float, rope_scaling: dict[str, Any] | None = None) -> torch.Tensor:
    """fp32 [head_dim // 2] inverse frequencies theta ** (-2i / head_dim), with the config's scaling applied."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    if rope_scaling is None:
        return inv_freq
    rope_type = rope_scaling.get("rope_type", rope_scaling.get("type", "default"))
    if rope_type == "default":
        return inv_freq
    factor = float(rope_scaling["factor"])
    if rope_type == "linear":
        return inv_freq / factor
    if rope_type == "llama3":
        low = float(rope_scaling["low_freq_factor"])
        high = float(rope_scaling["high_freq_factor"])
        old_len = float(rope_scaling.get("original_max_position_embeddings", 8192))
        wavelen = 2 * math.pi / inv_freq
        # Long wavelengths (beyond the original context / low) are interpolated; short ones kept as trained.
        scaled = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
        smooth = (old_len / wavelen - low) / (high - low)
        blended = (1 - smooth) * scaled / factor + smooth * scaled
        is_medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
        return torch.where(is_medium, blended, scaled)
    raise ValueError(f"rope_type {rope_type!r} is not supported; use 'default', 'linear' or 'llama3'")


def rope_tables(
    positions: torch.Tensor, inv_freq: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotary tables for integer `positions` [..., T]: cos and signed sin, each [..., T, 1, D], in `dtype`.

    Angles are computed in fp32 and cast. The rotation [x1 cos - x2 sin, x2 cos + x1 sin] equals
    x * cos + [x2, x1] * [-sin, sin] (sin's first half negated here, once per step): negation is exact, so
    `apply_rope` gives the textbook rotate-half formula's values bit for bit with one op fewer per call.
    The 1 broadcasts over the heads.
    """
    freqs = positions.float()[..., None] * inv_freq.to(positions.device)  # [..., T, D/2]
    cos = freqs.cos().to(dtype)
    sin = freqs.sin().to(dtype)
    # Both halves of the head dim share a frequency: cos [c, c], signed sin [-s, s].
    return torch.cat((cos, cos), dim=-1).unsqueeze(-2), torch.cat((-sin, sin), dim=-1).unsqueeze(-2)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """Rotate x [..., T, H, D] by `rope_tables` output: x * cos + swap_halves(x) * signed_sin."""
    swapped = x.unflatten(-1, (2, x.shape[-1] // 2)).flip(-2).flatten(-2)  # [x2, x1], a new tensor
    return (x * cos).add_(swapped.mul_(signed_sin))
