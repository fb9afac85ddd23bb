"""KV across GPUs: what tensor parallelism does to each GPU's KV cache, in vLLM's terms.

Tensor parallelism (TP) gives each GPU a slice of every layer: `total_num_heads / TP` query heads and, for K
and V, `total_num_kv_heads / TP` KV heads while TP is below the KV-head count. From TP = num_kv_heads on,
each GPU keeps exactly one KV head and each head is *replicated* on `TP / num_kv_heads` GPUs (vLLM's
`QKVParallelLinear`, vllm/model_executor/layers/linear.py: `num_kv_heads = 1`, `num_kv_head_replicas =
divide(tp_size, total_num_kv_heads)`). So Llama-3-70B, with 8 KV heads, stores as much KV per token on each
GPU at TP 16 as at TP 8: going wider frees weight memory but no longer thins the KV. Every GPU holds its slice
of every token, so the pool holds as many tokens as one GPU's slice allows. Each GPU also pays for NCCL's
buffers outside torch's allocator (vLLM's `non_torch_memory`): one published log (vLLM PR #10511, Llama-3-8B on
an 80 GB GPU) shows 1.79 GiB at TP 1 and 3.58 GiB at TP 2. No Streamlit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.memory.catalog import resolve_gpu, resolve_model
from engine.memory.footprint import serving_footprint
from engine.memory.parallel import check_tensor_parallel, kv_head_replicas, kv_heads_per_gpu
from engine.memory.units import GiB, KiB

TP_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16)
DEFAULT_MODEL, DEFAULT_GPU = "llama-3-70b", "h100-sxm"


@dataclass(frozen=True)
class TpRow:
    """One TP size: each GPU's share of the KV heads, its KV bytes per token, and the pool it leaves."""

    tensor_parallel: int
    kv_heads_per_gpu: int
    kv_head_replicas: int  # GPUs holding a copy of each KV head (1: no copies)
    kv_bytes_per_token_per_gpu: int
    weights_bytes_per_gpu: int
    non_torch_bytes_per_gpu: int
    kv_pool_bytes_per_gpu: int  # <= 0: the weights do not leave room
    tokens_in_pool: int  # every GPU holds its slice of each token: the pool holds what one GPU's slice allows

    @property
    def fits(self) -> bool:
        """Whether the weights leave any KV pool on each GPU."""
        return self.tokens_in_pool > 0

    @property
    def kv_bytes_per_token_all_gpus(self) -> int:
        """What the whole group stores per token: replicated heads are stored once per copy."""
        return self.kv_bytes_per_token_per_gpu * self.tensor_parallel

    def row(self) -> dict[str, Any]:
        return {
            "TP (GPUs)": self.tensor_parallel,
            "KV heads per GPU": self.kv_heads_per_gpu,
            "copies of each KV head": self.kv_head_replicas,
            "KV KiB/token per GPU": self.kv_bytes_per_token_per_gpu / KiB,
            "KV KiB/token, all GPUs": self.kv_bytes_per_token_all_gpus / KiB,
            "weights GiB per GPU": round(self.weights_bytes_per_gpu / GiB, 2),
            "non-torch GiB per GPU": round(self.non_torch_bytes_per_gpu / GiB, 2),
            "KV pool GiB per GPU": round(max(self.kv_pool_bytes_per_gpu, 0) / GiB, 2),
            "tokens in the pool": self.tokens_in_pool,
        }


@dataclass(frozen=True)
class TpTable:
    """The TP sizes vLLM accepts for one model on one GPU type, side by side."""

    model_name: str
    gpu_name: str
    num_kv_heads: int
    points: tuple[TpRow, ...]
    refused: tuple[tuple[int, str], ...]  # TP sizes vLLM refuses, with the reason

    def at(self, tensor_parallel: int) -> TpRow:
        for r in self.points:
            if r.tensor_parallel == tensor_parallel:
                return r
        raise ValueError(
            f"TP {tensor_parallel} is not in this table; use one of {[r.tensor_parallel for r in self.points]}"
        )

    def rows(self) -> list[dict[str, Any]]:
        return [r.row() for r in self.points]

    def summary(self) -> str:
        """The sentence the section is about: where splitting stops thinning each GPU's KV."""
        at_kv = [r for r in self.points if r.tensor_parallel >= self.num_kv_heads]
        if len(at_kv) < 2:
            first = self.points[-1]
            return (
                f"{self.model_name} has {self.num_kv_heads} KV heads: up to TP {first.tensor_parallel} each GPU "
                f"stores {first.kv_bytes_per_token_per_gpu / KiB:g} KiB per token, a 1/{first.tensor_parallel} slice."
            )
        a, b = at_kv[0], at_kv[-1]
        return (
            f"{self.model_name} has {self.num_kv_heads} KV heads: from TP {a.tensor_parallel} on each GPU keeps one "
            f"({a.kv_bytes_per_token_per_gpu / KiB:g} KiB per token), so TP {b.tensor_parallel} stores as much KV per "
            f"token on each GPU as TP {a.tensor_parallel}, with each head copied on {b.kv_head_replicas} GPUs."
        )


def tp_table(model: str = DEFAULT_MODEL, gpu: str = DEFAULT_GPU, kv_dtype: str = "bf16") -> TpTable:
    """Each TP size of TP_SIZES on `gpu` cards: KV heads per GPU, KV bytes per token, pool (vLLM V1 sizing)."""
    m, g = resolve_model(model), resolve_gpu(gpu)
    points, refused = [], []
    for tp in TP_SIZES:
        try:
            check_tensor_parallel(m, tp)
        except ValueError as exc:
            refused.append((tp, str(exc)))
            continue
        fp = serving_footprint(m, g, kv_dtype=kv_dtype, tensor_parallel=tp)  # non-torch memory: non_torch_bytes(tp)
        points.append(
            TpRow(
                tensor_parallel=tp,
                kv_heads_per_gpu=kv_heads_per_gpu(m, tp),
                kv_head_replicas=kv_head_replicas(m, tp),
                kv_bytes_per_token_per_gpu=fp.kv_bytes_per_token,
                weights_bytes_per_gpu=fp.weights_bytes,
                non_torch_bytes_per_gpu=fp.overhead_bytes,
                kv_pool_bytes_per_gpu=fp.kv_budget_bytes,
                tokens_in_pool=fp.kv_token_capacity if fp.kv_budget_bytes > 0 else 0,
            )
        )
    return TpTable(m.name, g.name, m.num_kv_heads, tuple(points), tuple(refused))
