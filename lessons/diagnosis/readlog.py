"""Reading a learner's own vLLM start-up log (V0 or V1 format) and PyTorch OOM message into numbers.

`read_vllm_log(text)` returns a `VllmLog`: the weights, KV cache (GiB, tokens, blocks), max_model_len, the
"Maximum concurrency" figure, CUDA graph memory, the profiling fields (total, utilization, peak torch,
non-torch) and the recognised error lines, each None when the log does not say it. When several start-ups are
pasted, the last value of each field wins. Nothing here raises on what a learner can paste: garbage, binary
bytes or a huge file give a `VllmLog` whose `message` says what was (not) found. The formats follow real logs
from public vLLM issues (tests/lessons/diagnosis/fixtures/ holds them, each with its issue URL).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

__all__ = ["MAX_LOG_CHARS", "VllmLog", "read_vllm_log"]

MAX_LOG_CHARS = 2_000_000  # a start-up log is a few hundred KB; more is read up to this many characters
_NUM = r"(\d[\d,]{0,24}(?:\.\d{1,12})?)(?![\d,])"  # bounded: a pasted wall of digits is not a number
_UNITS = {"B": 1 / 2**30, "KiB": 1 / 2**20, "MiB": 1 / 2**10, "GiB": 1.0, "GB": 1.0}
_SIZE = _NUM + r"\s*(KiB|MiB|GiB|GB)"

# field -> patterns, each with the number in group 1 (and a unit in group 2 when it is a size)
_PATTERNS: dict[str, tuple[str, ...]] = {
    "weights_gb": (
        r"Loading model weights took " + _SIZE,
        r"Model loading took " + _SIZE,
        r"model weights take\s*" + _SIZE,
    ),
    "kv_cache_gib": (
        r"kv_cache_size=" + _SIZE,
        r"reserved for KV Cache is\s*" + _SIZE,
        r"available_kv_cache_memory\s*" + _SIZE,
        r"Available KV cache memory:\s*" + _SIZE,
        r"larger than the available KV cache memory \(" + _SIZE,
    ),
    "kv_cache_tokens": (r"GPU KV cache size:\s*" + _NUM + r" tokens",),
    "num_gpu_blocks": (r"GPU blocks:\s*" + _NUM, r"# cuda blocks:\s*" + _NUM),
    "max_model_len": (
        r"max_seq_len=" + _NUM,
        r"max seq len \(" + _NUM + r"\)",
        r"Maximum concurrency for " + _NUM + r" tokens per request",
    ),
    "max_concurrency": (r"Maximum concurrency for [\d,]+ tokens per request:\s*" + _NUM + r"x",),
    "cuda_graph_gib": (
        r"Estimated CUDA graph memory:\s*" + _SIZE,
        r"Graph capturing finished in [\d.]+ secs?, took " + _SIZE,
    ),
    "total_gib": (r"total_gpu_memory[=\s(]*" + _SIZE,),
    "gpu_memory_utilization": (
        r"gpu_memory_utilization[=\s(]*(\d?\.\d+)",
        r"current --gpu-memory-utilization=(\d?\.\d+)",
    ),
    "peak_torch_gib": (r"peak_torch_memory=" + _SIZE,),
    "non_torch_gib": (r"non_torch_memory(?: takes)?[=\s]*" + _SIZE,),
    "activation_gib": (r"PyTorch activation peak memory(?: takes)?\s*" + _SIZE,),
    "oom_tried_gib": (r"Tried to allocate " + _SIZE,),
    "oom_total_gib": (r"has a total capac\w* of " + _SIZE, r"GPU \d+; " + _SIZE + r" total capacity"),
    "oom_free_gib": (r"total capac\w* of [\d.]+ \w+ of which " + _SIZE + r" is free", r"; " + _SIZE + r" free;"),
    "oom_allocated_gib": (r"Of the allocated memory " + _SIZE, r"; " + _SIZE + r" already allocated"),
}
_INTS = ("kv_cache_tokens", "num_gpu_blocks", "max_model_len")
_ERRORS = (  # anchors; the whole line around each is the error reported
    "is larger than the maximum number of tokens that can be stored in KV cache",
    "KV cache is needed, which is larger than the available KV cache memory",
    "No available memory for the cache blocks",
    "is less than desired GPU memory utilization",
    "CUDA out of memory. Tried to allocate",
)
MAX_ERROR_CHARS = 2000
_MODEL_PATTERNS = (r"model='([\w./-]{1,200})'", r"vllm serve ([\w./-]{1,200})", r"model=([\w./-]{1,200}),")
_V1_MARKS = ("Available KV cache memory", "GPU KV cache size", "V1 LLM engine", "EngineCore", "KV cache is needed",
             "Estimated CUDA graph memory", "gpu_worker.py", "kv_cache_utils.py")  # fmt: skip
_V0_MARKS = ("# CPU blocks", "kv_cache_size=", "reserved for KV Cache is", "is larger than the maximum number",
             "executor_base.py", "# cuda blocks")  # fmt: skip


@dataclass(frozen=True, slots=True)
class VllmLog:
    """What a pasted vLLM log says; every figure is None when the log does not state it."""

    weights_gb: float | None = None
    kv_cache_gib: float | None = None
    kv_cache_tokens: int | None = None
    num_gpu_blocks: int | None = None
    max_model_len: int | None = None
    max_concurrency: float | None = None
    cuda_graph_gib: float | None = None
    total_gib: float | None = None
    gpu_memory_utilization: float | None = None
    peak_torch_gib: float | None = None
    non_torch_gib: float | None = None
    activation_gib: float | None = None
    oom_tried_gib: float | None = None
    oom_total_gib: float | None = None
    oom_free_gib: float | None = None
    oom_allocated_gib: float | None = None
    errors: tuple[str, ...] = ()
    model: str | None = None  # the served model as the log names it (e.g. a Hugging Face repo id)
    version: str | None = None  # "V0", "V1" or None (not recognisable)
    message: str | None = None  # set when nothing (or only part) could be read
    found: tuple[str, ...] = field(default=())

    @property
    def recognised(self) -> bool:
        """True when at least one figure or error line was found."""
        return bool(self.found or self.errors)


def _number(text: str, unit: str | None) -> float:
    value = float(text.replace(",", ""))
    if not math.isfinite(value):
        raise ValueError(text)
    return value * _UNITS[unit] if unit else value


def _last(text: str, patterns: tuple[str, ...]) -> float | None:
    """The value of the last match of any pattern (in text order), or None."""
    best: tuple[int, float] | None = None
    for pattern in patterns:
        for m in re.finditer(pattern, text):
            unit = m.group(2) if m.lastindex and m.lastindex >= 2 else None
            try:
                value = _number(m.group(1), unit)
            except ValueError:  # "1,2,,3" and the like: not a number
                continue
            if best is None or m.start() >= best[0]:
                best = (m.start(), value)
    return None if best is None else best[1]


def _errors(text: str) -> tuple[str, ...]:
    """Recognised error lines, in order, without duplicates (tensor-parallel workers repeat them)."""
    hits: list[tuple[int, str]] = []
    for anchor in _ERRORS:
        at = text.find(anchor)
        while at >= 0 and len(hits) < 100:
            start, end = text.rfind("\n", 0, at) + 1, text.find("\n", at)
            end = len(text) if end < 0 else end
            start = max(start, at - MAX_ERROR_CHARS // 2)
            hits.append((start, text[start : min(end, start + MAX_ERROR_CHARS)].strip()))
            at = text.find(anchor, end)
    return tuple(dict.fromkeys(line for _, line in sorted(hits)))


def _as_text(text: object) -> tuple[str, str | None]:
    """The pasted value as text (bytes decoded leniently), and a note when it had to be cut or decoded."""
    if text is None:
        return "", None
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text[: MAX_LOG_CHARS * 4]).decode("utf-8", errors="replace")
    if not isinstance(text, str):
        return "", f"expected the log as text, got {type(text).__name__}"
    note = None
    if len(text) > MAX_LOG_CHARS:
        text, note = text[:MAX_LOG_CHARS], f"only the first {MAX_LOG_CHARS:,} characters were read"
    return text.replace("\x00", " "), note


def _version(text: str) -> str | None:
    if any(mark in text for mark in _V1_MARKS):
        return "V1"
    return "V0" if any(mark in text for mark in _V0_MARKS) else None


def read_vllm_log(text: object) -> VllmLog:
    """Parse a vLLM start-up log and/or a PyTorch OOM message; never raises on what a learner pastes."""
    body, note = _as_text(text)
    values: dict[str, float | int | None] = {}
    for name, patterns in _PATTERNS.items():
        value = _last(body, patterns)
        values[name] = int(value) if value is not None and name in _INTS else value
    errors = _errors(body)
    models = [m.group(1) for pattern in _MODEL_PATTERNS for m in [re.search(pattern, body)] if m]
    found = tuple(k for k, v in values.items() if v is not None)
    message = note
    if not found and not errors:
        message = (
            "No vLLM start-up figures or known error lines found. Paste the lines vLLM prints while starting "
            "(e.g. 'Loading model weights took …', 'Available KV cache memory: … GiB', '# GPU blocks: …', "
            "'Maximum concurrency for … tokens per request') or a 'CUDA out of memory. Tried to allocate …' message."
        ) + (f" ({note})" if note else "")
    model = models[0] if models else None
    return VllmLog(**values, errors=errors, model=model, version=_version(body), message=message, found=found)  # type: ignore[arg-type]
