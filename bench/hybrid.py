"""A hybrid model (sliding-window + full layers) against the same model with every layer full, at one KV budget.

Two engines around the same random tiny Qwen2 weights (4 layers, hidden 64, 4 query / 2 KV heads), differing
only in `layer_types`: the hybrid has layers 0-2 sliding (window --window) and layer 3 full (Gemma 3's 3:1
shape at tiny scale), the other all four full. Both get the same `kv_cache_memory_bytes`, block size and
`max_num_batched_tokens`. The hybrid's three sliding KV-cache groups give back the blocks behind their window
(engine/core/kv_groups.py), so the same bytes serve more. Reported, both sides in one run:
- the longest context each engine accepts (its `max_model_len` when the pool sets it), and a request of that
  length actually served to its end (prompt = the limit less --new-tokens) without preemption;
- the most requests running at once on a fixed workload (--requests prompts of --prompt-len tokens, each
  generating --new-tokens; greedy, EOS ignored): the peak of `len(StepTrace.running)`, with preemptions;
- the ratios hybrid / all-full, and the machine's load average. Counts, not times: no interleaving needed.

    python -m bench.hybrid --json [--save]
"""

from __future__ import annotations

import os

import torch

from bench.harness import emit, env_info, log, parser, save
from engine import LLM, SamplingParams
from engine.model.config import ModelConfig
from engine.model.llama import CausalLM

VOCAB = 256


def tiny(layer_types: tuple[str, ...], window: int, max_positions: int) -> tuple[CausalLM, ModelConfig]:
    """The benchmark's random weights (seed 0) under the given per-layer kinds: the same tensors for both sides."""
    config = ModelConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=len(layer_types),
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
        sliding_window=window,
        layer_types=layer_types,
        architecture="Qwen2ForCausalLM",
        qkv_bias=True,
    )
    torch.manual_seed(0)
    model = CausalLM(config).eval()
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.1)
    return model, config


def engine(layer_types: tuple[str, ...], args, max_model_len: int | None = None) -> LLM:
    model, config = tiny(layer_types, args.window, args.max_positions)
    return LLM(
        "bench-hybrid",
        device="cpu",
        block_size=args.block_size,
        kv_cache_memory_bytes=args.budget_kib * 1024,
        max_num_batched_tokens=args.chunk,
        max_num_seqs=args.requests,
        max_model_len=max_model_len,
        preloaded=(model, config, None),
    )


def prompts(n: int, length: int, seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(1, VOCAB, (length,), generator=g).tolist() for _ in range(n)]


def serve(llm: LLM, batch: list[list[int]], new_tokens: int) -> dict:
    """Run the batch to its end; the peak of requests holding blocks at once (running after a step, or finished
    in it), preemptions and tokens generated."""
    peak = 0

    def watch(trace) -> None:
        nonlocal peak
        peak = max(peak, len(trace.running) + len(trace.finished))

    greedy = SamplingParams(max_tokens=new_tokens, temperature=0.0, ignore_eos=True)
    outs = llm.generate(batch, greedy, on_step=watch)
    return {
        "peak_running": peak,
        "preemptions": llm.scheduler.num_preemptions,
        "generated_tokens": sum(len(o.token_ids) for o in outs),
        "steps": llm.num_steps,
    }


def side(layer_types: tuple[str, ...], args) -> dict:
    probe = engine(layer_types, args)
    longest = probe.max_model_len  # the pool sets it (max_positions is far beyond what the budget holds)
    groups = [g.kind for g in probe.cache_config.kv_groups] or ["full"]  # one kind of layer: one group
    log(f"  {'/'.join(layer_types)}: {probe.num_gpu_blocks} blocks, longest context {longest}")
    one = engine(layer_types, args, max_model_len=longest)
    (prompt,) = prompts(1, longest - args.new_tokens, seed=1)
    long_run = serve(one, [prompt], args.new_tokens)
    many = serve(engine(layer_types, args), prompts(args.requests, args.prompt_len, seed=2), args.new_tokens)
    return {
        "layer_types": list(layer_types),
        "kv_cache_groups": groups,
        "num_blocks": probe.num_gpu_blocks,
        "kv_cache_bytes": probe.kv_cache_bytes,
        "longest_context": longest,
        "longest_served": {"prompt_tokens": len(prompt), **long_run},
        "concurrency": many,
    }


def main() -> None:
    p = parser("hybrid (sliding + full layers) vs all-full layers at one KV byte budget")
    p.add_argument(
        "--budget-kib", type=int, default=1024, help="the KV byte budget, KiB (1 MiB: 1,024 all-full tokens)"
    )
    p.add_argument("--window", type=int, default=64, help="the sliding layers' window, tokens")
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--chunk", type=int, default=64, help="max_num_batched_tokens: prompt chunk per step")
    p.add_argument("--requests", type=int, default=24)
    p.add_argument("--prompt-len", type=int, default=224)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--max-positions", type=int, default=16384)
    args = p.parse_args()
    torch.set_num_threads(1)  # a shared machine: one thread, the same on both sides
    hybrid_types = ("sliding_attention",) * 3 + ("full_attention",)
    full_types = ("full_attention",) * 4
    log(f"hybrid: budget {args.budget_kib} KiB, window {args.window}, block {args.block_size}, chunk {args.chunk}")
    hybrid, full = side(hybrid_types, args), side(full_types, args)
    result = {
        "benchmark": "hybrid",
        "model": "tiny Qwen2, 4 layers (hybrid: 3 sliding + 1 full), hidden 64, 4/2 heads, fp32",
        "budget_bytes": args.budget_kib * 1024,
        "window": args.window,
        "block_size": args.block_size,
        "max_num_batched_tokens": args.chunk,
        "workload": {"requests": args.requests, "prompt_len": args.prompt_len, "new_tokens": args.new_tokens},
        "hybrid": hybrid,
        "all_full": full,
        "longest_context_ratio": round(hybrid["longest_context"] / full["longest_context"], 3),
        "concurrency_ratio": round(hybrid["concurrency"]["peak_running"] / full["concurrency"]["peak_running"], 3),
        "env": env_info(),
        "load_average_1min": round(os.getloadavg()[0], 2),
    }
    if args.save:
        log(f"saved {save('hybrid', result)}")
    emit(result)


if __name__ == "__main__":
    main()
