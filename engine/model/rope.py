"""Rotary position embeddings (RoFormer, Su et al., 2021, arXiv 2104.09864), Llama / Hugging Face layout.

The head dimension is split in two halves (not interleaved pairs): x = [x1, x2] rotates to
[x1 cos - x2 sin, x2 cos + x1 sin], the layout Llama, Mistral and Qwen2 checkpoints were trained with.
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


def rope_cos_sin(
    positions: torch.Tensor, inv_freq: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin of shape [*positions.shape, head_dim] for integer `positions`, computed in fp32, cast to dtype."""
    freqs = positions.float()[..., None] * inv_freq.to(positions.device)  # [..., D/2]
    emb = torch.cat((freqs, freqs), dim=-1)  # [..., D]: both halves share a frequency
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x [..., T, H, D] by cos/sin [..., T, D] (broadcast over the head dim H)."""
    cos = cos.unsqueeze(-2)  # [..., T, 1, D]
    sin = sin.unsqueeze(-2)
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)  # rotate_half: [-x2, x1]
    return x * cos + rotated * sin
