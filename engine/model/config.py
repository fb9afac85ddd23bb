"""ModelConfig: the architecture numbers of a Llama-family decoder, read from a Hugging Face config.json.

Covers the three families the engine runs: Llama 2/3 (Touvron et al., 2023, arXiv 2307.09288; Llama 3 adds
"llama3" rope scaling), Mistral (Jiang et al., 2023, arXiv 2310.06825; sliding-window attention) and Qwen2
(Yang et al., 2024, arXiv 2407.10671; biases on the q/k/v projections). Both config.json dialects are read:
transformers 4 writes `rope_theta` + `rope_scaling`, transformers 5 writes `rope_parameters`.
Anything the engine does not implement is rejected here with a message, not silently run wrong.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from engine.model.mla_config import MLAConfig

# config.json "architectures" entry -> family name used below.
ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2",
    "DeepseekV2ForCausalLM": "deepseek_v2",  # multi-head latent attention: engine/model/mla_config.py
    "DeepseekV3ForCausalLM": "deepseek_v3",
}
ROPE_TYPES = ("default", "linear", "llama3")
MLA_ROPE_TYPES = ("default", "yarn")  # DeepSeek's configs use yarn (engine/model/mla_rope.py)
# Per-layer attention kinds (config.json `layer_types`) the engine runs; transformers knows more (chunked
# local attention, linear attention, ...), and a layer of any other kind is refused by name, never run as one of these.
LAYER_TYPES = ("full_attention", "sliding_attention")


def real_number(field: str, value: Any) -> float:
    """`value` as a float when it is a finite real number (not a bool, text or null); else ValueError naming `field`.

    Python's json reads `NaN`, `Infinity` and `-Infinity`, and a NaN compares False with everything, so a
    `rope_theta <= 0` check alone lets it through: the model then loads and emits token 0 forever."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{field}={value!r} must be a number (a JSON number such as 1e-05, not text or true/false)")
    if not math.isfinite(value):
        raise ValueError(f"{field}={value!r} is not a finite number; a real checkpoint's config.json has a finite one")
    return float(value)


# The float fields of a config and why each must be positive: a zero or negative one has no meaning, and the
# model would produce NaN (an rsqrt of a negative mean square, 0 ** -x frequencies) or silent garbage.
_POSITIVE = {
    "rms_norm_eps": "RMSNorm adds it under a square root; checkpoints use 1e-06 … 1e-05",
    "rope_theta": "the base of the rotary wavelengths; checkpoints use 10,000 … 1,000,000",
}
_POSITIVE_SCALING = {
    "factor": "how many times the trained context is stretched",
    "low_freq_factor": "llama3 rope scaling divides the original context by it",
    "high_freq_factor": "llama3 rope scaling divides the original context by it",
    "original_max_position_embeddings": "the context the checkpoint was trained at",
}


def _check_real_numbers(config: ModelConfig) -> None:
    """Refuse a float field that no checkpoint can have (NaN, infinite, not a number, not positive), by name."""
    for field, why in _POSITIVE.items():
        if real_number(field, getattr(config, field)) <= 0:
            raise ValueError(f"{field}={getattr(config, field)!r} must be > 0 ({why})")
    scaling = config.rope_scaling or {}
    for key, why in _POSITIVE_SCALING.items():
        if key in scaling and real_number(f"rope scaling {key}", scaling[key]) <= 0:
            raise ValueError(f"rope scaling {key}={scaling[key]!r} must be > 0 ({why})")
    if "low_freq_factor" in scaling and "high_freq_factor" in scaling:
        low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
        if high <= low:  # the blend between them divides by high - low
            raise ValueError(f"rope scaling high_freq_factor={high!r} must be > low_freq_factor={low!r}")


@dataclass(slots=True)
class ModelConfig:
    """Architecture of a Llama-family decoder; validates itself on construction."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int | None = None  # None: hidden_size // num_attention_heads
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: dict[str, Any] | None = None  # {"rope_type": "linear" | "llama3", "factor": ..., ...}
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    qkv_bias: bool = False  # Qwen2, or Llama with attention_bias
    o_bias: bool = False  # Llama with attention_bias also biases o_proj; Qwen2 does not
    sliding_window: int | None = None  # Mistral: the token at position p sees keys p - W + 1 .. p only
    # Per-layer kinds (Qwen2's `layer_types`): a "sliding_attention" layer attends within sliding_window, a
    # "full_attention" one sees every token. None: every layer alike (sliding when sliding_window is set).
    layer_types: tuple[str, ...] | None = None
    architecture: str = "LlamaForCausalLM"
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    # DeepSeek-V2/V3: the latent attention's numbers; then head_dim is qk_rope_head_dim (the rotary width) and
    # num_key_value_heads is 1 (the latent cache's one row per token and layer)
    mla: MLAConfig | None = None

    def __post_init__(self) -> None:
        if self.architecture not in ARCHITECTURES:
            raise ValueError(
                f"architecture {self.architecture!r} is not supported; supported: {', '.join(ARCHITECTURES)}"
            )
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1")
        if self.num_key_value_heads < 1 or self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads={self.num_attention_heads} must be a multiple of "
                f"num_key_value_heads={self.num_key_value_heads} (grouped-query attention)"
            )
        if self.head_dim is None:
            if self.hidden_size % self.num_attention_heads:
                raise ValueError(
                    f"hidden_size={self.hidden_size} is not divisible by num_attention_heads="
                    f"{self.num_attention_heads}; give head_dim explicitly"
                )
            self.head_dim = self.hidden_size // self.num_attention_heads
        if self.head_dim < 2 or self.head_dim % 2:
            raise ValueError(f"head_dim={self.head_dim} must be even (rotary embeddings rotate pairs)")
        if self.rope_scaling is not None:
            rope_type = self.rope_scaling.get("rope_type", self.rope_scaling.get("type", "default"))
            supported = ROPE_TYPES if self.mla is None else MLA_ROPE_TYPES
            if rope_type not in supported:
                raise ValueError(f"rope_type {rope_type!r} is not supported; supported: {', '.join(supported)}")
            needed = {
                "linear": ("factor",),
                "llama3": ("factor", "low_freq_factor", "high_freq_factor"),
                "yarn": ("factor", "original_max_position_embeddings"),
            }
            for key in needed.get(rope_type, ()):
                if key not in self.rope_scaling:
                    raise ValueError(f"rope scaling {rope_type!r} needs {key!r} in the config")
        _check_real_numbers(self)
        if self.sliding_window is not None and self.sliding_window < 1:
            raise ValueError(f"sliding_window={self.sliding_window} must be >= 1 or None")
        if self.layer_types is not None:
            self.layer_types = check_layer_types(self.layer_types, self.num_hidden_layers)
            if "sliding_attention" in self.layer_types and self.sliding_window is None:
                raise ValueError(
                    f"layer {self.layer_types.index('sliding_attention')} is 'sliding_attention' but sliding_window "
                    "is None; give the window in tokens, or make the layer 'full_attention'"
                )

    @property
    def layer_sliding_windows(self) -> tuple[int | None, ...]:
        """Each layer's window: sliding_window for a sliding layer, None for full attention (as transformers'
        Qwen2Attention sets `sliding_window` per layer; a sliding layer with no window set attends fully)."""
        if self.layer_types is None:
            return (self.sliding_window,) * self.num_hidden_layers
        return tuple(self.sliding_window if t == "sliding_attention" else None for t in self.layer_types)

    @property
    def is_hybrid(self) -> bool:
        """True when layers attend differently (some within a window, some fully): several KV-cache groups."""
        return len(set(self.layer_sliding_windows)) > 1

    @property
    def num_queries_per_kv(self) -> int:
        """Query heads sharing one K/V head (1 = MHA, num_attention_heads = MQA)."""
        return self.num_attention_heads // self.num_key_value_heads

    @property
    def max_model_len(self) -> int:
        """Longest context the engine serves: max_position_embeddings (a sliding window does not cap it: the
        kernels mask keys outside the window and the block manager frees their blocks)."""
        return self.max_position_embeddings

    @classmethod
    def from_hf(cls, cfg: dict[str, Any]) -> ModelConfig:
        """Read a Hugging Face config.json dict (transformers 4 or 5 layout)."""
        archs = cfg.get("architectures") or []
        if not archs:
            family = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM"}
            archs = [family.get(cfg.get("model_type"), f"model_type={cfg.get('model_type')!r}")]
        arch = archs[0]
        if arch not in ARCHITECTURES:
            raise ValueError(f"architecture {arch!r} is not supported; supported: {', '.join(ARCHITECTURES)}")
        family = ARCHITECTURES[arch]
        if cfg.get("hidden_act", "silu") != "silu":
            raise ValueError(f"hidden_act={cfg['hidden_act']!r} is not supported; only 'silu' (SwiGLU)")
        if cfg.get("mlp_bias", False):
            raise ValueError("mlp_bias=true is not supported; Llama-family checkpoints have bias-free MLPs")
        if family.startswith("deepseek"):
            return cls.from_hf_mla(cfg, arch)
        if cfg.get("partial_rotary_factor", 1.0) != 1.0:
            raise ValueError(f"partial_rotary_factor={cfg['partial_rotary_factor']} is not supported; only 1.0")
        try:
            required = {k: int(cfg[k]) for k in ("vocab_size", "hidden_size", "intermediate_size")}
            required["num_hidden_layers"] = int(cfg["num_hidden_layers"])
            required["num_attention_heads"] = int(cfg["num_attention_heads"])
        except KeyError as exc:
            raise ValueError(f"config.json is missing required key {exc.args[0]!r}") from exc
        # transformers 5: rope_parameters {"rope_type", "rope_theta", ...}; transformers 4: rope_theta + rope_scaling.
        rope = dict(cfg.get("rope_parameters") or cfg.get("rope_scaling") or {})
        rope_theta = real_number("rope_theta", rope.pop("rope_theta", cfg.get("rope_theta", 10000.0)))
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        rope_scaling = None if rope_type == "default" else rope
        sliding_window = cfg.get("sliding_window")
        if family == "qwen2" and not cfg.get("use_sliding_window", False):
            sliding_window = None  # Qwen2 configs carry a window size even when windowing is off
        if family == "llama":
            sliding_window = None
        layer_types = read_layer_types(cfg, family, sliding_window, required["num_hidden_layers"])
        eos = cfg.get("eos_token_id")
        eos_ids = tuple(eos) if isinstance(eos, list) else (() if eos is None else (int(eos),))
        attention_bias = bool(cfg.get("attention_bias", False))
        return cls(
            **required,
            num_key_value_heads=int(cfg.get("num_key_value_heads") or required["num_attention_heads"]),
            head_dim=cfg.get("head_dim"),
            rms_norm_eps=real_number("rms_norm_eps", cfg.get("rms_norm_eps", 1e-6)),
            rope_theta=rope_theta,
            rope_scaling=rope_scaling,
            max_position_embeddings=int(cfg.get("max_position_embeddings", 2048)),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            qkv_bias=family == "qwen2" or attention_bias,
            o_bias=family != "qwen2" and attention_bias,
            sliding_window=None if sliding_window is None else int(sliding_window),
            layer_types=layer_types,
            architecture=arch,
            bos_token_id=cfg.get("bos_token_id"),
            eos_token_ids=eos_ids,
        )

    @classmethod
    def from_hf_mla(cls, cfg: dict[str, Any], arch: str) -> ModelConfig:
        """A DeepSeek-V2/V3 config.json: the decoder's numbers plus its MLAConfig (MoE layers refused there)."""
        try:
            required = {k: int(cfg[k]) for k in ("vocab_size", "hidden_size", "intermediate_size")}
            required["num_hidden_layers"] = int(cfg["num_hidden_layers"])
            required["num_attention_heads"] = int(cfg["num_attention_heads"])
        except KeyError as exc:
            raise ValueError(f"config.json is missing required key {exc.args[0]!r}") from exc
        rope = dict(cfg.get("rope_parameters") or cfg.get("rope_scaling") or {})
        rope_theta = real_number("rope_theta", rope.pop("rope_theta", cfg.get("rope_theta", 10000.0)))
        mla = MLAConfig.from_hf(cfg, arch, rope)
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        eos = cfg.get("eos_token_id")
        return cls(
            **required,
            num_key_value_heads=1,
            head_dim=mla.qk_rope_head_dim,
            rms_norm_eps=real_number("rms_norm_eps", cfg.get("rms_norm_eps", 1e-6)),
            rope_theta=rope_theta,
            rope_scaling=None if rope_type == "default" else rope,
            max_position_embeddings=int(cfg.get("max_position_embeddings", 2048)),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            architecture=arch,
            bos_token_id=cfg.get("bos_token_id"),
            eos_token_ids=tuple(eos) if isinstance(eos, list) else (() if eos is None else (int(eos),)),
            mla=mla,
        )

    def to_hf(self) -> dict[str, Any]:
        """A config.json dict in the transformers 4 layout (readable by transformers 4 and 5)."""
        cfg: dict[str, Any] = {
            "architectures": [self.architecture],
            "model_type": ARCHITECTURES[self.architecture],
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "rope_scaling": self.rope_scaling,
            "max_position_embeddings": self.max_position_embeddings,
            "tie_word_embeddings": self.tie_word_embeddings,
            "attention_bias": self.qkv_bias,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": self.eos_token_ids[0] if len(self.eos_token_ids) == 1 else list(self.eos_token_ids),
        }
        if self.sliding_window is not None:
            cfg["sliding_window"] = self.sliding_window
            if self.architecture == "Qwen2ForCausalLM":
                cfg["use_sliding_window"] = True
        if self.layer_types is not None:
            cfg["layer_types"] = list(self.layer_types)
        if self.mla is not None:  # every layer dense; the config's KV heads are the query heads, as DeepSeek's say
            cfg |= self.mla.to_hf() | {"first_k_dense_replace": self.num_hidden_layers}
            cfg |= {"num_key_value_heads": self.num_attention_heads, "head_dim": self.mla.qk_rope_head_dim}
        return cfg


def check_layer_types(layer_types: object, num_hidden_layers: int) -> tuple[str, ...]:
    """`layer_types` as a tuple when it names one kind the engine runs per layer; else a ValueError naming the layer."""
    if isinstance(layer_types, str) or not isinstance(layer_types, (list, tuple)):
        raise ValueError(f"layer_types={layer_types!r} must be a list with one attention kind per layer")
    if len(layer_types) != num_hidden_layers:
        raise ValueError(
            f"layer_types has {len(layer_types)} entries but the model has num_hidden_layers={num_hidden_layers}; "
            "give one kind per layer"
        )
    for i, kind in enumerate(layer_types):
        if kind not in LAYER_TYPES:
            raise ValueError(
                f"layer {i} has layer type {kind!r}, which this engine does not run; supported layer types: "
                f"{', '.join(LAYER_TYPES)} (a model with other layers is refused rather than run as something else)"
            )
    return tuple(layer_types)


def read_layer_types(
    cfg: dict[str, Any], family: str, sliding_window: int | None, num_hidden_layers: int
) -> tuple[str, ...] | None:
    """Per-layer kinds as transformers reads them for each family, or None when every layer is alike.

    Qwen2 (Qwen2Config): `layer_types` when given, else layers from `max_window_layers` on slide when
    use_sliding_window is on. Llama and Mistral models ignore `layer_types` in transformers (Mistral slides every
    layer), so the engine does too; a kind the engine does not run is refused in any family."""
    given = cfg.get("layer_types")
    if given is not None:
        check_layer_types(given, num_hidden_layers)
    if family != "qwen2":
        return None
    if given is not None:
        if "sliding_attention" in given and sliding_window is None:
            layer = list(given).index("sliding_attention")
            raise ValueError(
                f"layer {layer} is 'sliding_attention' but this Qwen2 config sets no window (use_sliding_window is "
                "false or sliding_window is null), which transformers cannot run either; set use_sliding_window: "
                "true with a sliding_window, or make the layer 'full_attention'"
            )
        return tuple(given)
    if sliding_window is None:
        return None
    first = cfg.get("max_window_layers", 28)
    if isinstance(first, bool) or not isinstance(first, int):
        raise ValueError(f"max_window_layers={first!r} must be a whole number of layers")
    return tuple("sliding_attention" if i >= first else "full_attention" for i in range(num_hidden_layers))
