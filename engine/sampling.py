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
import numbers
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import torch

FLOAT32_TINY = torch.finfo(torch.float32).tiny  # the smallest normal float32, 1.2e-38
FLOAT32_MAX = torch.finfo(torch.float32).max  # 3.4e38
MAX_SEED = 2**63 - 1  # torch.Generator.manual_seed takes any 64-bit value; 0 .. 2**63 - 1 is one per seed


def _is_bool(value: object) -> bool:
    """True for Python and numpy booleans (numpy's bool is not a subclass of bool, nor a number)."""
    kind = type(value)
    return isinstance(value, bool) or (kind.__module__ == "numpy" and kind.__name__ in ("bool", "bool_"))


def _shown(value: object) -> str:
    """repr(value), cut to 40 characters (a 400-digit int in an error message helps nobody)."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


def _integer(name: str, value: object, rule: str) -> int:
    """`value` as a Python int (numpy integers too); a bool, float, str or tensor is a ValueError naming `rule`."""
    if _is_bool(value) or isinstance(value, torch.Tensor):
        raise ValueError(f"{name}={_shown(value)} must be {rule}")
    try:
        return operator.index(value)  # int, numpy.int64, ...: exact, never truncating a float
    except TypeError:
        raise ValueError(f"{name}={_shown(value)} must be {rule}") from None


def _real(name: str, value: object, rule: str) -> float:
    """`value` as a Python float (numpy floats and ints too); a bool, str or tensor is a ValueError naming `rule`."""
    if _is_bool(value) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name}={_shown(value)} must be {rule}")
    try:
        return float(value)
    except OverflowError:  # an int beyond float's range
        raise ValueError(f"{name}={_shown(value)} must be {rule}") from None


@dataclass(slots=True)
class SamplingParams:
    """How to pick tokens for one request; validated on construction.

    temperature 0 is greedy (argmax). top_k None (or 0) keeps the whole vocabulary; top_p 1.0 disables
    nucleus filtering. Generation stops after `max_tokens` tokens ("length"), or when a token in
    `stop_token_ids` or the tokenizer's EOS is produced ("stop"; the stop token is kept in the output).
    `ignore_eos=True` disables the EOS stop (benchmarks use it so every run produces max_tokens tokens).

    Every finite temperature >= 0 is sampled exactly, at float32's resolution (`tempered`): a tiny one picks
    among the top logits' ties, a huge one uniformly among the tokens with finite logits; nothing is NaN. vLLM instead
    treats temperature < 1e-5 as greedy and raises 1e-5 .. 1e-2 to 1e-2 with a warning
    (vllm/sampling_params.py: _SAMPLING_EPS = 1e-5, _MAX_TEMP = 1e-2), because its sampler divides the raw
    logits; this sampler subtracts each row's max first, so it needs neither rule.
    Numbers may be Python or numpy numbers (normalized to int / float here); bools are refused for numbers.
    max_tokens has no upper bound of its own: a request also stops at the engine's max_model_len ("length").
    seed: 0 .. 2**63 - 1, or None for a random draw.
    """

    max_tokens: int = 16
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float = 1.0
    seed: int | None = None
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        self.max_tokens = _integer("max_tokens", self.max_tokens, "an integer >= 1")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens={self.max_tokens} must be an integer >= 1")
        rule = "a finite number >= 0 (0 means greedy)"
        self.temperature = _real("temperature", self.temperature, rule)
        if not math.isfinite(self.temperature) or self.temperature < 0:
            raise ValueError(f"temperature={self.temperature!r} must be {rule}")
        if self.temperature == 0:
            self.temperature = 0.0  # -0.0 too
        if self.top_k is not None:
            self.top_k = _integer("top_k", self.top_k, "an integer >= 1, or None / 0 to keep every token")
            if self.top_k < 0:
                raise ValueError(f"top_k={self.top_k} must be >= 1, or None / 0 to keep every token")
            if self.top_k == 0:
                self.top_k = None
        rule = "a number in (0, 1]; use 1.0 to disable nucleus sampling"
        self.top_p = _real("top_p", self.top_p, rule)
        if not 0.0 < self.top_p <= 1.0:  # also refuses NaN
            raise ValueError(f"top_p={self.top_p!r} must be {rule}")
        if self.seed is not None:
            self.seed = _integer("seed", self.seed, f"an integer in 0 .. 2**63 - 1 ({MAX_SEED}), or None")
            if not 0 <= self.seed <= MAX_SEED:
                raise ValueError(f"seed={_shown(self.seed)} must be an integer in 0 .. 2**63 - 1 ({MAX_SEED}), or None")
        self.stop_token_ids = self._stop_ids(self.stop_token_ids)
        if not isinstance(self.ignore_eos, bool) and not _is_bool(self.ignore_eos):
            raise ValueError(f"ignore_eos={_shown(self.ignore_eos)} must be True or False")
        self.ignore_eos = bool(self.ignore_eos)

    @staticmethod
    def _stop_ids(value: object) -> list[int]:
        rule = "a list of non-negative token ids"
        if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
            raise ValueError(f"stop_token_ids={_shown(value)} must be {rule}")
        try:
            stop = list(value)  # an Iterable can still refuse iteration (a 0-d tensor, a broken generator)
        except TypeError:
            raise ValueError(f"stop_token_ids={_shown(value)} must be {rule}") from None
        try:
            ids = [_integer("stop_token_ids", t, rule) for t in stop]
        except ValueError:
            raise ValueError(f"stop_token_ids={_shown(stop)} must be {rule}") from None
        if any(t < 0 for t in ids):
            raise ValueError(f"stop_token_ids={_shown(stop)} must be {rule}")
        return ids

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
