"""KV-cache precision, measured on the real engine: fp8 (e4m3 with per-layer scales) against full precision.

`compare()` loads one model, builds two engines around the same read-only weights that differ only in
`kv_cache_dtype` ("auto": the model's dtype; "fp8": vLLM's float8 e4m3 cache, engine/worker/kv_cache.py),
each with the same KV byte budget (`kv_cache_memory_bytes`), and reports
- the pool: KV bytes per token, blocks and tokens the budget holds, the pool's bytes;
- the price: along each prompt's full-precision greedy path (teacher forcing, so one early difference does
  not cascade), the largest and the mean absolute logit difference and how often fp8's top token is the
  same (top-1 agreement); and how many whole greedy generations come out token for token identical.
Everything is plain numbers (no Streamlit), a pure function of its arguments, so a page can cache it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from engine import LLM, SamplingParams
from engine.config import KV_CACHE_DTYPES
from engine.memory.units import kv_bytes
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
BUDGET_BYTES = 8 * 2**20  # the same KV budget for both engines: 8 MiB


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


def pool(llm: LLM) -> dict[str, Any]:
    """The engine's KV pool as numbers."""
    return {
        "kv_cache_dtype": str(llm.kv_cache_dtype).removeprefix("torch."),
        "kv_bytes_per_token": llm.kv_bytes_per_token,
        "num_gpu_blocks": llm.num_gpu_blocks,
        "token_capacity": llm.num_gpu_blocks * llm.block_size,
        "kv_cache_bytes": llm.kv_cache_bytes,
    }


def compare_engines(full: LLM, fp8: LLM, prompts: Sequence[str], max_tokens: int) -> dict[str, Any]:
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
    auto, eight = pool(full), pool(fp8)
    return {
        "auto": auto,
        "fp8": eight,
        "bytes_per_token_ratio": auto["kv_bytes_per_token"] / eight["kv_bytes_per_token"],
        "blocks_ratio": eight["num_gpu_blocks"] / auto["num_gpu_blocks"],
        "max_logit_error": max_err,
        "mean_logit_error": err_sum / count,
        "top1_agreement": agree / count,
        "positions": count,
        "identical_generations": same,
        "num_prompts": len(prompts),
        "max_tokens": max_tokens,
    }


def compare(
    model: str = "demo",
    prompts: Sequence[str] = PROMPTS,
    max_tokens: int = MAX_TOKENS,
    budget_bytes: int = BUDGET_BYTES,
    device: str = "cpu",
) -> dict[str, Any]:
    """Load `model` once and compare an fp8 KV cache with full precision under the same byte budget."""
    if not prompts:
        raise ValueError("prompts is empty; give at least one prompt")
    loaded = load_model(model, device)
    full, fp8 = (engine(loaded, kind, budget_bytes, model=model) for kind in CHOICES)
    return {"model": model, "budget_bytes": budget_bytes, **compare_engines(full, fp8, prompts, max_tokens)}


def summary(result: dict[str, Any], choice: str) -> dict[str, Any]:
    """What a page shows for one precision choice: its pool, and (for fp8) its price against full precision."""
    if choice not in CHOICES:
        raise ValueError(f"KV precision {choice!r} is not offered; use one of {', '.join(CHOICES)}")
    row = dict(result[choice])
    if choice == "fp8":
        row.update({k: result[k] for k in ("max_logit_error", "top1_agreement", "identical_generations")})
    return row


PAGE_PROMPTS = PROMPTS[:4]  # a page's live run: four prompts, twelve tokens each (seconds on a laptop CPU)
PAGE_MAX_TOKENS = 12


def pool_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """One table row per precision: bytes per token, and what the shared budget holds."""
    rows = []
    for choice in CHOICES:
        p = result[choice]
        rows.append(
            {
                "KV precision": f"{choice} ({p['kv_cache_dtype']})",
                "KV bytes / token": p["kv_bytes_per_token"],
                "blocks in budget": p["num_gpu_blocks"],
                "tokens in budget": p["token_capacity"],
                "pool MiB": round(p["kv_cache_bytes"] / 2**20, 2),
            }
        )
    return rows


def bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int) -> dict[str, int]:
    """KV bytes per token of one model at fp32, bf16 and fp8 (engine.memory.footprint.kv_bytes)."""
    return {name: kv_bytes(num_layers, num_kv_heads, head_dim, b) for name, b in (("fp32", 4), ("bf16", 2), ("fp8", 1))}
