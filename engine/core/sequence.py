"""Request state: token ids, progress counters, block table and status (nano-vllm / vLLM v1 style).

A `Sequence` is plain state. The scheduler moves it between statuses, the block manager
(`engine.core.block_manager.BlockManager`) fills its `block_table`, and the model runner advances
`num_computed_tokens` after each step. Following vLLM v1's rewrite, there is one rule: a request has
`num_tokens` token ids and `num_computed_tokens` of them have K/V in the cache; each step catches up
part of the difference (a prompt chunk, or the one token sampled last step). Everything else the engine
knows about a request lives here too: its prompt text, its sampling RNG and how often it was preempted.

Public API:
    SequenceStatus            WAITING, RUNNING, PREEMPTED, FINISHED
    Sequence(seq_id, token_ids, block_size=16, sampling_params=None, arrival_time=0.0, prompt=None,
             generator=None)
        fields:     seq_id, token_ids (prompt + generated), num_prompt_tokens, num_computed_tokens,
                    num_cached_tokens, block_tables: list[list[int]] (one per KV-cache group,
                    engine/core/kv_groups.py), status, block_size, sampling_params,
                    finish_reason ("stop" | "length" | "abort" | None), arrival_time, first_token_time,
                    finish_time, prompt (the text, or None), generator (torch.Generator | None),
                    num_preemptions
        properties: block_table (block_tables[0], the first group's: the only one of a one-kind model),
                    num_tokens, num_completion_tokens, prompt_token_ids, completion_token_ids,
                    last_token, num_blocks, last_block_num_tokens, is_finished
        methods:    append_token(token_id), block_token_ids(i), len(seq) == num_tokens
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Any

from kernels.validate import is_whole

_BLOCK_SIZES = tuple(1 << i for i in range(9))  # 1, 2, 4, ..., 256


class SequenceStatus(enum.Enum):
    """Where a request is in its life: queued, scheduled, evicted for recompute, or done."""

    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED = "finished"


def check_block_size(block_size: object) -> int:
    """Return `block_size` if it is a power of two in 1..256, else raise a ValueError saying so."""
    if not is_whole(block_size) or block_size not in _BLOCK_SIZES:
        raise ValueError(
            f"block_size={block_size!r} is not supported; use a power of two from 1 to 256 (this engine's default "
            "is 16, vLLM v0.34.0's 64)"
        )
    return int(block_size)


class Sequence:
    """One request: its token ids, how many have K/V in the cache, and where that K/V lives."""

    def __init__(
        self,
        seq_id: int,
        token_ids: Iterable[int],
        block_size: int = 16,
        sampling_params: Any = None,
        arrival_time: float = 0.0,
        prompt: str | None = None,
        generator: Any = None,
    ) -> None:
        token_ids = list(token_ids)
        # The engine's boundary (LLM._encode, EngineConfig) checked the prompt and the block size.
        assert token_ids, f"sequence {seq_id} has an empty prompt"
        assert block_size in _BLOCK_SIZES, f"block_size={block_size!r}"
        self.seq_id = seq_id
        self.token_ids: list[int] = token_ids  # prompt followed by generated tokens
        self.num_prompt_tokens = len(token_ids)
        self.num_computed_tokens = 0  # tokens whose K/V is in the cache
        self.num_cached_tokens = 0  # of those, tokens reused from the prefix cache at its first admission
        # Per KV-cache group: logical block i -> physical block id (a model with one kind of layer has one group).
        self.block_tables: list[list[int]] = [[]]
        self.status = SequenceStatus.WAITING
        self.block_size = block_size
        self.sampling_params = sampling_params
        self.finish_reason: str | None = None  # "stop" | "length" once finished
        self.arrival_time = arrival_time
        self.first_token_time: float | None = None
        self.finish_time: float | None = None
        self.prompt = prompt  # the text the request came as, None when it came as token ids
        self.generator = generator  # its own sampling RNG (torch.Generator), None for greedy requests
        self.num_preemptions = 0  # times the scheduler evicted it for recompute

    def __len__(self) -> int:
        return len(self.token_ids)

    def __repr__(self) -> str:
        return (
            f"Sequence(seq_id={self.seq_id}, status={self.status.name}, num_tokens={self.num_tokens}, "
            f"num_computed_tokens={self.num_computed_tokens}, block_table={self.block_table})"
        )

    @property
    def block_table(self) -> list[int]:
        """The first KV-cache group's block table (the whole model's when all its layers attend alike)."""
        return self.block_tables[0]

    @block_table.setter
    def block_table(self, table: list[int]) -> None:
        self.block_tables[0] = table

    @property
    def num_tokens(self) -> int:
        """Prompt plus generated tokens."""
        return len(self.token_ids)

    @property
    def num_completion_tokens(self) -> int:
        """Generated tokens so far."""
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def prompt_token_ids(self) -> list[int]:
        """The prompt's token ids (a copy)."""
        return self.token_ids[: self.num_prompt_tokens]

    @property
    def completion_token_ids(self) -> list[int]:
        """The generated token ids (a copy)."""
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def last_token(self) -> int:
        """The newest token id (the next decode step's input)."""
        return self.token_ids[-1]

    @property
    def num_blocks(self) -> int:
        """Blocks needed to hold all `num_tokens` tokens."""
        return (len(self.token_ids) + self.block_size - 1) // self.block_size

    @property
    def last_block_num_tokens(self) -> int:
        """Tokens in the last logical block (1..block_size)."""
        return len(self.token_ids) - (self.num_blocks - 1) * self.block_size

    @property
    def is_finished(self) -> bool:
        """True once the scheduler has marked the request FINISHED."""
        return self.status is SequenceStatus.FINISHED

    def block_token_ids(self, i: int) -> list[int]:
        """Token ids of logical block `i` (the last block may be partial)."""
        if not 0 <= i < self.num_blocks:
            raise ValueError(
                f"block index {i} is out of range for sequence {self.seq_id} with {self.num_blocks} blocks"
            )
        return self.token_ids[i * self.block_size : (i + 1) * self.block_size]

    def append_token(self, token_id: int) -> None:
        """Append a sampled token; its K/V is computed in the next step."""
        self.token_ids.append(token_id)
