"""Per-step batch metadata for one forward pass of the model over a packed, paged batch.

One scheduler step runs S sequences. Sequence i contributes `query_lens[i]` new tokens (a prompt chunk, or
one token in decode) on top of `context_lens[i]` tokens whose K/V already sit in the paged cache (prefix
cache hits, earlier prompt chunks, earlier decode steps). All new tokens are packed into one 1-D batch of
T = sum(query_lens) tokens, as in flash-attn's varlen API and vLLM's attention metadata.

Prefill or decode is decided here, once per step, by one rule (`is_decode`): a row decodes when it adds one
token on top of cached context. The model then, in every layer:
1. writes the new tokens' K/V into the paged cache through `slot_mapping` (`kernels.ops.store_kv`);
2. decode step (`is_prefill=False`, every row decodes): `paged_attention` over `block_tables` / `seq_lens`;
   prefill step with no cached context (`has_context=False`): `varlen_attention` over the new K/V only;
   prefill step with cached context (`has_context=True`): K/V of each sequence's whole context are
   gathered from the paged cache through `context_slot_mapping` and `varlen_attention` runs with
   `cu_seqlens_k` over the full context, causal bottom-right aligned, so new token j of a sequence sees the
   cached prefix plus new tokens 0..j. A prefill step that also carries decode rows is split (`mixed`): the
   decode rows attend with `paged_attention`, only the prompt rows pay for the gather and varlen attention.

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
from kernels.paged_attention_torch import TokenSlots, token_slots


def is_decode(query_len: int, context_len: int) -> bool:
    """The one prefill-vs-decode rule: a row decodes when it computes one token on top of cached context."""
    return query_len == 1 and context_len > 0


@dataclass(slots=True)
class ForwardMeta:
    """Metadata for one forward step over S sequences and T = sum(query_lens) new tokens.

    Fields (all tensors on the model's device):
      positions      int64 [T]      position of each new token inside its sequence (for rotary embeddings)
      slot_mapping   int64 [T]      cache slot = block_id * block_size + offset for each new token; < 0 skips
      cu_seqlens_q   int32 [S + 1]  prefix sums of query_lens (new tokens per sequence)
      cu_seqlens_k   int32 [S + 1]  prefix sums of seq_lens (whole context per sequence, incl. new tokens)
      max_seqlen_q   int            max(query_lens)
      max_seqlen_k   int            max(seq_lens)
      block_tables   int32 [S, max_blocks]  physical block ids per sequence (pad with 0; never read past seq_len)
      seq_lens       int32 [S]      context_lens + query_lens: tokens in the cache after this step's store
      is_prefill     bool           False only when every row decodes (`is_decode`): a pure decode step
      has_context    bool           True when some sequence has cached tokens before this step (prefill only)
      context_slot_mapping int64 [sum(seq_lens)] | None  cache slot of every context token, sequence by
                                    sequence; needed when has_context (gathers K/V for varlen attention)
      mixed          MixedSplit | None  set by `build` for a prefill step that also holds decode rows: the
                                    decode rows then take the paged path and only the prompt rows the varlen one
      backend        str            kernels.ops backend of the step: "torch", "triton" or "auto"

    The decode gather index every layer needs is computed on first use and cached on the instance, so the
    layers of one step share it.
    """

    positions: torch.Tensor
    slot_mapping: torch.Tensor
    cu_seqlens_q: torch.Tensor
    cu_seqlens_k: torch.Tensor
    max_seqlen_q: int
    max_seqlen_k: int
    block_tables: torch.Tensor
    seq_lens: torch.Tensor
    is_prefill: bool
    has_context: bool = False
    context_slot_mapping: torch.Tensor | None = None
    mixed: MixedSplit | None = None
    backend: str = "auto"
    _paged_index: TokenSlots | None = field(default=None, init=False, repr=False, compare=False)

    def paged_index(self, block_size: int, heads: tuple[int, int] | None = None) -> TokenSlots:
        """The decode index of this step (kernels/paged_attention_torch.py), built once, shared by layers.

        heads: the layers' (Hq, Hkv), for the index of the CPU sparse path (`use_sparse`) as well.
        """
        index = self._paged_index
        built_for = None if index is None else (index.block_size, index.sparse[:2] if index.sparse else None)
        if built_for != (block_size, heads):
            index = token_slots(self.block_tables, self.seq_lens, block_size, heads)
            self._paged_index = index
        return index

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
        context_lens[i] + query_lens[i] tokens. The step is a pure decode when every row `is_decode`;
        otherwise it is a prefill (possibly mixed with decodes).
        """
        _check_counts(query_lens, context_lens, block_tables, block_size)
        decode = [i for i, (q, c) in enumerate(zip(query_lens, context_lens, strict=True)) if is_decode(q, c)]
        is_prefill = len(decode) < len(query_lens)
        has_context = is_prefill and any(c > 0 for c in context_lens)
        positions, slots, context_slots, seq_lens = _slots(
            query_lens, context_lens, block_tables, block_size, has_context
        )
        max_blocks = max(1, max(len(t) for t in block_tables))
        padded = [list(t) + [0] * (max_blocks - len(t)) for t in block_tables]
        cu_q = [0, *itertools.accumulate(query_lens)]

        def tensor(values: list, dtype: torch.dtype) -> torch.Tensor:
            return torch.tensor(values, dtype=dtype, device=device)

        def part(rows: list[int]) -> ForwardMeta:  # the step restricted to some of its sequences
            lists = ([values[i] for i in rows] for values in (query_lens, context_lens, block_tables))
            return cls.build(*lists, block_size, device, backend)

        mixed = None
        if has_context and decode:
            # A prefill step that carries decodes: split it so only the prompt rows pay for varlen attention.
            decoding = set(decode)
            prompt = [i for i in range(len(query_lens)) if i not in decoding]
            prompt_tokens = [t for i in prompt for t in range(cu_q[i], cu_q[i + 1])]
            mixed = MixedSplit(tensor([cu_q[i] for i in decode], torch.int64), part(decode),
                               tensor(prompt_tokens, torch.int64), part(prompt))  # fmt: skip
        return cls(
            positions=tensor(positions, torch.int64),
            slot_mapping=tensor(slots, torch.int64),
            cu_seqlens_q=tensor(cu_q, torch.int32),
            cu_seqlens_k=tensor([0, *itertools.accumulate(seq_lens)], torch.int32),
            max_seqlen_q=max(query_lens),
            max_seqlen_k=max(seq_lens),
            block_tables=tensor(padded, torch.int32),
            seq_lens=tensor(seq_lens, torch.int32),
            is_prefill=is_prefill,
            has_context=has_context,
            context_slot_mapping=tensor(context_slots, torch.int64) if has_context else None,
            mixed=mixed,
            backend=backend,
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


def _slots(
    query_lens: Sequence[int],
    context_lens: Sequence[int],
    block_tables: Sequence[Sequence[int]],
    block_size: int,
    has_context: bool,
) -> tuple[list[int], list[int], list[int], list[int]]:
    """(positions, slot_mapping, context_slot_mapping, seq_lens) as lists; context slots only if has_context."""
    positions: list[int] = []
    slots: list[int] = []
    context_slots: list[int] = []
    seq_lens: list[int] = []
    for q_len, ctx_len, table in zip(query_lens, context_lens, block_tables, strict=True):
        seq_len = ctx_len + q_len
        # Only the positions a step needs: the new ones, plus the whole context when varlen attention gathers it.
        first = 0 if has_context else ctx_len
        seq_slots = slots_of(table, first, seq_len, block_size)
        positions.extend(range(ctx_len, seq_len))
        slots.extend(seq_slots[ctx_len - first :])
        if has_context:
            context_slots.extend(seq_slots)
        seq_lens.append(seq_len)
    return positions, slots, context_slots, seq_lens


@dataclass(slots=True)
class MixedSplit:
    """A mixed step cut in two: decode rows (one new token each) and prompt rows, each with its own metadata.

    decode_rows  int64 [Sd]  packed index of each decode sequence's token; `decode` is their pure-decode meta
    prompt_rows  int64 [Tp]  packed indices of the prompt tokens, in order; `prompt` is their prefill meta
    """

    decode_rows: torch.Tensor
    decode: ForwardMeta
    prompt_rows: torch.Tensor
    prompt: ForwardMeta
