"""Lesson 7's "vLLM v0.34's default sizing" section: one server's KV cache sized two ways, side by side.

vLLM v0.34.0 sizes the KV cache from an estimate made before the CUDA graphs are captured (every release before
it; still the path with ``--no-enable-extensible-kv-cache``, ``--kv-cache-memory-bytes`` or off CUDA and ROCm), or
by default on CUDA and ROCm from the memory measured free after warm-up and capture (the *extensible* KV cache,
``engine.memory.extensible``). `compare` builds both for one model, GPU and launch, and `rows` lays their terms
out for the page's table.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.memory.catalog import GPUS, MODELS
from engine.memory.extensible import MeasuredKV, measured_kv
from engine.memory.footprint import ServingFootprint, serving_footprint
from engine.memory.startup import (
    DEFAULT_GPU_MEMORY_UTILIZATION,
    cuda_graph_bytes,
    default_max_num_batched_tokens,
    default_max_num_seqs,
)
from engine.memory.units import GiB
from lessons.labs.choices import GPU_KEYS, MODEL_KEYS

__all__ = ["DEFAULTS", "GPU_CHOICES", "MODEL_CHOICES", "UTILIZATIONS", "SizingComparison", "compare"]

MODEL_CHOICES: tuple[str, ...] = tuple(k for k in MODEL_KEYS if k != "demo")  # served models (the demo is a toy)
GPU_CHOICES: tuple[str, ...] = tuple(k for k in GPU_KEYS if k != "cpu")  # devices vLLM sizes a KV cache on

# The page's defaults: a chat server of today's size on the card most of them run on.
DEFAULTS = {"model": "llama-3.1-8b", "gpu": "h100-sxm", "max_model_len": 32768, "utilization": None}
# The utilizations the page offers for the measured path: unset (1.0), the old habits, and a deliberate share.
UTILIZATIONS: tuple[float | None, ...] = (None, 0.95, 0.92, 0.9, 0.6)


@dataclass(frozen=True)
class SizingComparison:
    """One server's KV cache under the estimate (at 0.92) and under v0.34.0's measured sizing."""

    estimate: ServingFootprint
    measured: MeasuredKV

    @property
    def gain_blocks(self) -> int:
        return self.measured.num_blocks - self.estimate.num_blocks

    @property
    def gain_gib(self) -> float:
        return (self.measured.committed_bytes - self.estimate.num_blocks * self.estimate.pool_block_bytes) / GiB

    def rows(self) -> list[dict[str, str]]:
        """The two sizings' terms in GiB, one row per term (text: the page shows them as they are)."""
        e, m = self.estimate, self.measured
        blank = "—"

        def gib(num_bytes: int) -> str:
            return f"{num_bytes / GiB:.2f}"

        util = "unset (1.0)" if m.gpu_memory_utilization is None else f"{m.gpu_memory_utilization:g}"
        return [
            {"term": "gpu_memory_utilization", "estimate": f"{e.gpu_memory_utilization:g}", "measured": util},
            {
                "term": "budget: total x utilization",
                "estimate": gib(int(e.capacity_bytes * e.gpu_memory_utilization)),
                "measured": gib(m.requested_bytes),
            },
            {"term": "weights", "estimate": gib(e.weights_bytes), "measured": gib(e.weights_bytes)},
            {"term": "CUDA graphs", "estimate": gib(e.cuda_graph_bytes), "measured": gib(e.cuda_graph_bytes)},
            {
                "term": "activation peak (estimate) / transient peak kept free (measured)",
                "estimate": gib(e.activation_bytes),
                "measured": gib(m.transient_peak_bytes),
            },
            {"term": "non-torch memory", "estimate": gib(e.overhead_bytes), "measured": "held before the snapshot"},
            {"term": "safety margin", "estimate": blank, "measured": gib(m.margin_bytes)},
            {
                "term": "KV cache",
                "estimate": gib(e.num_blocks * e.pool_block_bytes),
                "measured": gib(m.committed_bytes),
            },
            {
                "term": f"KV blocks of {e.block_size} tokens",
                "estimate": f"{e.num_blocks:,}",
                "measured": f"{m.num_blocks:,}",
            },
        ]


def compare(
    model: str = DEFAULTS["model"],
    gpu: str = DEFAULTS["gpu"],
    max_model_len: int = DEFAULTS["max_model_len"],
    utilization: float | None = DEFAULTS["utilization"],
) -> SizingComparison:
    """Both sizings for a default `vllm serve` of `model` on one `gpu` (CUDA graphs on, the GPU's default batch).

    utilization: what the measured path is given (None: unset). The estimate always uses vLLM's 0.92."""
    if model not in MODEL_CHOICES:
        raise ValueError(f"unknown model {model!r}; pick one of {', '.join(MODEL_CHOICES)}")
    if gpu not in GPU_CHOICES:
        raise ValueError(f"unknown GPU {gpu!r}; pick one of {', '.join(GPU_CHOICES)}")
    spec, card = MODELS[model], GPUS[gpu]
    graphs = cuda_graph_bytes(spec, default_max_num_seqs(card), default_max_num_batched_tokens(card), False, card)
    estimate = serving_footprint(
        model,
        gpu,
        max_model_len=max_model_len,
        gpu_memory_utilization=DEFAULT_GPU_MEMORY_UTILIZATION,
        cuda_graph_bytes=graphs,
    )
    platform = "rocm" if card.name.startswith(("AMD", "MI")) else "cuda"
    return SizingComparison(estimate, measured_kv(estimate, utilization, platform))
