"""kernels.ops.varlen_attention on both backends against the loop-over-sequences reference and SDPA.

Triton runs through the interpreter on CPU, so its cases stay tiny.
"""

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

from kernels.ops import varlen_attention
from kernels.reference import varlen_attention_ref
from tests.conftest import DEVICE, requires_triton

ROOT = Path(__file__).resolve().parents[2]
NUM_HEADS = [(4, 4), (8, 2), (5, 1)]
# (q lengths, k lengths): ragged incl. 1, equal, q shorter than k (cached prefix), q longer than k, empty.
SEQLENS = [
    ([1, 7, 3], [1, 7, 3]),
    ([2, 5, 1], [6, 9, 1]),
    ([6, 3, 4], [2, 3, 0]),
    ([0, 4, 1], [3, 0, 2]),
    ([4, 4, 4], [2, 2, 2]),  # equal shapes: the torch backend's single batched SDPA call
    ([2, 2], [5, 5]),
]
BACKENDS = ["torch", pytest.param("triton", marks=requires_triton)]
TOL = {
    torch.float32: {"atol": 1e-4, "rtol": 1e-4},
    torch.float16: {"atol": 2e-3, "rtol": 2e-3},
    torch.bfloat16: {"atol": 2e-2, "rtol": 2e-2},
}


def offsets(lens: list[int]) -> torch.Tensor:
    return torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device=DEVICE)


def make(lens_q, lens_k, hq, hkv, d=16, dtype=torch.float32):
    q = torch.randn(sum(lens_q), hq, d, device=DEVICE).to(dtype)
    k = torch.randn(sum(lens_k), hkv, d, device=DEVICE).to(dtype)
    v = torch.randn(sum(lens_k), hkv, d, device=DEVICE).to(dtype)
    return q, k, v, offsets(lens_q), offsets(lens_k)


def run(q, k, v, cu_q, cu_k, lens_q, lens_k, **kw):
    return varlen_attention(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), **kw)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("heads", NUM_HEADS)
@pytest.mark.parametrize("seqlens", SEQLENS)
@pytest.mark.parametrize("causal", [False, True])
def test_matches_reference_fp32(backend, heads, seqlens, causal):
    (hq, hkv), (lens_q, lens_k) = heads, seqlens
    q, k, v, cu_q, cu_k = make(lens_q, lens_k, hq, hkv)
    out = run(q, k, v, cu_q, cu_k, lens_q, lens_k, causal=causal, backend=backend)
    expected = varlen_attention_ref(q, k, v, cu_q, cu_k, causal=causal)
    assert not out.isnan().any()
    torch.testing.assert_close(out, expected, **TOL[torch.float32])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
def test_half_precision(backend, dtype, causal):
    lens_q, lens_k = [3, 9], [5, 9]
    q, k, v, cu_q, cu_k = make(lens_q, lens_k, 8, 2, d=32, dtype=dtype)
    out = run(q, k, v, cu_q, cu_k, lens_q, lens_k, causal=causal, backend=backend)
    assert out.dtype == dtype
    expected = varlen_attention_ref(q.float(), k.float(), v.float(), cu_q, cu_k, causal=causal)
    torch.testing.assert_close(out.float(), expected, **TOL[dtype])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("causal", [False, True])
def test_matches_sdpa_per_sequence(backend, causal):
    """Independent of our reference: SDPA on each unpacked sequence (square blocks, so causal aligns)."""
    lens = [4, 1, 6]
    q, k, v, cu, _ = make(lens, lens, 6, 3, d=24)
    out = run(q, k, v, cu, cu, lens, lens, causal=causal, backend=backend, scale=0.2)
    for i, n in enumerate(lens):
        s = slice(int(cu[i]), int(cu[i]) + n)
        expected = F.scaled_dot_product_attention(
            q[s].transpose(0, 1),
            k[s].transpose(0, 1),
            v[s].transpose(0, 1),
            is_causal=causal,
            scale=0.2,
            enable_gqa=True,
        ).transpose(0, 1)
        torch.testing.assert_close(out[s], expected, **TOL[torch.float32])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("causal", [False, True])
def test_odd_head_dim_and_long_sequence(backend, causal):
    """Head dim not a power of two; sequences spanning several query and key tiles (unmasked + masked loops)."""
    lens_q, lens_k = [70, 2, 130], [150, 2, 130]
    q, k, v, cu_q, cu_k = make(lens_q, lens_k, 2, 1, d=20)
    out = run(q, k, v, cu_q, cu_k, lens_q, lens_k, causal=causal, backend=backend)
    torch.testing.assert_close(out, varlen_attention_ref(q, k, v, cu_q, cu_k, causal=causal), **TOL[torch.float32])


@pytest.mark.parametrize("backend", BACKENDS)
def test_fully_masked_rows_and_empty_keys_are_zero(backend):
    lens_q, lens_k = [5, 3], [2, 0]
    q, k, v, cu_q, cu_k = make(lens_q, lens_k, 4, 2)
    out = varlen_attention(q, k, v, cu_q, cu_k, 5, 2, causal=True, backend=backend)
    assert not out.isnan().any()
    assert torch.equal(out[:3], torch.zeros_like(out[:3]))  # 5 queries, 2 keys: first 3 rows see nothing
    assert torch.equal(out[5:], torch.zeros_like(out[5:]))  # no keys at all
    assert out[3:5].abs().sum() > 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_padding_is_never_read(backend):
    """NaN in rows that belong to no sequence (and past max_seqlen) must not reach any output."""
    lens = [3, 4]
    q, k, v, cu, _ = make(lens, lens, 4, 2)
    pad = torch.full((5, 2, 16), float("nan"), device=DEVICE)
    k_pad, v_pad = torch.cat([k, pad]), torch.cat([v, pad])  # 5 trailing garbage rows
    # A third "sequence" owns the garbage keys but has no queries; max_seqlen_k covers it.
    cu_q = torch.cat([cu, cu[-1:]])
    cu_k = torch.cat([cu, cu[-1:] + 5])
    out = varlen_attention(q, k_pad, v_pad, cu_q, cu_k, 4, 5, backend=backend)
    assert not out.isnan().any()
    torch.testing.assert_close(out, varlen_attention_ref(q, k, v, cu, cu), **TOL[torch.float32])


@pytest.mark.parametrize("backend", BACKENDS)
def test_larger_max_seqlen_is_allowed_and_empty_batch(backend):
    lens = [2, 3]
    q, k, v, cu, _ = make(lens, lens, 2, 2)
    out = varlen_attention(q, k, v, cu, cu, 40, 40, backend=backend)
    torch.testing.assert_close(out, varlen_attention_ref(q, k, v, cu, cu), **TOL[torch.float32])
    empty = varlen_attention(q[:0], k[:0], v[:0], cu[:1], cu[:1], 0, 0, backend=backend)
    assert empty.shape == (0, 2, 16)


@pytest.mark.parametrize("backend", BACKENDS)
def test_noncontiguous_heads(backend):
    """q taken as a head slice of a wider tensor (stride(1) != head_dim) still works."""
    lens = [3, 2]
    wide = torch.randn(5, 8, 16, device=DEVICE)
    q = wide[:, ::2]  # [5, 4, 16], stride over heads doubled, stride(-1) == 1
    _, k, v, cu, _ = make(lens, lens, 4, 2)
    out = varlen_attention(q, k, v, cu, cu, 3, 3, causal=True, backend=backend)
    torch.testing.assert_close(out, varlen_attention_ref(q, k, v, cu, cu, causal=True), **TOL[torch.float32])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("scale", [None, 0.3])
def test_check_false_matches_check_true(backend, causal, scale):
    """check=False (a model layer reusing validated step metadata) skips the checks, not the math."""
    lens_q, lens_k = [2, 5, 0, 1], [6, 9, 3, 1]
    q, k, v, cu_q, cu_k = make(lens_q, lens_k, 8, 2)
    checked = run(q, k, v, cu_q, cu_k, lens_q, lens_k, causal=causal, scale=scale, backend=backend)
    unchecked = run(q, k, v, cu_q, cu_k, lens_q, lens_k, causal=causal, scale=scale, backend=backend, check=False)
    assert torch.equal(unchecked, checked)
    expected = varlen_attention_ref(q, k, v, cu_q, cu_k, causal=causal, scale=scale)
    torch.testing.assert_close(unchecked, expected, **TOL[torch.float32])


# (lens_q, lens_k, Hq, Hkv, causal, query shapes SDPA receives, enable_gqa): the torch twin folds a KV group's
# query heads into the query dim exactly where every row sees every key and the fold is a view.
FOLD_CASES = [
    ([1, 1, 1, 1], [6, 6, 6, 6], 8, 2, True, [(4, 2, 4, 16)], False),  # batched decode: [B, Hkv, Hq/Hkv, D]
    ([1, 1, 1], [9, 4, 1], 8, 2, True, [(1, 2, 4, 16)] * 3, False),  # ragged decode: one call per sequence
    ([5, 5], [5, 5], 6, 1, False, [(2, 1, 30, 16)], False),  # MQA, non-causal: rows x heads in one query dim
    ([3], [1], 4, 2, True, [(1, 2, 2, 16)], False),  # bottom-right: 2 rows see nothing, the last sees the key
    ([4, 4], [4, 4], 8, 2, True, [(2, 8, 4, 16)], True),  # causal prefill: no fold, SDPA's enable_gqa
    ([5, 5], [5, 5], 6, 2, False, [(2, 6, 5, 16)], True),  # several KV heads, many rows: a fold would copy
]


@pytest.mark.parametrize(("lens_q", "lens_k", "hq", "hkv", "causal", "shapes", "gqa_flag"), FOLD_CASES)
def test_torch_gqa_fold_is_exact_and_taken_where_it_applies(
    monkeypatch, lens_q, lens_k, hq, hkv, causal, shapes, gqa_flag
):
    import kernels.varlen_attention_torch as twin

    calls, sdpa = [], F.scaled_dot_product_attention

    def spy(q, k, v, **kw):
        calls.append((tuple(q.shape), tuple(k.shape), kw.get("enable_gqa", False), kw.get("is_causal", False)))
        return sdpa(q, k, v, **kw)

    q, k, v, cu_q, cu_k = make(lens_q, lens_k, hq, hkv)
    monkeypatch.setattr(twin.F, "scaled_dot_product_attention", spy)
    out = run(q, k, v, cu_q, cu_k, lens_q, lens_k, causal=causal, backend="torch")
    monkeypatch.undo()
    torch.testing.assert_close(out, varlen_attention_ref(q, k, v, cu_q, cu_k, causal=causal), **TOL[torch.float32])
    assert [c[0] for c in calls] == shapes
    assert all(c[1][1] == hkv for c in calls)  # K/V always carry the stored KV heads, never repeated ones
    assert all(c[2] == gqa_flag for c in calls)
    assert not any(c[3] for c in calls) or gqa_flag  # a folded call is never causal


@settings(max_examples=25, deadline=None)
@given(
    lens=st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9)), min_size=1, max_size=5),
    group=st.sampled_from([1, 2, 3]),
    causal=st.booleans(),
)
def test_torch_backend_property(lens, group, causal):
    lens_q, lens_k = [a for a, _ in lens], [b for _, b in lens]
    q, k, v, cu_q, cu_k = make(lens_q, lens_k, 2 * group, 2, d=8)
    out = run(q, k, v, cu_q, cu_k, lens_q, lens_k, causal=causal, backend="torch")
    assert not out.isnan().any()
    torch.testing.assert_close(out, varlen_attention_ref(q, k, v, cu_q, cu_k, causal=causal), **TOL[torch.float32])


@requires_triton
@settings(max_examples=8, deadline=None)
@given(
    lens=st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), min_size=1, max_size=3),
    group=st.sampled_from([1, 3]),
    causal=st.booleans(),
)
def test_triton_backend_property(lens, group, causal):
    lens_q, lens_k = [a for a, _ in lens], [b for _, b in lens]
    q, k, v, cu_q, cu_k = make(lens_q, lens_k, 2 * group, 2, d=8)
    out = run(q, k, v, cu_q, cu_k, lens_q, lens_k, causal=causal, backend="triton")
    assert not out.isnan().any()
    torch.testing.assert_close(out, varlen_attention_ref(q, k, v, cu_q, cu_k, causal=causal), **TOL[torch.float32])


def tile_edge_cases(dtype: torch.dtype, group: int, head_dim: int = 16) -> list[tuple[int, int]]:
    """(len_q, len_k) pairs whose causal offset len_k - len_q puts a key-tile edge at or next to a query tile's
    first row, for the kernel's own tile sizes (kernels.varlen_attention.tile_config).

    The kernel runs the keys every row of a query tile sees as whole, unmasked key tiles; an off-by-one in that
    bound lets the tile's first query see one key too many only when the keys it sees, tile_start + len_k -
    len_q + 1, are one short of a key-tile edge, which short random lengths never reach.
    """
    from kernels.varlen_attention import tile_config

    rows, block_n, _, _ = tile_config(dtype, max(1 << (head_dim - 1).bit_length(), 16))
    block_q = max(rows >> (group - 1).bit_length(), 1)  # rows // next_power_of_2(group), as the launcher does
    first = [(2, 2 + diag) for diag in (block_n - 3, block_n - 2, block_n - 1, block_n, block_n + 1)]
    # the second query tile (tile_start = block_q): its first row sees block_q + diag + 1 == m * block_n - 1 keys
    edge = (-(block_q + 2)) % block_n
    second = [(block_q + 2, block_q + 2 + diag) for diag in (edge, edge + 1)]
    return first + second


@requires_triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_triton_causal_tile_edges(dtype):
    """len_k - len_q on and around the key-tile size: every query row sees exactly keys 0 .. i + len_k - len_q."""
    lens = tile_edge_cases(dtype, group=2)
    lens_q, lens_k = [a for a, _ in lens], [b for _, b in lens]
    q, k, v, cu_q, cu_k = make(lens_q, lens_k, 4, 2, d=16, dtype=dtype)
    out = run(q, k, v, cu_q, cu_k, lens_q, lens_k, causal=True, backend="triton")
    expected = varlen_attention_ref(q.float(), k.float(), v.float(), cu_q, cu_k, causal=True)
    torch.testing.assert_close(out.float(), expected, **TOL[dtype])


COMPILE_SCRIPT = """
import torch, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from kernels.varlen_attention import varlen_attention_kernel as kernel, tile_config
dtype, head_dim, group, causal = {config!r}
rows, block_n, num_warps, num_stages = tile_config(getattr(torch, dtype), head_dim)
ptr = "*" + {{"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}}[dtype]
sig = dict.fromkeys(["q_ptr", "k_ptr", "v_ptr", "o_ptr"], ptr)
sig |= dict.fromkeys(["cu_seqlens_q_ptr", "cu_seqlens_k_ptr"], "*i32")
sig |= dict.fromkeys([n for n in kernel.arg_names if n.startswith("stride")], "i32") | {{"qk_scale": "fp32"}}
consts = dict(HEAD_DIM=head_dim, HEAD_DIM_P2=head_dim, QUERIES_PER_KV=group, GROUP_P2=group, BLOCK_Q=rows // group,
              BLOCK_N=block_n, CAUSAL=causal, UPCAST=False, DOT_PRECISION="ieee" if dtype == "float32" else "tf32")
sig |= dict.fromkeys(consts, "constexpr")
src = ASTSource(fn=kernel, signature=sig, constexprs={{(kernel.arg_names.index(k),): v for k, v in consts.items()}})
options = {{"num_warps": num_warps, "num_stages": num_stages}}
compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)
assert "cubin" in compiled.asm
"""


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton not installed")
@pytest.mark.skipif(torch.cuda.is_available(), reason="on a CUDA machine the other tests compile the kernel for real")
@pytest.mark.parametrize("config", [("bfloat16", 128, 4, True)])
def test_kernel_compiles_for_sm90(config):
    """The interpreter cannot catch compile-only errors; compile the hot configuration for H100/H200 ahead of time.

    Runs in a subprocess without TRITON_INTERPRET so the kernel is a real JIT function. Needs no GPU.
    """
    import triton.backends

    if "nvidia" not in triton.backends.backends:
        pytest.skip("triton has no NVIDIA backend here")
    env = {**os.environ, "TRITON_INTERPRET": "0", "PYTHONPATH": str(ROOT)}
    script = COMPILE_SCRIPT.format(config=config)
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]


def test_packing_benchmark_smoke():
    """bench.packing prints one JSON object as its last stdout line with the documented keys (tiny sizes)."""
    args = "--json --batch 3 --min-len 4 --max-len 24 --repeats 1 --warmup 0 --dtype float32".split()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "bench.packing", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    record = json.loads(result.stdout.strip().splitlines()[-1])
    for key in ("padded_s", "packed_s", "speedup", "ideal_speedup", "real_token_fraction", "seq_lens", "torch"):
        assert key in record
    assert record["max_seqlen"] == 24 and len(record["seq_lens"]) == 3
    assert record["max_abs_diff"] < 1e-3  # both sides computed the same attention
    assert 0 < record["real_token_fraction"] <= 1 and record["ideal_speedup"] >= 1
