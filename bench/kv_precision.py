"""fp8 KV cache vs full precision on the demo model: bytes, blocks in one budget, tokens/s, and the price.

Two engines around the same weights (`LLM(model="demo")`), differing only in `kv_cache_dtype` ("auto" =
the model's dtype, float32 on CPU / bfloat16 on CUDA; "fp8" = float8 e4m3 with per-layer scales), each
given the same KV byte budget (`kv_cache_memory_bytes`). Reported (lessons/labs/kv_precision.py computes
the non-timing numbers, the same ones the lessons show, and names them: `PrecisionComparison.record()`):
- KV bytes per token and the blocks / tokens the budget holds, per side, and their ratios;
- tokens/s of the same greedy batch (fixed prompts, EOS ignored, same max_tokens) on each engine, timed
  interleaved (auto, fp8, auto, ...; median of --repeats, docs/BENCHMARKS.md), and their ratio;
- the price, along full precision's greedy path (teacher forcing): max and mean |logit difference|, top-1
  agreement per position, and how many whole greedy generations are identical.

    python -m bench.kv_precision --json [--save]
"""

from __future__ import annotations

import os

import torch

from bench.harness import emit, env_info, log, parser, save, time_interleaved
from engine import SamplingParams
from engine.model.loader import load_model
from lessons.labs import kv_precision as lab


def main() -> None:
    """Measure both engines and print one JSON line."""
    p = parser("fp8 KV cache vs full precision on the demo model")
    p.add_argument("--max-tokens", type=int, default=lab.MAX_TOKENS)
    p.add_argument("--budget-mib", type=int, default=lab.BUDGET_BYTES // 2**20)
    p.set_defaults(repeats=5, warmup=1)  # each call generates the whole batch: seconds, not microseconds
    args = p.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    budget = args.budget_mib * 2**20
    loaded = load_model("demo", device)
    engines = {kind: lab.engine(loaded, kind, budget) for kind in lab.CHOICES}
    log(f"kv_precision: demo on {device}, budget {args.budget_mib} MiB, {len(lab.PROMPTS)} prompts")
    comparison = lab.compare_engines(engines["auto"], engines["fp8"], lab.PROMPTS, args.max_tokens)
    greedy = SamplingParams(max_tokens=args.max_tokens, temperature=0.0, ignore_eos=True)
    prompts = list(lab.PROMPTS)
    fns = {kind: (lambda llm=llm: llm.generate(prompts, greedy)) for kind, llm in engines.items()}
    times = time_interleaved(fns, repeats=args.repeats, warmup=args.warmup)
    tokens = len(prompts) * args.max_tokens
    result = {
        "benchmark": "kv_precision",
        "model": "demo",
        "device": device,
        "budget_bytes": budget,
        **comparison.record(),
        "generate_s": times,
        "tokens_per_s": {kind: tokens / t for kind, t in times.items()},
        "fp8_speed_ratio": times["auto"] / times["fp8"],
        "generated_tokens": tokens,
        "prompts": prompts,
        "repeats": args.repeats,
        "env": env_info(),
        "load_average_1min": round(os.getloadavg()[0], 2),
    }
    log(
        f"bytes/token {comparison.auto.kv_bytes_per_token} -> {comparison.fp8.kv_bytes_per_token}, blocks "
        f"x{comparison.blocks_ratio:.1f}, top-1 agreement {comparison.price.top1_agreement:.3f}, max |dlogit| "
        f"{comparison.price.max_logit_error:.3f}, tokens/s auto {result['tokens_per_s']['auto']:.1f} fp8 "
        f"{result['tokens_per_s']['fp8']:.1f}"
    )
    if args.save:
        log(f"saved {save('kv_precision', result)}")
    emit(result)


if __name__ == "__main__":
    main()
