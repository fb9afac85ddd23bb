"""Page 5's kernel side: what the project's paged attention costs per block size on this machine.

`kernel_costs` times `kernels.ops.paged_varlen_attention` in decode (one query per sequence, the call every
engine step makes: the torch twin on CPU, Triton on a GPU) at each block size over a shuffled pool, and
`fitted_costs` turns the timings into a smooth cost model, t(block size) = a + b / block size: a per-token
cost a (reading K/V) plus a per-block cost b (one block-table lookup and one gather per block — the
table-access overhead Kwon et al., SOSP 2023, §7.1 and §7.2 describe). One timing per block size on a shared
machine wobbles by ±10%; the least-squares fit over all nine sizes does not let one noisy point move the
sweep's peak. No Streamlit.
"""

from __future__ import annotations

from enum import StrEnum

import torch

from engine.core.sequence import check_block_size
from engine.memory.catalog import MODELS
from kernels import ops
from lessons.measure import default_device, time_interleaved

BLOCK_SIZES: tuple[int, ...] = tuple(1 << i for i in range(9))  # 1, 2, 4, ..., 256 (engine.core.sequence's range)
# vLLM v0.34.0's CacheConfig takes any positive block size (vllm/config/cache.py: `block_size: int`, gt=0); each
# attention backend says which kernel block sizes it runs (get_supported_kernel_block_sizes in
# vllm/v1/attention/backends/) and takes a --block-size that is a multiple of one of them
# (AttentionBackend.supports_block_size, vllm/v1/attention/backend.py: a larger block is split into kernel blocks).
# For a model with ordinary K/V heads every GPU backend asks for a multiple of 16: FlashAttention (the default on
# NVIDIA GPUs), Triton, FlexAttention, ROCm's ROCM_ATTN and AITER unified attention take any multiple of 16;
# FlashInfer's kernels run 16, 32 or 64 (up to 1,024 on Blackwell) and ROCm's AITER FlashAttention 16 or 32, so a
# larger multiple of 16 is split into those. Releases before 2026 typed block_size Literal[1, 8, 16, 32, 64, 128].
GPU_BLOCK_MULTIPLE = 16
# The timed decode batch: the demo model's attention shape (the model this engine runs here), fp32 on CPU.
KERNEL_SEQS, KERNEL_CONTEXT, KERNEL_REPEATS = 8, 2048, 25


class VllmAccepts(StrEnum):
    """Whether vLLM v0.34.0 runs a --block-size on a GPU: its config takes any, its attention backends only some.

    A str enum: its value is the page's word for it ("yes", "not on a GPU backend")."""

    YES = "yes"
    NOT_ON_A_GPU_BACKEND = "not on a GPU backend"  # not a multiple of 16: FlashAttention, FlashInfer, Triton, ROCm


def vllm_accepts(block_size: int) -> VllmAccepts:
    """Whether vLLM v0.34.0 runs this --block-size on a GPU: YES, or NOT_ON_A_GPU_BACKEND (not a multiple of 16)."""
    return VllmAccepts.YES if block_size % GPU_BLOCK_MULTIPLE == 0 else VllmAccepts.NOT_ON_A_GPU_BACKEND


def kernel_inputs(
    block_size: int, num_seqs: int = KERNEL_SEQS, context: int = KERNEL_CONTEXT, seed: int = 0, device: str = "cpu"
) -> tuple[torch.Tensor, ...]:
    """(q, k_cache, v_cache, block_tables, seq_lens) of one decode step in blocks of block_size, demo shape.

    Every sequence holds `context` tokens in ceil(context / block_size) blocks; the physical blocks are a
    seeded permutation of the pool, so consecutive logical blocks sit anywhere (as after hours of traffic).
    """
    spec = MODELS["demo"]
    per_seq = -(-context // check_block_size(block_size))
    gen = torch.Generator().manual_seed(seed)
    shape = (num_seqs * per_seq, block_size, spec.num_kv_heads, spec.head_dim)
    k, v = torch.randn(shape, generator=gen), torch.randn(shape, generator=gen)
    tables = torch.randperm(num_seqs * per_seq, generator=gen).to(torch.int32).view(num_seqs, per_seq)
    q = torch.randn(num_seqs, spec.num_heads, spec.head_dim, generator=gen)
    lens = torch.full((num_seqs,), context, dtype=torch.int32)
    return tuple(t.to(device) for t in (q, k, v, tables, lens))


def kernel_costs(
    block_sizes: tuple[int, ...] = BLOCK_SIZES,
    num_seqs: int = KERNEL_SEQS,
    context: int = KERNEL_CONTEXT,
    repeats: int = KERNEL_REPEATS,
) -> list[dict[str, float | str]]:
    """Time the engine's decode attention (ops.paged_varlen_attention, one query per sequence) per block size.

    Each call also validates and plans the step (kernels.ops.plan_attention: its gather index from the block
    table included), as a decode step does once for its layers.
    On a CPU the kernel runs on one thread and is charged its CPU time: a machine shared with other programs
    cannot give two cores' wall time steadily enough to tell block sizes apart. On a GPU: wall time, synced.
    Rows: block size, ms per call, ns per cached token, cost vs the fastest block size, vLLM's verdict.
    """
    device = default_device()
    args = {bs: kernel_inputs(bs, num_seqs, context, device=device) for bs in block_sizes}
    cu = torch.arange(num_seqs + 1, dtype=torch.int32, device=device)  # one query per sequence: decode
    fns = {
        bs: (lambda q, k, v, t, lens: lambda: ops.paged_varlen_attention(q, k, v, cu, lens, t, 1))(*a)
        for bs, a in args.items()
    }
    threads = torch.get_num_threads()
    try:
        if device == "cpu":
            torch.set_num_threads(1)
        seconds = time_interleaved(fns, repeats, 1, device, "min", "cpu" if device == "cpu" else "wall")
    finally:
        torch.set_num_threads(threads)
    best = min(seconds.values())
    return [
        {
            "block size": bs,
            "kernel ms": 1e3 * t,
            "ns per cached token": 1e9 * t / (num_seqs * context),
            "kernel cost vs best": t / best,
            "vLLM accepts": vllm_accepts(bs).value,
        }
        for bs, t in seconds.items()
    ]


def fitted_costs(rows: list[dict[str, float | str]]) -> dict[int, float]:
    """Block size -> the fitted kernel cost a + b / block size relative to its cheapest block size.

    Least squares over the rows' "ns per cached token" against 1 / block size. A negative per-block cost b
    (none measurable) is clipped to 0, giving a flat line (every factor 1.0): the sweep then charges nothing.
    """
    if len(rows) < 2:
        raise ValueError(f"fitting a + b / block size needs timings at >= 2 block sizes, got {len(rows)}")
    xs = [1.0 / int(r["block size"]) for r in rows]
    ys = [float(r["ns per cached token"]) for r in rows]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = max(0.0, sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx) if sxx else 0.0
    a = my - b * mx
    if a <= 0:  # a per-token cost must be positive; all the time is per block: cost proportional to 1 / bs
        a, b = 1e-9, max(ys) * min(int(r["block size"]) for r in rows)
    model = {int(r["block size"]): a + b / int(r["block size"]) for r in rows}
    best = min(model.values())
    return {bs: t / best for bs, t in model.items()}
