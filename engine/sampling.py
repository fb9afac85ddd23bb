"""Sampling parameters and the sampler that turns one step's logits into next tokens.

Follows vLLM's `SamplingParams` vocabulary (max_tokens, temperature, top_k, top_p, seed, stop_token_ids,
ignore_eos). Top-k and nucleus (top-p) filtering are the classic recipes (Fan et al. 2018, "Hierarchical
Neural Story Generation"; Holtzman et al. 2020, "The Curious Case of Neural Text Degeneration").

Each request owns a `torch.Generator`, seeded from `SamplingParams.seed` when given, so a seeded request
draws the same tokens whether it runs alone or batched with strangers, and a preempted request that is
recomputed does not reuse random numbers from another request.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch


@dataclass(slots=True)
class SamplingParams:
    """How to pick tokens for one request; validated on construction.

    temperature 0 is greedy (argmax). top_k None (or 0) keeps the whole vocabulary; top_p 1.0 disables
    nucleus filtering. Generation stops after `max_tokens` tokens ("length"), or when a token in
    `stop_token_ids` or the tokenizer's EOS is produced ("stop"; the stop token is kept in the output).
    `ignore_eos=True` disables the EOS stop (benchmarks use it so every run produces max_tokens tokens).
    """

    max_tokens: int = 16
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float = 1.0
    seed: int | None = None
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ValueError(f"max_tokens={self.max_tokens!r} must be an integer >= 1")
        if not isinstance(self.temperature, (int, float)) or not math.isfinite(self.temperature):
            raise ValueError(f"temperature={self.temperature!r} must be a finite number >= 0 (0 means greedy)")
        if self.temperature < 0:
            raise ValueError(f"temperature={self.temperature} must be >= 0 (0 means greedy)")
        if self.top_k is not None and (isinstance(self.top_k, bool) or not isinstance(self.top_k, int)):
            raise ValueError(f"top_k={self.top_k!r} must be an integer >= 1, or None to keep every token")
        if self.top_k is not None and self.top_k < 0:
            raise ValueError(f"top_k={self.top_k} must be >= 1, or None / 0 to keep every token")
        if self.top_k == 0:
            self.top_k = None
        if not isinstance(self.top_p, (int, float)) or not (0.0 < self.top_p <= 1.0):
            raise ValueError(f"top_p={self.top_p!r} must be in (0, 1]; use 1.0 to disable nucleus sampling")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise ValueError(f"seed={self.seed!r} must be an integer or None")
        stop = list(self.stop_token_ids)
        if any(isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in stop):
            raise ValueError(f"stop_token_ids={self.stop_token_ids!r} must be a list of non-negative token ids")
        self.stop_token_ids = stop

    @property
    def greedy(self) -> bool:
        """True when this request takes the argmax (temperature 0)."""
        return self.temperature == 0.0


def make_generator(params: SamplingParams, device: torch.device | str) -> torch.Generator | None:
    """A per-request RNG on `device`: seeded from params.seed, random otherwise; None for greedy requests."""
    if params.greedy:
        return None
    gen = torch.Generator(device=device)
    if params.seed is None:
        gen.seed()
    else:
        gen.manual_seed(params.seed)
    return gen


def filter_logits(logits: torch.Tensor, top_k: int | None, top_p: float) -> torch.Tensor:
    """Mask (to -inf) tokens outside the top-k and outside the smallest set whose probability >= top_p.

    logits: [V] float; returns a new [V] tensor. The most likely token always survives.
    """
    out = logits.clone()
    if top_k is not None and top_k < out.shape[-1]:
        kth = torch.topk(out, top_k).values[-1]
        out[out < kth] = float("-inf")
    if top_p < 1.0:
        sorted_logits, order = torch.sort(out, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        # drop a token when the tokens strictly more likely than it already reach top_p
        mass_before = torch.cumsum(probs, dim=-1) - probs
        drop_sorted = mass_before >= top_p
        drop_sorted[0] = False
        out[order[drop_sorted]] = float("-inf")
    return out


def sample(
    logits: torch.Tensor,
    params: Sequence[SamplingParams],
    generators: Sequence[torch.Generator | None],
) -> list[int]:
    """Pick one token per row of logits [S, V] with each row's own params and generator."""
    if logits.dim() != 2 or logits.shape[0] != len(params) or len(params) != len(generators):
        raise ValueError(
            f"logits {tuple(logits.shape)} must be [S, V] with S == len(params) ({len(params)}) "
            f"== len(generators) ({len(generators)})"
        )
    logits = logits.float()
    tokens = logits.argmax(dim=-1).tolist()  # greedy rows are done; sampled rows are overwritten below
    for i, (p, gen) in enumerate(zip(params, generators, strict=True)):
        if p.greedy:
            continue
        row = filter_logits(logits[i] / p.temperature, p.top_k, p.top_p)
        probs = torch.softmax(row, dim=-1)
        tokens[i] = int(torch.multinomial(probs, 1, generator=gen).item())
    return tokens
