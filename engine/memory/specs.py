"""What a model and a GPU are to the memory model: the spec dataclasses, and models built from config.json.

A `ModelSpec` holds the architecture numbers of one decoder-only transformer, as a Hugging Face
``config.json`` states them; a `GpuSpec` holds one accelerator's capacity, HBM bandwidth and dense bf16
throughput. KV bytes per token follow the GQA formula ``2 * layers * kv_heads * head_dim * bytes``
(engine/memory/units.py's `kv_bytes`, the one formula everyone calls); the common calculator bug is to use
the number of *query* heads instead, which :meth:`ModelSpec.kv_bytes_per_token_mha` returns so a page can
show the difference (4x for Llama-3-8B). The published entries built from these classes are engine/memory/catalog.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from engine.memory import units
from kernels.validate import is_whole

_POSITIVE_FIELDS = (
    "num_layers",
    "hidden_size",
    "num_heads",
    "num_kv_heads",
    "head_dim",
    "intermediate_size",
    "vocab_size",
    "max_context",
    "num_params",
    "num_experts",
    "experts_per_token",
)


def _is_positive_int(value: object) -> bool:
    return is_whole(value) and value > 0


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """Architecture numbers of one decoder-only transformer, enough for memory and roofline arithmetic."""

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_context: int
    num_params: int
    source: str
    sliding_window: int | None = None
    num_experts: int = 1
    experts_per_token: int = 1
    tie_word_embeddings: bool = False

    def __post_init__(self) -> None:
        for field in _POSITIVE_FIELDS:
            value = getattr(self, field)
            if not _is_positive_int(value):
                raise ValueError(f"model {self.name!r}: {field} must be a positive integer, got {value!r}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"model {self.name!r}: num_heads={self.num_heads} is not a multiple of "
                f"num_kv_heads={self.num_kv_heads}; each KV head must serve a whole group of query heads"
            )
        if self.experts_per_token > self.num_experts:
            raise ValueError(
                f"model {self.name!r}: experts_per_token={self.experts_per_token} > num_experts={self.num_experts}"
            )
        if self.sliding_window is not None and not _is_positive_int(self.sliding_window):
            raise ValueError(f"model {self.name!r}: sliding_window must be positive or None, got {self.sliding_window}")

    @property
    def attention_kind(self) -> str:
        """ "MHA" (one KV head per query head), "MQA" (a single KV head) or "GQA" (in between)."""
        if self.num_kv_heads == self.num_heads:
            return "MHA"
        return "MQA" if self.num_kv_heads == 1 else "GQA"

    @property
    def num_queries_per_kv(self) -> int:
        """Query heads sharing one KV head (the GQA group size)."""
        return self.num_heads // self.num_kv_heads

    @property
    def active_params(self) -> int:
        """Parameters read per token: all of them for dense models, the routed experts' share for MoE."""
        if self.num_experts == 1:
            return self.num_params
        expert = 3 * self.hidden_size * self.intermediate_size * self.num_layers
        return self.num_params - (self.num_experts - self.experts_per_token) * expert

    def kv_bytes_per_token(self, dtype_bytes: float = 2) -> int:
        """K and V bytes one token adds to the cache: 2 * layers * kv_heads * head_dim * bytes per element."""
        return units.kv_bytes(self.num_layers, self.num_kv_heads, self.head_dim, units.dtype_bytes(dtype_bytes))

    def kv_bytes_per_token_mha(self, dtype_bytes: float = 2) -> int:
        """The naive number that assumes one KV head per query head (the classic calculator bug for GQA)."""
        return units.kv_bytes(self.num_layers, self.num_heads, self.head_dim, units.dtype_bytes(dtype_bytes))

    def with_kv_heads(self, num_kv_heads: int) -> ModelSpec:
        """The same model with a different number of KV heads (MHA -> GQA -> MQA slider)."""
        return replace(self, name=f"{self.name} (kv_heads={num_kv_heads})", num_kv_heads=num_kv_heads)


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One accelerator: memory capacity, HBM bandwidth and dense bf16 tensor throughput.

    memory_bytes is the board's memory as nvidia-smi reports it; cuda_memory_bytes is the device total CUDA
    reports (``torch.cuda.mem_get_info``), a few hundred MiB to ~1 GiB less, which is what vLLM multiplies by
    gpu_memory_utilization. cuda_source names the public log that shows it (None where none was found).
    """

    name: str
    memory_bytes: int
    bandwidth_bytes_per_s: float
    bf16_flops: float
    source: str
    cuda_memory_bytes: int | None = None
    cuda_source: str = ""

    def __post_init__(self) -> None:
        for field in ("memory_bytes", "bandwidth_bytes_per_s", "bf16_flops"):
            if getattr(self, field) <= 0:
                raise ValueError(f"GPU {self.name!r}: {field} must be positive, got {getattr(self, field)!r}")
        if self.cuda_memory_bytes is not None and not 0 < self.cuda_memory_bytes <= self.memory_bytes:
            raise ValueError(
                f"GPU {self.name!r}: cuda_memory_bytes={self.cuda_memory_bytes!r} must be positive and at most "
                f"memory_bytes ({self.memory_bytes}): CUDA never reports more than the board holds"
            )

    @property
    def total_bytes(self) -> int:
        """The device total vLLM sizes from: CUDA's figure when a source gives it, else the board's memory."""
        return self.memory_bytes if self.cuda_memory_bytes is None else self.cuda_memory_bytes

    @property
    def ridge_point(self) -> float:
        """FLOP per byte at which compute time equals memory time; below it a kernel is bandwidth-bound."""
        return self.bf16_flops / self.bandwidth_bytes_per_s


def estimate_params(spec: ModelSpec) -> int:
    """Parameter count implied by the architecture (Llama-style: q/k/v/o, gated MLP, RMSNorm, embeddings)."""
    h, hd = spec.hidden_size, spec.head_dim
    attn = h * spec.num_heads * hd * 2 + h * spec.num_kv_heads * hd * 2  # q, o + k, v projections
    mlp = 3 * h * spec.intermediate_size * spec.num_experts
    router = h * spec.num_experts if spec.num_experts > 1 else 0
    per_layer = attn + mlp + router + 2 * h  # two RMSNorm weights
    embeddings = spec.vocab_size * h * (1 if spec.tie_word_embeddings else 2)
    return spec.num_layers * per_layer + embeddings + h


def _decoder_config(config: str | dict[str, Any]) -> dict[str, Any]:
    """The language model's part of a config.json (dict or JSON text), with its required keys checked."""
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except json.JSONDecodeError as e:
            raise ValueError(
                f"config is not valid JSON ({e.msg} at line {e.lineno}); paste the whole config.json"
            ) from None
    if not isinstance(config, dict):
        raise ValueError(f"config.json must be a JSON object, got {type(config).__name__}")
    cfg = config.get("text_config", config)  # multimodal wrappers nest the language model's config
    required = ("num_hidden_layers", "hidden_size", "num_attention_heads")
    missing = [k for k in required if k not in cfg]
    if missing:
        raise ValueError(f"config.json lacks {missing}; a decoder config needs {list(required)}")
    for key in required:
        if not _is_positive_int(cfg[key]):
            raise ValueError(f"config.json: {key} must be a positive integer, got {cfg[key]!r}")
    return cfg


def model_from_config(
    config: str | dict[str, Any], name: str = "custom", source: str = "pasted config.json"
) -> ModelSpec:
    """Build a ModelSpec from a Hugging Face config.json (a dict or its JSON text), validating every field."""
    cfg = _decoder_config(config)

    def opt(key: str, default: Any) -> Any:  # JSON null means "not set", as in transformers
        value = cfg.get(key)
        return default if value is None else value

    window = opt("sliding_window", None) if cfg.get("use_sliding_window", True) else None
    return custom_model(
        name=name,
        num_layers=cfg["num_hidden_layers"],
        hidden_size=cfg["hidden_size"],
        num_heads=cfg["num_attention_heads"],
        num_kv_heads=opt("num_key_value_heads", None),
        head_dim=opt("head_dim", None),
        intermediate_size=opt("intermediate_size", None),
        vocab_size=opt("vocab_size", 32000),
        max_context=opt("max_position_embeddings", 4096),
        sliding_window=window,
        num_experts=opt("num_local_experts", 1),
        experts_per_token=opt("num_experts_per_tok", 1),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        source=source,
    )


def custom_model(
    name: str,
    num_layers: int,
    hidden_size: int,
    num_heads: int,
    num_kv_heads: int | None = None,
    head_dim: int | None = None,
    intermediate_size: int | None = None,
    vocab_size: int = 32000,
    max_context: int = 4096,
    num_params: int | None = None,
    sliding_window: int | None = None,
    num_experts: int = 1,
    experts_per_token: int = 1,
    tie_word_embeddings: bool = False,
    source: str = "custom",
) -> ModelSpec:
    """A learner-defined model; KV heads default to MHA, head_dim to hidden/heads, params are estimated."""
    for field, value in (("num_layers", num_layers), ("hidden_size", hidden_size), ("num_heads", num_heads)):
        if not _is_positive_int(value):
            raise ValueError(f"custom model {name!r}: {field} must be a positive integer, got {value!r}")
    num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
    if head_dim is None:
        if hidden_size % num_heads:
            raise ValueError(
                f"custom model {name!r}: hidden_size={hidden_size} is not divisible by "
                f"num_heads={num_heads}; pass head_dim explicitly"
            )
        head_dim = hidden_size // num_heads
    if isinstance(num_kv_heads, int) and num_kv_heads <= 0:
        raise ValueError(f"custom model {name!r}: num_kv_heads must be a positive integer, got {num_kv_heads!r}")
    spec = ModelSpec(
        name=name,
        num_layers=num_layers,
        hidden_size=hidden_size,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        head_dim=head_dim,
        intermediate_size=4 * hidden_size if intermediate_size is None else intermediate_size,
        vocab_size=vocab_size,
        max_context=max_context,
        num_params=num_params or 1,
        source=source,
        sliding_window=sliding_window,
        num_experts=num_experts,
        experts_per_token=experts_per_token,
        tie_word_embeddings=tie_word_embeddings,
    )
    return spec if num_params else replace(spec, num_params=estimate_params(spec))
