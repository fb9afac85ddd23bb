"""Packed varlen attention vs the padded batch a user would write without varlen support.

Padded side (docs/BENCHMARKS.md fairness rules): the fastest single SDPA call on [B, Hq, Lmax, D] that gives
every real token the right answer. With right padding and causal attention that is `is_causal=True` and no
mask (a real row never reaches a padding key), reported as `"baseline": "sdpa_is_causal"`; without causality
it needs the key-padding mask ([B, 1, 1, Lmax], `"sdpa_key_padding_mask"`). The variant with a materialized
[B, 1, Lmax, Lmax] boolean mask is timed beside it (`speedup_vs_masked`). Packed side:
kernels.ops.varlen_attention (auto backend) on the [total, Hq, D] tensor of the same tokens. Before timing,
the real rows of both padded sides must equal the packed output (torch.testing.assert_close), so every side
does the same work. All sides run interleaved in one process on identical values.
`ideal_speedup` = padded attention FLOPs / packed FLOPs (causal counted as half on both sides);
`speedup_over_ideal` = speedup / ideal_speedup (goal >= 0.7 on CPU).

With `--flash` (CUDA only; bench/gpu_check.sh) it instead times our Triton varlen kernel against SDPA's
flash-attention backend on the same packed workload (bf16, head dim 128 by default): the flash varlen
forward that SDPA dispatches to (`aten._flash_attention_forward` with cu_seqlens), falling back to one
SDPA-flash call per sequence if that op is unavailable. `ratio` = flash_s / ours (goal >= 0.7).

    python -m bench.packing --json
    python -m bench.packing --json --threads 1   # every side at one CPU thread (steadier on a busy machine)
    python -m bench.packing --json --lengths 50,400,30,1000,120,7 --heads 4 --kv-heads 4 --head-dim 32  # page 3
    python -m bench.packing --flash --json
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from bench.harness import assert_same_rows, emit, env_info, log, parser, save, time_interleaved
from kernels.backend import resolve_backend
from kernels.ops import varlen_attention

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
BASELINES = {True: "sdpa_is_causal", False: "sdpa_key_padding_mask"}  # the fair padded side, by causality


def attention_flops(lens: list[int], heads: int, head_dim: int, causal: bool) -> float:
    """FLOPs of attention over sequences of these lengths: QK^T and PV, 2 * 2 * n^2 * D per head, halved if causal."""
    return 4 * heads * head_dim * sum(n * n for n in lens) * (0.5 if causal else 1.0)


def ideal_speedup(lens: list[int], causal: bool) -> float:
    """Padded attention FLOPs (every sequence at the longest length) / packed FLOPs, same causal rule on both."""
    padded = attention_flops([max(lens)] * len(lens), 1, 1, causal)
    return padded / attention_flops(lens, 1, 1, causal)


def make_workload(args, device: str) -> dict:
    """Lengths from a fixed seed, the packed tensors, and the same values scattered into a padded batch."""
    gen = torch.Generator().manual_seed(args.seed)
    lens = torch.randint(args.min_len, args.max_len + 1, (args.batch,), generator=gen).tolist()
    lens[0] = args.max_len  # pin the longest request so Lmax is the configured maximum
    if getattr(args, "lengths", None):  # fixed lengths (page 3's default batch, say) instead of random ones
        lens = list(args.lengths)
    dtype = DTYPES[args.dtype]
    total, l_max = sum(lens), max(lens)
    q = torch.randn(total, args.heads, args.head_dim, generator=gen).to(device=device, dtype=dtype)
    k = torch.randn(total, args.kv_heads, args.head_dim, generator=gen).to(device=device, dtype=dtype)
    v = torch.randn(total, args.kv_heads, args.head_dim, generator=gen).to(device=device, dtype=dtype)
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device=device)

    def pad(x: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(args.batch, l_max, x.shape[1], x.shape[2], dtype=dtype, device=device)
        for i, n in enumerate(lens):
            out[i, :n] = x[cu[i] : cu[i] + n]
        return out.transpose(1, 2).contiguous()  # [B, H, Lmax, D]

    valid = torch.arange(l_max, device=device)[None, :] < torch.tensor(lens, device=device)[:, None]  # [B, Lmax]
    key_mask = valid[:, None, None, :]  # [B, 1, 1, Lmax]: key padding only
    full_mask = key_mask.expand(args.batch, 1, l_max, l_max)
    if args.causal:
        full_mask = full_mask & torch.ones(l_max, l_max, dtype=torch.bool, device=device).tril()
    full_mask = full_mask.contiguous()  # [B, 1, Lmax, Lmax], materialized
    return {
        "lens": lens,
        "q": q,
        "k": k,
        "v": v,
        "cu": cu,
        "qp": pad(q),
        "kp": pad(k),
        "vp": pad(v),
        "key_mask": key_mask,
        "full_mask": full_mask,
    }


def padded_sides(w: dict, causal: bool) -> dict:
    """The two padded SDPA calls: the fair baseline ("padded") and the materialized-mask variant ("masked")."""
    qp, kp, vp = w["qp"], w["kp"], w["vp"]
    gqa = qp.shape[1] != kp.shape[1]

    def padded() -> torch.Tensor:  # right padding: a causal real row never reaches a padding key
        if causal:
            return F.scaled_dot_product_attention(qp, kp, vp, is_causal=True, enable_gqa=gqa)
        return F.scaled_dot_product_attention(qp, kp, vp, attn_mask=w["key_mask"], enable_gqa=gqa)

    def masked() -> torch.Tensor:
        return F.scaled_dot_product_attention(qp, kp, vp, attn_mask=w["full_mask"], enable_gqa=gqa)

    return {"padded": padded, "masked": masked}


def packed_side(w: dict, causal: bool):
    """varlen_attention over the packed tensors (auto backend)."""
    l_max = max(w["lens"])
    return lambda: varlen_attention(w["q"], w["k"], w["v"], w["cu"], w["cu"], l_max, l_max, causal=causal)


def real_rows(out_padded: torch.Tensor, lens: list[int]) -> torch.Tensor:
    """The real tokens of a padded [B, H, Lmax, D] output, packed as [total, H, D] in request order."""
    return torch.cat([out_padded[i, :, :n].transpose(0, 1) for i, n in enumerate(lens)])


def check_same_work(w: dict, causal: bool) -> dict[str, float]:
    """Run every side once; each padded side's real rows must equal the packed output. Returns max |diff| per side."""
    expected = packed_side(w, causal)()
    diffs = {}
    for name, fn in padded_sides(w, causal).items():
        diffs[name] = assert_same_rows(real_rows(fn(), w["lens"]), expected, what=f"padded side {name!r} vs packed")
    return diffs


def summarize(times: dict[str, float], lens: list[int], causal: bool) -> dict:
    """The headline numbers from interleaved times: speedup vs the fair baseline and vs the masked variant."""
    ideal = ideal_speedup(lens, causal)
    speedup = times["padded"] / times["packed"]
    return {
        "baseline": BASELINES[causal],
        "padded_s": times["padded"],
        "padded_masked_s": times["masked"],
        "packed_s": times["packed"],
        "speedup": speedup,
        "speedup_vs_masked": times["masked"] / times["packed"],
        "ideal_speedup": ideal,
        "speedup_over_ideal": speedup / ideal,
        "goal_speedup_over_ideal": 0.7,
        "real_token_fraction": sum(lens) / (len(lens) * max(lens)),
    }


def flash_comparison(args, device: str) -> dict:
    """Our Triton varlen kernel vs SDPA's flash backend on the same packed tensors (CUDA only)."""
    record = {"benchmark": "varlen_vs_flash", **env_info()}
    if device != "cuda":
        log("--flash needs a CUDA device; nothing timed")
        return record | {"skipped": "needs a CUDA device"}
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from kernels.varlen_attention import varlen_attention_triton

    w = make_workload(args, device)
    lens, cu = w["lens"], w["cu"]
    l_max, total = max(lens), sum(lens)
    q, k, v = w["q"], w["k"], w["v"]
    del w["qp"], w["kp"], w["vp"], w["key_mask"], w["full_mask"]  # the padded copies are not needed here
    group = args.heads // args.kv_heads
    k_rep, v_rep = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)  # [total, Hq, D], untimed

    def flash_varlen(kk: torch.Tensor, vv: torch.Tensor):
        return lambda: torch.ops.aten._flash_attention_forward(
            q, kk, vv, cu, cu, l_max, l_max, 0.0, args.causal, False
        )[0]

    def flash_per_sequence() -> torch.Tensor:
        out = torch.empty_like(q)
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            for i, n in enumerate(lens):
                s = slice(int(cu[i]), int(cu[i]) + n)
                o = F.scaled_dot_product_attention(
                    q[s].transpose(0, 1)[None],
                    k_rep[s].transpose(0, 1)[None],
                    v_rep[s].transpose(0, 1)[None],
                    is_causal=args.causal,
                )  # [1, Hq, n, D]
                out[s] = o[0].transpose(0, 1)
        return out

    def ours_api() -> torch.Tensor:
        return varlen_attention(q, k, v, cu, cu, l_max, l_max, causal=args.causal, backend="triton")

    def ours_kernel() -> torch.Tensor:
        return varlen_attention_triton(q, k, v, cu, cu, l_max, l_max, causal=args.causal)

    expected = ours_kernel()
    candidates = [
        ("flash_varlen_gqa", flash_varlen(k, v)),
        ("flash_varlen_repeated_kv", flash_varlen(k_rep, v_rep)),
        ("sdpa_flash_per_sequence", flash_per_sequence),
    ]
    flash_name, flash_fn, err = None, None, None
    for name, fn in candidates:
        try:
            err = (fn().float() - expected.float()).abs().max().item()
        except (RuntimeError, TypeError, AttributeError) as exc:
            log(f"{name} unavailable: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
            continue
        if not err < 0.1:  # a backend that disagrees (e.g. ignores GQA) is not a fair opponent
            log(f"{name} disagrees with the reference kernel (max diff {err:.3e}); skipped")
            continue
        flash_name, flash_fn = name, fn
        break
    if flash_fn is None:
        return record | {"skipped": "no SDPA flash backend available"}
    log(f"flash side: {flash_name}; max |ours - flash| = {err:.3e}")
    times = time_interleaved(
        {"flash": flash_fn, "ours_kernel": ours_kernel, "ours_api": ours_api}, repeats=args.repeats, warmup=args.warmup
    )
    flops = attention_flops(lens, args.heads, args.head_dim, args.causal)
    return record | {
        "flash_s": times["flash"],
        "varlen_kernel_s": times["ours_kernel"],
        "varlen_api_s": times["ours_api"],
        "ratio": times["flash"] / times["ours_kernel"],
        "ratio_api": times["flash"] / times["ours_api"],
        "flash_side": flash_name,
        "kernel_tflops": flops / times["ours_kernel"] / 1e12,
        "flash_tflops": flops / times["flash"] / 1e12,
        "max_abs_diff": err,
        "seq_lens": lens,
        "total_tokens": total,
        "max_seqlen": l_max,
        "num_heads": args.heads,
        "num_kv_heads": args.kv_heads,
        "head_dim": args.head_dim,
        "dtype": args.dtype,
        "causal": args.causal,
        "seed": args.seed,
        "repeats": args.repeats,
        "warmup": args.warmup,
    }


def _lengths(text: str) -> list[int]:
    """--lengths: positive whole numbers separated by commas."""
    try:
        lens = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        lens = []
    if not lens or min(lens) < 1:
        raise argparse.ArgumentTypeError(f"--lengths {text!r}: give positive whole numbers, e.g. 50,400,30,1000")
    return lens


def main() -> None:
    """Time the padded SDPA calls vs packed varlen_attention and print one JSON line."""
    p = parser("packed varlen attention vs padded SDPA")
    p.add_argument("--flash", action="store_true", help="CUDA: Triton varlen kernel vs SDPA flash, same packed data")
    p.add_argument("--batch", type=int, default=None, help="default: 8 (16 with --flash)")
    p.add_argument("--min-len", type=int, default=64)
    p.add_argument("--max-len", type=int, default=None, help="default: 2048 (4096 with --flash)")
    p.add_argument("--heads", type=int, default=None, help="default: 8 (32 with --flash)")
    p.add_argument("--kv-heads", type=int, default=None, help="default: 2 (8 with --flash)")
    p.add_argument("--head-dim", type=int, default=None, help="default: 64 (128 with --flash)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default=None, help="default: float32 on CPU, bfloat16 on CUDA")
    p.add_argument("--no-causal", dest="causal", action="store_false")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--lengths",
        type=_lengths,
        default=None,
        help="comma-separated request lengths instead of random ones, e.g. 50,400,30,1000,120,7 (page 3)",
    )
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads for every side (default: torch's)")
    args = p.parse_args()
    if args.threads is not None:
        if args.threads < 1:
            p.error(f"--threads must be >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    defaults = (16, 4096, 32, 8, 128) if args.flash else (8, 2048, 8, 2, 64)
    for name, value in zip(("batch", "max_len", "heads", "kv_heads", "head_dim"), defaults, strict=True):
        if getattr(args, name) is None:
            setattr(args, name, value)
    args.dtype = args.dtype or ("bfloat16" if device == "cuda" else "float32")
    if args.lengths:  # the batch is exactly these requests
        args.batch, args.min_len, args.max_len = len(args.lengths), min(args.lengths), max(args.lengths)
    if args.flash:
        emit(flash_comparison(args, device))
        return
    w = make_workload(args, device)
    lens = w["lens"]
    log(f"packing: lengths {lens}, device {device}, dtype {args.dtype}, baseline {BASELINES[args.causal]}")
    diffs = check_same_work(w, args.causal)  # same answer on every side (real rows) before anything is timed
    log(f"max |padded - packed| on real tokens: {diffs}")
    sides = {**padded_sides(w, args.causal), "packed": packed_side(w, args.causal)}
    times = time_interleaved(sides, repeats=args.repeats, warmup=args.warmup)
    result = {
        "benchmark": "packing",
        **summarize(times, lens, args.causal),
        "max_abs_diff": max(diffs.values()),
        "max_abs_diff_per_side": diffs,
        "seq_lens": lens,
        "batch": args.batch,
        "max_seqlen": max(lens),
        "total_tokens": sum(lens),
        "num_heads": args.heads,
        "num_kv_heads": args.kv_heads,
        "head_dim": args.head_dim,
        "dtype": args.dtype,
        "causal": args.causal,
        "packed_backend": resolve_backend("auto", device),
        "seed": args.seed,
        "repeats": args.repeats,
        "warmup": args.warmup,
        **env_info(),
    }
    log(
        f"speedup {result['speedup']:.2f}x vs {result['baseline']} ({result['speedup_over_ideal']:.2f} of the ideal "
        f"{result['ideal_speedup']:.2f}x), {result['speedup_vs_masked']:.2f}x vs the materialized mask"
    )
    if args.save:
        log(f"saved {save('packing', result)}")
    emit(result)


if __name__ == "__main__":
    main()
