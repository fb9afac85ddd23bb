"""Tensor parallelism's split of a model's attention heads over GPUs, by vLLM's rules.

vLLM's `QKVParallelLinear` (vllm/model_executor/layers/linear.py) gives each of `tp` GPUs `num_heads / tp` query
heads; while `tp` is below the KV-head count each GPU gets `num_kv_heads / tp` KV heads, and from `tp ==
num_kv_heads` on each GPU keeps exactly one, every KV head copied on `tp / num_kv_heads` GPUs
(`num_kv_head_replicas`). Both divisions must be exact. `ModelConfig.get_num_kv_heads` sizes each GPU's KV
cache from the same `max(1, num_kv_heads // tp)`. An MLA model (DeepSeek-V2/V3, Kimi K2) is the exception: its
cache is one latent per token, which `get_num_kv_heads` counts as 1 head whatever the TP, so every GPU holds the
whole latent (TP splits the query heads and the projections, never the cache), and the config's
`num_key_value_heads` is not checked against TP.
"""

from __future__ import annotations

from engine.memory.specs import ModelSpec
from kernels.validate import is_whole


def check_tensor_parallel(model: ModelSpec, tensor_parallel: object) -> int:
    """The TP size if vLLM accepts it for this model; ValueError naming the rule and the fix otherwise."""
    if not is_whole(tensor_parallel) or tensor_parallel < 1:
        raise ValueError(f"tensor parallel size must be a whole number >= 1, got {tensor_parallel!r}")
    if model.num_heads % tensor_parallel:
        raise ValueError(
            f"{model.name} has {model.num_heads} query heads, not divisible by TP {tensor_parallel}: "
            f"vLLM refuses it; pick a divisor of {model.num_heads}"
        )
    if model.is_mla:
        return tensor_parallel
    kv = model.num_kv_heads
    if (tensor_parallel < kv and kv % tensor_parallel) or (tensor_parallel >= kv and tensor_parallel % kv):
        raise ValueError(
            f"{model.name} has {kv} KV heads: TP {tensor_parallel} neither divides them nor is a multiple of them, "
            f"so vLLM cannot split or copy them evenly; pick a divisor or a multiple of {kv}"
        )
    return tensor_parallel


def kv_heads_per_gpu(model: ModelSpec, tensor_parallel: int) -> int:
    """KV heads each GPU stores: num_kv_heads / TP, and never fewer than one (MLA: the one latent)."""
    tp = check_tensor_parallel(model, tensor_parallel)
    return 1 if model.is_mla else max(1, model.num_kv_heads // tp)


def kv_head_replicas(model: ModelSpec, tensor_parallel: int) -> int:
    """GPUs that hold a copy of each KV head (1: every head lives on one GPU; MLA: the latent is on every GPU)."""
    tp = check_tensor_parallel(model, tensor_parallel)
    return tp if model.is_mla else max(1, tp // model.num_kv_heads)
