"""Page 7's "Diagnose your own server": a learner's pasted vLLM log -> memory bar, room for requests, flag changes.

`memory_parts` turns a `VllmLog` (lessons/diagnosis/readlog.py) into the GPU memory bar's parts (`memory_rows`: its
table); `kv_pool` finds how many KV tokens the server holds and what one token costs; `room_for` says how many
requests of a given length fit at once (whole 16-token blocks each, vLLM's default block size up to v0.33; v0.34.0's
is 64); `suggestions` recomputes vLLM V1's start-up arithmetic (engine/memory/startup.py) for each flag change that
applies to this log: a `FlagChange` each, with the new pool and its table row.
No Streamlit here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from engine.memory.catalog import MODELS
from engine.memory.footprint import embedding_params, kv_bytes_per_token
from engine.memory.startup import cudagraph_capture_sizes
from engine.memory.units import GiB
from kernels.validate import is_whole
from lessons.diagnosis.readlog import MAX_BYTES_PER_TOKEN, MAX_TOKENS, MIN_BYTES_PER_TOKEN, VllmLog, read_vllm_log
from lessons.diagnosis.scenarios import CHAT_REPOS, MemoryPart

# vLLM's default block size on CUDA up to v0.33, which the "# GPU blocks" of older logs count in. v0.34.0's default
# (CacheConfig.DEFAULT_BLOCK_SIZE) is 64: whole 64-token blocks fit at most 48 tokens per request fewer.
BLOCK = 16
MAX_OOM_CHARS = 20_000  # the OOM box: a PyTorch out-of-memory message is a few hundred characters
MAX_REQUEST_LEN = 10_000_000  # the longest request the room question takes (tokens)
DEFAULT_REQUEST_LEN = 4096  # the request length asked about when the log states no max_model_len
_ERROR_TOKENS = re.compile(r"stored in KV cache \((\d{1,12})\)|estimated maximum model length is (\d{1,12})", re.ASCII)
__all__ = [
    "BLOCK",
    "DEFAULT_REQUEST_LEN",
    "FlagChange",
    "MAX_OOM_CHARS",
    "MAX_REQUEST_LEN",
    "KvPool",
    "found_rows",
    "guess_model",
    "kv_pool",
    "memory_parts",
    "memory_rows",
    "read_paste",
    "request_len_default",
    "room_for",
    "room_sentence",
    "suggestions",
]
_LABELS = {
    "weights_gb": "weights (GiB; older releases print 'GB')",
    "kv_cache_gib": "KV cache (GiB)",
    "kv_cache_tokens": "KV cache (tokens)",
    "num_gpu_blocks": "GPU blocks",
    "max_model_len": "max_model_len",
    "max_concurrency": "maximum concurrency (x)",
    "cuda_graph_gib": "CUDA graphs (GiB)",
    "total_gib": "total GPU memory (GiB)",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "suggested_utilization": "suggested gpu_memory_utilization (same KV as before v0.20)",
    "peak_torch_gib": "peak torch memory (GiB)",
    "non_torch_gib": "non-torch memory (GiB)",
    "activation_gib": "activation peak (GiB)",
    "oom_tried_gib": "OOM: tried to allocate (GiB)",
    "oom_total_gib": "OOM: total capacity (GiB)",
    "oom_free_gib": "OOM: free (GiB)",
    "oom_allocated_gib": "OOM: allocated by PyTorch (GiB)",
    "running_reqs": "running requests (last metrics line)",
    "waiting_reqs": "waiting requests (last metrics line)",
    "preemptions": "preemptions (last metrics line; vLLM prints none when 0)",
    "kv_cache_usage_pct": "GPU KV cache usage (%, last metrics line)",
}


@dataclass(frozen=True, slots=True)
class KvPool:
    """The server's KV pool: tokens it holds, bytes per token, and where each figure came from."""

    tokens: int
    bytes_per_token: float | None
    source: str

    @property
    def gib(self) -> float | None:
        """The pool in GiB, when bytes per token are known."""
        return None if self.bytes_per_token is None else self.tokens * self.bytes_per_token / GiB


def read_paste(log_text: object, oom_text: object = "") -> VllmLog:
    """The pasted start-up log and optional PyTorch OOM message, read together (never raises)."""
    parts = [t for t in (log_text, oom_text) if isinstance(t, str) and t.strip()]
    return read_vllm_log("\n".join(parts) if parts else log_text)


def found_rows(log: VllmLog) -> list[dict[str, str]]:
    """What the log states, one row per figure (then the model, format and errors), for the page's table."""
    rows = [{"figure": _LABELS[k], "value": f"{getattr(log, k):g}"} for k in log.found]
    rows += [{"figure": "model", "value": log.model}] if log.model else []
    rows += [{"figure": "log format", "value": log.version}] if log.version else []
    return rows + [{"figure": "error", "value": e} for e in log.errors]


def request_len_default(log: VllmLog) -> int:
    """The request length the room question starts from: the log's max_model_len, within 1 … MAX_REQUEST_LEN."""
    return max(1, min(log.max_model_len or DEFAULT_REQUEST_LEN, MAX_REQUEST_LEN))


def room_sentence(pool: KvPool, request_len: int) -> str:
    """How many requests of request_len fit the pool at once, in words, with the arithmetic."""
    n, blocks = room_for(pool.tokens, request_len), -(-request_len // BLOCK)
    size = f" ({pool.gib:.2f} GiB)" if pool.gib is not None else ""
    fit = "request fits" if n == 1 else "requests fit"
    text = (
        f"Your KV pool holds **{pool.tokens:,} tokens**{size} ({pool.source}). A {request_len:,}-token request "
        f"takes {blocks:,} blocks of {BLOCK}: **{n} such {fit} at once**."
    )
    if n == 0:
        text += " Not even one: vLLM V1 refuses to start with a max_model_len this long."
    return text


def guess_model(log: VllmLog) -> str | None:
    """The catalog key of the model the log names (its HF repo, chat or base), or None."""
    if not log.model:
        return None
    name = log.model.lower().rstrip("/")
    for key, spec in MODELS.items():
        repos = {spec.source.lower(), CHAT_REPOS.get(key, "").lower()} - {""}
        if any(name == r or name.endswith("/" + r.split("/")[-1]) for r in repos):
            return key
    return None


def memory_parts(log: VllmLog) -> tuple[MemoryPart, ...]:
    """The parts of GPU memory the log states; with the total and utilization, the rest is shown too."""
    activations = log.activation_gib
    if activations is None and log.peak_torch_gib is not None and log.weights_gb is not None:
        activations = max(log.peak_torch_gib - log.weights_gb, 0.0)
    parts = [
        ("weights", log.weights_gb),
        ("activations (profiled peak)", activations),
        ("CUDA context / non-torch", log.non_torch_gib),
        ("CUDA graphs", log.cuda_graph_gib),
        ("KV cache", log.kv_cache_gib),
    ]
    rows = [(p, g) for p, g in parts if g is not None]
    if not rows and log.oom_total_gib is not None:  # only a PyTorch OOM message
        used = max(log.oom_total_gib - (log.oom_free_gib or 0.0), 0.0)  # "free" above the total: flagged, not drawn
        rows = [("allocated by PyTorch", log.oom_allocated_gib or used)]
        rows.append(("other memory in use", max(used - rows[0][1], 0.0)))
        rows.append(("free", log.oom_free_gib or 0.0))
    if log.total_gib is not None and log.gpu_memory_utilization is not None and rows:
        budget = log.total_gib * log.gpu_memory_utilization
        other = budget - sum(g for _, g in rows)
        if other > 0.005:
            rows.append(("rest of vLLM's share (not itemised in the log)", other))
        rows.append(("held back (1 - gpu_memory_utilization)", log.total_gib - budget))
    return tuple(MemoryPart(p, float(g * GiB)) for p, g in rows)


def memory_rows(log: VllmLog) -> list[dict[str, float | str]]:
    """The memory bar's table: one row per part of `memory_parts` (GiB to 3 decimals, bytes)."""
    return [p.row() for p in memory_parts(log)]


def kv_pool(log: VllmLog, model: str | None = None) -> KvPool | None:
    """Tokens the KV pool holds and bytes per token, from the log (or the catalog model); None if unknown.

    A source that gives more tokens than any GPU holds (`readlog.MAX_TOKENS`: max_concurrency x max_model_len
    can) is passed over, and bytes per token no model has (a 0.0001 GiB pool of 99,999 tokens) count as unknown."""
    candidates = [
        (log.kv_cache_tokens, "GPU KV cache size"),
        (None if log.num_gpu_blocks is None else log.num_gpu_blocks * BLOCK, f"# GPU blocks x {BLOCK} tokens"),
        (
            int(log.max_concurrency * log.max_model_len) if log.max_concurrency and log.max_model_len else None,
            "Maximum concurrency x max_model_len",
        ),
        *(
            (int(g), "the tokens the start-up error says fit")
            for e in reversed(log.errors)
            for m in [_ERROR_TOKENS.search(e)]
            if m
            for g in [m.group(1) or m.group(2)]
        ),
    ]
    tokens, source = next(((t, s) for t, s in candidates if t and t <= MAX_TOKENS), (None, ""))
    per_token = None
    if model is not None:
        per_token = float(kv_bytes_per_token(model))
    elif tokens and log.kv_cache_gib:
        per_token = log.kv_cache_gib * GiB / tokens
        per_token = per_token if MIN_BYTES_PER_TOKEN <= per_token <= MAX_BYTES_PER_TOKEN else None
    if tokens is None and per_token and log.kv_cache_gib is not None:
        tokens, source = int(log.kv_cache_gib * GiB // per_token), "Available KV cache memory / KV per token"
    return None if tokens is None else KvPool(tokens, per_token, source)


def room_for(tokens: int, request_len: int) -> int:
    """Requests of request_len tokens that fit in a pool of `tokens` at once (whole blocks each)."""
    if not is_whole(request_len) or request_len < 1:
        raise ValueError(f"request length {request_len!r} must be a whole number of tokens >= 1")
    return (max(tokens, 0) // BLOCK) // -(-request_len // BLOCK)


@dataclass(frozen=True, slots=True)
class FlagChange:
    """One flag change for the learner's server and the KV pool vLLM's start-up arithmetic gives after it."""

    flag: str  # the `vllm serve` flag, or "(as logged)" for the server as it is
    kv_gib: float  # the KV cache after the change (GiB, two decimals)
    kv_tokens: int  # the tokens it holds (whole blocks of BLOCK)
    requests: int  # requests of the asked length that fit at once
    why: str  # what the change does, and its price

    def row(self) -> dict[str, str | int | float]:
        """The page's table row (also its download)."""
        return {
            "change": self.flag,
            "KV cache (GiB)": self.kv_gib,
            "KV tokens": self.kv_tokens,
            "requests at once": self.requests,
            "why": self.why,
        }


def _row(
    flag: str, why: str, kv_gib: float, per_token: float, request_len: int, tokens: int | None = None
) -> FlagChange:
    tokens = int(max(kv_gib, 0) * GiB // per_token) // BLOCK * BLOCK if tokens is None else tokens
    return FlagChange(flag, round(kv_gib, 2), tokens, room_for(tokens, request_len), why)


def suggestions(log: VllmLog, request_len: int, model: str | None = None) -> list[FlagChange]:
    """Flag changes that apply to this log, each with the KV pool vLLM's start-up arithmetic gives after it."""
    pool = kv_pool(log, model)
    if pool is None or pool.bytes_per_token is None or pool.gib is None:
        return []
    kv, per = pool.gib, pool.bytes_per_token
    rows = [_row("(as logged)", f"from {pool.source}", kv, per, request_len, pool.tokens)]
    if log.total_gib and log.gpu_memory_utilization and log.gpu_memory_utilization <= 0.9:
        util = round(log.gpu_memory_utilization + 0.05, 2)
        rows.append(
            _row(
                f"--gpu-memory-utilization {util:g}",
                "5% more of the card for vLLM (only if nothing else runs on it)",
                kv + 0.05 * log.total_gib,
                per,
                request_len,
            )
        )
    # the notice caps its suggestion at 1.0: at the extensible KV cache's default of 1.0 it suggests no change
    raises = (
        log.gpu_memory_utilization is None
        or log.suggested_utilization is None
        or (log.suggested_utilization > log.gpu_memory_utilization)
    )
    if log.cuda_graph_gib and log.suggested_utilization and log.suggested_utilization <= 1 and raises:
        rows.append(
            _row(
                f"--gpu-memory-utilization {log.suggested_utilization:g}",
                "the value your log suggests: the KV cache a release without CUDA graph profiling gave, graphs "
                "kept (only if nothing else runs on the card)",
                kv + log.cuda_graph_gib,
                per,
                request_len,
            )
        )
    if log.cuda_graph_gib:
        rows.append(
            _row(
                "--enforce-eager",
                "no CUDA graphs: their memory goes to KV (decode gets slower)",
                kv + log.cuda_graph_gib,
                per,
                request_len,
            )
        )
        share = len(cudagraph_capture_sizes(64, 8192)) / len(cudagraph_capture_sizes(256, 8192))
        rows.append(
            _row(
                "--max-num-seqs 64",
                "fewer captured batch sizes (assuming the default 256 before)",
                kv + log.cuda_graph_gib * (1 - share),
                per,
                request_len,
            )
        )
    rows.append(
        _row(
            "--kv-cache-dtype fp8",
            "half the bytes per token of a bf16 cache (re-run your evals)",
            kv,
            per / 2,
            request_len,
        )
    )
    if log.weights_gb:
        # fp8 covers the linear layers; the embedding and lm_head stay bf16 (Fp8Config.get_quant_method)
        linear = 1 - embedding_params(MODELS[model]) / MODELS[model].num_params if model in MODELS else 1.0
        rows.append(
            _row(
                "--quantization fp8",
                "fp8 linear layers from a bf16 checkpoint: about half the weight memory, the embedding and "
                "lm_head stay bf16 (re-run your evals)",
                kv + log.weights_gb / 2 * linear,
                per,
                request_len,
            )
        )
        rows.append(
            _row(
                "--tensor-parallel-size 2",
                "two GPUs: each holds half the weights and half the KV heads",
                kv + log.weights_gb / 2,
                per / 2,
                request_len,
            )
        )
    if log.activation_gib:
        rows.append(
            _row(
                "--max-num-batched-tokens (halve it)",
                "the profiled activation peak scales with the token budget",
                kv + log.activation_gib / 2,
                per,
                request_len,
            )
        )
    if log.errors and any("max seq len" in e for e in log.errors):
        rows.append(
            _row(
                "--max-model-len auto",
                "vLLM (v0.34.0) picks the longest context the pool holds, the model's own if it fits; longer "
                "requests are rejected",
                kv,
                per,
                request_len,
                pool.tokens,
            )
        )
        fit = pool.tokens // 1024 * 1024
        rows.append(
            _row(
                f"--max-model-len {fit}",
                "the longest context the logged pool can hold, rounded down",
                kv,
                per,
                request_len,
                pool.tokens,
            )
        )
    return rows
