"""KV-memory waste of static reservation (Max, Pow2, Oracle) vs paged blocks, on one trace and one capacity.

Reproduces the vLLM paper's motivation (Kwon et al., SOSP 2023, Fig. 2: existing systems keep live tokens in
only 20.4-38.2% of their KV memory; vLLM wastes under 4%) with the project's simulator (`lessons.sim`) over the
real `BlockManager`. Setup follows the paper's LLaMA-13B on one A100 40GB, a ShareGPT-like trace (lengths from
the paper's Fig. 11 means, see lessons/sim/traces.py) and max_model_len 2048. The static servers are the
paper's Fig. 2 comparison systems: reserve max_model_len (Max), the next power of two of the final length
(Pow2), or exactly the final length (Oracle). Waste, as docs/BENCHMARKS.md defines it: the step-average of
(reserved + internal + external) / (those + stored) while requests run. Every policy gets the same KV bytes;
the simulation time of each is timed interleaved (median of --repeats after --warmup). The JSON's `trace`
records the drawn trace's statistics beside the source lengths they were drawn from (`source`).

Run: python -m bench.fragmentation --json
"""

from __future__ import annotations

from collections.abc import Callable

from bench.harness import emit, env_info, log, parser, save, time_interleaved
from engine.memory.footprint import serving_footprint
from lessons.sim.metrics import SimResult, SimSummary
from lessons.sim.simulate import simulate_model
from lessons.sim.traces import DATASETS, Request, generate_trace, trace_stats

MODEL, GPU, DATASET = "llama-2-13b", "a100-40gb", "sharegpt"
# name -> (simulate_model policy, reservation): the paper's three static systems and paged
POLICIES = {
    "static_max": ("static", "max_model_len"),
    "static_pow2": ("static", "pow2"),
    "static_oracle": ("static", "oracle"),
    "paged": ("paged", "max_model_len"),
}


def run_policies(trace: list[Request], model: str, gpu: str, **kw: int) -> dict[str, Callable[[], SimResult]]:
    """name -> a zero-argument call simulating the trace under that policy."""
    return {
        name: (
            lambda policy=policy, reservation=reservation: simulate_model(
                trace, model, gpu, policy, reservation=reservation, **kw
            )
        )
        for name, (policy, reservation) in POLICIES.items()
    }


def policy_row(s: SimSummary, seconds: float) -> dict[str, float]:
    """One policy's waste, its parts, peak concurrency, throughput and simulation time."""
    return {
        "waste": round(s.avg_waste, 4),
        "reserved": round(s.avg_reserved, 4),
        "internal": round(s.avg_internal, 4),
        "external": round(s.avg_external, 4),
        "peak_concurrency": s.peak_concurrency,
        "tokens_per_s": round(s.tokens_per_s, 1),
        "num_preemptions": s.num_preemptions,
        "sim_seconds": round(seconds, 4),
    }


def block_size_sweep(trace: list[Request], max_model_len: int) -> dict[str, dict[str, float]]:
    """Paged waste and peak concurrency per block size."""
    sweep = {}
    for bs in (8, 16, 32, 64, 128):
        s = simulate_model(trace, MODEL, GPU, "paged", block_size=bs, max_model_len=max_model_len).summary
        sweep[str(bs)] = {"waste": round(s.avg_waste, 4), "peak_concurrency": s.peak_concurrency}
        log(f"paged block {bs}: waste {s.avg_waste:.3%}")
    return sweep


def speed_80gb(request_rate: float, seed: int, repeats: int) -> dict[str, float]:
    """The speed target: seconds to simulate a 1,000-request trace over an 80 GB GPU, static Max and paged."""
    big = run_policies(generate_trace("sharegpt", 1000, request_rate, seed=seed), "llama-3-8b", "a100-80gb")
    times = time_interleaved({"static": big["static_max"], "paged": big["paged"]}, repeats=repeats, warmup=1)
    return {k: round(v, 4) for k, v in times.items()}


def trace_record(trace: list[Request], args) -> dict:
    """The trace's measured statistics, how it was drawn, and the source of the lengths it was drawn from."""
    src = DATASETS[DATASET]
    return {
        **trace_stats(trace),
        "dataset": DATASET,
        "seed": args.seed,
        "source": src.source,
        "source_lengths": {
            "prompt_mean": src.prompt_mean,
            "prompt_std": src.prompt_std,
            "output_mean": src.output_mean,
            "output_std": src.output_std,
        },
        "generator": "lessons.sim.traces.generate_trace: log-normal lengths, Poisson arrivals",
        "request_rate": args.request_rate,
        "max_len": args.max_model_len,
        "length_filter": "requests with prompt + output > max_len are redrawn (lowers the drawn means)",
    }


def main() -> None:
    """Run every policy on one trace, sweep paged block sizes, print one JSON line."""
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--num-requests", type=int, default=1000)
    p.add_argument("--request-rate", type=float, default=8.0, help="Poisson arrivals per second (saturating)")
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--max-model-len", type=int, default=2048)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    trace = generate_trace(DATASET, args.num_requests, args.request_rate, seed=args.seed, max_len=args.max_model_len)
    fp = serving_footprint(MODEL, GPU, max_model_len=args.max_model_len, block_size=args.block_size)
    log(f"{MODEL} on {GPU}: {fp.kv_budget_bytes // fp.kv_bytes_per_token} KV slots; {len(trace)} requests")
    calls = run_policies(trace, MODEL, GPU, block_size=args.block_size, max_model_len=args.max_model_len)
    summaries = {name: call().summary for name, call in calls.items()}
    times = time_interleaved(calls, repeats=args.repeats, warmup=args.warmup)
    rows = {name: policy_row(summaries[name], times[name]) for name in POLICIES}
    st, pg = summaries["static_max"], summaries["paged"]
    result = {
        "benchmark": "fragmentation",
        "block_size": args.block_size,
        "paged_waste": rows["paged"]["waste"],
        "static_waste": rows["static_max"]["waste"],  # static Max, the paper's FasterTransformer-style system
        "waste": {name: row["waste"] for name, row in rows.items()},
        "policies": rows,
        "paged_peak_concurrency": pg.peak_concurrency,
        "static_peak_concurrency": st.peak_concurrency,
        "sim_seconds": round(max(times.values()), 4),
        "sim_seconds_static": round(times["static_max"], 4),
        "sim_seconds_paged": round(times["paged"], 4),
        "sim_seconds_1000_requests_80gb": speed_80gb(args.request_rate, args.seed, args.repeats),
        "static_waste_parts": {k: rows["static_max"][k] for k in ("reserved", "internal", "external")},
        "tokens_per_s": {"static": round(st.tokens_per_s, 1), "paged": round(pg.tokens_per_s, 1)},
        "paged_block_size_sweep": block_size_sweep(trace, args.max_model_len),
        "setup": {
            "model": MODEL,
            "gpu": GPU,
            "kv_slots": int(fp.kv_budget_bytes // fp.kv_bytes_per_token),
            "max_model_len": args.max_model_len,
            "max_num_seqs": 256,
            "request_rate": args.request_rate,
            "static_reservations": {
                name: reservation for name, (policy, reservation) in POLICIES.items() if policy == "static"
            },
            "step_time": "roofline",
        },
        "trace": trace_record(trace, args),
        "env": env_info(),
        "targets": {"paged_waste": "<= 0.04", "static_waste": ">= 0.5", "waste": "all four policies reported"},
    }
    log(
        "waste: "
        + ", ".join(f"{name} {row['waste']:.2%} (peak {row['peak_concurrency']})" for name, row in rows.items())
    )
    if args.save:
        log(f"saved {save('fragmentation', result)}")
    emit(result)


if __name__ == "__main__":
    main()
