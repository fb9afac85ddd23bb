"""What a model and a GPU are to the memory model: the spec dataclasses, and learner-defined models.

A `ModelSpec` holds the architecture numbers of one decoder-only transformer, as a Hugging Face
``config.json`` states them; a `GpuSpec` holds one accelerator's capacity, HBM bandwidth and dense bf16
throughput. A model's KV cache is described per layer, by kind, as vLLM V1 does (`ModelSpec.layer_kinds`, the
kinds of engine/memory/layers.py: full attention, sliding window, chunked local, MLA, linear state); a dense
model's KV bytes per token stay the GQA formula ``2 * layers * kv_heads * head_dim * bytes`` (engine/memory/units.py's
`kv_bytes`). The common calculator bug is to use the number of *query* heads instead, which
:meth:`ModelSpec.kv_bytes_per_token_mha` returns so a page can show the difference (4x for Llama-3-8B).
Models read from a config.json come from engine/memory/hf_config.py; the published entries are
engine/memory/catalog.py.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from engine.memory import units
from engine.memory.layers import FullAttention, LatentAttention, LayerKind, SlidingWindow
from kernels.validate import is_whole

# How a checkpoint ships its weights (`quantization_config` in config.json): plain bf16, DeepSeek's block-wise fp8
# (128 x 128 tiles, one fp32 scale each), or gpt-oss's MXFP4 experts (4-bit values, one 8-bit scale per 32).
WEIGHT_FORMATS = ("bf16", "fp8_block", "mxfp4")

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
    layers: tuple[LayerKind, ...] = ()  # one KV kind per layer; () = every layer as num_kv_heads / sliding_window say
    moe_intermediate_size: int | None = None  # one routed expert's MLP width (None: intermediate_size)
    shared_expert_intermediate_size: int = 0  # the always-on shared experts' MLP width, summed (0: none)
    num_dense_layers: int = 0  # layers with a dense MLP in an MoE model (DeepSeek's first_k_dense_replace)
    weight_format: str = "bf16"  # the checkpoint's weights as shipped: "bf16", "fp8_block" or "mxfp4"

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
        if self.layers and len(self.layers) != self.num_layers:
            raise ValueError(
                f"model {self.name!r}: {len(self.layers)} layer kinds for num_layers={self.num_layers}; "
                "give one kind per layer"
            )
        if self.moe_intermediate_size is not None and not _is_positive_int(self.moe_intermediate_size):
            width = self.moe_intermediate_size
            raise ValueError(f"model {self.name!r}: moe_intermediate_size must be a positive integer, got {width!r}")
        if not is_whole(self.shared_expert_intermediate_size) or self.shared_expert_intermediate_size < 0:
            raise ValueError(
                f"model {self.name!r}: shared_expert_intermediate_size must be a whole number >= 0, "
                f"got {self.shared_expert_intermediate_size!r}"
            )
        if not is_whole(self.num_dense_layers) or not 0 <= self.num_dense_layers <= self.num_layers:
            raise ValueError(
                f"model {self.name!r}: num_dense_layers={self.num_dense_layers!r} must be in 0..num_layers"
            )
        if self.weight_format not in WEIGHT_FORMATS:
            raise ValueError(
                f"model {self.name!r}: weight_format={self.weight_format!r} is not one of {list(WEIGHT_FORMATS)}"
            )

    @property
    def layer_kinds(self) -> tuple[LayerKind, ...]:
        """The KV-cache kind of every layer, in order (vllm/v1/kv_cache_interface.py's specs, engine/memory/layers.py).

        Without explicit `layers`: full attention everywhere, or a sliding window everywhere when `sliding_window`
        is set (Mistral-7B v0.1)."""
        if self.layers:
            return self.layers
        if self.sliding_window is None:
            return (FullAttention(self.num_kv_heads, self.head_dim),) * self.num_layers
        return (SlidingWindow(self.num_kv_heads, self.head_dim, self.sliding_window),) * self.num_layers

    @property
    def is_hybrid(self) -> bool:
        """Whether the layers are of more than one KV kind (gpt-oss, Gemma 3, Llama 4, Qwen3-Next)."""
        return len({type(k) for k in self.layer_kinds}) > 1

    @property
    def is_mla(self) -> bool:
        """Whether the model caches an MLA latent (DeepSeek-V2/V3, Kimi K2) instead of per-head K and V."""
        return any(isinstance(k, LatentAttention) for k in self.layer_kinds)

    @property
    def attention_kind(self) -> str:
        """ "MLA" (a latent per token), "MHA" (one KV head per query head), "MQA" (one KV head) or "GQA" (between)."""
        if self.is_mla:
            return "MLA"
        if self.num_kv_heads == self.num_heads:
            return "MHA"
        return "MQA" if self.num_kv_heads == 1 else "GQA"

    @property
    def num_queries_per_kv(self) -> int:
        """Query heads sharing one KV head (the GQA group size)."""
        return self.num_heads // self.num_kv_heads

    @property
    def active_params(self) -> int:
        """Parameters read per token: all of them for dense models; for MoE, all but the routed experts not chosen
        (experts_per_token of num_experts in each MoE layer; shared experts and dense layers always run)."""
        if self.num_experts == 1:
            return self.num_params
        return self.num_params - (self.num_experts - self.experts_per_token) * self.expert_params

    @property
    def expert_intermediate_size(self) -> int:
        """One routed expert's MLP width: moe_intermediate_size, else intermediate_size (Mixtral, gpt-oss)."""
        return self.intermediate_size if self.moe_intermediate_size is None else self.moe_intermediate_size

    @property
    def expert_params(self) -> int:
        """Parameters of one routed expert summed over the MoE layers (0 for a dense model)."""
        if self.num_experts == 1:
            return 0
        moe_layers = self.num_layers - self.num_dense_layers
        return 3 * self.hidden_size * self.expert_intermediate_size * moe_layers

    def kv_bytes_per_token(self, dtype_bytes: float = 2, tensor_parallel: int = 1) -> int:
        """KV bytes each further token adds at long context, on one GPU.

        Dense models: 2 * layers * kv_heads * head_dim * bytes per element. Per-kind models: the layers that keep
        every token (full attention, MLA); sliding, chunked and linear layers stop growing. A model none of whose
        layers keeps every token (Mistral-7B: a window everywhere) is charged every layer's per-token bytes,
        what a token inside the window costs.
        """
        size = units.dtype_bytes(dtype_bytes)
        if not self.layers and tensor_parallel == 1:
            return units.kv_bytes(self.num_layers, self.num_kv_heads, self.head_dim, size)
        kinds = self.layer_kinds
        growing = [k for k in kinds if k.keeps_every_token] or kinds
        return sum(k.bytes_per_token(size, tensor_parallel) for k in growing)

    def kv_bytes_per_token_mha(self, dtype_bytes: float = 2) -> int:
        """The naive number that assumes one KV head per query head (the classic calculator bug for GQA)."""
        return units.kv_bytes(self.num_layers, self.num_heads, self.head_dim, units.dtype_bytes(dtype_bytes))

    def with_kv_heads(self, num_kv_heads: int) -> ModelSpec:
        """The same model with a different number of KV heads (MHA -> GQA -> MQA slider); MLA has none to change."""
        if self.is_mla:
            raise ValueError(
                f"{self.name} uses MLA: it caches one latent per token, not KV heads; there are no KV heads to change"
            )
        layers = tuple(replace(k, num_kv_heads=num_kv_heads) if hasattr(k, "num_kv_heads") else k for k in self.layers)
        return replace(self, name=f"{self.name} (kv_heads={num_kv_heads})", num_kv_heads=num_kv_heads, layers=layers)


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


def param_parts(spec: ModelSpec) -> dict[str, int]:
    """Parameters by part, from the architecture: embeddings, attention (per layer kind), router, routed experts,
    MLP (dense layers and shared experts), norms. Gated (SwiGLU) MLPs: 3 * hidden * width per MLP; biases, Qwen3's
    q/k norms, gpt-oss's attention sinks and Qwen3-Next's output gate are left out (under 0.2 % of each model)."""
    h = spec.hidden_size
    attention = sum(k.attention_params(h, spec.num_heads) for k in spec.layer_kinds)
    moe_layers = spec.num_layers - spec.num_dense_layers if spec.num_experts > 1 else 0
    mlp = 3 * h * spec.intermediate_size * (spec.num_layers - moe_layers)
    mlp += 3 * h * spec.shared_expert_intermediate_size * moe_layers
    return {
        "embeddings": spec.vocab_size * h * (1 if spec.tie_word_embeddings else 2),
        "attention": attention,
        "router": h * spec.num_experts * moe_layers,
        "experts": 3 * h * spec.expert_intermediate_size * spec.num_experts * moe_layers,
        "mlp": mlp,
        "norms": 2 * h * spec.num_layers + h,
    }


def estimate_params(spec: ModelSpec) -> int:
    """Parameter count implied by the architecture: the sum of `param_parts` (Llama-style for a dense model)."""
    return sum(param_parts(spec).values())


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
    **arch: Any,
) -> ModelSpec:
    """A learner-defined model; KV heads default to MHA, head_dim to hidden/heads, params are estimated.

    `arch` passes the per-kind and MoE fields of `ModelSpec` through (layers, moe_intermediate_size, ...)."""
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
        **arch,
    )
    return spec if num_params else replace(spec, num_params=estimate_params(spec))
