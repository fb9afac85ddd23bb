"""One paged call for every step kind vs the path it replaces: gather K/V out of the cache, then varlen attention.

Three step kinds, each from a fixed seed (docs/BENCHMARKS.md fairness rules: same values, dtype, device and
threads on every side, interleaved repeats, outputs checked equal before timing):
- `prefill_chunks`: a few sequences with a cached prefix, each adding a chunk of new tokens;
- `decode`: many sequences, one new token each;
- `mixed`: two chunks plus the decode batch in one step (what chunked prefill schedules).

Sides:
- `paged_varlen`: kernels.ops.paged_varlen_attention (auto backend) reading K/V through shuffled block tables,
  validating the step and planning it inside the call;
- `paged_varlen_planned`: the same call with the step's `plan_attention(...)` built before timing (the engine
  builds it once per step for all layers), the like-for-like match of the gather side's slots;
- `gather_varlen`: the old path: copy each sequence's K/V out of the blocks (one index_select per cache over
  slot indices built before timing, as a model builds them once per step) and call kernels.ops.varlen_attention
  on the packed copy. The copy is part of its time: it is what the paged call saves.
- on CUDA `varlen_contiguous`: the Triton varlen kernel on K/V that already sit contiguously (no gather): the
  floor a paged kernel is measured against (`vs_contiguous` = paged_varlen / varlen_contiguous).
`vs_gather` = paged_varlen_s / gather_varlen_s (< 1: the one paged call is faster); `planned_vs_gather` the same
for the planned call. CPU times are at one torch thread (`--threads` to change), as in bench.paged_decode.

    python -m bench.paged_varlen --json
"""

from __future__ import annotations

import os

import torch

from bench.harness import assert_same_rows, emit, env_info, log, parser, save, time_interleaved
from kernels.backend import resolve_backend
from kernels.ops import paged_varlen_attention, paged_varlen_attention_planned, plan_attention, varlen_attention
from kernels.plan import KVCache

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def step_shapes(kind: str, args, gen: torch.Generator) -> list[tuple[int, int]]:
    """(seq_len, len_q) of every sequence of one step kind: lengths drawn from the seed, up to --max-len."""
    chunks = [(int(torch.randint(args.chunk, args.max_len + 1, (1,), generator=gen)), args.chunk) for _ in range(4)]
    decode = [(int(torch.randint(16, args.max_len + 1, (1,), generator=gen)), 1) for _ in range(args.seqs)]
    if kind == "prefill_chunks":
        return chunks
    if kind == "decode":
        return decode
    return chunks[:2] + decode


def make_step(shapes: list[tuple[int, int]], args, device: str, seed: int) -> dict:
    """The step's q, a paged cache holding every sequence's K/V in shuffled blocks, and the contiguous copy."""
    gen = torch.Generator().manual_seed(seed)
    dtype, bs = DTYPES[args.dtype], args.block_size
    lens = [n for n, _ in shapes]
    blocks = [-(-n // bs) for n in lens]
    num_blocks = sum(blocks)
    physical = torch.randperm(num_blocks, generator=gen)
    tables = torch.zeros(len(shapes), max(blocks), dtype=torch.int32)
    cache_shape = (num_blocks, bs, args.kv_heads, args.head_dim)
    # Values are drawn on the device itself: a GPU-sized cache would take seconds to fill on the host.
    dev_gen = torch.Generator(device=device).manual_seed(seed)
    k_cache = torch.randn(cache_shape, generator=dev_gen, device=device).to(dtype)
    v_cache = torch.randn(cache_shape, generator=dev_gen, device=device).to(dtype)
    used = 0
    slots = []
    for i, n in enumerate(lens):
        row = physical[used : used + blocks[i]]
        tables[i, : blocks[i]] = row.to(torch.int32)
        used += blocks[i]
        slots.append((row[:, None] * bs + torch.arange(bs)).flatten()[:n])
    slots = torch.cat(slots).to(device)  # [total_k]: each key's slot, sequence by sequence
    cu_q = torch.tensor([0, *torch.tensor([q for _, q in shapes]).cumsum(0).tolist()], dtype=torch.int32)
    cu_k = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
    q = torch.randn(int(cu_q[-1]), args.heads, args.head_dim, generator=dev_gen, device=device).to(dtype)
    flat = (-1, args.kv_heads, args.head_dim)
    return {
        "shapes": shapes,
        "q": q,
        "k_cache": k_cache,
        "v_cache": v_cache,
        "block_tables": tables.to(device),
        "seq_lens": torch.tensor(lens, dtype=torch.int32, device=device),
        "cu_q": cu_q.to(device),
        "cu_k": cu_k.to(device),
        "slots": slots,
        "k_contig": k_cache.view(flat).index_select(0, slots),
        "v_contig": v_cache.view(flat).index_select(0, slots),
        "max_q": max(q for _, q in shapes),
        "max_k": max(lens),
    }


def sides(w: dict, cuda: bool) -> dict:
    """The timed callables of one step."""
    flat = (-1, *w["k_cache"].shape[2:])

    def paged() -> torch.Tensor:
        return paged_varlen_attention(
            w["q"], w["k_cache"], w["v_cache"], w["cu_q"], w["seq_lens"], w["block_tables"], w["max_q"]
        )

    def gather() -> torch.Tensor:
        k = w["k_cache"].view(flat).index_select(0, w["slots"])
        v = w["v_cache"].view(flat).index_select(0, w["slots"])
        return varlen_attention(w["q"], k, v, w["cu_q"], w["cu_k"], w["max_q"], w["max_k"], causal=True)

    # The step's plan, built before timing as the gather side's slots are (a model builds it once per step).
    plan = plan_attention(
        w["cu_q"],
        w["seq_lens"],
        w["block_tables"],
        w["max_q"],
        None,
        w["k_cache"],
        w["v_cache"],
        num_heads=w["q"].shape[1],
        q_dtype=w["q"].dtype,
    )

    cache = KVCache(w["k_cache"], w["v_cache"])

    def planned() -> torch.Tensor:
        return paged_varlen_attention_planned(w["q"], cache, plan)

    fns = {"paged_varlen": paged, "gather_varlen": gather, "paged_varlen_planned": planned}
    if cuda:
        fns["varlen_contiguous"] = lambda: varlen_attention(
            w["q"], w["k_contig"], w["v_contig"], w["cu_q"], w["cu_k"], w["max_q"], w["max_k"], causal=True
        )
    return fns


def run_kind(kind: str, args, device: str, seed: int) -> dict:
    """Build one step kind, check every side computes the same rows, time them interleaved."""
    gen = torch.Generator().manual_seed(seed)
    w = make_step(step_shapes(kind, args, gen), args, device, seed)
    fns = sides(w, device == "cuda")
    expected = fns["gather_varlen"]()
    diffs = {name: assert_same_rows(fn(), expected, f"{kind}: {name} vs gather_varlen") for name, fn in fns.items()}
    times = time_interleaved(fns, repeats=args.repeats, warmup=args.warmup)
    entry = {f"{name}_s": t for name, t in times.items()}
    entry["vs_gather"] = times["paged_varlen"] / times["gather_varlen"]
    entry["planned_vs_gather"] = times["paged_varlen_planned"] / times["gather_varlen"]
    if "varlen_contiguous" in times:
        entry["vs_contiguous"] = times["paged_varlen"] / times["varlen_contiguous"]
    kv_bytes = 2 * sum(n for n, _ in w["shapes"]) * args.kv_heads * args.head_dim * w["k_cache"].element_size()
    entry["kv_bytes"] = kv_bytes
    entry["max_abs_diff"] = max(diffs.values())
    entry["seq_lens"] = [n for n, _ in w["shapes"]]
    entry["len_q"] = [q for _, q in w["shapes"]]
    timing = ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in times.items())
    log(f"{kind}: {timing}; vs_gather {entry['vs_gather']:.3f}")
    return entry


def main() -> None:
    """Time the paged varlen call against gather + varlen on three step kinds; print one JSON line."""
    p = parser("paged varlen attention vs gather + varlen, per step kind")
    p.add_argument("--seqs", type=int, default=None, help="decode sequences (default: 16 on CPU, 64 on CUDA)")
    p.add_argument("--max-len", type=int, default=None, help="default: 1024 on CPU, 4096 on CUDA")
    p.add_argument("--chunk", type=int, default=None, help="new tokens per prefill chunk (default 128 / 512)")
    p.add_argument("--heads", type=int, default=None, help="default: 8 on CPU, 32 on CUDA")
    p.add_argument("--kv-heads", type=int, default=None, help="default: 2 on CPU, 8 on CUDA")
    p.add_argument("--head-dim", type=int, default=None, help="default: 64 on CPU, 128 on CUDA")
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--dtype", choices=sorted(DTYPES), default=None, help="default: float32 on CPU, bfloat16 on CUDA")
    p.add_argument("--kinds", default="prefill_chunks,decode,mixed")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1, the steadier headline)")
    args = p.parse_args()
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    torch.set_num_threads(args.threads)
    defaults = {
        "seqs": (16, 64),
        "max_len": (1024, 4096),
        "chunk": (128, 512),
        "heads": (8, 32),
        "kv_heads": (2, 8),
        "head_dim": (64, 128),
        "dtype": ("float32", "bfloat16"),
    }
    for name, pair in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, pair[cuda])
    backend = resolve_backend("auto", device)
    log(f"paged_varlen: device {device}, backend {backend}, {args.threads} thread(s)")
    load_before = os.getloadavg()[0]
    kinds = {kind: run_kind(kind, args, device, args.seed + i) for i, kind in enumerate(args.kinds.split(","))}
    result = {
        "benchmark": "paged_varlen",
        "backend": backend,
        "kinds": kinds,
        "vs_gather": {kind: e["vs_gather"] for kind, e in kinds.items()},
        "planned_vs_gather": {kind: e["planned_vs_gather"] for kind, e in kinds.items()},
        "shapes": {
            "num_heads": args.heads,
            "num_kv_heads": args.kv_heads,
            "head_dim": args.head_dim,
            "block_size": args.block_size,
            "dtype": args.dtype,
            "decode_seqs": args.seqs,
            "max_len": args.max_len,
            "chunk": args.chunk,
        },
        "seed": args.seed,
        "repeats": args.repeats,
        "env": env_info(),
        "load_average_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }
    if args.save:
        log(f"saved {save('paged_varlen', result)}")
    emit(result)


if __name__ == "__main__":
    main()
