"""One step's inputs to the model beside its token ids: positions, which rows give logits, the attention plan.

One scheduler step runs S sequences. Sequence i contributes `query_lens[i]` new tokens (a prompt chunk, or
one token in decode) on top of `context_lens[i]` tokens whose K/V already sit in the paged cache (prefix
cache hits, earlier prompt chunks, earlier decode steps). All new tokens are packed into one 1-D batch of
T = sum(query_lens) tokens, as in flash-attn's varlen API and vLLM V1's attention metadata.

Every step is the same kind of step (vLLM V1's unified attention): in every layer the model writes the new
tokens' K/V into the paged cache (`kernels.ops.store_kv`, through the plan's `slot_mapping`) and runs
`kernels.ops.paged_varlen_attention` once over the whole batch: sequence i's queries are the last
query_lens[i] of its seq_lens[i] tokens, read through its block-table row, causal bottom-right aligned,
within the model's sliding window if it has one. A fresh prompt, a chunk, a prefix-cache hit, a decode and
any mix of them are the same call. Which path the kernels take, and the index it needs, is the kernels'
business: `kernels.ops.plan_attention` validates the step once and returns that `AttentionPlan`, which
every layer reuses. The model reads only `positions`, `logits_indices` and passes `attention` on.

This is passed to the model as an argument rather than kept in a module global (nano-vllm's context):
Streamlit runs each learner in a thread, and a global would leak one learner's batch into another's.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch

from engine.core.block_manager import slots_of
from kernels.ops import HostStep, plan_attention
from kernels.plan import AttentionPlan


class LayerKV(NamedTuple):
    """One layer's cache: K and V [num_blocks, block_size, Hkv, D] and, for an fp8 cache, their float32 [1]
    scales (0 until the layer's first write sets them); None for a full-precision cache."""

    k: torch.Tensor
    v: torch.Tensor
    k_scale: torch.Tensor | None = None
    v_scale: torch.Tensor | None = None


@dataclass(frozen=True, slots=True)
class ForwardMeta:
    """One step over S sequences and T = sum(query_lens) new tokens (tensors on the model's device).

    positions       int64 [T]  position of each new token inside its sequence (for rotary embeddings)
    logits_indices  int64 [S]  row in the packed batch of each sequence's last new token (where logits are taken)
    attention       the step's `kernels.ops.AttentionPlan`: slot mapping, cu_seqlens_q, seq_lens, block
                    tables, the backend and its index, validated for the cache layout it was built against
    layer_plans     a hybrid model's plan per layer (each KV-cache group has its block tables, slot mapping
                    and window: engine/core/kv_groups.py); None: every layer uses `attention`
    """

    positions: torch.Tensor
    logits_indices: torch.Tensor
    attention: AttentionPlan
    layer_plans: tuple[AttentionPlan, ...] | None = None

    def plans(self, num_layers: int) -> Sequence[AttentionPlan]:
        """The attention plan of each of `num_layers` layers."""
        return self.layer_plans if self.layer_plans is not None else (self.attention,) * num_layers

    @property
    def num_seqs(self) -> int:
        """S, the number of sequences in this step."""
        return int(self.logits_indices.shape[0])

    @property
    def num_tokens(self) -> int:
        """T, the number of new (query) tokens packed in this step."""
        return int(self.positions.shape[0])

    @classmethod
    def build(
        cls,
        query_lens: Sequence[int],
        context_lens: Sequence[int],
        block_tables: Sequence[Sequence[int]],
        cache: LayerKV,
        *,
        num_heads: int,
        q_dtype: torch.dtype,
        sliding_window: int | None = None,
        backend: str = "auto",
    ) -> ForwardMeta:
        """The step's metadata from per-sequence counts and block tables (plain lists, as a scheduler holds them).

        query_lens[i]: new tokens of sequence i this step (>= 1); context_lens[i]: tokens of sequence i already
        in the cache (num_computed_tokens); block_tables[i]: its physical blocks, enough for
        context_lens[i] + query_lens[i] tokens (leading entries may be -1: blocks a sliding window freed).
        cache: one layer's cache (every layer shares its layout; the block size is its second dimension);
        num_heads / q_dtype: the model's query heads and activation dtype; backend: "auto", "torch" or "triton".
        """
        block_size = cache.k.shape[1]
        device = cache.k.device
        _check_counts(query_lens, context_lens, block_tables, block_size)
        positions: list[int] = []
        slots: list[int] = []
        seq_lens: list[int] = []
        for q_len, ctx_len, table in zip(query_lens, context_lens, block_tables, strict=True):
            seq_len = ctx_len + q_len
            positions.extend(range(ctx_len, seq_len))
            slots.extend(slots_of(table, ctx_len, seq_len, block_size))  # only the new tokens' slots
            seq_lens.append(seq_len)
        max_blocks = max(1, max(len(t) for t in block_tables))
        padded = [list(t) + [0] * (max_blocks - len(t)) for t in block_tables]
        cu_q = [0, *itertools.accumulate(query_lens)]

        def tensor(values: list, dtype: torch.dtype) -> torch.Tensor:
            return torch.tensor(values, dtype=dtype, device=device)

        attention = plan_attention(
            tensor(cu_q, torch.int32),
            tensor(seq_lens, torch.int32),
            tensor(padded, torch.int32),
            max(query_lens),
            tensor(slots, torch.int64),
            cache.k,
            cache.v,
            num_heads=num_heads,
            q_dtype=q_dtype,
            causal=True,
            sliding_window=sliding_window,
            k_scale=cache.k_scale,
            v_scale=cache.v_scale,
            backend=backend,
            host_step=HostStep(cu_q, seq_lens, padded, slots),  # its checks run on these lists: no read back
        )
        return cls(tensor(positions, torch.int64), tensor([c - 1 for c in cu_q[1:]], torch.int64), attention)


def _check_counts(
    query_lens: Sequence[int], context_lens: Sequence[int], block_tables: Sequence[Sequence[int]], block_size: int
) -> None:
    """ValueErrors for inputs `ForwardMeta.build` cannot describe a step with."""
    num_seqs = len(query_lens)
    if num_seqs == 0:
        raise ValueError("ForwardMeta.build got no sequences; schedule at least one sequence per step")
    if len(context_lens) != num_seqs or len(block_tables) != num_seqs:
        raise ValueError(
            f"query_lens ({num_seqs}), context_lens ({len(context_lens)}) and block_tables "
            f"({len(block_tables)}) must have one entry per sequence"
        )
    if block_size < 1:
        raise ValueError(f"block_size={block_size} must be >= 1")
    for i, (q_len, ctx_len, table) in enumerate(zip(query_lens, context_lens, block_tables, strict=True)):
        if q_len < 1 or ctx_len < 0:
            raise ValueError(f"sequence {i}: query_len={q_len} must be >= 1 and context_len={ctx_len} >= 0")
        if len(table) * block_size < ctx_len + q_len:
            raise ValueError(
                f"sequence {i}: block table has {len(table)} blocks of {block_size} slots but needs "
                f"{ctx_len + q_len} tokens; allocate more blocks before the step"
            )
