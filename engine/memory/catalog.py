"""Model and GPU catalog: the published numbers the memory model and the simulator start from.

Every model entry copies its architecture from the model's published Hugging Face ``config.json`` (the repo
is named in ``source``); ``num_params`` is the parameter count the model card / safetensors index reports.
KV bytes per token follow the GQA formula ``2 * layers * kv_heads * head_dim * bytes`` — the common
calculator bug is to use the number of *query* heads instead, which :meth:`ModelSpec.kv_bytes_per_token_mha`
returns so a page can show the difference (8x for Llama-3).

GPU entries use datasheet bandwidth and dense (no sparsity) bf16 tensor throughput. Capacities are in bytes
as ``nvidia-smi`` reports the total: an "80 GB" A100 has 80 GiB (81920 MiB) of HBM, i.e. 85.9e9 bytes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

GiB = 1024**3
MiB = 1024**2

_DEMO_CONFIG = Path(__file__).resolve().parents[2] / "models" / "demo" / "config.json"


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
        for field in (
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
        ):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
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
        window = self.sliding_window
        if window is not None and (not isinstance(window, int) or isinstance(window, bool) or window <= 0):
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
        """K and V bytes one token adds to the cache: 2 * layers * kv_heads * head_dim * dtype_bytes."""
        return int(2 * self.num_layers * self.num_kv_heads * self.head_dim * dtype_bytes)

    def kv_bytes_per_token_mha(self, dtype_bytes: float = 2) -> int:
        """The naive number that assumes one KV head per query head (the classic calculator bug for GQA)."""
        return int(2 * self.num_layers * self.num_heads * self.head_dim * dtype_bytes)

    def with_kv_heads(self, num_kv_heads: int) -> ModelSpec:
        """The same model with a different number of KV heads (MHA -> GQA -> MQA slider)."""
        return replace(self, name=f"{self.name} (kv_heads={num_kv_heads})", num_kv_heads=num_kv_heads)


def estimate_params(spec: ModelSpec) -> int:
    """Parameter count implied by the architecture (Llama-style: q/k/v/o, gated MLP, RMSNorm, embeddings)."""
    h, hd = spec.hidden_size, spec.head_dim
    attn = h * spec.num_heads * hd * 2 + h * spec.num_kv_heads * hd * 2  # q, o + k, v projections
    mlp = 3 * h * spec.intermediate_size * spec.num_experts
    router = h * spec.num_experts if spec.num_experts > 1 else 0
    per_layer = attn + mlp + router + 2 * h  # two RMSNorm weights
    embeddings = spec.vocab_size * h * (1 if spec.tie_word_embeddings else 2)
    return spec.num_layers * per_layer + embeddings + h


def _m(
    name: str,
    source: str,
    layers: int,
    hidden: int,
    heads: int,
    kv: int,
    inter: int,
    vocab: int,
    ctx: int,
    params: float,
    **kw: Any,
) -> ModelSpec:
    return ModelSpec(
        name=name,
        num_layers=layers,
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=kv,
        head_dim=hidden // heads,
        intermediate_size=inter,
        vocab_size=vocab,
        max_context=ctx,
        num_params=int(params),
        source=source,
        **kw,
    )


# fmt: off
# name, HF repo of the config.json, layers, hidden, heads, kv_heads, intermediate, vocab, max_position_embeddings,
# published parameter count. Qwen2.5 configs carry sliding_window but use_sliding_window=false, so None here.
_PUBLISHED: dict[str, ModelSpec] = {
    "llama-2-7b": _m("Llama-2-7B", "meta-llama/Llama-2-7b-hf", 32, 4096, 32, 32, 11008, 32000, 4096, 6.738e9),
    "llama-2-13b": _m("Llama-2-13B", "meta-llama/Llama-2-13b-hf", 40, 5120, 40, 40, 13824, 32000, 4096, 13.016e9),
    "llama-2-70b": _m("Llama-2-70B", "meta-llama/Llama-2-70b-hf", 80, 8192, 64, 8, 28672, 32000, 4096, 68.977e9),
    "llama-3-8b": _m("Llama-3-8B", "meta-llama/Meta-Llama-3-8B", 32, 4096, 32, 8, 14336, 128256, 8192, 8.030e9),
    "llama-3-70b": _m("Llama-3-70B", "meta-llama/Meta-Llama-3-70B", 80, 8192, 64, 8, 28672, 128256, 8192,
                      70.554e9),
    "llama-3.1-8b": _m("Llama-3.1-8B", "meta-llama/Llama-3.1-8B", 32, 4096, 32, 8, 14336, 128256, 131072,
                       8.030e9),
    "llama-3.1-70b": _m("Llama-3.1-70B", "meta-llama/Llama-3.1-70B", 80, 8192, 64, 8, 28672, 128256, 131072,
                        70.554e9),
    "llama-3.1-405b": _m("Llama-3.1-405B", "meta-llama/Llama-3.1-405B", 126, 16384, 128, 8, 53248, 128256,
                         131072, 405.853e9),
    "mistral-7b": _m("Mistral-7B", "mistralai/Mistral-7B-v0.1", 32, 4096, 32, 8, 14336, 32000, 32768, 7.242e9,
                     sliding_window=4096),
    "mixtral-8x7b": _m("Mixtral-8x7B", "mistralai/Mixtral-8x7B-v0.1", 32, 4096, 32, 8, 14336, 32000, 32768,
                       46.703e9, num_experts=8, experts_per_token=2),
    "qwen2.5-0.5b": _m("Qwen2.5-0.5B", "Qwen/Qwen2.5-0.5B", 24, 896, 14, 2, 4864, 151936, 32768, 0.494e9,
                       tie_word_embeddings=True),
    "qwen2.5-7b": _m("Qwen2.5-7B", "Qwen/Qwen2.5-7B", 28, 3584, 28, 4, 18944, 152064, 131072, 7.616e9),
    "qwen2.5-72b": _m("Qwen2.5-72B", "Qwen/Qwen2.5-72B", 80, 8192, 64, 8, 29568, 152064, 131072, 72.706e9),
}
# fmt: on


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One accelerator: memory capacity, HBM bandwidth and dense bf16 tensor throughput."""

    name: str
    memory_bytes: int
    bandwidth_bytes_per_s: float
    bf16_flops: float
    source: str

    def __post_init__(self) -> None:
        for field in ("memory_bytes", "bandwidth_bytes_per_s", "bf16_flops"):
            if getattr(self, field) <= 0:
                raise ValueError(f"GPU {self.name!r}: {field} must be positive, got {getattr(self, field)!r}")

    @property
    def ridge_point(self) -> float:
        """FLOP per byte at which compute time equals memory time; below it a kernel is bandwidth-bound."""
        return self.bf16_flops / self.bandwidth_bytes_per_s


# fmt: off
GPUS: dict[str, GpuSpec] = {
    "a100-40gb": GpuSpec("A100 40GB SXM", 40960 * MiB, 1.555e12, 312e12, "NVIDIA A100 datasheet (2021)"),
    "a100-80gb": GpuSpec("A100 80GB SXM", 81920 * MiB, 2.039e12, 312e12, "NVIDIA A100 datasheet (2021)"),
    "h100-sxm": GpuSpec("H100 SXM 80GB", 81559 * MiB, 3.35e12, 989e12, "NVIDIA H100 datasheet (2023)"),
    "h200": GpuSpec("H200 141GB SXM", 143771 * MiB, 4.8e12, 989e12, "NVIDIA H200 datasheet (2024)"),
    "l4": GpuSpec("L4 24GB", 23034 * MiB, 300e9, 121e12, "NVIDIA L4 datasheet (2023)"),
    "rtx-4090": GpuSpec("RTX 4090 24GB", 24564 * MiB, 1.008e12, 165e12, "NVIDIA Ada GPU architecture whitepaper"),
    "rtx-3090": GpuSpec("RTX 3090 24GB", 24576 * MiB, 936e9, 71e12, "NVIDIA Ampere GA102 whitepaper"),
    # Illustrative laptop/desktop CPU: dual-channel DDR5 bandwidth, AVX-512/AMX-less bf16 matmul throughput.
    "cpu": GpuSpec("CPU (typical desktop)", 32 * GiB, 60e9, 1e12, "illustrative: dual-channel DDR5-4800"),
}
# fmt: on


def model_from_config(
    config: str | dict[str, Any], name: str = "custom", source: str = "pasted config.json"
) -> ModelSpec:
    """Build a ModelSpec from a Hugging Face config.json (a dict or its JSON text), validating every field."""
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
        value = cfg[key]
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"config.json: {key} must be a positive integer, got {value!r}")

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
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
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


def _load_demo() -> ModelSpec:
    """The in-repo demo model, read from its config.json when it has been trained, else the fallback."""
    # Fallback: the shape the demo is trained with (4 layers, 4 query / 2 KV heads), used until it is trained.
    fallback = custom_model(
        "demo",
        num_layers=4,
        hidden_size=256,
        num_heads=4,
        num_kv_heads=2,
        intermediate_size=512,
        vocab_size=4096,
        max_context=256,
        tie_word_embeddings=True,
        source="models/demo/config.json (fallback until the demo model is trained)",
    )
    if not _DEMO_CONFIG.is_file():
        return fallback
    try:
        return model_from_config(_DEMO_CONFIG.read_text(), name="demo", source="models/demo/config.json")
    except (OSError, ValueError, TypeError):
        return fallback  # a half-written config during training must not break every page


MODELS: dict[str, ModelSpec] = {**_PUBLISHED, "demo": _load_demo()}


def get_model(name: str) -> ModelSpec:
    """Look a model up by catalog key (case-insensitive), with the list of known keys on a miss."""
    key = name.strip().lower()
    if key not in MODELS:
        raise ValueError(f"unknown model {name!r}; known models: {', '.join(MODELS)} (or build one with custom_model)")
    return MODELS[key]


def get_gpu(name: str) -> GpuSpec:
    """Look a GPU up by catalog key (case-insensitive), with the list of known keys on a miss."""
    key = name.strip().lower()
    if key not in GPUS:
        raise ValueError(f"unknown GPU {name!r}; known GPUs: {', '.join(GPUS)}")
    return GPUS[key]
