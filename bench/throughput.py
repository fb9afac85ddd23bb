"""Serving throughput: this engine (continuous batching, paged KV) vs transformers' `generate()` on static batches.

Fairness (docs/BENCHMARKS.md): the same weights (one random Llama checkpoint with the demo model's shape, written
with `save_pretrained` and loaded by both sides), the same 32 requests (prompt and output lengths from a
fixed seed), greedy decoding and ignore-EOS so both sides produce exactly `max_tokens` per request, the same
dtype and threads, and the same KV memory budget. A static cache reserves `max_len` slots per sequence, so
transformers' batch size under the budget is `budget // (max_len * kv_bytes_per_token)`; it runs the requests
in arrival order in batches of that size, each padded to its longest prompt and decoded until its longest
output is done (the tokens a request did not ask for are not counted). The engine gets the same bytes as
paged blocks. transformers runs its static cache (`cache_implementation="static"`, the reservation the budget
rule describes); the same batches on its default DynamicCache, and the whole workload in one static batch
(no budget), are reported too. Sides are timed interleaved, median of repeats after a warm-up. The vLLM
paper (Kwon et al., SOSP 2023) and its blog report the GPU version of this comparison.

Step accounting (`steps` in the JSON) explains the ratio: continuous batching needs far fewer decode steps
than static batches (no request waits for the longest one in its batch) and computes no padded prompt
tokens. On a GPU a decode step costs about the same at batch 1 or 64 (it streams the weights once), so fewer,
wider steps are almost free speed. On one CPU core a step's cost grows with every sequence in it (the
matmuls and the attention are compute- and cache-bound), so fewer steps buy less than on a GPU.

`decode_step_cost` measures one decode step of B sequences on each side at the same context length; its
`ratio` is engine / transformers per batch size (<= 1: the engine's step costs no more).

`--quick` runs a tiny version (4 short requests, one timed round, step costs at batch 1 and 2 over a short
context) that only shows the benchmark runs and what its JSON holds; its timings mean nothing.

    python -m bench.throughput --json [--repeats 5] [--warmup 1] [--threads 1] [--no-step-costs] [--save]
    python -m bench.throughput --json --quick
"""

from __future__ import annotations

import tempfile
import time

import torch

from bench.harness import emit, env_info, log, parser, save, time_interleaved

NUM_REQUESTS = 32
PROMPT_LENS = (8, 256)
OUTPUT_LENS = (8, 128)
SEED = 0
BLOCK_SIZE = 16
HF_BUDGET_BATCH = 8  # default KV budget: what a static cache needs for this many max-length sequences
# The demo model's shape (scripts/train_demo.py) with room for 256 + 128 positions.
MODEL = dict(
    vocab_size=1024,
    hidden_size=256,
    intermediate_size=512,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
    rms_norm_eps=1e-5,
    tie_word_embeddings=True,
)


# --quick: a tiny workload and step-cost setting, only to show the benchmark runs (tests/bench).
QUICK = dict(num_requests=4, prompt_lens=(8, 32), output_lens=(4, 12))
QUICK_STEP_COSTS = dict(batches=(1, 2), context=16, new_tokens=4, repeats=1)


def workload(
    num_requests: int = NUM_REQUESTS,
    prompt_lens: tuple[int, int] = PROMPT_LENS,
    output_lens: tuple[int, int] = OUTPUT_LENS,
) -> tuple[list[list[int]], list[int]]:
    """32 prompts (token ids) and their output lengths, drawn from a fixed seed (other sizes for --quick)."""
    g = torch.Generator().manual_seed(SEED)
    lo, hi = prompt_lens
    prompt_lens = torch.randint(lo, hi + 1, (num_requests,), generator=g).tolist()
    output_lens = torch.randint(output_lens[0], output_lens[1] + 1, (num_requests,), generator=g).tolist()
    prompts = [torch.randint(3, MODEL["vocab_size"], (n,), generator=g).tolist() for n in prompt_lens]
    return prompts, output_lens


def hf_generate(
    model, prompts: list[list[int]], output_lens: list[int], batch_size: int, cache: str | None = "static"
) -> int:
    """Static batching in arrival order, left padding; returns the generated tokens the requests asked for.

    cache: transformers' `cache_implementation` ("static": a fixed [batch, max_len] KV reservation per batch;
    None: its default DynamicCache, which grows by concatenation).
    """
    useful = 0
    extra = {} if cache is None else {"cache_implementation": cache}
    for start in range(0, len(prompts), batch_size):
        batch, outs = prompts[start : start + batch_size], output_lens[start : start + batch_size]
        width = max(len(p) for p in batch)
        ids = torch.zeros(len(batch), width, dtype=torch.long)  # [B, width], left padded with id 0
        mask = torch.zeros(len(batch), width, dtype=torch.long)
        for i, p in enumerate(batch):
            ids[i, width - len(p) :] = torch.tensor(p)
            mask[i, width - len(p) :] = 1
        with torch.inference_mode():
            out = model.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=max(outs),
                do_sample=False,
                pad_token_id=0,
                **extra,
            )
        assert out.shape[1] == width + max(outs)
        useful += sum(outs)
    return useful


def hf_steps(prompts: list[list[int]], output_lens: list[int], batch_size: int) -> dict:
    """What static batches compute: padded prompt tokens and forward passes (one prefill + one per new token)."""
    prefill_tokens = decode_steps = forwards = 0
    for start in range(0, len(prompts), batch_size):
        batch, outs = prompts[start : start + batch_size], output_lens[start : start + batch_size]
        prefill_tokens += len(batch) * max(len(p) for p in batch)
        decode_steps += max(outs) - 1  # the prefill forward samples the first token
        forwards += max(outs)
    return {"prefill_tokens": prefill_tokens, "decode_steps": decode_steps, "forward_passes": forwards}


def engine_steps(llm, prompts: list[list[int]], params: list) -> dict:
    """One untimed engine run with step traces: forward passes, pure-decode steps, prompt tokens computed."""
    counts = {"prefill_tokens": 0, "decode_steps": 0, "forward_passes": 0, "mean_decode_batch": 0.0}
    decode_rows = 0

    def on_step(trace) -> None:
        nonlocal decode_rows
        counts["forward_passes"] += 1
        counts["prefill_tokens"] += sum(r.num_new_tokens for r in trace.scheduled if r.phase == "prefill")
        if all(r.phase == "decode" for r in trace.scheduled):
            counts["decode_steps"] += 1
            decode_rows += len(trace.scheduled)

    llm.generate(prompts, params, on_step=on_step)
    counts["mean_decode_batch"] = round(decode_rows / max(1, counts["decode_steps"]), 2)
    return counts


def decode_step_costs(llm_like, hf, batches=(1, 8, 16), context=240, new_tokens=48, repeats=5) -> dict:
    """Milliseconds per decode step on both sides at the same batch size and context length.

    B equal prompts of `context` random tokens: generating 1 token (the prefill) and 1 + new_tokens, the
    difference over new_tokens is the cost of one decode step of B sequences. Interleaved, median of repeats.
    The engine gets a pool big enough for the largest batch (it shares llm_like's weights).
    """
    from engine import LLM, SamplingParams

    g = torch.Generator().manual_seed(SEED + 1)
    slots = max(batches) * (context + new_tokens + 1)
    llm = LLM(
        block_size=BLOCK_SIZE,
        num_gpu_blocks=-(-slots // BLOCK_SIZE) + max(batches),
        device="cpu",
        max_model_len=llm_like.max_model_len,
        preloaded=(llm_like.model, llm_like.config, llm_like.tokenizer),
    )
    costs: dict = {
        "context": context,
        "new_tokens": new_tokens,
        "repeats": repeats,
        "engine_ms": {},
        "hf_static_ms": {},
        "ratio": {},
    }
    for b in batches:
        prompts = torch.randint(3, MODEL["vocab_size"], (b, context), generator=g)
        as_lists = prompts.tolist()

        def ours(n: int, as_lists=as_lists) -> None:
            llm.generate(as_lists, SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True))

        def theirs(n: int, prompts=prompts) -> None:
            with torch.inference_mode():
                hf.generate(
                    input_ids=prompts,
                    max_new_tokens=n,
                    do_sample=False,
                    pad_token_id=0,
                    cache_implementation="static",
                )

        times = time_interleaved(
            {
                "ours_1": lambda: ours(1),
                "ours_n": lambda: ours(1 + new_tokens),
                "hf_1": lambda: theirs(1),
                "hf_n": lambda: theirs(1 + new_tokens),
            },
            repeats=repeats,
            warmup=1,
        )
        costs["engine_ms"][b] = round((times["ours_n"] - times["ours_1"]) / new_tokens * 1e3, 3)
        costs["hf_static_ms"][b] = round((times["hf_n"] - times["hf_1"]) / new_tokens * 1e3, 3)
        costs["ratio"][b] = round(costs["engine_ms"][b] / costs["hf_static_ms"][b], 3)  # engine / transformers
        log(
            f"decode step, batch {b}: engine {costs['engine_ms'][b]} ms, transformers {costs['hf_static_ms'][b]} "
            f"ms, ratio {costs['ratio'][b]}"
        )
    return costs


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    # One thread by default: this model's matmuls are too small to split, and on a shared, oversubscribed
    # machine OpenMP's spinning threads made both sides 10-30x slower. Both sides always share the setting.
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads for both sides")
    p.add_argument(
        "--budget-seqs", type=int, default=HF_BUDGET_BATCH, help="KV budget in max-length sequences (static batch)"
    )
    p.add_argument("--no-step-costs", action="store_true", help="skip measuring ms per decode step at batch 1 / 8 / 16")
    p.add_argument("--quick", action="store_true", help="a tiny run that only shows the benchmark works (no --save)")
    p.set_defaults(repeats=5, warmup=1)
    args = p.parse_args()
    if args.quick and args.save:
        p.error("--quick timings mean nothing; run without --quick to --save bench/results/throughput-*.json")
    if args.quick:
        args.repeats, args.warmup = 1, 0
    torch.set_num_threads(args.threads)
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.utils import logging as hf_logging

    from engine import LLM, SamplingParams
    from engine.memory import kv_blocks_from_budget, model_from_config
    from engine.memory import kv_bytes_per_token as footprint_kv_bytes_per_token

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    sizes = QUICK if args.quick else dict(num_requests=NUM_REQUESTS, prompt_lens=PROMPT_LENS, output_lens=OUTPUT_LENS)
    prompts, output_lens = workload(**sizes)
    max_len = sizes["prompt_lens"][1] + sizes["output_lens"][1]
    torch.manual_seed(SEED)
    hf = LlamaForCausalLM(LlamaConfig(**MODEL, eos_token_id=None, bos_token_id=None, pad_token_id=0)).eval()
    hf.generation_config.eos_token_id = None  # ignore EOS: every request produces exactly its max_tokens
    kv_bytes_per_token = footprint_kv_bytes_per_token(model_from_config(hf.config.to_dict()), 4)  # fp32
    budget = args.budget_seqs * max_len * kv_bytes_per_token
    hf_batch = budget // (max_len * kv_bytes_per_token)
    num_blocks = kv_blocks_from_budget(budget, kv_bytes_per_token, BLOCK_SIZE)
    with tempfile.TemporaryDirectory() as folder:
        hf.save_pretrained(folder, safe_serialization=True)
        llm = LLM(folder, block_size=BLOCK_SIZE, num_gpu_blocks=num_blocks, device="cpu", max_model_len=max_len)
    assert llm.kv_cache_bytes == num_blocks * BLOCK_SIZE * kv_bytes_per_token  # the same bytes as paged blocks
    params = [SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True) for n in output_lens]
    useful = sum(output_lens)
    stats: dict = {}

    def engine() -> None:
        steps, preemptions = llm.num_steps, llm.scheduler.num_preemptions
        outs = llm.generate(prompts, params)  # no on_step: a user's run, without trace capture
        assert sum(len(o.token_ids) for o in outs) == useful
        stats.update(steps=llm.num_steps - steps, preemptions=llm.scheduler.num_preemptions - preemptions)

    steps_engine = engine_steps(llm, prompts, params)  # untimed: step traces cost time
    log(f"workload: {len(prompts)} requests, {useful} output tokens; budget {budget / 2**20:.1f} MiB")
    log(f"engine: {num_blocks} blocks of {BLOCK_SIZE}; transformers: batches of {hf_batch} (and one of {len(prompts)})")
    started = time.perf_counter()
    times = time_interleaved(
        {
            "engine": engine,
            "hf": lambda: hf_generate(hf, prompts, output_lens, hf_batch),
            "hf_dynamic": lambda: hf_generate(hf, prompts, output_lens, hf_batch, cache=None),
            "hf_unbudgeted": lambda: hf_generate(hf, prompts, output_lens, len(prompts)),
        },
        repeats=args.repeats,
        warmup=args.warmup,
    )
    log(f"timed in {time.perf_counter() - started:.0f} s: " + ", ".join(f"{k} {v:.2f} s" for k, v in times.items()))
    step_costs = None
    if not args.no_step_costs:
        step_costs = decode_step_costs(llm, hf, **(QUICK_STEP_COSTS if args.quick else {}))
    result = {
        "benchmark": "throughput",
        "engine_tok_s": useful / times["engine"],
        "hf_tok_s": useful / times["hf"],
        "speedup": times["hf"] / times["engine"],
        "hf_dynamic_tok_s": useful / times["hf_dynamic"],
        "speedup_vs_dynamic": times["hf_dynamic"] / times["engine"],
        "hf_unbudgeted_tok_s": useful / times["hf_unbudgeted"],
        "speedup_vs_unbudgeted": times["hf_unbudgeted"] / times["engine"],
        "seconds": times,
        "workload": {
            "num_requests": len(prompts),
            "prompt_lens": "uniform {}-{}".format(*sizes["prompt_lens"]),
            "output_lens": "uniform {}-{}".format(*sizes["output_lens"]),
            "seed": SEED,
            "prompt_tokens": sum(len(p) for p in prompts),
            "output_tokens": useful,
            "greedy": True,
            "ignore_eos": True,
        },
        "model": {**MODEL, "dtype": "float32", "weights": "random, demo-model shape"},
        "kv_budget_bytes": budget,
        "kv_bytes_per_token": kv_bytes_per_token,
        "engine": {"block_size": BLOCK_SIZE, "num_blocks": num_blocks, **stats},
        "hf": {
            "batch_size_under_budget": hf_batch,
            "max_len": max_len,
            "batching": "arrival order, left padded",
            "cache": "static (cache_implementation='static'); hf_dynamic: the same batches on DynamicCache",
        },
        "steps": {"engine": steps_engine, "hf": hf_steps(prompts, output_lens, hf_batch)},
        "decode_step_cost": step_costs,
        "repeats": args.repeats,
        "warmup": args.warmup,
        "quick": args.quick,
        "env": env_info(),
    }
    if args.save:
        log(f"saved {save('throughput', result)}")
    emit(result)


if __name__ == "__main__":
    main()
