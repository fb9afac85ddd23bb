"""KV-cache precision, measured on the real engine: fp8 (e4m3 with per-layer scales) against full precision.

`compare()` loads one model, builds two engines around the same read-only weights that differ only in
`kv_cache_dtype` ("auto": the model's dtype; "fp8": vLLM's float8 e4m3 cache, engine/worker/kv_cache.py),
each with the same KV byte budget (`kv_cache_memory_bytes`), and reports
- the pool (`KvPool`): KV bytes per token, blocks and tokens the budget holds, the pool's bytes;
- the price (`Fp8Price`): along each prompt's full-precision greedy path (teacher forcing, so one early
  difference does not cascade), the largest and the mean absolute logit difference and how often fp8's top
  token is the same (top-1 agreement); and how many whole greedy generations come out token for token identical.
Both come back in one frozen dataclass (`PrecisionComparison`, and `PrecisionRun` with the model and budget),
with the pool table's rows, one precision's summary and the benchmark's JSON record. Nothing here uses
Streamlit, and `compare()` is a pure function of its arguments, so a page can cache it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from engine import LLM, SamplingParams
from engine.config import KV_CACHE_DTYPES
from engine.memory.units import MiB, kv_bytes
from engine.model.loader import load_model

CHOICES = ("auto", "fp8")  # the two the lessons compare (fp8_e4m3 is fp8's long name)
PROMPTS = (
    "def fibonacci(n):",
    "class Stack:",
    "import collections",
    "for line in open(path):",
    "def binary_search(items, target):",
    "with open('data.csv') as f:",
    "# sort the list in place",
    "if __name__ == '__main__':",
)
MAX_TOKENS = 24
BUDGET_BYTES = 8 * MiB  # the same KV budget for both engines: 8 MiB
PAGE_PROMPTS = PROMPTS[:4]  # a page's live run: four prompts, twelve tokens each (seconds on a laptop CPU)
PAGE_MAX_TOKENS = 12


def _check_choice(choice: str) -> None:
    if choice not in CHOICES:
        raise ValueError(f"KV precision {choice!r} is not offered; use one of {', '.join(CHOICES)}")


def engine(
    loaded: tuple[Any, Any, Any],
    kv_cache_dtype: str,
    budget_bytes: int = BUDGET_BYTES,
    block_size: int = 16,
    model: str = "demo",
) -> LLM:
    """An engine around shared weights (`load_model(model)`) with a `kv_cache_dtype` cache of budget_bytes."""
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise ValueError(f"KV precision {kv_cache_dtype!r} is not offered; use one of {', '.join(KV_CACHE_DTYPES)}")
    device = next(loaded[0].parameters()).device
    return LLM(
        model,
        block_size=block_size,
        device=device,
        kv_cache_dtype=kv_cache_dtype,
        kv_cache_memory_bytes=budget_bytes,
        preloaded=loaded,
    )


def path_logits(llm: LLM, ids: Sequence[int], prompt_len: int) -> torch.Tensor:
    """fp32 logits [len(ids) - prompt_len + 1, vocab]: after the prompt, then after each next token of `ids`.

    Runs the engine's model over its KV cache (blocks 0.., so the engine must be idle), one prefill then one
    decode per token, as the scheduler would (store_kv, then the paged attention kernel reading it back).
    """
    if llm.has_unfinished_requests():
        raise ValueError("path_logits writes blocks 0.. of the engine's cache; run it on an idle engine")
    runner, bs = llm.runner, llm.block_size
    table = list(range(-(-len(ids) // bs)))
    if len(table) > llm.num_gpu_blocks:
        raise ValueError(f"{len(ids)} tokens need {len(table)} blocks but the engine has {llm.num_gpu_blocks}")
    rows, start = [], 0
    for stop in range(prompt_len, len(ids) + 1):
        inputs, meta = runner.inputs(list(ids[start:stop]), [stop - start], [start], [table])
        rows.append(runner.forward(inputs, meta)[0])
        start = stop
    return torch.stack(rows)


@dataclass(frozen=True)
class KvPool:
    """One engine's KV pool: what one K/V token costs and what the byte budget holds at that cost."""

    kv_cache_dtype: str  # the cache's torch dtype without "torch." ("float32", "float8_e4m3fn")
    kv_bytes_per_token: int  # K and V bytes of one token over all layers
    num_gpu_blocks: int  # blocks the budget holds
    token_capacity: int  # tokens those blocks hold (blocks x block size)
    kv_cache_bytes: int  # bytes the pool's tensors take

    @property
    def pool_mib(self) -> float:
        """The pool's bytes in MiB."""
        return self.kv_cache_bytes / MiB

    def row(self, choice: str) -> dict[str, Any]:
        """This pool's row of the page's table, labelled with the precision `choice` ("auto" or "fp8")."""
        return {
            "KV precision": f"{choice} ({self.kv_cache_dtype})",
            "KV bytes / token": self.kv_bytes_per_token,
            "blocks in budget": self.num_gpu_blocks,
            "tokens in budget": self.token_capacity,
            "pool MiB": round(self.pool_mib, 2),
        }


def pool(llm: LLM) -> KvPool:
    """The engine's KV pool as numbers."""
    return KvPool(
        kv_cache_dtype=str(llm.kv_cache_dtype).removeprefix("torch."),
        kv_bytes_per_token=llm.kv_bytes_per_token,
        num_gpu_blocks=llm.num_gpu_blocks,
        token_capacity=llm.num_gpu_blocks * llm.block_size,
        kv_cache_bytes=llm.kv_cache_bytes,
    )


@dataclass(frozen=True)
class Fp8Price:
    """What fp8 costs against full precision, along full precision's greedy paths (teacher forcing)."""

    max_logit_error: float  # the largest |logit difference| at any position, any vocabulary entry
    mean_logit_error: float  # the mean |logit difference| over every position and vocabulary entry
    top1_agreement: float  # the fraction of positions where both caches pick the same top token (0..1)
    positions: int  # positions compared: (max_tokens + 1) per prompt
    identical_generations: int  # whole greedy generations that came out token for token the same
    num_prompts: int


@dataclass(frozen=True)
class PrecisionChoice:
    """What a page shows for one precision choice: its pool and, for fp8, its price (None for full precision)."""

    choice: str  # "auto" or "fp8"
    pool: KvPool
    price: Fp8Price | None


@dataclass(frozen=True)
class PrecisionComparison:
    """Both engines' pools under one budget and fp8's price against full precision."""

    auto: KvPool
    fp8: KvPool
    price: Fp8Price
    max_tokens: int  # greedy tokens generated per prompt

    @property
    def bytes_per_token_ratio(self) -> float:
        """How many times full precision's KV bytes per token outweigh fp8's (4 from fp32, 2 from bf16)."""
        return self.auto.kv_bytes_per_token / self.fp8.kv_bytes_per_token

    @property
    def blocks_ratio(self) -> float:
        """How many times more blocks fp8 fits in the same budget than full precision."""
        return self.fp8.num_gpu_blocks / self.auto.num_gpu_blocks

    def pool_of(self, choice: str) -> KvPool:
        """The pool of one precision choice ("auto" or "fp8")."""
        _check_choice(choice)
        return self.auto if choice == "auto" else self.fp8

    def summary(self, choice: str) -> PrecisionChoice:
        """What a page shows for one precision choice: its pool, and (for fp8) its price against full precision."""
        return PrecisionChoice(choice, self.pool_of(choice), self.price if choice == "fp8" else None)

    def rows(self) -> list[dict[str, Any]]:
        """The pool table: one row per precision, bytes per token and what the shared budget holds."""
        return [self.pool_of(choice).row(choice) for choice in CHOICES]

    def record(self) -> dict[str, Any]:
        """The comparison as bench/kv_precision.py's JSON fields (bench/results/kv_precision-cpu.json)."""
        price = self.price
        return {
            "auto": asdict(self.auto),
            "fp8": asdict(self.fp8),
            "bytes_per_token_ratio": self.bytes_per_token_ratio,
            "blocks_ratio": self.blocks_ratio,
            "max_logit_error": price.max_logit_error,
            "mean_logit_error": price.mean_logit_error,
            "top1_agreement": price.top1_agreement,
            "positions": price.positions,
            "identical_generations": price.identical_generations,
            "num_prompts": price.num_prompts,
            "max_tokens": self.max_tokens,
        }


@dataclass(frozen=True)
class PrecisionRun(PrecisionComparison):
    """`compare()`'s result: the comparison, with the model it ran and the KV byte budget both engines got."""

    model: str
    budget_bytes: int

    @property
    def budget_mib(self) -> float:
        """The shared KV budget in MiB."""
        return self.budget_bytes / MiB

    def record(self) -> dict[str, Any]:
        """The model, the budget and the comparison's JSON fields."""
        return {"model": self.model, "budget_bytes": self.budget_bytes, **super().record()}


def compare_engines(full: LLM, fp8: LLM, prompts: Sequence[str], max_tokens: int) -> PrecisionComparison:
    """The pools of both engines and fp8's price along full precision's greedy paths."""
    greedy = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    ref, low = full.generate(list(prompts), greedy), fp8.generate(list(prompts), greedy)
    max_err, err_sum, agree, count = 0.0, 0.0, 0, 0
    for out in ref:
        ids = out.prompt_token_ids + out.token_ids
        a = path_logits(full, ids, len(out.prompt_token_ids))
        b = path_logits(fp8, ids, len(out.prompt_token_ids))
        diff = (a - b).abs()
        max_err = max(max_err, float(diff.max()))
        err_sum += float(diff.mean()) * a.shape[0]
        agree += int((a.argmax(-1) == b.argmax(-1)).sum())
        count += a.shape[0]
    same = sum(r.token_ids == s.token_ids for r, s in zip(ref, low, strict=True))
    price = Fp8Price(
        max_logit_error=max_err,
        mean_logit_error=err_sum / count,
        top1_agreement=agree / count,
        positions=count,
        identical_generations=same,
        num_prompts=len(prompts),
    )
    return PrecisionComparison(pool(full), pool(fp8), price, max_tokens)


def compare(
    model: str = "demo",
    prompts: Sequence[str] = PROMPTS,
    max_tokens: int = MAX_TOKENS,
    budget_bytes: int = BUDGET_BYTES,
    device: str = "cpu",
) -> PrecisionRun:
    """Load `model` once and compare an fp8 KV cache with full precision under the same byte budget."""
    if not prompts:
        raise ValueError("prompts is empty; give at least one prompt")
    loaded = load_model(model, device)
    full, fp8 = (engine(loaded, kind, budget_bytes, model=model) for kind in CHOICES)
    c = compare_engines(full, fp8, prompts, max_tokens)
    return PrecisionRun(c.auto, c.fp8, c.price, c.max_tokens, model=model, budget_bytes=budget_bytes)


def bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int) -> dict[str, int]:
    """KV bytes per token of one model at fp32, bf16 and fp8 (engine.memory.units.kv_bytes), by dtype name."""
    return {name: kv_bytes(num_layers, num_kv_heads, head_dim, b) for name, b in (("fp32", 4), ("bf16", 2), ("fp8", 1))}
