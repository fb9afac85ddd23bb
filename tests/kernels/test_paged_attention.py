"""Paged decode attention (kernels.ops.paged_attention) against independent references.

Every case builds a cache whose blocks are scattered by a random permutation, whose unused slots (the tail
of each last block, spare blocks) hold NaN, and whose block-table padding points outside the cache. The
result must match the slow reference (kernels.reference.paged_attention_ref) and plain SDPA on each
sequence's K/V kept contiguously on the side, so a bug shared by the gather and the reference still fails.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import kernels.paged_attention as paged
import kernels.paged_attention_torch as paged_torch
from kernels.ops import paged_attention
from kernels.reference import paged_attention_ref
from tests.conftest import DEVICE, TRITON_OK

NUM_HEADS = [(4, 4), (8, 2), (5, 1)]  # (Hq, Hkv): MHA, GQA, MQA with an odd group
BLOCK_SIZES = [8, 16, 32]
BACKENDS = ["torch", pytest.param("triton", marks=pytest.mark.skipif(not TRITON_OK, reason="triton not installed"))]
TOLERANCES = {torch.float32: (2e-5, 2e-5), torch.float16: (2e-3, 2e-3), torch.bfloat16: (1.6e-2, 1.6e-2)}
PAD_ENTRY = 1 << 20  # block-table padding: any read of it would go far outside the cache


def make_paged(lens, num_heads, num_kv_heads, head_dim, block_size, dtype=torch.float32, spare_blocks=3, seed=0):
    """Random q and per-sequence K/V, plus the same K/V scattered into a NaN-filled paged cache.

    Returns (q, k_cache, v_cache, block_tables, seq_lens, ks, vs) with ks[i]/vs[i] the contiguous
    [len_i, Hkv, D] keys/values of sequence i.
    """
    gen = torch.Generator().manual_seed(seed)
    blocks_per_seq = [-(-n // block_size) for n in lens]
    num_blocks = sum(blocks_per_seq) + spare_blocks
    physical = torch.randperm(num_blocks, generator=gen).tolist()
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = torch.full(shape, float("nan"), dtype=dtype)
    v_cache = torch.full(shape, float("nan"), dtype=dtype)
    block_tables = torch.full((len(lens), max(blocks_per_seq + [1]) + 1), PAD_ENTRY, dtype=torch.int32)
    ks, vs = [], []
    for i, n in enumerate(lens):
        k = torch.randn(n, num_kv_heads, head_dim, generator=gen).to(dtype)
        v = torch.randn(n, num_kv_heads, head_dim, generator=gen).to(dtype)
        ks.append(k)
        vs.append(v)
        for b in range(blocks_per_seq[i]):
            block = physical.pop()
            block_tables[i, b] = block
            rows = slice(b * block_size, min(n, (b + 1) * block_size))
            k_cache[block, : rows.stop - rows.start] = k[rows]
            v_cache[block, : rows.stop - rows.start] = v[rows]
    q = torch.randn(len(lens), num_heads, head_dim, generator=gen).to(dtype)
    seq_lens = torch.tensor(lens, dtype=torch.int32)
    on = lambda *ts: [t.to(DEVICE) for t in ts]
    return (*on(q, k_cache, v_cache, block_tables, seq_lens), on(*ks), on(*vs))


def sdpa_contiguous(q, ks, vs, scale):
    """Plain SDPA per sequence on its contiguous K/V (GQA via enable_gqa), fp32; empty sequences give 0."""
    out = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    for i, (k, v) in enumerate(zip(ks, vs, strict=True)):
        if k.shape[0]:
            o = F.scaled_dot_product_attention(
                q[i, :, None].float(),  # [Hq, 1, D]
                k.float().transpose(0, 1),  # [Hkv, L, D]
                v.float().transpose(0, 1),
                scale=scale,
                enable_gqa=True,
            )
            out[i] = o[:, 0]
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("block_size", BLOCK_SIZES)
@pytest.mark.parametrize("num_heads,num_kv_heads", NUM_HEADS)
def test_matches_reference_and_sdpa(backend, block_size, num_heads, num_kv_heads):
    lens = [1, block_size, block_size + 1, 3 * block_size + 5, 0]
    q, kc, vc, bt, sl, ks, vs = make_paged(lens, num_heads, num_kv_heads, 16, block_size)
    out = paged_attention(q, kc, vc, bt, sl, backend=backend)
    assert out.shape == q.shape and out.dtype == q.dtype
    assert torch.isfinite(out).all(), "NaN from an unused slot leaked into the output"
    ref = paged_attention_ref(q.cpu(), kc.cpu(), vc.cpu(), bt.cpu(), sl.cpu())
    torch.testing.assert_close(out.cpu(), ref, atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(out.float(), sdpa_contiguous(q, ks, vs, 16**-0.5), atol=2e-5, rtol=2e-5)
    assert (out[-1] == 0).all(), "a sequence of length 0 must output zeros"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision(backend, dtype):
    q, kc, vc, bt, sl, ks, vs = make_paged([7, 40, 16], 8, 2, 32, 16, dtype=dtype)
    out = paged_attention(q, kc, vc, bt, sl, scale=0.3, backend=backend)
    assert out.dtype == dtype
    atol, rtol = TOLERANCES[dtype]
    torch.testing.assert_close(out.float(), sdpa_contiguous(q, ks, vs, 0.3), atol=atol, rtol=rtol)


@pytest.mark.parametrize("backend", BACKENDS)
def test_odd_head_dim_and_long_sequence(backend):
    """Head dim 24 (not a power of two) and a sequence spanning several Triton tiles."""
    q, kc, vc, bt, sl, ks, vs = make_paged([150, 3], 6, 3, 24, 16)
    out = paged_attention(q, kc, vc, bt, sl, backend=backend)
    torch.testing.assert_close(out, sdpa_contiguous(q, ks, vs, 24**-0.5), atol=2e-5, rtol=2e-5)


@pytest.mark.skipif(not TRITON_OK, reason="triton not installed")
@pytest.mark.parametrize("num_splits", [2, 3, 7])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_triton_split_k_merges_exactly(num_splits, dtype):
    """Flash-decoding split-K: partial results merged by log-sum-exp, including splits past a short sequence."""
    q, kc, vc, bt, sl, ks, vs = make_paged([150, 1, 0, 65], 8, 2, 24, 8, dtype=dtype)
    out = paged.paged_attention_triton(q, kc, vc, bt, sl, 0.2, num_splits=num_splits)
    atol, rtol = TOLERANCES[dtype]
    torch.testing.assert_close(out.float(), sdpa_contiguous(q, ks, vs, 0.2), atol=atol, rtol=rtol)
    assert (out[2] == 0).all()
    with pytest.raises(ValueError, match="num_splits=0"):
        paged.paged_attention_triton(q, kc, vc, bt, sl, 0.2, num_splits=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_torch_chunked_split_k_matches_single_gather(monkeypatch, dtype):
    """The gather path attends to chunks and merges them by log-sum-exp; force many uneven chunks."""
    monkeypatch.setattr(paged_torch, "use_sparse", lambda *tensors: False)  # fp32 would take the sparse path
    q, kc, vc, bt, sl, ks, vs = make_paged([200, 1, 64, 65, 0, 130], 8, 2, 16, 16, dtype=dtype)
    whole = paged_torch.paged_attention_torch(q, kc, vc, bt, sl, 0.25)
    monkeypatch.setattr(paged_torch, "TORCH_CHUNK_BYTES", 1)  # -> the 64-token minimum chunk
    chunked = paged_torch.paged_attention_torch(q, kc, vc, bt, sl, 0.25)
    expected = sdpa_contiguous(q, ks, vs, 0.25)
    atol, rtol = TOLERANCES[dtype]
    assert chunked.dtype == dtype
    torch.testing.assert_close(whole.float(), expected, atol=atol, rtol=rtol)
    torch.testing.assert_close(chunked.float(), expected, atol=atol, rtol=rtol)
    assert (chunked[4] == 0).all()


@pytest.mark.parametrize("sparse", [True, False])
@pytest.mark.parametrize("lens", [[37, 37, 37], [40, 38, 39], [1, 16, 0, 70, 33], [70, 1, 0, 2, 3], [100, 1, 0, 0, 0]])
def test_sparse_and_gather_paths_agree_with_reference(monkeypatch, sparse, lens):
    """fp32 on CPU reads the cache in place (sampled_addmm + embedding_bag); the gather path is the fallback.

    Equal lengths (no padding); padding scored and masked, with an empty sequence; so much padding that only
    the real tokens are scored, then padded, also with empty last sequences (their padding would index past
    the real scores). Unused slots hold NaN in every case."""
    if not sparse:
        monkeypatch.setattr(paged_torch, "use_sparse", lambda *tensors: False)
    q, kc, vc, bt, sl, ks, vs = make_paged(lens, 8, 2, 16, 16)
    assert paged_torch.use_sparse(q, kc, vc) == (sparse and DEVICE == "cpu")
    index = paged_torch.token_slots(bt, sl, 16, (8, 2)).sparse
    padding = 1 - sum(lens) / (len(lens) * max(lens))
    assert (index.pad is None) == (padding <= paged_torch.SPARSE_MAX_PADDING) == (lens[0] != 100 and lens[0] != 70)
    out = paged_torch.paged_attention_torch(q, kc, vc, bt, sl, 0.25)
    assert torch.isfinite(out).all(), "NaN from an unused slot leaked into the output"
    ref = paged_attention_ref(q.cpu(), kc.cpu(), vc.cpu(), bt.cpu(), sl.cpu(), 0.25)
    torch.testing.assert_close(out.cpu(), ref, atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(out, sdpa_contiguous(q, ks, vs, 0.25), atol=2e-5, rtol=2e-5)
    assert all((out[i] == 0).all() for i, n in enumerate(lens) if n == 0)


def test_sparse_index_built_for_other_heads_is_rebuilt():
    """An index built for another head layout (or none) is rebuilt for this call's heads, not misread."""
    q, kc, vc, bt, sl, ks, vs = make_paged([37, 5, 70], 8, 2, 16, 16)
    expected = sdpa_contiguous(q, ks, vs, 0.25)
    for heads in [None, (8, 2), (4, 4), (8, 1)]:
        index = paged_torch.token_slots(bt, sl, 16, heads)
        assert (index.sparse is None) == (heads is None)
        out = paged_torch.paged_attention_torch(q, kc, vc, bt, sl, 0.25, index=index)
        torch.testing.assert_close(out, expected, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_shared_blocks_and_empty_batch(backend):
    """Two sequences may share a physical prefix block (prefix caching); an empty batch returns [0, Hq, D]."""
    q, kc, vc, bt, sl, ks, vs = make_paged([20, 20], 4, 2, 16, 8)
    bt[1, 0] = bt[0, 0]  # sequence 1 now reads sequence 0's first block
    vs[1] = torch.cat([vs[0][:8], vs[1][8:]])
    ks[1] = torch.cat([ks[0][:8], ks[1][8:]])
    out = paged_attention(q, kc, vc, bt, sl, backend=backend)
    torch.testing.assert_close(out, sdpa_contiguous(q, ks, vs, 0.25), atol=2e-5, rtol=2e-5)
    empty = paged_attention(q[:0], kc, vc, bt[:0], sl[:0], backend=backend)
    assert empty.shape == (0, 4, 16)


def test_ops_uses_a_prebuilt_index_and_rejects_a_stale_one():
    """kernels.ops.paged_attention takes a model's per-step gather index (torch backend) after its own checks."""
    q, kc, vc, bt, sl, ks, vs = make_paged([37, 5, 70, 0], 8, 2, 16, 16)
    index = paged_torch.token_slots(bt, sl, 16)
    out = paged_attention(q, kc, vc, bt, sl, backend="torch", index=index)
    torch.testing.assert_close(out, sdpa_contiguous(q, ks, vs, 0.25), atol=2e-5, rtol=2e-5)
    stale = paged_torch.token_slots(bt[:2], sl[:2], 16)  # built for another batch
    with pytest.raises(ValueError, match="build it with token_slots"):
        paged_attention(q, kc, vc, bt, sl, backend="torch", index=stale)
    bad = bt.clone()
    bad[0, 0] = kc.shape[0]  # validation still runs first, whatever index is passed
    with pytest.raises(ValueError, match="outside the cache"):
        paged_attention(q, kc, vc, bad, sl, backend="torch", index=index)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("prebuilt_index", [False, True])
def test_check_false_matches_check_true(backend, prebuilt_index):
    """check=False (a model layer whose step metadata was validated once) skips the checks, not the math."""
    q, kc, vc, bt, sl, ks, vs = make_paged([37, 5, 70, 0], 8, 2, 16, 16)
    index = paged_torch.token_slots(bt, sl, 16) if prebuilt_index and backend == "torch" else None
    checked = paged_attention(q, kc, vc, bt, sl, backend=backend, index=index)
    unchecked = paged_attention(q, kc, vc, bt, sl, backend=backend, index=index, check=False)
    assert torch.equal(unchecked, checked)
    torch.testing.assert_close(unchecked, sdpa_contiguous(q, ks, vs, 0.25), atol=2e-5, rtol=2e-5)


@settings(max_examples=25, deadline=None)
@given(
    lens=st.lists(st.integers(0, 70), min_size=1, max_size=5),
    block_size=st.sampled_from([1, 4, 16]),
    heads=st.sampled_from(NUM_HEADS),
    seed=st.integers(0, 2**16),
)
def test_torch_backend_property(lens, block_size, heads, seed):
    q, kc, vc, bt, sl, ks, vs = make_paged(lens, *heads, 8, block_size, seed=seed)
    out = paged_attention(q, kc, vc, bt, sl, backend="torch")
    torch.testing.assert_close(out, sdpa_contiguous(q, ks, vs, 8**-0.5), atol=2e-5, rtol=2e-5)


# ------------------------------------------------------------------------------------------- validation
def _valid_inputs():
    q, kc, vc, bt, sl, _, _ = make_paged([5, 9], 4, 2, 16, 8)
    return dict(q=q, k_cache=kc, v_cache=vc, block_tables=bt, seq_lens=sl)


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda a: a.update(block_tables=a["block_tables"].long()), "block_tables has dtype"),
        (lambda a: a.update(seq_lens=a["seq_lens"].long()), "seq_lens has dtype"),
        (lambda a: a["block_tables"].__setitem__((1, 1), 99), r"block_tables\[1, 1\] = 99"),
        (lambda a: a["block_tables"].__setitem__((0, 0), -1), r"block_tables\[0, 0\] = -1"),
        (lambda a: a["seq_lens"].__setitem__(0, 100), "widen block_tables"),
        (lambda a: a["seq_lens"].__setitem__(0, -2), "negative"),
        (lambda a: a.update(q=a["q"][:, :3]), "multiple of Hkv"),
        (lambda a: a.update(seq_lens=a["seq_lens"][:1]), "one row per sequence"),
        (lambda a: a.update(v_cache=a["v_cache"][:-1]), "must match"),
        (lambda a: a.update(q=a["q"].double()), "dtypes"),
    ],
)
@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_inputs_raise_clear_errors(change, message, backend):
    args = _valid_inputs()
    change(args)
    with pytest.raises(ValueError, match=message):
        paged_attention(**args, backend=backend)
