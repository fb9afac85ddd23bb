"""How one request picks its tokens: `SamplingParams`, plain data, validated when built (no torch).

Follows vLLM's `SamplingParams` vocabulary (max_tokens, temperature, top_k, top_p, seed, stop_token_ids,
ignore_eos), and lives, as in vLLM (vllm/sampling_params.py), apart from the sampler: the scheduler's stop
rules read it in engine/core/ (bookkeeping without torch), and the sampler that applies it to logits runs
next to the model runner (engine/worker/sampler.py).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from dataclasses import dataclass, field

from kernels.validate import is_whole

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
    if not is_whole(value):  # int, numpy.int64, ...: exact, never truncating a float
        raise ValueError(f"{name}={_shown(value)} must be {rule}")
    return int(value)


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
