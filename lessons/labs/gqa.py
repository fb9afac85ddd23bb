"""Page 2's arithmetic and live run: MHA / MQA / GQA over a real model's shape (no Streamlit).

KV bytes per token = 2 (K and V) × layers × KV heads × head dim × bytes per element (GQA: Ainslie et al.,
EMNLP 2023; MQA: Shazeer 2019, arXiv 1911.02150). A group-count slider picks the number of KV heads G among
the divisors of the query-head count: G = Hq is MHA, G = 1 is MQA. The live run uses xformers' 5-D layout
[B, M, G, H, K] (H = query heads per group) with K/V expanded over H by a stride-0 view, through
`engine.attention.fmha.memory_efficient_attention`, and checks it against plain multi-head attention whose K/V heads
were physically repeated.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from engine.attention.fmha import memory_efficient_attention
from engine.memory.catalog import MODELS, GiB, KiB
from engine.memory.footprint import dtype_bytes
from engine.memory.measure import default_device, time_interleaved
from engine.memory.specs import ModelSpec

KV_DTYPES: tuple[str, ...] = ("bf16", "fp8", "fp32")


def group_options(num_heads: int) -> list[int]:
    """Valid KV-group counts for `num_heads` query heads: its divisors, ascending (1 = MQA, num_heads = MHA)."""
    if not isinstance(num_heads, int) or num_heads < 1:
        raise ValueError(f"num_heads={num_heads!r} must be a positive integer")
    return [g for g in range(1, num_heads + 1) if num_heads % g == 0]


def attention_kind(num_heads: int, groups: int) -> str:
    """ "MHA", "MQA" or "GQA-<G>" for G KV groups."""
    if groups == num_heads:
        return "MHA"
    return "MQA" if groups == 1 else f"GQA-{groups}"


def _spec(model: str, groups: int) -> ModelSpec:
    spec = MODELS[model]  # an unknown key is a ValueError listing the known ones
    if groups not in group_options(spec.num_heads):
        raise ValueError(
            f"{groups} KV groups do not divide {spec.num_heads} query heads of {model}; "
            f"use one of {group_options(spec.num_heads)}"
        )
    return spec.with_kv_heads(groups)


@dataclass(frozen=True)
class KvFootprint:
    """KV cache size of one model configuration, right and wrong (the calculator bug)."""

    model: str
    groups: int
    num_heads: int
    bytes_per_token: int
    naive_bytes_per_token: int  # uses query heads instead of KV heads: the common calculator bug
    context_len: int
    users: int

    @property
    def total_bytes(self) -> int:
        """KV bytes for `users` sequences of `context_len` tokens each."""
        return self.bytes_per_token * self.context_len * self.users

    @property
    def naive_total_bytes(self) -> int:
        """What a calculator that ignores KV heads would claim for the same load."""
        return self.naive_bytes_per_token * self.context_len * self.users

    @property
    def overcount(self) -> float:
        """How many times the buggy calculator over-states the KV cache (= query heads per KV head)."""
        return self.naive_bytes_per_token / self.bytes_per_token


def footprint(model: str, groups: int, kv_dtype: str = "bf16", context_len: int = 8192, users: int = 1) -> KvFootprint:
    """KV bytes per token and at context × users for `model` with `groups` KV heads."""
    if kv_dtype not in KV_DTYPES:
        raise ValueError(f"KV dtype {kv_dtype!r} is not offered; use one of {', '.join(KV_DTYPES)}")
    for name, value in (("context length", context_len), ("users", users)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
    spec = _spec(model, groups)
    b = dtype_bytes(kv_dtype)
    return KvFootprint(
        model, groups, spec.num_heads, spec.kv_bytes_per_token(b), spec.kv_bytes_per_token_mha(b), context_len, users
    )


def footprint_rows(model: str, kv_dtype: str = "bf16", context_len: int = 8192, users: int = 1) -> list[dict]:
    """One row per valid group count: KV heads, KiB per token, GiB at context × users, saving vs MHA."""
    spec = MODELS[model]
    rows = []
    for g in group_options(spec.num_heads):
        fp = footprint(model, g, kv_dtype, context_len, users)
        rows.append(
            {
                "groups (KV heads)": g,
                "kind": attention_kind(spec.num_heads, g),
                "query heads per KV head": spec.num_heads // g,
                "KiB per token": fp.bytes_per_token / KiB,
                "GiB at context x users": fp.total_bytes / GiB,
                "x smaller than MHA": fp.overcount,
            }
        )
    return rows


@dataclass(frozen=True)
class GqaRun:
    """A real GQA attention call in the 5-D layout, checked against MHA with repeated K/V heads."""

    query_shape: tuple[int, ...]
    key_shape: tuple[int, ...]
    key_stride: tuple[int, ...]
    output_shape: tuple[int, ...]
    mha_key_shape: tuple[int, ...]
    max_abs_err: float
    gqa_seconds: float
    mha_seconds: float
    gqa_kv_bytes: int  # K and V bytes the GQA call reads (the storage behind the stride-0 view)
    mha_kv_bytes: int  # K and V bytes MHA with repeated heads reads

    def rows(self) -> list[dict]:
        """Side-by-side table of the two runs."""
        return [
            {"run": "GQA, 5-D layout (stride-0 K/V)", "key shape": str(self.key_shape), "K+V KiB read":
             self.gqa_kv_bytes / KiB, "ms": self.gqa_seconds * 1e3},
            {"run": "MHA, K/V heads repeated", "key shape": str(self.mha_key_shape), "K+V KiB read":
             self.mha_kv_bytes / KiB, "ms": self.mha_seconds * 1e3},
        ]  # fmt: skip


def layout_shapes(num_heads: int, groups: int, head_dim: int, seq_len: int, batch: int = 1) -> dict[str, str]:
    """The shapes of each tensor in the [B, M, G, H, K] layout, as the page prints them."""
    if groups not in group_options(num_heads):
        raise ValueError(
            f"{groups} groups do not divide {num_heads} query heads; use one of {group_options(num_heads)}"
        )
    h = num_heads // groups
    return {
        "query": f"[B={batch}, M={seq_len}, G={groups}, H={h}, K={head_dim}]",
        "key / value (stored)": f"[B={batch}, N={seq_len}, G={groups}, 1, K={head_dim}]",
        "key / value (as the kernel sees them)": (
            f"[B={batch}, N={seq_len}, G={groups}, H={h} (stride 0), K={head_dim}]"
        ),
        "output": f"[B={batch}, M={seq_len}, G={groups}, H={h}, K={head_dim}]",
    }


def run_gqa(
    num_heads: int,
    groups: int,
    head_dim: int,
    seq_len: int = 128,
    repeats: int = 5,
    seed: int = 0,
    device: str | None = None,
) -> GqaRun:
    """Run memory_efficient_attention in [B, M, G, H, K] and MHA over repeated heads; compare and time them.

    Runs on CUDA (the Triton kernels) when a GPU is present, else on CPU (the torch backend).
    """
    if groups not in group_options(num_heads):
        raise ValueError(
            f"{groups} groups do not divide {num_heads} query heads; use one of {group_options(num_heads)}"
        )
    if not 1 <= seq_len <= 2048 or not 1 <= head_dim <= 256:
        raise ValueError(f"seq_len={seq_len} must be in 1..2048 and head_dim={head_dim} in 1..256 for a live run")
    h = num_heads // groups
    device = device or default_device()
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(1, seq_len, groups, h, head_dim, generator=gen).to(device)  # [B, M, G, H, K]
    k_store = torch.randn(1, seq_len, groups, 1, head_dim, generator=gen).to(device)  # [B, N, G, 1, K]: 1 per group
    v_store = torch.randn(1, seq_len, groups, 1, head_dim, generator=gen).to(device)
    k = k_store.expand(1, seq_len, groups, h, head_dim)  # [B, N, G, H, K], stride 0 over H: no copy
    v = v_store.expand(1, seq_len, groups, h, head_dim)
    q_mha = q.flatten(2, 3)  # [B, M, Hq, K]; query head g * h + j belongs to group g
    k_mha = k.flatten(2, 3).contiguous()  # [B, N, Hq, K]: every KV head physically repeated h times
    v_mha = v.flatten(2, 3).contiguous()

    gqa = lambda: memory_efficient_attention(q, k, v)
    mha = lambda: memory_efficient_attention(q_mha, k_mha, v_mha)
    times = time_interleaved({"gqa": gqa, "mha": mha}, repeats=repeats, warmup=1, device=device)
    out = gqa()  # [B, M, G, H, K]
    # Independent check: plain SDPA over the repeated heads, in [B, Hq, M, K].
    ref = F.scaled_dot_product_attention(q_mha.transpose(1, 2), k_mha.transpose(1, 2), v_mha.transpose(1, 2))
    err = (out.flatten(2, 3) - ref.transpose(1, 2)).abs().max().item()
    elem = q.element_size()
    return GqaRun(
        query_shape=tuple(q.shape),
        key_shape=tuple(k.shape),
        key_stride=tuple(k.stride()),
        output_shape=tuple(out.shape),
        mha_key_shape=tuple(k_mha.shape),
        max_abs_err=err,
        gqa_seconds=times["gqa"],
        mha_seconds=times["mha"],
        gqa_kv_bytes=2 * k_store.numel() * elem,
        mha_kv_bytes=2 * k_mha.numel() * elem,
    )
