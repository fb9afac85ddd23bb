"""Deep links: each lesson's main settings as URL query parameters, parsed and checked (no Streamlit).

`SPECS` holds one `LinkSpec` per page: its URL path (the name st.navigation derives from the script file,
`pages/5_paged_attention.py` -> `paged_attention`) and, per setting, the query parameter, the widget key
that holds it in session state, its default and what it accepts. A parameter may depend on the ones before
it (the valid KV-group counts depend on the model), so values resolve in order. `resolve(spec, query)` turns
a query mapping into values plus one `BadValue` per bad parameter (each falls back to its default);
`query_for(spec, values)` is the same view as strings; `link(spec, values)` the relative link
`paged_attention?block_size=64&max_context=4096`; `markdown_table()` the README's parameter table
(`python -m lessons.links` prints it). ui/linked_view.py's `linked_view` ties this to `st.query_params` and
`st.session_state`, and `link_note` words a `BadValue` for the page, the link's value shown inertly.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any
from urllib.parse import urlencode

from engine.memory.catalog import GPUS, MODELS
from lessons.diagnosis import scenario_ids
from lessons.labs import bandwidth, fragmentation, gqa, packing, paged, playground, pressure
from lessons.labs.diagnosis import MAX_VARIANT
from lessons.sim.traces import DATASETS

Earlier = Mapping[str, Any]  # the values of the parameters before this one
_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")
_BLANKS = " \t\r\n"  # the only characters trimmed from a value's ends (no-break, ideographic spaces are refused)
_INT = re.compile(r"[+-]?[0-9]{1,18}")  # ASCII digits only: no "６４", "٦٤", "6_4", "1e3", inner spaces
_FLOAT = re.compile(r"[+-]?(?:[0-9]{1,18}(?:\.[0-9]{0,18})?|\.[0-9]{1,18})")  # "0.5", ".5", "5."; no exponent


@dataclass(frozen=True)
class Param:
    """One setting in the URL. Callables receive the values of the parameters listed before it."""

    name: str  # query parameter
    key: str  # widget key; "{model}" style placeholders are filled from earlier values
    label: str  # what it sets, in words (README table)
    kind: type  # int, float, bool or str: the type the widget holds
    default: Any  # a value, or a callable of the earlier values
    choices: Sequence[Any] | Callable[[Earlier], Sequence[Any]] | None = None
    low: float | None = None
    high: float | Callable[[Earlier], float] | None = None
    step: float | None = None  # values lie on low + k * step
    check: Callable[[str], Any] | None = None  # str parameters: raises ValueError on a bad value
    accepts: str | None = None  # README wording where the accepted values depend on earlier ones

    def key_for(self, earlier: Earlier) -> str:
        return self.key.format(**earlier)

    def default_for(self, earlier: Earlier) -> Any:
        return self.default(earlier) if callable(self.default) else self.default

    def choices_for(self, earlier: Earlier) -> list[Any] | None:
        found = self.choices(earlier) if callable(self.choices) else self.choices
        return None if found is None else list(found)

    def high_for(self, earlier: Earlier) -> float | None:
        return self.high(earlier) if callable(self.high) else self.high

    def accepted(self, earlier: Earlier) -> str:
        """The accepted values in words, for the note on a bad value."""
        choices = self.choices_for(earlier)
        if choices is not None:
            return "one of " + ", ".join(encode(c) for c in choices)
        if self.kind is bool:
            return "true or false"
        if self.check is not None:
            return self.accepts or "see the page's help"
        span = f"{encode(self.low)} … {encode(self.high_for(earlier))}"
        return f"{span} in steps of {encode(self.step)}" if self.step else span

    def parse(self, raw: str, earlier: Earlier) -> Any:
        """The value ``raw`` stands for; ValueError when it is not one the setting accepts."""
        text = raw.strip(_BLANKS)
        if not text.isascii():  # every accepted value is ASCII; "K" (Kelvin sign) must not lower() into "k"
            raise ValueError("the value holds a character outside ASCII (type digits 0-9 and plain letters)")
        if self.kind is bool:
            if text.lower() not in _TRUE + _FALSE:
                raise ValueError(raw)
            return text.lower() in _TRUE
        if self.kind is str:
            choices = self.choices_for(earlier)
            if choices is not None:
                match = [c for c in choices if c.lower() == text.lower()]
                if not match:
                    raise ValueError(raw)
                return match[0]
            return ", ".join(str(n) for n in self.check(text)) if self.check else text
        value = _number(text, self.kind)
        choices = self.choices_for(earlier)
        if choices is not None:
            if value not in choices:
                raise ValueError(raw)
            return value
        return self._in_range(value, earlier, raw)

    def _in_range(self, value: float, earlier: Earlier, raw: str) -> Any:
        high = self.high_for(earlier)
        if (self.low is not None and value < self.low) or (high is not None and value > high):
            raise ValueError(raw)
        if self.step:
            k = round((value - (self.low or 0)) / self.step)
            snapped = (self.low or 0) + k * self.step
            if not math.isclose(value, snapped, rel_tol=0, abs_tol=1e-9 * max(1.0, abs(value))):
                raise ValueError(raw)
            value = round(snapped, 9)
        return self.kind(value)


def _number(text: str, kind: type) -> float:
    """An int ("64", "+64", "-1") or a float ("0.5", ".5") in ASCII digits from ``text``; ValueError otherwise.

    Python's own int() and float() also take "６４" (any script's digits), "6_4", " 6 ", "1e3", "inf" and
    "nan"; a link takes none of them."""
    if not (_INT if kind is int else _FLOAT).fullmatch(text):
        raise ValueError(text)
    value = int(text) if kind is int else float(text)
    if not math.isfinite(value):  # unreachable with 18 digits at most; kept as the contract
        raise ValueError(text)
    return value


def encode(value: Any) -> str:
    """How a value is written in the URL: true/false, 8 rather than 8.0, text as is."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


@dataclass(frozen=True)
class LinkSpec:
    """A page's deep-linkable settings, in the order they resolve."""

    page_id: str
    url_path: str
    params: tuple[Param, ...]

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise ValueError(f"{self.page_id} has no parameter {name!r}; use one of {', '.join(self.names)}")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)


@dataclass(frozen=True)
class BadValue:
    """A link parameter whose value the page does not take: the page shows its default instead.

    ``name``, ``accepts`` and ``default`` are the course's own words; ``raw`` is what the link held and
    ``reason`` (a free-text parameter's own complaint) may quote it: both are untrusted text."""

    name: str  # the query parameter
    raw: str  # the value the link gave, as given
    accepts: str  # what the parameter takes, in words ("one of 1, 2, 4", "0.5 … 64 in steps of 0.5")
    default: str  # the default shown instead, as the URL writes it
    reason: str | None = None  # why a free-text value was refused ("length 0 is outside 1 … 1024"), else None


def resolve(spec: LinkSpec, query: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, BadValue]]:
    """(values, bad), both by parameter name: each absent parameter takes its default, each bad one its
    default plus a `BadValue` naming the value and what the parameter accepts. Never raises for a bad value."""
    values: dict[str, Any] = {}
    bad: dict[str, BadValue] = {}
    for p in spec.params:
        default = p.default_for(values)
        raw = query.get(p.name)
        if raw is None:
            values[p.name] = default
            continue
        try:
            values[p.name] = p.parse(raw, values)
        except ValueError as exc:
            values[p.name] = default
            if p.check is not None:
                bad[p.name] = BadValue(p.name, raw, p.accepts or "see the page's help", encode(default), str(exc))
            else:
                bad[p.name] = BadValue(p.name, raw, p.accepted(values), encode(default))
    return values, bad


def query_for(spec: LinkSpec, values: Mapping[str, Any]) -> dict[str, str]:
    """The page's query parameters for ``values``, in spec order."""
    return {p.name: encode(values[p.name]) for p in spec.params if p.name in values}


def link(spec: LinkSpec, values: Mapping[str, Any], **extra: str) -> str:
    """The relative link to this view, e.g. ``paged_attention?block_size=64&max_context=4096``."""
    return f"{spec.url_path}?{urlencode({**query_for(spec, values), **extra}, safe=',')}"


def other_pages_params(spec: LinkSpec) -> frozenset[str]:
    """Query parameters only other pages use: a link from another lesson's view carries them over."""
    return frozenset(n for s in SPECS.values() for n in s.names) - frozenset(spec.names)


def _model_max(earlier: Earlier) -> int:
    return min(1_000_000, MODELS[earlier["model"]].max_context)


def _groups(earlier: Earlier) -> list[int]:
    return gqa.group_options(MODELS[earlier["model"]].num_heads)


SPECS: Mapping[str, LinkSpec] = MappingProxyType(
    {
        s.page_id: s
        for s in (
            LinkSpec(
                "bandwidth",
                "bandwidth",
                (
                    Param("model", "bw_model", "model", str, bandwidth.DEFAULTS["model"], tuple(MODELS)),
                    Param("gpu", "bw_gpu", "GPU", str, bandwidth.DEFAULTS["gpu"], tuple(GPUS)),
                    Param(
                        "dtype",
                        "bw_dtype",
                        "weight precision",
                        str,
                        bandwidth.DEFAULTS["dtype"],
                        bandwidth.WEIGHT_DTYPES,
                    ),
                    Param(
                        "batch",
                        "bw_batch",
                        "sequences decoding together",
                        int,
                        bandwidth.DEFAULTS["batch"],
                        low=1,
                        high=bandwidth.MAX_BATCH,
                    ),
                    Param(
                        "context",
                        "bw_context",
                        "context length (tokens)",
                        int,
                        lambda e: min(bandwidth.DEFAULTS["context"], _model_max(e)),
                        low=1,
                        high=_model_max,
                        accepts="1 … the model's context length",
                    ),
                ),
            ),
            LinkSpec(
                "gqa",
                "gqa",
                (
                    Param("model", "gqa_model", "model shape", str, gqa.DEFAULT_MODEL, tuple(MODELS)),
                    Param("kv_dtype", "gqa_dtype", "KV cache precision", str, gqa.KV_DTYPES[0], gqa.KV_DTYPES),
                    Param(
                        "groups",
                        "gqa_groups_{model}",
                        "KV groups G",
                        int,
                        lambda e: MODELS[e["model"]].num_kv_heads,
                        _groups,
                        accepts="a divisor of the model's query heads (default: its real KV heads)",
                    ),
                    Param("context", "gqa_context", "context length per user", int, 8192, low=1, high=10_000_000),
                    Param("users", "gqa_users", "concurrent users", int, 16, low=1, high=100_000),
                    Param(
                        "seq_len",
                        "gqa_seq",
                        "tokens in the prefill run",
                        int,
                        gqa.DEFAULT_SEQ_LEN,
                        low=gqa.SEQ_LENS[0],
                        high=gqa.SEQ_LENS[1],
                        step=gqa.SEQ_LENS[2],
                    ),
                ),
            ),
            LinkSpec(
                "packing",
                "packing",
                (
                    Param(
                        "lengths",
                        "pack_lengths",
                        "request lengths",
                        str,
                        packing.DEFAULT_LENGTHS,
                        check=packing.parse_lengths,
                        accepts=f"up to {packing.MAX_REQUESTS} whole numbers 1 … "
                        f"{packing.MAX_LENGTH}, comma-separated, at most {packing.MAX_TOTAL} in total",
                    ),
                    Param("causal", "pack_causal", "causal attention", bool, True),
                ),
            ),
            LinkSpec(
                "fragmentation",
                "fragmentation",
                (
                    Param(
                        "model",
                        "frag_model",
                        "model",
                        str,
                        fragmentation.DEFAULTS["model"],
                        tuple(m for m in MODELS if m != "demo"),
                    ),
                    Param("gpu", "frag_gpu", "GPU", str, fragmentation.DEFAULTS["gpu"], tuple(GPUS)),
                    Param(
                        "max_model_len",
                        "frag_max_len",
                        "max_model_len",
                        int,
                        fragmentation.DEFAULTS["max_model_len"],
                        fragmentation.MAX_MODEL_LENS,
                    ),
                    Param(
                        "dataset", "frag_dataset", "traffic", str, fragmentation.DEFAULTS["dataset"], tuple(DATASETS)
                    ),
                    Param(
                        "rate",
                        "frag_rate",
                        "requests per second",
                        float,
                        fragmentation.DEFAULTS["rate"],
                        low=0.5,
                        high=fragmentation.MAX_RATE,
                        step=0.5,
                    ),
                    Param(
                        "requests",
                        "frag_requests",
                        "requests in the trace",
                        int,
                        fragmentation.DEFAULTS["requests"],
                        low=20,
                        high=fragmentation.MAX_REQUESTS,
                        step=20,
                    ),
                ),
            ),
            LinkSpec(
                "paged",
                "paged_attention",
                (
                    Param(
                        "block_size",
                        "paged_block",
                        "tokens per KV block",
                        int,
                        paged.DEFAULT_BLOCK_SIZE,
                        paged.BLOCK_SIZES,
                    ),
                    Param(
                        "max_context",
                        "paged_context",
                        "max context (max_model_len)",
                        int,
                        paged.DEFAULT_MAX_CONTEXT,
                        paged.MAX_CONTEXTS,
                    ),
                ),
            ),
            LinkSpec(
                "pressure",
                "pressure",
                (
                    Param(
                        "rate",
                        "pr_rate",
                        "new requests per engine step",
                        float,
                        pressure.DEFAULTS["rate"],
                        pressure.RATES,
                    ),
                    Param(
                        "prompt_len",
                        "pr_prompt",
                        "prompt tokens",
                        int,
                        pressure.DEFAULTS["prompt_len"],
                        pressure.PROMPT_LENS,
                    ),
                    Param(
                        "kv_blocks",
                        "pr_blocks",
                        "KV pool (blocks of 16 tokens)",
                        int,
                        pressure.DEFAULTS["num_blocks"],
                        pressure.POOL_BLOCKS,
                    ),
                    Param(
                        "max_num_seqs",
                        "pr_seqs",
                        "max_num_seqs",
                        int,
                        pressure.DEFAULTS["max_num_seqs"],
                        pressure.MAX_NUM_SEQS,
                    ),
                    Param(
                        "max_num_batched_tokens",
                        "pr_budget",
                        "max_num_batched_tokens (token budget)",
                        int,
                        pressure.DEFAULTS["budget"],
                        pressure.BUDGETS,
                    ),
                    Param("gpu", "pr_gpu", "GPU (simulated part)", str, pressure.GPU_DEFAULT, pressure.GPU_CHOICES),
                ),
            ),
            LinkSpec(
                "diagnosis",
                "diagnosis",
                (
                    Param("incident", "diag_scenario", "incident", str, scenario_ids()[0], tuple(scenario_ids())),
                    Param("variant", "diag_variant", "variant (0 = original)", int, 0, low=0, high=MAX_VARIANT),
                ),
            ),
            LinkSpec(
                "playground",
                "playground",
                (
                    Param(
                        "max_tokens", "pg_max_tokens", "max new tokens", int, 12, low=1, high=playground.MAX_NEW_TOKENS
                    ),
                    Param("temperature", "pg_temperature", "temperature", float, 0.6, low=0.0, high=2.0, step=0.1),
                    Param("top_p", "pg_top_p", "top-p", float, 1.0, low=0.05, high=1.0, step=0.05),
                    Param("top_k", "pg_top_k", "top-k (0 = off)", int, 40, low=0, high=1024),
                    Param("seed", "pg_seed", "seed", int, 0, low=0, high=2**31 - 1),
                    Param("block_size", "pg_block", "KV block size", int, 8, paged.BLOCK_SIZES),
                    Param(
                        "num_blocks", "pg_blocks", "KV blocks in the pool", int, 12, low=1, high=playground.MAX_BLOCKS
                    ),
                    Param("prefix_caching", "pg_prefix", "prefix caching", bool, False),
                ),
            ),
        )
    }
)


def markdown_table() -> str:
    """README's table of every page's parameters: page path, parameter, what it sets, accepted values, default."""
    lines = ["| Page | Parameter | Sets | Accepts | Default |", "| --- | --- | --- | --- | --- |"]
    for spec in SPECS.values():
        values, _ = resolve(spec, {})
        for p in spec.params:
            accepts = p.accepts or p.accepted(values)
            lines.append(f"| `/{spec.url_path}` | `{p.name}` | {p.label} | {accepts} | `{encode(values[p.name])}` |")
    return "\n".join(lines)


if __name__ == "__main__":  # `python -m lessons.links` prints README's parameter table
    print(markdown_table())
