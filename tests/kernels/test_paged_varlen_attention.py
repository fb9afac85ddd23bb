"""kernels.ops.paged_varlen_attention (several queries per sequence over a paged cache) against two references.

Every case scatters each sequence's K/V over shuffled blocks of a NaN-filled cache (the tail of each last
block, spare blocks and, with a window, the blocks freed behind it are NaN or absent), so a read of a slot
or table entry the contract says is never read poisons the output. Each result is compared with the slow
reference (kernels.reference.paged_varlen_attention_ref) and with plain SDPA on the contiguous K/V under
transformers' own sliding-window-causal mask function, so a bug shared by the kernel and the reference
still fails. What each test catches:
- a causal offset that is top-left instead of bottom-right: the prefix-cached chunks (len_q < seq_len);
- a window off by one (p - W instead of p - W + 1): every windowed case (the plain-math side uses
  transformers' mask, kv_idx > q_idx - W); windows smaller than a block, W = 1, and W past the sequence;
- a wrong GQA head mapping (h % Hkv instead of h // (Hq // Hkv)): the (8, 2) and (6, 1) head layouts;
- reading freed / padding table entries or NaN slots: NaN in the output or an index error;
- fp8 scales swapped, ignored or mapped to the wrong head: distinct per-head k/v scales.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers.masking_utils import causal_mask_function, sliding_window_causal_mask_function

from kernels.ops import paged_varlen_attention
from kernels.reference import paged_varlen_attention_ref
from tests.conftest import DEVICE, TRITON_OK, requires_cuda

BACKENDS = ["torch", pytest.param("triton", marks=pytest.mark.skipif(not TRITON_OK, reason="triton not installed"))]
TOLERANCES = {torch.float32: (2e-5, 2e-5), torch.float16: (2e-3, 2e-3), torch.bfloat16: (1.6e-2, 1.6e-2)}
PAD_ENTRY = 1 << 20  # block-table padding past a sequence's last block: any read goes far outside the cache
# (seq_len, len_q): decode, a one-token sequence, a full prefill, prefix-cached chunks, a sequence with no
# query this step, and two sequences of one shape (the torch twin batches those into one SDPA).
MIX = [(7, 1), (1, 1), (12, 12), (20, 5), (9, 0), (33, 1), (10, 4), (10, 4), (6, 2)]


def make_case(mix, num_heads, num_kv_heads, head_dim, block_size, window=None, dtype=torch.float32, seed=0):
    """q and per-sequence K/V, the same K/V scattered into a NaN-filled paged cache, and the step metadata.

    Blocks wholly before the first query's window start are freed: their table entries are -1 (even
    sequences) or a NaN-filled spare block (odd ones). Returns a dict of the op's arguments plus ks / vs,
    the contiguous [seq_len, Hkv, D] K/V of each sequence.
    """
    gen = torch.Generator().manual_seed(seed)
    blocks_per_seq = [-(-n // block_size) for n, _ in mix]
    num_blocks = sum(blocks_per_seq) + 2
    physical = torch.randperm(num_blocks, generator=gen).tolist()
    spare = physical.pop()  # never written: NaN throughout
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = torch.full(shape, float("nan"), dtype=dtype)
    v_cache = torch.full(shape, float("nan"), dtype=dtype)
    tables = torch.full((len(mix), max(blocks_per_seq) + 1), PAD_ENTRY, dtype=torch.int32)
    ks, vs = [], []
    for i, (n, len_q) in enumerate(mix):
        k = torch.randn(n, num_kv_heads, head_dim, generator=gen).to(dtype)
        v = torch.randn(n, num_kv_heads, head_dim, generator=gen).to(dtype)
        ks.append(k)
        vs.append(v)
        first = 0 if window is None else max(0, n - len_q - window + 1) // block_size
        for b in range(blocks_per_seq[i]):
            if b < first:  # freed behind the window
                tables[i, b] = -1 if i % 2 == 0 else spare
                continue
            block = physical.pop()
            tables[i, b] = block
            rows = slice(b * block_size, min(n, (b + 1) * block_size))
            k_cache[block, : rows.stop - rows.start] = k[rows]
            v_cache[block, : rows.stop - rows.start] = v[rows]
    cu = torch.tensor([0] + torch.tensor([q for _, q in mix]).cumsum(0).tolist(), dtype=torch.int32)
    q = torch.randn(int(cu[-1]), num_heads, head_dim, generator=gen).to(dtype)
    seq_lens = torch.tensor([n for n, _ in mix], dtype=torch.int32)
    args = {
        "q": q,
        "k_cache": k_cache,
        "v_cache": v_cache,
        "cu_seqlens_q": cu,
        "seq_lens": seq_lens,
        "block_tables": tables,
        "max_seqlen_q": max(q for _, q in mix),
        "sliding_window": window,
    }
    args = {name: x.to(DEVICE) if isinstance(x, torch.Tensor) else x for name, x in args.items()}
    return args, ks, vs


def plain_math(args, ks, vs, causal=True, k_scale=None, v_scale=None):
    """SDPA per sequence on contiguous K/V (heads repeated) under transformers' mask function, in fp32."""
    q, cu, lens = args["q"].float().cpu(), args["cu_seqlens_q"].tolist(), args["seq_lens"].tolist()
    window = args["sliding_window"]
    out = torch.zeros(q.shape)
    group = q.shape[1] // ks[0].shape[1]
    for i, n in enumerate(lens):
        q0, q1 = cu[i], cu[i + 1]
        if q1 == q0:
            continue
        k, v = ks[i].float().cpu(), vs[i].float().cpu()
        if k_scale is not None:
            k, v = k * k_scale.cpu().reshape(-1, 1), v * v_scale.cpu().reshape(-1, 1)
        q_pos = torch.arange(n - (q1 - q0), n)[:, None]
        kv_pos = torch.arange(n)[None, :]
        fn = causal_mask_function if window is None else sliding_window_causal_mask_function(window)
        visible = fn(0, 0, q_pos, kv_pos) if causal else torch.ones(q1 - q0, n, dtype=torch.bool)
        o = F.scaled_dot_product_attention(
            q[q0:q1].transpose(0, 1),
            k.repeat_interleave(group, 1).transpose(0, 1),
            v.repeat_interleave(group, 1).transpose(0, 1),
            attn_mask=visible,
        )
        out[q0:q1] = o.transpose(0, 1)
    return out


def check_both(args, ks, vs, backend, causal=True, k_scale=None, v_scale=None, tol=None):
    """The op's output is NaN-free and matches the reference and the plain math."""
    out = paged_varlen_attention(**args, causal=causal, backend=backend, k_scale=k_scale, v_scale=v_scale)
    assert out.shape == args["q"].shape and out.dtype == args["q"].dtype
    assert not out.isnan().any()
    ref_args = {k: v for k, v in args.items() if k != "max_seqlen_q"}
    ref = paged_varlen_attention_ref(**ref_args, causal=causal, k_scale=k_scale, v_scale=v_scale)
    atol, rtol = tol or TOLERANCES[args["q"].dtype]
    torch.testing.assert_close(out, ref, atol=atol, rtol=rtol)
    math = plain_math(args, ks, vs, causal, k_scale, v_scale)
    torch.testing.assert_close(out.float().cpu(), math, atol=atol, rtol=rtol)
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("heads", [(4, 4), (8, 2), (6, 1)])
@pytest.mark.parametrize("block_size", [1, 4, 16])
def test_mixed_step_matches_references(backend, heads, block_size):
    args, ks, vs = make_case(MIX, *heads, 16, block_size)
    check_both(args, ks, vs, backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("window", [1, 3, 8, 100])
@pytest.mark.parametrize("block_size", [1, 4, 16])
def test_sliding_window_matches_transformers_mask(backend, window, block_size):
    args, ks, vs = make_case(MIX, 8, 2, 16, block_size, window=window)
    check_both(args, ks, vs, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_window_decode_batch_past_the_window(backend):
    """Many decode rows far past a window smaller than a block: only their last W keys count."""
    mix = [(40, 1), (41, 1), (57, 1), (3, 1), (64, 1)]
    args, ks, vs = make_case(mix, 4, 2, 16, 16, window=5)
    out = check_both(args, ks, vs, backend)
    # Without the window the answer is different: the window is really applied.
    full = paged_varlen_attention_ref(**{k: v for k, v in args.items() if k not in ("max_seqlen_q", "sliding_window")})
    assert not torch.allclose(out[:3], full[:3], atol=1e-3)


@pytest.mark.parametrize("backend", BACKENDS)
def test_not_causal_sees_every_key(backend):
    args, ks, vs = make_case(MIX, 8, 2, 16, 4)
    check_both(args, ks, vs, backend, causal=False)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("per_head", [False, True])
@pytest.mark.parametrize("window", [None, 3])
def test_fp8_cache_matches_dequantized_reference(backend, per_head, window):
    """Quantize the cache to e4m3 with a scale; the op must attend to cache.float() * scale."""
    args, ks, vs = make_case(MIX, 8, 2, 16, 4, window=window)
    if per_head:  # distinct per-head and k / v scales: a swapped or mis-mapped scale changes the result
        k_scale, v_scale = torch.tensor([0.02, 0.04]), torch.tensor([0.05, 0.015])
    else:
        k_scale, v_scale = torch.tensor(0.02), torch.tensor(0.03)
    k_scale, v_scale = k_scale.to(DEVICE), v_scale.to(DEVICE)
    k8 = (args["k_cache"] / k_scale.reshape(-1, 1)).to(torch.float8_e4m3fn)  # NaN slots stay NaN
    v8 = (args["v_cache"] / v_scale.reshape(-1, 1)).to(torch.float8_e4m3fn)
    deq_k = [(k.to(DEVICE) / k_scale.reshape(-1, 1)).to(torch.float8_e4m3fn).float().cpu() for k in ks]
    deq_v = [(v.to(DEVICE) / v_scale.reshape(-1, 1)).to(torch.float8_e4m3fn).float().cpu() for v in vs]
    args = args | {"k_cache": k8, "v_cache": v8}
    out = check_both(args, deq_k, deq_v, backend, k_scale=k_scale, v_scale=v_scale, tol=(1e-4, 1e-4))
    # And fp8 is near the full-precision answer (e4m3 has 3 mantissa bits: a few % per value); an ignored or
    # swapped scale would be off by far more.
    assert (out.cpu() - plain_math(args, ks, vs)).abs().mean() < 0.03


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision(backend, dtype):
    """Half-precision q and cache (the interpreter upcasts before tl.dot; compiled GPU code does not)."""
    args, ks, vs = make_case(MIX, 8, 2, 16, 4, window=6, dtype=dtype)
    check_both(args, ks, vs, backend)


@settings(max_examples=30, deadline=None)
@given(
    shape=st.lists(st.tuples(st.integers(1, 40), st.integers(0, 40)), min_size=1, max_size=5),
    heads=st.sampled_from([(2, 2), (4, 2), (3, 1)]),
    block_size=st.sampled_from([1, 2, 4, 16]),
    window=st.one_of(st.none(), st.integers(1, 45)),
    seed=st.integers(0, 1000),
)
def test_random_steps_torch(shape, heads, block_size, window, seed):
    mix = [(n, min(q, n)) for n, q in shape]
    args, ks, vs = make_case(mix, *heads, 8, block_size, window=window, seed=seed)
    check_both(args, ks, vs, "torch")


@settings(max_examples=6, deadline=None)
@given(
    shape=st.lists(st.tuples(st.integers(1, 24), st.integers(0, 24)), min_size=1, max_size=3),
    block_size=st.sampled_from([1, 4, 16]),
    window=st.one_of(st.none(), st.integers(1, 30)),
    seed=st.integers(0, 1000),
)
@pytest.mark.skipif(not TRITON_OK, reason="triton not installed")
def test_random_steps_triton(shape, block_size, window, seed):
    mix = [(n, min(q, n)) for n, q in shape]
    args, ks, vs = make_case(mix, 4, 2, 16, block_size, window=window, seed=seed)
    check_both(args, ks, vs, "triton")


@pytest.mark.parametrize("backend", BACKENDS)
def test_strided_q_and_cache(backend):
    """q sliced out of a fused projection and caches that are views of a wider pool (unit stride kept)."""
    args, ks, vs = make_case(MIX, 8, 2, 16, 4, window=5)
    wide_q = torch.cat([args["q"], torch.full_like(args["q"], float("nan"))], dim=1)  # [T, 2 * Hq, D]
    wide_k = torch.cat([args["k_cache"], torch.full_like(args["k_cache"], float("nan"))], dim=2)
    wide_v = torch.cat([args["v_cache"], torch.full_like(args["v_cache"], float("nan"))], dim=2)
    heads, kv_heads = args["q"].shape[1], args["k_cache"].shape[2]
    strided = args | {"q": wide_q[:, :heads], "k_cache": wide_k[:, :, :kv_heads], "v_cache": wide_v[:, :, :kv_heads]}
    assert not strided["q"].is_contiguous() and not strided["k_cache"].is_contiguous()
    torch.testing.assert_close(
        paged_varlen_attention(**strided, backend=backend), paged_varlen_attention(**args, backend=backend)
    )


@requires_cuda
@pytest.mark.parametrize("fp8", [False, True])
@pytest.mark.parametrize("window", [None, 24])
def test_compiled_bf16_head_dim_128(fp8, window):
    """The production configuration, compiled (tensor-core bf16 dots, 128 x 64 tiles, fp8 conversions), on
    longer contexts than the interpreter tests reach: several key tiles, unmasked middle tiles, GQA 4."""
    mix = [(300, 1), (517, 64), (130, 130), (1000, 1), (77, 5), (640, 0), (200, 33)]
    args, ks, vs = make_case(mix, 16, 4, 128, 16, window=window, dtype=torch.bfloat16)
    scales = {}
    if fp8:
        scales = {"k_scale": torch.tensor(0.02, device=DEVICE), "v_scale": torch.tensor([0.02, 0.03, 0.04, 0.05])}
        scales["v_scale"] = scales["v_scale"].to(DEVICE)
        args |= {"k_cache": (args["k_cache"].float() / 0.02).to(torch.float8_e4m3fn)}
        args |= {"v_cache": (args["v_cache"].float() / scales["v_scale"].reshape(-1, 1)).to(torch.float8_e4m3fn)}
    out = paged_varlen_attention(**args, **scales, backend="triton")
    ref = paged_varlen_attention(**args, **scales, backend="torch")  # fp32 math inside for fp8, bf16 SDPA otherwise
    assert not out.isnan().any()
    torch.testing.assert_close(out.float(), ref.float(), atol=3e-2, rtol=3e-2)


# ------------------------------------------------------------------------------------------- errors
def error_args(**over):
    args, _, _ = make_case([(5, 2), (6, 1)], 4, 2, 8, 4, window=None)
    args.pop("sliding_window")
    return args | over


CU = torch.tensor([0, 2, 3], dtype=torch.int32)
ERRORS = [
    ({"q": [[1.0]]}, "q must be a torch.Tensor"),
    ({"q": torch.randn(3, 4, 8, dtype=torch.float64)}, "q has dtype torch.float64"),
    ({"k_cache": torch.zeros(6, 4, 2, 8, dtype=torch.float16)}, "k_cache, v_cache have dtypes"),
    ({"v_cache": torch.zeros(3, 4, 2, 8)}, "k_cache has shape .* but v_cache"),
    ({"q": torch.randn(3, 4, 4)}, "q has head_dim 4 but k_cache has 8"),
    ({"q": torch.randn(3, 3, 8)}, "q has 3 heads but k_cache has 2"),
    ({"causal": 1}, "causal=1 must be True or False"),
    ({"scale": float("inf")}, "scale=inf must be a finite"),
    ({"sliding_window": 0}, "sliding_window=0 must be a positive int"),
    ({"sliding_window": True}, "sliding_window=True must be a positive int"),
    ({"sliding_window": 4, "causal": False}, "sliding_window=4 needs causal=True"),
    ({"cu_seqlens_q": CU.long()}, r"cu_seqlens_q has dtype torch.int64; pass cu_seqlens_q.to\(torch.int32\)"),
    ({"cu_seqlens_q": torch.tensor([0, 2, 4], dtype=torch.int32)}, r"cu_seqlens_q\[-1\] is 4 but the packed"),
    ({"cu_seqlens_q": torch.tensor([0, 3], dtype=torch.int32)}, "seq_lens has 2 rows but there are 1 sequences"),
    ({"seq_lens": torch.tensor([5, 6])}, r"seq_lens has dtype torch.int64; pass seq_lens.to\(torch.int32\)"),
    ({"seq_lens": torch.tensor([1, 6], dtype=torch.int32)}, r"sequence 0 has 2 queries but seq_lens\[0\] = 1"),
    ({"seq_lens": torch.tensor([5, -1], dtype=torch.int32)}, r"seq_lens\[1\] = -1 is negative"),
    ({"seq_lens": torch.tensor([5, 99], dtype=torch.int32)}, r"seq_lens\[1\] = 99 but a block table row holds"),
    ({"block_tables": torch.zeros(2, 3)}, "block_tables has dtype torch.float32"),
    ({"block_tables": torch.zeros(1, 3, dtype=torch.int32)}, "block_tables has 1 rows"),
    ({"max_seqlen_q": 1}, "max_seqlen_q=1 but the longest sequence has 2 tokens"),
    ({"backend": "cuda"}, "backend='cuda' is not supported"),
    ({"k_scale": torch.tensor(1.0)}, "k_scale was given but the cache is torch.float32"),
]


@pytest.mark.parametrize(("over", "match"), ERRORS)
def test_errors_name_the_value_and_fix(over, match):
    with pytest.raises(ValueError, match=match):
        paged_varlen_attention(**error_args(**over))


def test_block_table_entry_that_is_read_must_name_a_block():
    args = error_args()
    args["block_tables"][1, 1] = -1  # sequence 1 (6 tokens, blocks of 4) reads blocks 0 and 1
    with pytest.raises(ValueError, match=r"block_tables\[1, 1\] = -1 is outside the cache's"):
        paged_varlen_attention(**args)
    args["block_tables"][1, 1] = args["k_cache"].shape[0]
    with pytest.raises(ValueError, match=r"block_tables\[1, 1\] = \d+ is outside"):
        paged_varlen_attention(**args)


def test_entries_behind_the_window_and_of_idle_sequences_are_never_checked():
    """With a window, entries before the first query's window-start block may be anything; so may a row of a
    sequence with no query this step. The op accepts them (and the backends never read them)."""
    args = error_args()
    args["seq_lens"] = torch.tensor([5, 14], dtype=torch.int32).to(DEVICE)
    tables = args["block_tables"]
    args["block_tables"] = torch.cat([tables, tables[:, :2]], dim=1)  # 4 columns
    args["block_tables"][1, 2] = args["block_tables"][1, 0]
    args["block_tables"][1, 3] = args["block_tables"][1, 1]
    args["block_tables"][1, :2] = -1  # query at position 13 with window 3 reads keys 11..13: block 2 and 3
    out = paged_varlen_attention(**args, sliding_window=3, backend="torch")
    assert not out.isnan().any()
    with pytest.raises(ValueError, match=r"block_tables\[1, 1\] = -1"):
        paged_varlen_attention(**args, sliding_window=7)  # keys 7..13 start in block 1


# ------------------------------------------------------------------------------- compile and bench
ROOT = Path(__file__).resolve().parents[2]
COMPILE_SCRIPT = """
import torch, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from kernels.paged_varlen_attention import paged_varlen_attention_kernel as kernel, launch_config
dtype, cache, head_dim, group, window, *value = {config!r}
head_dim_v = value[0] if value else head_dim  # MLA: values narrower than keys
block_q, block_n, num_warps, num_stages = launch_config(getattr(torch, dtype), head_dim, group, 512)
names = {{"bfloat16": "*bf16", "float16": "*fp16", "fp8": "*fp8e4nv"}}
sig = dict.fromkeys(["q_ptr", "o_ptr"], names[dtype]) | dict.fromkeys(["k_cache_ptr", "v_cache_ptr"], names[cache])
sig |= dict.fromkeys(["cu_seqlens_q_ptr", "seq_lens_ptr", "block_tables_ptr"], "*i32")
sig |= dict.fromkeys(["k_scale_ptr", "v_scale_ptr"], "*fp32") | {{"qk_scale": "fp32", "window": "i32"}}
sig |= dict.fromkeys([n for n in kernel.arg_names if n.startswith("stride")], "i32")
consts = dict(HEAD_DIM=head_dim, HEAD_DIM_P2=head_dim, HEAD_DIM_V=head_dim_v, HEAD_DIM_V_P2=head_dim_v,
              QUERIES_PER_KV=group, GROUP_P2=group, BLOCK_Q=block_q,
              BLOCK_N=block_n, BLOCK_SIZE=16, CAUSAL=True, HAS_WINDOW=window, KV_SCALED=cache == "fp8", UPCAST=False,
              CONVERT=cache == "fp8", DOT_PRECISION="tf32")
sig |= dict.fromkeys(consts, "constexpr")
assert set(sig) == set(kernel.arg_names), set(kernel.arg_names) ^ set(sig)
src = ASTSource(fn=kernel, signature=sig, constexprs={{(kernel.arg_names.index(k),): v for k, v in consts.items()}})
options = {{"num_warps": num_warps, "num_stages": num_stages}}
compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)
assert "cubin" in compiled.asm
"""


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton not installed")
@pytest.mark.skipif(torch.cuda.is_available(), reason="on a CUDA machine the other tests compile the kernel for real")
@pytest.mark.parametrize(
    "config",
    [
        ("bfloat16", "bfloat16", 128, 4, False),
        ("bfloat16", "fp8", 128, 4, True),
        ("bfloat16", "bfloat16", 64, 16, False, 32),
    ],
)
def test_kernel_compiles_for_sm90(config):
    """The interpreter cannot catch compile-only errors (fp8 conversions, loop-carried types): compile the hot
    configurations for H100/H200 ahead of time, in a subprocess without TRITON_INTERPRET. Needs no GPU."""
    import triton.backends

    if "nvidia" not in triton.backends.backends:
        pytest.skip("triton has no NVIDIA backend here")
    env = {**os.environ, "TRITON_INTERPRET": "0", "PYTHONPATH": str(ROOT)}
    script = COMPILE_SCRIPT.format(config=config)
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]


def test_benchmark_smoke():
    """bench.paged_varlen prints one JSON object whose sides computed the same rows (tiny sizes)."""
    args = "--json --repeats 1 --warmup 0 --seqs 3 --max-len 40 --chunk 8 --heads 4 --kv-heads 2 --head-dim 8"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "bench.paged_varlen", *args.split()],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    record = json.loads(result.stdout.strip().splitlines()[-1])
    assert set(record["kinds"]) == {"prefill_chunks", "decode", "mixed"}
    for entry in record["kinds"].values():
        assert entry["max_abs_diff"] < 1e-4 and entry["vs_gather"] > 0 and entry["planned_vs_gather"] > 0
    assert record["kinds"]["decode"]["len_q"] == [1, 1, 1] and "paged_varlen_planned_s" in record["kinds"]["decode"]
