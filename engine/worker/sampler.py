"""The sampler: one step's logits -> next tokens, each row with its request's `SamplingParams` and RNG.

Top-k and nucleus (top-p) filtering are the classic recipes (Fan et al. 2018, "Hierarchical Neural Story
Generation"; Holtzman et al. 2020, "The Curious Case of Neural Text Degeneration"). The parameters themselves
are plain data (engine/sampling_params.py); this module is the torch half, run by the model runner.

Each request owns a `torch.Generator`, seeded from `SamplingParams.seed` when given, so a seeded request
draws the same tokens whether it runs alone or batched with strangers, and a preempted request that is
recomputed does not reuse random numbers from another request.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from engine.sampling_params import SamplingParams

FLOAT32_TINY = torch.finfo(torch.float32).tiny  # the smallest normal float32, 1.2e-38
FLOAT32_MAX = torch.finfo(torch.float32).max  # 3.4e38


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


def inverse_temperature(temperature: float) -> float:
    """1 / temperature, kept a normal float32 (1.2e-38 .. 3.4e38): the multiplier `tempered` applies.

    Normal on purpose: a subnormal or 0 multiplier (a flush-to-zero device) would turn -inf logits into NaN,
    an inf one the top logit's 0 into NaN. So temperatures below 1 / FLT_MAX (2.9e-39) act as 2.9e-39, which
    still weighs a logit 1e-36 below the top by exp(-340) = 0 in float32, and above 1 / FLT_MIN as 8.5e37."""
    return min(max(1.0 / temperature, FLOAT32_TINY), FLOAT32_MAX)


def tempered(logits: torch.Tensor, inverse: float | torch.Tensor) -> torch.Tensor:
    """Logits [..., V] (float32) times `inverse` (`inverse_temperature`: a float or a [..., 1] tensor) after
    subtracting each row's max: the exact limit at any temperature, never NaN.

    The top logit (and its ties) become 0 and every other one (x - max) / T < 0, so a tiny T makes the
    others -inf: an argmax among ties; a huge T makes every finite logit ~0: uniform. NaN logits count as
    -inf (never drawn); +inf logits are the row's top and tie with each other; a row of only -inf / NaN is
    uniform.
    """
    top = logits.amax(dim=-1, keepdim=True)  # NaN when the row holds a NaN
    if bool(top.isfinite().all()):  # the common case; 0 * inverse and -inf * inverse are exact
        # In place on the difference: a second fresh [R, V] tensor cost 10x the arithmetic (page faults).
        return (logits - top).mul_(inverse)
    x = torch.where(logits.isnan(), float("-inf"), logits)
    top = x.amax(dim=-1, keepdim=True)
    return torch.where(x == top, 0.0, (x - top) * inverse)  # x == top: also inf - inf and -inf - -inf


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
    rows = [i for i, p in enumerate(params) if not p.greedy]
    if not rows:
        return tokens
    # Every sampled row tempered at once (one op each, not one per row); then each row's filter and RNG.
    inverse = torch.tensor([[inverse_temperature(params[i].temperature)] for i in rows], device=logits.device)
    scaled = tempered(logits if len(rows) == len(params) else logits[rows], inverse)  # [R, V]
    for j, i in enumerate(rows):
        p = params[i]
        row = filter_logits(scaled[j], p.top_k, p.top_p)
        probs = torch.softmax(row, dim=-1)  # the top token is 0 after tempering and survives filtering
        tokens[i] = int(torch.multinomial(probs, 1, generator=generators[i]).item())
    return tokens
