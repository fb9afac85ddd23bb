"""Roofline of one serving step: FLOPs and HBM bytes of prefill vs decode, split by operation.

Follows the roofline model (Williams, Waterman and Patterson, CACM 2009): a step takes at least
max(FLOPs / peak FLOP/s, bytes / bandwidth). Decode moves every weight and the batch's whole KV cache for one
token per sequence, so its arithmetic intensity is ~1 FLOP/byte at batch 1 (bf16), far below a GPU's ridge
point (~300 FLOP/byte on an H100); prefill reuses each weight for every prompt token and is compute-bound.
`StepTimeModel` is the same arithmetic in closed form for the simulator's inner loop; its `kv_read_factor`
charges the KV reads of a kernel that streams the cache slower than the bandwidth roof (e.g. small paged blocks,
as measured by lessons/labs/paged.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.memory.catalog import resolve_gpu, resolve_model
from engine.memory.footprint import kv_bytes_per_token, weight_bytes
from engine.memory.specs import GpuSpec, ModelSpec
from engine.memory.units import dtype_bytes


@dataclass(frozen=True, slots=True)
class OpCost:
    """FLOPs and bytes moved by one kind of operation in one forward step (all layers)."""

    name: str
    flops: float
    bytes: float

    @property
    def intensity(self) -> float:
        """Arithmetic intensity in FLOP per byte."""
        return self.flops / self.bytes if self.bytes else float("inf")


@dataclass(frozen=True, slots=True)
class Roofline:
    """Cost of one prefill or decode step on one GPU, split by operation, bounded by compute or bandwidth."""

    phase: str
    model: ModelSpec
    gpu: GpuSpec
    batch_size: int
    context_len: int
    ops: tuple[OpCost, ...]

    @property
    def flops(self) -> float:
        """Total FLOPs of the step."""
        return sum(o.flops for o in self.ops)

    @property
    def bytes(self) -> float:
        """Total bytes read or written from HBM in the step."""
        return sum(o.bytes for o in self.ops)

    @property
    def intensity(self) -> float:
        """FLOP per byte of the whole step."""
        return self.flops / self.bytes

    @property
    def compute_s(self) -> float:
        """Time if only the tensor cores limited the step."""
        return self.flops / self.gpu.bf16_flops

    @property
    def memory_s(self) -> float:
        """Time if only HBM bandwidth limited the step."""
        return self.bytes / self.gpu.bandwidth_bytes_per_s

    @property
    def time_s(self) -> float:
        """Roofline lower bound of the step time: the slower of the two limits."""
        return max(self.compute_s, self.memory_s)

    @property
    def bound(self) -> str:
        """ "memory" or "compute": which limit sets the step time."""
        return "memory" if self.memory_s >= self.compute_s else "compute"

    @property
    def memory_bound_factor(self) -> float:
        """memory time / compute time: > 1 means bandwidth-bound by that factor (e.g. ~150x for decode)."""
        return self.memory_s / self.compute_s

    @property
    def tokens_per_s(self) -> float:
        """Tokens produced (decode) or processed (prefill) per second at the roofline bound."""
        tokens = self.batch_size * (1 if self.phase == "decode" else self.context_len)
        return tokens / self.time_s

    def rows(self) -> list[dict[str, float | str]]:
        """One row per operation: flops, bytes, intensity, and its own compute / memory time."""
        g = self.gpu
        return [
            {
                "op": o.name,
                "flops": o.flops,
                "bytes": o.bytes,
                "intensity": o.intensity,
                "compute_s": o.flops / g.bf16_flops,
                "memory_s": o.bytes / g.bandwidth_bytes_per_s,
                "bound": "memory" if o.intensity < g.ridge_point else "compute",
            }
            for o in self.ops
        ]


def roofline(
    model: ModelSpec | str,
    gpu: GpuSpec | str,
    phase: str = "decode",
    batch_size: int = 1,
    context_len: int = 1024,
    weight_dtype: str = "bf16",
    kv_dtype: str = "bf16",
) -> Roofline:
    """FLOPs and bytes of one step: prefill of batch_size prompts of context_len, or one decode token each.

    Attention here is the score/value part that reads the KV cache; projections and the MLP are weight
    matmuls. Decode reads every weight and the whole KV of the batch for one token per sequence, hence an
    intensity of ~batch FLOP/byte for the MLP and ~group size for attention, far below the ridge point.
    """
    m, g = resolve_model(model), resolve_gpu(gpu)
    if phase not in ("prefill", "decode"):
        raise ValueError(f"phase must be 'prefill' or 'decode', got {phase!r}")
    if batch_size < 1 or context_len < 1:
        raise ValueError(f"batch_size and context_len must be positive, got {batch_size}, {context_len}")
    wb, kb, ab = dtype_bytes(weight_dtype), dtype_bytes(kv_dtype), 2.0
    L, h, hd, inter = m.num_layers, m.hidden_size, m.head_dim, m.intermediate_size
    q_dim, kv_dim = m.num_heads * hd, m.num_kv_heads * hd
    new = batch_size * (context_len if phase == "prefill" else 1)  # tokens going through the weights
    # keys each new token attends to, summed: causal triangle in prefill, the whole context in decode
    pairs = batch_size * (context_len * (context_len + 1) / 2 if phase == "prefill" else context_len)
    kv_read = batch_size * kv_read_bytes(m, context_len, kb)
    attn = OpCost("attention", 4 * L * q_dim * pairs, kv_read + L * new * 2 * q_dim * ab)  # KV read + q in / out
    proj_w = sum(kind.attention_params(h, m.num_heads) for kind in m.layer_kinds)  # q/k/v/o or MLA's projections
    proj = OpCost("qkv/o projections", 2 * new * proj_w, proj_w * wb + L * new * (2 * h + 2 * q_dim + 2 * kv_dim) * ab)
    k = m.experts_per_token
    experts_read = m.num_experts * (1 - (1 - k / m.num_experts) ** new) if m.num_experts > 1 else 1.0
    moe_layers = L - m.num_dense_layers if m.num_experts > 1 else 0
    dense_w = 3 * h * inter * (L - moe_layers)  # dense MLPs (every layer of a dense model)
    expert_w, shared_w = 3 * h * m.expert_intermediate_size, 3 * h * m.shared_expert_intermediate_size * moe_layers
    mlp = OpCost(
        "mlp",
        2 * new * (dense_w + shared_w + moe_layers * expert_w * k),
        (dense_w + shared_w + moe_layers * expert_w * experts_read) * wb + L * new * (2 * h + 3 * inter) * ab,
    )
    logits = batch_size  # only the last position of each sequence needs logits
    hb = max(wb, dtype_bytes("bf16"))  # quantization leaves the lm_head in bf16 (engine/memory/footprint.py)
    head = OpCost("lm_head", 2 * logits * h * m.vocab_size, h * m.vocab_size * hb + logits * m.vocab_size * 4)
    return Roofline(phase, m, g, batch_size, context_len, (attn, proj, mlp, head))


def kv_read_bytes(model: ModelSpec | str, context_len: int, kv_dtype_bytes: float = 2) -> float:
    """KV bytes one decode step of one sequence reads: each layer's tokens in view, or its state.

    Full attention and MLA read the whole context; a sliding layer its window; a chunked layer at most one chunk;
    a linear layer its fixed state. A dense model: layers * context * 2 * kv_heads * head_dim * bytes."""
    m = resolve_model(model)
    total = 0.0
    for kind in m.layer_kinds:
        seen = min(context_len, getattr(kind, "window", None) or getattr(kind, "chunk", None) or context_len)
        total += kind.bytes_per_token(kv_dtype_bytes) * seen + kind.state_bytes(2)
    return total


@dataclass(frozen=True, slots=True)
class StepTimeModel:
    """Closed-form roofline step time used by the simulator (same terms as `roofline`, per-step totals)."""

    weight_bytes: float
    kv_bytes_per_token: float
    flops_per_token: float
    attn_flops_per_pair: float
    peak_flops: float
    bandwidth: float
    kv_read_factor: float = 1.0  # KV-read time / (KV bytes / bandwidth): 1 is a kernel at the roof

    def __post_init__(self) -> None:
        if not self.kv_read_factor > 0:
            raise ValueError(f"kv_read_factor must be positive, got {self.kv_read_factor}; 1.0 is a kernel at the roof")

    @classmethod
    def for_model(
        cls,
        model: ModelSpec | str,
        gpu: GpuSpec | str,
        weight_dtype: str = "bf16",
        kv_dtype: str = "bf16",
        tensor_parallel: int = 1,
        kv_read_factor: float = 1.0,
    ) -> StepTimeModel:
        """Constants for one model on one GPU (per-GPU shares under tensor parallelism)."""
        m, g = resolve_model(model), resolve_gpu(gpu)
        # the embedding table is gathered one row per token, not streamed, unless it doubles as the lm_head; it stays
        # in bf16 when the linear layers are quantized (`weight_bytes`)
        table_dtype = weight_dtype if dtype_bytes(weight_dtype) >= dtype_bytes("bf16") else "bf16"
        table = 0 if m.tie_word_embeddings else m.vocab_size * m.hidden_size * dtype_bytes(table_dtype)
        return cls(
            weight_bytes(m, weight_dtype, tensor_parallel) - table / tensor_parallel,
            kv_bytes_per_token(m, kv_dtype, tensor_parallel),
            2 * m.active_params / tensor_parallel,
            4 * m.num_layers * m.num_heads * m.head_dim / tensor_parallel,
            g.bf16_flops,
            g.bandwidth_bytes_per_s,
            kv_read_factor,
        )

    def __call__(
        self, num_decode: int, context_tokens: int, prefill_tokens: int = 0, prefill_pairs: float = 0.0
    ) -> float:
        """Seconds for a step decoding num_decode sequences over context_tokens and prefilling prefill_tokens."""
        if num_decode == 0 and prefill_tokens == 0:
            return 0.0
        flops = self.flops_per_token * (num_decode + prefill_tokens) + self.attn_flops_per_pair * (
            context_tokens + prefill_pairs
        )
        kv_read = self.kv_bytes_per_token * context_tokens * self.kv_read_factor  # bytes at the roof's speed
        moved = self.weight_bytes + kv_read + self.kv_bytes_per_token * prefill_tokens
        return max(flops / self.peak_flops, moved / self.bandwidth)
