"""Request traces for the serving simulator: seeded ShareGPT-like and Alpaca-like workloads, or a replay.

Lengths follow the workloads of the vLLM paper (Kwon et al., SOSP 2023, §6.1 and Fig. 11): ShareGPT prompts
are 8.4x longer and outputs 5.8x longer than Alpaca's on average, with higher variance. We use the means of
Fig. 11 (ShareGPT: 161.3 prompt / 338.0 output tokens; Alpaca: 19.3 / 58.5). The paper shows histograms, not
standard deviations, so the spreads below are our assumption, chosen to be wide for ShareGPT and narrow for
Alpaca; lengths are log-normal (right-skewed, like the histograms). As in vLLM's serving benchmark, requests
whose prompt + output exceed ``max_len`` are dropped and redrawn, which lowers the ShareGPT means a little —
`trace_stats` reports what was actually drawn. Arrivals are a Poisson process (exponential gaps), as in §6.1.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

__all__ = ["Request", "LengthStats", "DATASETS", "generate_trace", "replay_trace", "trace_stats"]


@dataclass(frozen=True, slots=True)
class Request:
    """One client request: when it arrives and how many tokens it brings and will generate."""

    request_id: int
    arrival_s: float
    prompt_len: int
    output_len: int


@dataclass(frozen=True, slots=True)
class LengthStats:
    """Mean and standard deviation (tokens) of prompt and output lengths of a dataset, with the source."""

    prompt_mean: float
    prompt_std: float
    output_mean: float
    output_std: float
    source: str


DATASETS: dict[str, LengthStats] = {
    "sharegpt": LengthStats(161.3, 200.0, 338.0, 300.0, "vLLM paper Fig. 11 means; std assumed (higher variance)"),
    "alpaca": LengthStats(19.3, 12.0, 58.5, 45.0, "vLLM paper Fig. 11 means; std assumed (lower variance)"),
    # Retrieval-augmented QA: a few retrieved passages (~1.8K tokens) and a short answer. Illustrative.
    "rag": LengthStats(1800.0, 500.0, 200.0, 120.0, "illustrative RAG workload (not from a paper)"),
}


def _lognormal(rng: np.random.Generator, mean: float, std: float, n: int) -> np.ndarray:
    """n integer draws >= 1 from the log-normal with this mean and standard deviation."""
    sigma2 = math.log1p((std / mean) ** 2)
    draws = rng.lognormal(math.log(mean) - sigma2 / 2, math.sqrt(sigma2), n)
    return np.maximum(1, np.rint(draws)).astype(np.int64)


def generate_trace(
    dataset: str = "sharegpt",
    num_requests: int = 1000,
    request_rate: float = math.inf,
    seed: int = 0,
    max_len: int = 2048,
) -> list[Request]:
    """A seeded synthetic trace: log-normal lengths (prompt + output <= max_len), Poisson arrivals.

    request_rate is requests per second; math.inf sends every request at time 0 (an offline batch).
    """
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; use one of {list(DATASETS)}")
    if num_requests < 0:
        raise ValueError(f"num_requests must be >= 0, got {num_requests}")
    if not request_rate > 0:
        raise ValueError(f"request_rate must be positive (math.inf for all at once), got {request_rate}")
    if max_len < 2:
        raise ValueError(f"max_len must be >= 2 (one prompt and one output token), got {max_len}")
    stats = DATASETS[dataset]
    rng = np.random.default_rng(seed)
    prompts: list[int] = []
    outputs: list[int] = []
    while len(prompts) < num_requests:  # draw in batches, keep those that fit, like vLLM's benchmark filter
        batch = max(64, 2 * (num_requests - len(prompts)))
        p = _lognormal(rng, stats.prompt_mean, stats.prompt_std, batch)
        o = _lognormal(rng, stats.output_mean, stats.output_std, batch)
        keep = p + o <= max_len
        prompts.extend(p[keep].tolist())
        outputs.extend(o[keep].tolist())
    if math.isinf(request_rate):
        arrivals = np.zeros(num_requests)
    else:
        arrivals = np.cumsum(rng.exponential(1.0 / request_rate, num_requests))
    return [Request(i, float(arrivals[i]), prompts[i], outputs[i]) for i in range(num_requests)]


def replay_trace(items: Iterable[Mapping[str, float] | tuple[float, int, int]]) -> list[Request]:
    """Requests from an explicit list of (arrival_s, prompt_len, output_len) tuples or dicts with those keys."""
    trace: list[Request] = []
    for i, item in enumerate(items):
        if isinstance(item, Mapping):
            try:
                arrival, prompt, output = item["arrival_s"], item["prompt_len"], item["output_len"]
            except KeyError as e:
                raise ValueError(f"request {i} lacks {e}; give arrival_s, prompt_len and output_len") from None
        else:
            arrival, prompt, output = item
        if arrival < 0 or int(prompt) != prompt or int(output) != output or prompt < 1 or output < 1:
            raise ValueError(
                f"request {i}: arrival_s={arrival}, prompt_len={prompt}, output_len={output}; arrival must be "
                "non-negative and both lengths positive integers"
            )
        trace.append(Request(i, float(arrival), int(prompt), int(output)))
    trace.sort(key=lambda r: (r.arrival_s, r.request_id))
    return trace


def trace_stats(trace: list[Request]) -> dict[str, float | int]:
    """Count, mean / std / max of prompt and output lengths, and the span of arrivals."""
    if not trace:
        return {"num_requests": 0}
    p = np.array([r.prompt_len for r in trace], dtype=np.float64)
    o = np.array([r.output_len for r in trace], dtype=np.float64)
    return {
        "num_requests": len(trace),
        "prompt_mean": round(float(p.mean()), 2),
        "prompt_std": round(float(p.std()), 2),
        "prompt_max": int(p.max()),
        "output_mean": round(float(o.mean()), 2),
        "output_std": round(float(o.std()), 2),
        "output_max": int(o.max()),
        "arrival_span_s": round(max(r.arrival_s for r in trace), 3),
    }
