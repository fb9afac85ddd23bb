"""MLAConfig: the multi-head latent attention numbers of a DeepSeek-V2 / V3 config.json.

Multi-head latent attention (DeepSeek-V2, arXiv 2405.04434, §2.1) compresses each token's keys and values into
one latent of `kv_lora_rank` (after `kv_a_layernorm`) plus one rotary key of `qk_rope_head_dim` shared by every
head (the "decoupled" rope key); `kv_b_proj` expands the latent into per-head no-rope keys (`qk_nope_head_dim`)
and values (`v_head_dim`). Queries come from `q_proj`, or from a low-rank `q_a_proj` -> `q_a_layernorm` ->
`q_b_proj` when `q_lora_rank` is set. A paged cache therefore stores `kv_lora_rank + qk_rope_head_dim` values
per token and layer, whatever the head count: DeepSeek-V3's `num_key_value_heads` (128) describes the expanded
keys of training, not what a serving engine keeps (vLLM's MLAAttentionSpec: vllm/v1/kv_cache_interface.py).

The engine runs the attention of both families as transformers does (models/deepseek_v2, models/deepseek_v3):
the softmax scale is qk_head_dim ** -0.5, times mscale(factor, mscale_all_dim) ** 2 under yarn rope scaling.
DeepSeek-V2 rotates interleaved pairs (its complex-number rope); V3 says so with `rope_interleave`. Layers from
`first_k_dense_replace` on are mixture-of-experts layers; the engine has no MoE, so a config that has any is
refused here by naming them, never run with a dense MLP in their place; so is a latent row wider than the
kernels' head-dim limit (kernels/checks.py: MAX_HEAD_DIM), which today's DeepSeek checkpoints (512 + 64) are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from kernels.checks import MAX_HEAD_DIM

# config.json "architectures" entry -> its transformers default for first_k_dense_replace.
DEEPSEEK_ARCHITECTURES = {"DeepseekV2ForCausalLM": 0, "DeepseekV3ForCausalLM": 3}


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN's attention temperature term 0.1 * mscale * ln(factor) + 1 (1 for factor <= 1), as DeepSeek uses it."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def _whole(cfg: dict[str, Any], key: str, default: Any = None) -> int:
    value = cfg.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{key}={value!r} must be a whole number >= 1 (a DeepSeek-V2/V3 config.json has one)")
    return value


@dataclass(frozen=True, slots=True)
class MLAConfig:
    """The latent attention's dimensions (names as in config.json) and its softmax scale."""

    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    q_lora_rank: int | None = None  # None: queries from one q_proj
    rope_interleave: bool = True  # rotary pairs (x0, x1), (x2, x3), ... instead of two halves
    softmax_scale: float = 0.0  # 0: qk_head_dim ** -0.5

    def __post_init__(self) -> None:
        for name in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1")
        if self.qk_rope_head_dim % 2:
            raise ValueError(f"qk_rope_head_dim={self.qk_rope_head_dim} must be even (rotary embeddings rotate pairs)")
        if self.q_lora_rank is not None and self.q_lora_rank < 1:
            raise ValueError(f"q_lora_rank={self.q_lora_rank} must be >= 1 or null")
        if self.latent_dim > MAX_HEAD_DIM:  # the absorbed decode reads the whole row as one key head
            raise ValueError(
                f"kv_lora_rank + qk_rope_head_dim = {self.kv_lora_rank} + {self.qk_rope_head_dim} = {self.latent_dim} "
                f"is wider than the {MAX_HEAD_DIM} values per cache row this engine's attention kernels hold; "
                f"checkpoints of this size are not supported (DeepSeek's own use 512 + 64)"
            )
        if self.softmax_scale == 0.0:
            object.__setattr__(self, "softmax_scale", self.qk_head_dim**-0.5)

    @property
    def qk_head_dim(self) -> int:
        """Per-head query/key width: the no-rope part plus the rope part."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def latent_dim(self) -> int:
        """Values one token keeps per layer in the paged cache: kv_lora_rank + qk_rope_head_dim."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    def cache_bytes_per_token(self, num_layers: int, dtype_bytes: int) -> int:
        """Bytes one token holds in a latent cache: layers * (kv_lora_rank + qk_rope_head_dim) * dtype bytes."""
        return num_layers * self.latent_dim * dtype_bytes

    @classmethod
    def from_hf(cls, cfg: dict[str, Any], architecture: str, rope: dict[str, Any]) -> MLAConfig:
        """Read a DeepSeek-V2/V3 config.json dict; `rope` is its rope_parameters / rope_scaling (theta removed).

        Refuses, by name, what the engine does not run: mixture-of-experts layers and biased projections."""
        layers = _whole(cfg, "num_hidden_layers")
        dense = cfg.get("first_k_dense_replace", DEEPSEEK_ARCHITECTURES[architecture])
        if isinstance(dense, bool) or not isinstance(dense, int) or dense < 0:
            raise ValueError(f"first_k_dense_replace={dense!r} must be a whole number >= 0")
        if dense < layers:
            moe = list(range(dense, layers))
            shown = ", ".join(map(str, moe[:8])) + (f" … {moe[-1]}" if len(moe) > 8 else "")
            raise ValueError(
                f"layers {shown} ({len(moe)} of {layers}) are mixture-of-experts layers (first_k_dense_replace="
                f"{dense} < num_hidden_layers={layers}); this engine runs dense MLP layers only, so it refuses the "
                f"model rather than run them as something else; use a folder with first_k_dense_replace >= {layers}"
            )
        if cfg.get("attention_bias", False):
            raise ValueError(
                "attention_bias=true is not supported for MLA; DeepSeek checkpoints have bias-free projections"
            )
        q_lora = cfg.get("q_lora_rank")
        rope_dim = _whole(cfg, "qk_rope_head_dim")
        nope = _whole(cfg, "qk_nope_head_dim")
        scale = (nope + rope_dim) ** -0.5
        yarn = rope.get("rope_type", rope.get("type", "default")) == "yarn"
        if yarn and "factor" not in rope:
            raise ValueError("rope scaling 'yarn' needs 'factor' in the config")
        if yarn and rope.get("mscale_all_dim"):
            scale *= yarn_mscale(float(rope["factor"]), float(rope["mscale_all_dim"])) ** 2
        return cls(
            kv_lora_rank=_whole(cfg, "kv_lora_rank"),
            qk_nope_head_dim=nope,
            qk_rope_head_dim=rope_dim,
            v_head_dim=_whole(cfg, "v_head_dim"),
            q_lora_rank=None if q_lora is None else _whole(cfg, "q_lora_rank"),
            # DeepSeek-V2 always rotates interleaved pairs (complex multiplication); V3 says which in its config.
            rope_interleave=architecture == "DeepseekV2ForCausalLM" or bool(cfg.get("rope_interleave", True)),
            softmax_scale=scale,
        )

    def to_hf(self) -> dict[str, Any]:
        """The config.json fields this config was read from."""
        return {
            "kv_lora_rank": self.kv_lora_rank,
            "qk_nope_head_dim": self.qk_nope_head_dim,
            "qk_rope_head_dim": self.qk_rope_head_dim,
            "v_head_dim": self.v_head_dim,
            "q_lora_rank": self.q_lora_rank,
            "rope_interleave": self.rope_interleave,
        }
