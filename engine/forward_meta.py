"""Per-step batch metadata for one forward pass of the model over a packed, paged batch.

One scheduler step runs S sequences. Sequence i contributes `query_lens[i]` new tokens (a prompt chunk, or
one token in decode) on top of `context_lens[i]` tokens whose K/V already sit in the paged cache (prefix
cache hits, earlier prompt chunks, earlier decode steps). All new tokens are packed into one 1-D batch of
T = sum(query_lens) tokens, as in flash-attn's varlen API and vLLM V1's attention metadata.

Every step is the same kind of step (vLLM V1's unified attention): in every layer the model
1. writes the new tokens' K/V into the paged cache through `slot_mapping` (`kernels.ops.store_kv`);
2. runs `kernels.ops.paged_varlen_attention` once over the whole batch: sequence i's queries are the last
   query_lens[i] of its seq_lens[i] tokens, keys and values are read through its block-table row, causal
   bottom-right aligned (new token j sees the cached context plus new tokens 0..j), within the model's
   sliding window if it has one. A fresh prompt, a prompt chunk, a prefix-cache hit, a decode (one query)
   and any mix of them in one batch are the same call; nothing is gathered and nothing is split.
`is_decode` names a row that adds one token on top of cached context; it only labels steps for the traces.

This is passed to the model as an argument rather than kept in a module global (nano-vllm's context):
Streamlit runs each learner in a thread, and a global would leak one learner's batch into another's.
Build it with `ForwardMeta.build(...)` from plain Python lists; the raw fields are documented below. It also
names the kernel backend the step runs on (resolved once by the engine's ModelRunner), so a model shared
read-only by several engines serves each with its own backend.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from engine.core.kv_cache import slots_of
from kernels.paged_varlen_attention_torch import VarlenIndex, paged_varlen_index


def is_decode(query_len: int, context_len: int) -> bool:
    """A row decodes when it computes one token on top of cached context (a label: every row attends alike)."""
    return query_len == 1 and context_len > 0


@dataclass(slots=True)
class ForwardMeta:
    """Metadata for one forward step over S sequences and T = sum(query_lens) new tokens.

    Fields (all tensors on the model's device):
      positions      int64 [T]      position of each new token inside its sequence (for rotary embeddings)
      slot_mapping   int64 [T]      cache slot = block_id * block_size + offset for each new token; < 0 skips
      cu_seqlens_q   int32 [S + 1]  prefix sums of query_lens (new tokens per sequence)
      max_seqlen_q   int            max(query_lens)
      block_tables   int32 [S, max_blocks]  physical block ids per sequence (padded with 0; entries a sliding
                                    window freed hold -1: the kernel never reads outside the window)
      seq_lens       int32 [S]      context_lens + query_lens: tokens in the cache after this step's store
      max_seqlen_k   int            max(seq_lens)
      backend        str            kernels.ops backend of the step: "torch", "triton" or "auto"
      host           (cu_seqlens_q, seq_lens) as Python lists, so the step's plan needs no device read

    The torch backend's plan of the step (`varlen_index`: the grouping and the decode gather index) is built
    on first use and cached on the instance, so the layers of one step share it.
    """

    positions: torch.Tensor
    slot_mapping: torch.Tensor
    cu_seqlens_q: torch.Tensor
    max_seqlen_q: int
    block_tables: torch.Tensor
    seq_lens: torch.Tensor
    max_seqlen_k: int
    backend: str = "auto"
    host: tuple[list[int], list[int]] | None = None
    _index: tuple[tuple, VarlenIndex] | None = field(default=None, init=False, repr=False, compare=False)

    def varlen_index(
        self, block_size: int, heads: tuple[int, int] | None, sliding_window: int | None, kv_fp8: bool
    ) -> VarlenIndex:
        """This step's `kernels.paged_varlen_attention_torch.paged_varlen_index`, built once, shared by layers.

        heads: the layers' (Hq, Hkv) when they take the CPU sparse decode path (`use_sparse`), else None.
        """
        key = (block_size, heads, sliding_window, kv_fp8)
        if self._index is None or self._index[0] != key:
            index = paged_varlen_index(
                self.cu_seqlens_q,
                self.seq_lens,
                self.block_tables,
                block_size,
                heads,
                sliding_window,
                kv_fp8,
                host=self.host,
            )
            self._index = (key, index)
        return self._index[1]

    @property
    def num_seqs(self) -> int:
        """S, the number of sequences in this step."""
        return int(self.seq_lens.shape[0])

    @property
    def num_tokens(self) -> int:
        """T, the number of new (query) tokens packed in this step."""
        return int(self.positions.shape[0])

    @property
    def last_token_indices(self) -> torch.Tensor:
        """int64 [S]: index in the packed batch of each sequence's last new token (where logits are taken)."""
        return self.cu_seqlens_q[1:].long() - 1

    @classmethod
    def build(
        cls,
        query_lens: Sequence[int],
        context_lens: Sequence[int],
        block_tables: Sequence[Sequence[int]],
        block_size: int,
        device: torch.device | str = "cpu",
        backend: str = "auto",
    ) -> ForwardMeta:
        """Build the metadata from per-sequence counts and block tables (plain lists, as a scheduler holds them).

        query_lens[i]: new tokens of sequence i this step (>= 1); context_lens[i]: tokens of sequence i already
        in the cache (num_computed_tokens); block_tables[i]: its physical blocks, enough for
        context_lens[i] + query_lens[i] tokens (leading entries may be -1: blocks a sliding window freed).
        """
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

        def tensor(values: list, dtype: torch.dtype) -> torch.Tensor:
            return torch.tensor(values, dtype=dtype, device=device)

        cu_q = [0, *itertools.accumulate(query_lens)]
        return cls(
            positions=tensor(positions, torch.int64),
            slot_mapping=tensor(slots, torch.int64),
            cu_seqlens_q=tensor(cu_q, torch.int32),
            max_seqlen_q=max(query_lens),
            block_tables=tensor(padded, torch.int32),
            seq_lens=tensor(seq_lens, torch.int32),
            max_seqlen_k=max(seq_lens),
            backend=backend,
            host=(cu_q, seq_lens),
        )


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
