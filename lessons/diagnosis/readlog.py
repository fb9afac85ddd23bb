"""Reading a learner's own vLLM start-up log (V0 or V1 format) and PyTorch OOM message into numbers.

`read_vllm_log(text)` returns a `VllmLog`: the weights, KV cache (GiB, tokens, blocks), max_model_len, the
"Maximum concurrency" figure, CUDA graph memory, the profiling fields (total, utilization, peak torch,
non-torch), the last periodic metrics line's running and waiting requests, preemptions and KV cache usage, and the
recognised error lines, each None when the log does not say it. The formats of vLLM v0.34.0 are read ("Model
loading took X GiB memory and N seconds"; "CUDA graph pool memory: X GiB (actual)"; "Avg prompt throughput: …,
Running: N reqs, Waiting: N reqs, Preemptions: N, GPU KV cache usage: P%"; "--max-model-len auto reduced
max_model_len from A to B"), and those of older releases. When several start-ups are
pasted, the last value of each field wins. Nothing here raises on what a learner can paste: garbage, binary
bytes or a huge file give a `VllmLog` whose `message` says what was (not) found. A figure beyond any GPU
(`LIMITS`; e.g. 10^14 KV tokens, 10^9 GiB of weights, a negative size, a utilization above 1) is left out with a
note in `doubts`, and figures that cannot all be true together (weights larger than the GPU) get a note too.
The formats follow real logs from public vLLM issues (tests/lessons/diagnosis/fixtures/ holds them, each with
its issue URL).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

__all__ = ["LIMITS", "MAX_GPU_GIB", "MAX_LOG_CHARS", "MAX_MODEL_LEN", "MAX_TOKENS", "VllmLog", "read_vllm_log"]

MAX_LOG_CHARS = 2_000_000  # a start-up log is a few hundred KB; more is read up to this many characters
# bounded (a pasted wall of digits is not a number); a sign and an exponent are read so LIMITS can refuse them
_NUM = r"(-?\d[\d,]{0,24}(?:\.\d{1,12})?(?:[eE][+-]?\d{1,4})?)(?![\d,])"
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
        # v0.34.0's extensible KV cache (its CUDA and ROCm default): the size committed after warm-up, logged after
        # the "Available KV cache memory" of its first, estimate-based pass, so the last match is the real one
        r"KV cache blocks \(" + _SIZE + r"\) fit within the requested",
        r"Extended KV cache to [\d,]+ blocks \(" + _SIZE + r"\)",
    ),
    "kv_cache_tokens": (r"GPU KV cache size:\s*" + _NUM + r" tokens",),
    "num_gpu_blocks": (
        r"GPU blocks:\s*" + _NUM,
        r"# cuda blocks:\s*" + _NUM,
        r"Extended KV cache to " + _NUM + r" blocks",  # v0.34.0's extensible KV cache
    ),
    "max_model_len": (
        r"max_seq_len=" + _NUM,
        r"max seq len \(" + _NUM + r"\)",
        r"Maximum concurrency for " + _NUM + r" tokens per request",
        # v0.34.0's --max-model-len auto (`_auto_fit_max_model_len`): the length it settled on
        r"reduced max_model_len from [\d,]+ to " + _NUM,
        r"Auto-fit max_model_len: reduced from [\d,]+ to " + _NUM,
        r"Auto-fit max_model_len: using max_model_len=" + _NUM,
        r"Auto-fit max_model_len: full model context length " + _NUM,
    ),
    "max_concurrency": (r"Maximum concurrency for [\d,]+ tokens per request:\s*" + _NUM + r"x",),
    "cuda_graph_gib": (
        r"Estimated CUDA graph memory:\s*" + _SIZE,
        r"Graph capturing finished in [\d.]+ secs?, took " + _SIZE,
        r"CUDA graph pool memory:\s*" + _SIZE + r" \(actual\)",  # v0.34.0, after capture
    ),
    "total_gib": (r"total_gpu_memory[=\s(]*" + _SIZE,),
    "gpu_memory_utilization": (
        r"gpu_memory_utilization[=\s(]*(\d?\.\d+)",
        r"current --gpu-memory-utilization=(\d?\.\d+)",
    ),
    # v0.20+'s CUDA graph profiling notice: the utilization that gives the KV cache of a release without it
    "suggested_utilization": (r"increase --gpu-memory-utilization to (\d?\.\d+)",),
    "peak_torch_gib": (r"peak_torch_memory=" + _SIZE,),
    "non_torch_gib": (r"non_torch_memory(?: takes)?[=\s]*" + _SIZE,),
    "activation_gib": (r"PyTorch activation peak memory(?: takes)?\s*" + _SIZE,),
    "oom_tried_gib": (r"Tried to allocate " + _SIZE,),
    "oom_total_gib": (r"has a total capac\w* of " + _SIZE, r"GPU \d+; " + _SIZE + r" total capacity"),
    "oom_free_gib": (r"total capac\w* of [\d.]+ \w+ of which " + _SIZE + r" is free", r"; " + _SIZE + r" free;"),
    "oom_allocated_gib": (r"Of the allocated memory " + _SIZE, r"; " + _SIZE + r" already allocated"),
}
# the periodic metrics line (vllm/v1/metrics/loggers.py), read from the last such line only: it prints
# "Preemptions: N" only when there were any in its interval, so a last line without it means none
_METRICS_PATTERNS: dict[str, tuple[str, ...]] = {
    "running_reqs": (r"Running:\s*" + _NUM + r" reqs",),
    "waiting_reqs": (r"Waiting:\s*" + _NUM + r" reqs",),
    "preemptions": (r"Preemptions:\s*" + _NUM,),
    "kv_cache_usage_pct": (r"KV cache usage:\s*" + _NUM + r"%",),
}
_INTS = ("kv_cache_tokens", "num_gpu_blocks", "max_model_len", "running_reqs", "waiting_reqs", "preemptions")

# What a real server can print, per figure: (lowest, highest, what the highest stands for). Beyond it the line
# is misread, edited or made up, and the page would compute nonsense (or overflow a table) from it.
MAX_GPU_GIB = 1024.0  # memory of one GPU; the largest today hold 288 GB
MAX_TOKENS = 10**10  # KV tokens one GPU could hold: 1,024 GiB at about 100 bytes per token
MAX_MODEL_LEN = 10**8  # context length; the longest models read 10 million tokens
MAX_ALLOC_GIB = 2.0**20  # what one PyTorch allocation may ask for (a bug can ask for far more than the card)
_GPU = (0.0, MAX_GPU_GIB, f"any GPU's memory ({MAX_GPU_GIB:,.0f} GiB)")
LIMITS: dict[str, tuple[float, float, str]] = {
    "weights_gb": _GPU,
    "kv_cache_gib": _GPU,
    "kv_cache_tokens": (0, MAX_TOKENS, f"the KV tokens any GPU holds ({MAX_TOKENS:,})"),
    "num_gpu_blocks": (0, MAX_TOKENS, f"the KV blocks any GPU holds ({MAX_TOKENS:,})"),
    "max_model_len": (1, MAX_MODEL_LEN, f"any model's context ({MAX_MODEL_LEN:,} tokens)"),
    "max_concurrency": (0.0, float(MAX_TOKENS), f"the requests any GPU holds ({MAX_TOKENS:,})"),
    "cuda_graph_gib": _GPU,
    "total_gib": (1 / 1024, MAX_GPU_GIB, _GPU[2]),
    "gpu_memory_utilization": (0.01, 1.0, "the whole GPU (1.0)"),
    "suggested_utilization": (0.01, 2.0, "twice the GPU (2.0)"),
    "peak_torch_gib": _GPU,
    "non_torch_gib": _GPU,
    "activation_gib": _GPU,
    "oom_tried_gib": (0.0, MAX_ALLOC_GIB, f"any allocation PyTorch attempts ({MAX_ALLOC_GIB:,.0f} GiB)"),
    "oom_total_gib": (1 / 1024, MAX_GPU_GIB, _GPU[2]),
    "oom_free_gib": _GPU,
    "oom_allocated_gib": _GPU,
    "running_reqs": (0, MAX_TOKENS, f"the requests any GPU holds ({MAX_TOKENS:,})"),
    "waiting_reqs": (0, MAX_TOKENS, f"the requests any server queues ({MAX_TOKENS:,})"),
    "preemptions": (0, MAX_TOKENS, f"the preemptions of any log interval ({MAX_TOKENS:,})"),
    "kv_cache_usage_pct": (0.0, 100.0, "all of the KV cache (100%)"),
}
_WORDS = {
    "weights_gb": "the weights",
    "kv_cache_gib": "the KV cache",
    "kv_cache_tokens": "the KV cache size",
    "num_gpu_blocks": "the GPU blocks",
    "max_model_len": "max_model_len",
    "max_concurrency": "the maximum concurrency",
    "cuda_graph_gib": "the CUDA graph memory",
    "total_gib": "the total GPU memory",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "suggested_utilization": "the utilization the log suggests",
    "peak_torch_gib": "the peak torch memory",
    "non_torch_gib": "the non-torch memory",
    "activation_gib": "the activation peak",
    "oom_tried_gib": "the OOM's allocation",
    "oom_total_gib": "the OOM's total capacity",
    "oom_free_gib": "the OOM's free memory",
    "oom_allocated_gib": "the OOM's allocated memory",
    "running_reqs": "the running requests",
    "waiting_reqs": "the waiting requests",
    "preemptions": "the preemptions",
    "kv_cache_usage_pct": "the KV cache usage",
}
_UNIT_WORDS = {
    "kv_cache_tokens": "tokens",
    "num_gpu_blocks": "blocks",
    "max_model_len": "tokens",
    "max_concurrency": "x",
    "gpu_memory_utilization": "",
    "suggested_utilization": "",
    "running_reqs": "requests",
    "waiting_reqs": "requests",
    "preemptions": "",
    "kv_cache_usage_pct": "%",
}
MIN_BYTES_PER_TOKEN, MAX_BYTES_PER_TOKEN = 16.0, float(2**30)  # K and V of one token: a tiny model .. beyond any
_ERRORS = (  # anchors; the whole line around each is the error reported
    "is larger than the maximum number of tokens that can be stored in KV cache",
    "KV cache is needed, which is larger than the available KV cache memory",
    "No available memory for the cache blocks",
    "is less than desired GPU memory utilization",
    "CUDA out of memory. Tried to allocate",
)
MAX_ERROR_CHARS = 2000
MAX_METRICS_LINE = 2000  # characters of the metrics line read on either side of its "Running:"
_MODEL_PATTERNS = (r"model='([\w./-]{1,200})'", r"vllm serve ([\w./-]{1,200})", r"model=([\w./-]{1,200}),")
_V1_MARKS = (
    "Available KV cache memory",
    "GPU KV cache size",
    "V1 LLM engine",
    "EngineCore",
    "KV cache is needed",
    "Estimated CUDA graph memory",
    "CUDA graph pool memory",
    "Avg prompt throughput",
    "gpu_worker.py",
    "kv_cache_utils.py",
    "kv_cache_planning.py",
)
_V0_MARKS = (
    "# CPU blocks",
    "kv_cache_size=",
    "reserved for KV Cache is",
    "is larger than the maximum number",
    "executor_base.py",
    "# cuda blocks",
)


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
    suggested_utilization: float | None = None  # "increase --gpu-memory-utilization to U" (v0.20+)
    peak_torch_gib: float | None = None
    non_torch_gib: float | None = None
    activation_gib: float | None = None
    oom_tried_gib: float | None = None
    oom_total_gib: float | None = None
    oom_free_gib: float | None = None
    oom_allocated_gib: float | None = None
    running_reqs: int | None = None  # the last metrics line's "Running: N reqs"
    waiting_reqs: int | None = None
    preemptions: int | None = None  # "Preemptions: N" (vLLM leaves it out when there were none)
    kv_cache_usage_pct: float | None = None  # "GPU KV cache usage: P%"
    errors: tuple[str, ...] = ()
    model: str | None = None  # the served model as the log names it (e.g. a Hugging Face repo id)
    version: str | None = None  # "V0", "V1" or None (not recognisable)
    message: str | None = None  # set when nothing (or only part) could be read
    found: tuple[str, ...] = field(default=())
    doubts: tuple[str, ...] = ()  # figures left out as impossible, and figures that contradict each other

    @property
    def recognised(self) -> bool:
        """True when at least one figure or error line was found."""
        return bool(self.found or self.errors)


def _number(text: str, unit: str | None) -> float:
    """The figure in GiB (sizes) or as printed; "1e999" is inf, which `LIMITS` then refuses with a note."""
    value = float(text.replace(",", ""))
    if math.isnan(value):
        raise ValueError(text)
    return value * _UNITS[unit] if unit else value


def _last(text: str, patterns: tuple[str, ...]) -> float | None:
    """The value of the last match of any pattern (in text order), or None."""
    best: tuple[int, float] | None = None
    for pattern in patterns:
        for m in re.finditer(pattern, text, re.ASCII):  # ASCII digits only: float() would read "٩٩" or "９９"
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


def _capital(words: str) -> str:
    return words[:1].upper() + words[1:]


def _shown(name: str, value: float) -> str:
    """A figure in words for a note: "99,999,999,999,999 tokens", "1e+09 GiB", "5.5"."""
    unit = _UNIT_WORDS.get(name, "GiB")
    if isinstance(value, int) or (abs(value) < 1e15 and value == int(value)):
        number = f"{int(value):,}"
    else:
        number = f"{value:,.4g}" if abs(value) < 1e15 else f"{value:.3g}"
    return f"{number}{unit}" if unit == "x" else f"{number} {unit}".rstrip()


def _implausible(values: dict[str, float | int | None]) -> list[str]:
    """Drop each figure outside `LIMITS` (in place) and say why, one note per figure."""
    notes = []
    for name, (low, high, what) in LIMITS.items():
        value = values.get(name)
        if value is None or low <= value <= high:
            continue
        values[name] = None
        if value < 0:
            why = "is negative, which no server reports for it"
        elif value < low:
            why = f"is below {low:g}, which no server reports for it"
        else:
            why = f"is more than {what}"
        notes.append(
            f"The line giving {_WORDS[name]} looks wrong: {_shown(name, value)} {why}. It is left out; "
            "check that the line was pasted whole and unedited."
        )
    return notes


def _contradictions(v: dict[str, float | int | None]) -> list[str]:
    """Figures that cannot all be true of one GPU (each is kept: the page cannot tell which one is wrong)."""
    notes = []
    total = v.get("total_gib")
    if total is not None:
        for name in ("weights_gb", "kv_cache_gib", "peak_torch_gib", "cuda_graph_gib", "activation_gib"):
            part = v.get(name)
            if part is not None and part > total * 1.001:
                notes.append(
                    f"{_capital(_WORDS[name])} ({_shown(name, part)}) cannot be larger than the GPU's "
                    f"total memory ({_shown('total_gib', total)}); one of the two lines is wrong."
                )
        parts = [v.get(n) for n in ("weights_gb", "activation_gib", "non_torch_gib", "cuda_graph_gib", "kv_cache_gib")]
        stated = sum(p for p in parts if p is not None)
        if not notes and stated > total * 1.001:
            notes.append(
                f"The parts the log states add up to {stated:,.2f} GiB, more than the GPU's total memory "
                f"({_shown('total_gib', total)}); one of the lines is wrong."
            )
    oom_total = v.get("oom_total_gib")
    for name in ("oom_free_gib", "oom_allocated_gib"):
        part = v.get(name)
        if oom_total is not None and part is not None and part > oom_total * 1.001:
            notes.append(
                f"{_capital(_WORDS[name])} ({_shown(name, part)}) cannot be larger than its total "
                f"capacity ({_shown('oom_total_gib', oom_total)})."
            )
    tokens, kv = v.get("kv_cache_tokens"), v.get("kv_cache_gib")
    if tokens and kv:
        per_token = kv * 2**30 / tokens
        if not MIN_BYTES_PER_TOKEN <= per_token <= MAX_BYTES_PER_TOKEN:
            notes.append(
                f"A KV cache of {_shown('kv_cache_gib', kv)} holding {tokens:,} tokens is {per_token:,.3g} "
                f"bytes per token, which no model has ({MIN_BYTES_PER_TOKEN:g} … {MAX_BYTES_PER_TOKEN:,.0f});"
                " one of the two lines is wrong."
            )
    return notes


def _last_metrics_line(text: str) -> str | None:
    """The last periodic metrics line ("… Running: N reqs, Waiting: …"), cut to MAX_METRICS_LINE a side, or None."""
    at = text.rfind("Running:")
    while at >= 0:
        if re.match(r"Running:\s*\d", text[at : at + 40], re.ASCII):
            start = max(text.rfind("\n", 0, at) + 1, at - MAX_METRICS_LINE)
            end = text.find("\n", at)
            end = len(text) if end < 0 else end
            return text[start : min(end, at + MAX_METRICS_LINE)]
        at = text.rfind("Running:", 0, at)
    return None


def read_vllm_log(text: object) -> VllmLog:
    """Parse a vLLM start-up log and/or a PyTorch OOM message; never raises on what a learner pastes."""
    body, note = _as_text(text)
    values: dict[str, float | int | None] = {name: _last(body, patterns) for name, patterns in _PATTERNS.items()}
    values.update(dict.fromkeys(_METRICS_PATTERNS))
    line = _last_metrics_line(body)
    if line is not None:
        values.update({name: _last(line, patterns) for name, patterns in _METRICS_PATTERNS.items()})
        if values["preemptions"] is None:
            values["preemptions"] = 0
    doubts = _implausible(values)  # before int(): int(inf) raises, and 10^25 tokens would overflow a table
    values.update({name: int(v) for name in _INTS if (v := values.get(name)) is not None})
    doubts += _contradictions(values)
    errors = _errors(body)
    models = [m.group(1) for pattern in _MODEL_PATTERNS for m in [re.search(pattern, body)] if m]
    found = tuple(k for k, v in values.items() if v is not None)
    message = note
    if not found and not errors and doubts:
        message = (
            "Every figure read from the paste looks wrong (see the notes): nothing is left to draw or compute. "
            "Paste the lines exactly as vLLM printed them."
        )
    elif not found and not errors:
        message = (
            "No vLLM start-up figures or known error lines found. Paste the lines vLLM prints while starting "
            "(e.g. 'Loading model weights took …', 'Available KV cache memory: … GiB', '# GPU blocks: …', "
            "'Maximum concurrency for … tokens per request') or a 'CUDA out of memory. Tried to allocate …' message."
        ) + (f" ({note})" if note else "")
    model = models[0] if models else None
    return VllmLog(
        **values,
        errors=errors,
        model=model,
        version=_version(body),
        message=message,
        found=found,  # type: ignore[arg-type]
        doubts=tuple(doubts),
    )
