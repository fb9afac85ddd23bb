"""Tensor parallelism's split of a model's attention heads over GPUs, by vLLM's rules.

vLLM's `QKVParallelLinear` (vllm/model_executor/layers/linear.py) gives each of `tp` GPUs `num_heads / tp` query
heads; while `tp` is below the KV-head count each GPU gets `num_kv_heads / tp` KV heads, and from `tp ==
num_kv_heads` on each GPU keeps exactly one, every KV head copied on `tp / num_kv_heads` GPUs
(`num_kv_head_replicas`). Both divisions must be exact. `ModelConfig.get_num_kv_heads` sizes each GPU's KV
cache from the same `max(1, num_kv_heads // tp)`.
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
    kv = model.num_kv_heads
    if (tensor_parallel < kv and kv % tensor_parallel) or (tensor_parallel >= kv and tensor_parallel % kv):
        raise ValueError(
            f"{model.name} has {kv} KV heads: TP {tensor_parallel} neither divides them nor is a multiple of them, "
            f"so vLLM cannot split or copy them evenly; pick a divisor or a multiple of {kv}"
        )
    return tensor_parallel


def kv_heads_per_gpu(model: ModelSpec, tensor_parallel: int) -> int:
    """KV heads each GPU stores: num_kv_heads / TP, and never fewer than one."""
    return max(1, model.num_kv_heads // check_tensor_parallel(model, tensor_parallel))


def kv_head_replicas(model: ModelSpec, tensor_parallel: int) -> int:
    """GPUs that hold a copy of each KV head (1: every head lives on one GPU)."""
    return max(1, check_tensor_parallel(model, tensor_parallel) // model.num_kv_heads)
