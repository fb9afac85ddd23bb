"""KV-memory waste of static max-length reservation vs paged blocks, on one trace and one capacity.

Reproduces the vLLM paper's motivation (Kwon et al., SOSP 2023, Fig. 2: existing systems keep live tokens in
only 20.4-38.2% of their KV memory; vLLM wastes under 4%) with the project's simulator over the real
`BlockAllocator`. Setup follows the paper's LLaMA-13B on one A100 40GB, a ShareGPT-like trace (lengths from
the paper's Fig. 11 means, see engine/traces.py) and max_model_len 2048. Waste is defined in BENCHMARKS.md:
step-average of (reserved + internal + external) / (those + stored) while requests run. Both policies get the
same KV bytes; the simulation time of each is timed interleaved (median of --repeats after --warmup).

Run: python -m bench.fragmentation --json
"""

from __future__ import annotations

from bench._util import emit, env_info, log, parser, save, time_interleaved
from engine.memory.footprint import serving_footprint
from engine.sim.simulate import simulate_model
from engine.sim.traces import DATASETS, generate_trace, trace_stats

MODEL, GPU = "llama-2-13b", "a100-40gb"


def main() -> None:
    """Run both policies on one trace, sweep paged block sizes, print one JSON line."""
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--num-requests", type=int, default=1000)
    p.add_argument("--request-rate", type=float, default=8.0, help="Poisson arrivals per second (saturating)")
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--max-model-len", type=int, default=2048)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    trace = generate_trace("sharegpt", args.num_requests, args.request_rate, seed=args.seed, max_len=args.max_model_len)
    kw = dict(block_size=args.block_size, max_model_len=args.max_model_len)
    fp = serving_footprint(MODEL, GPU, max_model_len=args.max_model_len, block_size=args.block_size)
    log(f"{MODEL} on {GPU}: {fp.kv_budget_bytes // fp.kv_bytes_per_token} KV slots; {len(trace)} requests")
    runs = {policy: simulate_model(trace, MODEL, GPU, policy, **kw) for policy in ("static", "paged")}
    times = time_interleaved(
        {policy: (lambda policy=policy: simulate_model(trace, MODEL, GPU, policy, **kw)) for policy in runs},
        repeats=args.repeats,
        warmup=args.warmup,
    )
    # the speed target: a 1,000-request trace over an 80 GB GPU, both policies
    big = generate_trace("sharegpt", 1000, args.request_rate, seed=args.seed)
    times_80 = time_interleaved(
        {policy: (lambda policy=policy: simulate_model(big, "llama-3-8b", "a100-80gb", policy)) for policy in runs},
        repeats=args.repeats,
        warmup=1,
    )
    sweep = {}
    for bs in (8, 16, 32, 64, 128):
        s = simulate_model(trace, MODEL, GPU, "paged", block_size=bs, max_model_len=args.max_model_len).summary
        sweep[str(bs)] = {"waste": round(s.avg_waste, 4), "peak_concurrency": s.peak_concurrency}
        log(f"paged block {bs}: waste {s.avg_waste:.3%}")
    st, pg = runs["static"].summary, runs["paged"].summary
    result = {
        "benchmark": "fragmentation",
        "block_size": args.block_size,
        "paged_waste": round(pg.avg_waste, 4),
        "static_waste": round(st.avg_waste, 4),
        "paged_peak_concurrency": pg.peak_concurrency,
        "static_peak_concurrency": st.peak_concurrency,
        "sim_seconds": round(max(times.values()), 4),
        "sim_seconds_static": round(times["static"], 4),
        "sim_seconds_paged": round(times["paged"], 4),
        "sim_seconds_1000_requests_80gb": {k: round(v, 4) for k, v in times_80.items()},
        "static_waste_parts": {
            "reserved": round(st.avg_reserved, 4),
            "internal": round(st.avg_internal, 4),
            "external": round(st.avg_external, 4),
        },  # fmt: skip
        "tokens_per_s": {"static": round(st.tokens_per_s, 1), "paged": round(pg.tokens_per_s, 1)},
        "paged_block_size_sweep": sweep,
        "setup": {
            "model": MODEL,
            "gpu": GPU,
            "kv_slots": int(fp.kv_budget_bytes // fp.kv_bytes_per_token),
            "max_model_len": args.max_model_len,
            "max_num_seqs": 256,
            "request_rate": args.request_rate,
            "static_reservation": "max_model_len",
            "step_time": "roofline",
        },  # fmt: skip
        "trace": {
            **trace_stats(trace),
            "dataset": "sharegpt",
            "seed": args.seed,
            "source": DATASETS["sharegpt"].source,
        },  # fmt: skip
        "env": env_info(),
        "targets": {"paged_waste": "<= 0.04", "static_waste": ">= 0.5"},
    }
    log(f"static waste {st.avg_waste:.1%} (peak {st.peak_concurrency}), paged {pg.avg_waste:.2%} "
        f"(peak {pg.peak_concurrency})")  # fmt: skip
    if args.save:
        log(f"saved {save('fragmentation', result)}")
    emit(result)


if __name__ == "__main__":
    main()
