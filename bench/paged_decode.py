"""Decode attention over a contiguous KV store vs the same K/V in a paged cache (PagedAttention's cost).

vLLM's paper (Kwon et al., SOSP 2023, section 7.1) reports its first paged kernel 20-26% slower than a
contiguous one; this benchmark measures what paging costs ours. Fairness rules (docs/BENCHMARKS.md): the same
K/V values stored two ways, same backend on both sides, interleaved repeats.

- contiguous: K/V as [S, Lmax, Hkv, D] plus lengths. On CPU the natural best call is one SDPA over the
  batch with a key-padding mask, the GQA group's query heads acting as query rows (no repeated K/V). On
  CUDA it is the same Triton kernel as the paged side, reading the contiguous store as one block per
  sequence (block_size = Lmax, identity table), so the ratio isolates the cost of scattered blocks.
- paged: kernels.ops.paged_varlen_attention with one query per sequence (cu_seqlens_q = arange(S + 1), the
  engine's decode step) over blocks of `--block-size` tokens under a shuffled block table. The call validates
  and plans the step itself (its torch index included), as an engine step does once for all its layers; on
  CPU in fp32 the torch backend then reads the blocks in place with sparse ops.

`overhead` = paged_s / contiguous_s with both sides at one torch thread (the headline: at two threads the
sides split their work differently, so a busy neighbour core moved the ratio from 1.2 to 2.5);
`overhead_all_threads` beside it at torch's thread count (or `--threads`). On CUDA also: K/V bytes read /
paged_s and its fraction of the device's HBM peak (from engine.memory.catalog; null for an unknown device).

    python -m bench.paged_decode --json
"""

from __future__ import annotations

import os
import re

import torch
import torch.nn.functional as F

from bench.harness import emit, env_info, log, parser, save, time_interleaved
from engine.memory.catalog import GPUS
from kernels.backend import resolve_backend
from kernels.ops import paged_varlen_attention

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
# Device-name pattern -> engine.memory.catalog key, for the HBM peak. Unknown devices report null.
PEAK_KEYS = [
    (r"h200", "h200"),
    (r"h100(?!.*pcie)", "h100-sxm"),
    (r"\bl4\b", "l4"),
    (r"4090", "rtx-4090"),
    (r"3090", "rtx-3090"),
]


def peak_bandwidth(device_name: str) -> float | None:
    """HBM bytes/s of the named CUDA device from the GPU catalog, or None when it is not listed."""
    name = device_name.lower()
    if "a100" in name:  # two memory sizes, two bandwidths
        key = "a100-80gb" if torch.cuda.get_device_properties(0).total_memory > 50e9 else "a100-40gb"
        return GPUS[key].bandwidth_bytes_per_s
    for pattern, key in PEAK_KEYS:
        if re.search(pattern, name):
            return GPUS[key].bandwidth_bytes_per_s
    return None


def make_workload(args, device: str) -> dict:
    """Lengths from a fixed seed; the contiguous store; the same values in a paged cache, shuffled blocks."""
    if args.max_len % args.block_size:
        raise ValueError(f"--max-len {args.max_len} must be a multiple of --block-size {args.block_size}")
    gen = torch.Generator().manual_seed(args.seed)
    dtype = DTYPES[args.dtype]
    lens = torch.randint(args.max_len // 4, args.max_len + 1, (args.seqs,), generator=gen).tolist()
    lens[0] = args.max_len  # pin the longest sequence so Lmax is the configured maximum
    # Values are drawn on the device itself: a GPU-sized store would take seconds to fill on the host.
    dev_gen = torch.Generator(device=device).manual_seed(args.seed)
    shape = (args.seqs, args.max_len, args.kv_heads, args.head_dim)
    k_contig = torch.randn(shape, generator=dev_gen, device=device).to(dtype)  # [S, Lmax, Hkv, D]
    v_contig = torch.randn(shape, generator=dev_gen, device=device).to(dtype)
    q = torch.randn(args.seqs, args.heads, args.head_dim, generator=dev_gen, device=device).to(dtype)

    bs = args.block_size
    blocks_per_seq = args.max_len // bs
    needed = torch.tensor([-(-n // bs) for n in lens])  # [S] blocks each sequence uses
    num_blocks = int(needed.sum())
    seq_of = torch.repeat_interleave(torch.arange(args.seqs), needed)  # [num_blocks] owner of each block
    logical = torch.cat([torch.arange(int(n)) for n in needed])  # [num_blocks] its index in the sequence
    physical = torch.randperm(num_blocks, generator=gen)  # shuffled placement in the pool
    block_tables = torch.zeros(args.seqs, blocks_per_seq, dtype=torch.int32)
    block_tables[seq_of, logical] = physical.to(torch.int32)
    # Whole blocks are copied; slots past a sequence's end hold stale (finite) values, as in a real pool.
    k_cache = torch.empty(num_blocks, bs, args.kv_heads, args.head_dim, dtype=dtype, device=device)
    v_cache = torch.empty_like(k_cache)
    src = (seq_of.to(device), logical.to(device))
    k_cache[physical.to(device)] = k_contig.view(args.seqs, blocks_per_seq, bs, *shape[2:])[src]
    v_cache[physical.to(device)] = v_contig.view(args.seqs, blocks_per_seq, bs, *shape[2:])[src]
    seq_lens = torch.tensor(lens, dtype=torch.int32)
    valid = torch.arange(args.max_len)[None, :] < seq_lens[:, None]  # [S, Lmax] key-padding mask
    return {
        "lens": lens,
        "q": q,
        "k_contig": k_contig,
        "v_contig": v_contig,
        "valid": valid.to(device),
        "k_cache": k_cache,
        "v_cache": v_cache,
        "block_tables": block_tables.to(device),
        "seq_lens": seq_lens.to(device),
    }


def sdpa_contiguous(w: dict) -> torch.Tensor:
    """One SDPA call over the contiguous store: [S, Hkv, G, D] queries vs [S, Hkv, Lmax, D] keys, masked."""
    q, k, v = w["q"], w["k_contig"], w["v_contig"]
    num_seqs, num_heads, head_dim = q.shape
    num_kv_heads = k.shape[2]
    qg = q.view(num_seqs, num_kv_heads, num_heads // num_kv_heads, head_dim)  # [S, Hkv, G, D]
    out = F.scaled_dot_product_attention(qg, k.transpose(1, 2), v.transpose(1, 2), attn_mask=w["valid"][:, None, None])
    return out.reshape(num_seqs, num_heads, head_dim)


def main() -> None:
    """Time contiguous vs paged decode attention and print one JSON line."""
    p = parser("decode attention: contiguous KV store vs paged cache with a shuffled block table")
    p.add_argument("--seqs", type=int, default=None, help="default: 8 on CPU, 64 on CUDA")
    p.add_argument("--max-len", type=int, default=None, help="default: 1024 on CPU, 4096 on CUDA")
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--dtype", choices=sorted(DTYPES), default=None, help="default: float32 on CPU, float16 on CUDA")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="threads of the all-threads run (default: torch's choice)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    cuda = device == "cuda"
    args.seqs = args.seqs or (64 if cuda else 8)
    args.max_len = args.max_len or (4096 if cuda else 1024)
    args.dtype = args.dtype or ("float16" if cuda else "float32")
    backend = resolve_backend("auto", device)
    w = make_workload(args, device)
    log(f"paged_decode: {args.seqs} seqs up to {args.max_len} tokens, device {device}, backend {backend}")

    cu = torch.arange(args.seqs + 1, dtype=torch.int32, device=device)  # one query per sequence: decode

    def paged() -> torch.Tensor:
        return paged_varlen_attention(w["q"], w["k_cache"], w["v_cache"], cu, w["seq_lens"], w["block_tables"], 1)

    identity = torch.arange(args.seqs, dtype=torch.int32, device=device)[:, None]  # [S, 1]: one block each

    def contiguous() -> torch.Tensor:
        if backend == "torch":
            return sdpa_contiguous(w)
        return paged_varlen_attention(w["q"], w["k_contig"], w["v_contig"], cu, w["seq_lens"], identity, 1)

    out_c, out_p = contiguous(), paged()
    err = (out_c.float() - out_p.float()).abs().max().item()
    log(f"max |contiguous - paged| = {err:.2e}")
    fns = {"contiguous": contiguous, "paged": paged}
    if cuda:
        fns["sdpa_contiguous"] = lambda: sdpa_contiguous(w)
    load_before = os.getloadavg()[0]
    all_threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the headline: one thread on both sides
    times = time_interleaved(fns, repeats=args.repeats, warmup=args.warmup)
    torch.set_num_threads(all_threads)
    times_all = time_interleaved(fns, repeats=args.repeats, warmup=args.warmup)
    kv_bytes = 2 * sum(w["lens"]) * args.kv_heads * args.head_dim * w["k_cache"].element_size()
    result = {
        "benchmark": "paged_decode",
        "contiguous_s": times["contiguous"],
        "paged_s": times["paged"],
        "overhead": times["paged"] / times["contiguous"],
        "threads": 1,
        "contiguous_s_all_threads": times_all["contiguous"],
        "paged_s_all_threads": times_all["paged"],
        "overhead_all_threads": times_all["paged"] / times_all["contiguous"],
        "all_threads": all_threads,
        "backend": backend,
        "contiguous_side": "sdpa_key_padding_mask" if backend == "torch" else "same_kernel_identity_table",
        "max_abs_diff": err,
        "shapes": {
            "num_seqs": args.seqs,
            "max_len": args.max_len,
            "seq_lens": w["lens"],
            "num_heads": args.heads,
            "num_kv_heads": args.kv_heads,
            "head_dim": args.head_dim,
            "block_size": args.block_size,
            "num_blocks": int(w["k_cache"].shape[0]),
            "dtype": args.dtype,
        },
        "kv_bytes_read": kv_bytes,
        "seed": args.seed,
        "repeats": args.repeats,
        "env": env_info(),
        # Other processes' load during the run (a shared machine inflates times, mostly of multi-op paths).
        "load_average_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }
    if cuda:
        peak = peak_bandwidth(torch.cuda.get_device_name(0))
        achieved = kv_bytes / times["paged"]
        result["sdpa_contiguous_s"] = times["sdpa_contiguous"]
        result["achieved_bytes_per_s"] = achieved
        result["peak_bytes_per_s"] = peak
        result["fraction_of_peak"] = achieved / peak if peak else None
    log(
        f"1 thread: contiguous {times['contiguous'] * 1e3:.2f} ms, paged {times['paged'] * 1e3:.2f} ms, "
        f"overhead {result['overhead']:.3f}; {all_threads} threads: overhead {result['overhead_all_threads']:.3f}"
    )
    if args.save:
        log(f"saved {save('paged_decode', result)}")
    emit(result)


if __name__ == "__main__":
    main()
