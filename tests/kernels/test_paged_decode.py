"""Decode, one query per sequence over a paged cache: paged_varlen_attention with len_q = 1, the decode-only
wrapper kernels.ops.paged_attention, and the torch twin's decode helper (kernels/paged_decode_torch.py).

Every case builds a cache whose blocks are scattered by a random permutation, whose unused slots (the tail
of each last block, spare blocks) hold NaN, and whose block-table padding points outside the cache. The
result must match the slow reference (kernels.reference.paged_varlen_attention_ref, one query per sequence)
and plain SDPA on each sequence's K/V kept contiguously on the side, so a bug shared by the gather and the
reference still fails. The torch helper's two paths (sparse ops reading the cache in place, fp32 on CPU; the
gather, in chunks merged by log-sum-exp when long) are each checked on their own, and a sequence with no
token (seq_lens 0) has no query and outputs zeros through the wrapper.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import kernels.paged_decode_torch as decode_torch
from kernels.ops import paged_attention, paged_varlen_attention, paged_varlen_attention_planned, plan_attention
from kernels.plan import KVCache
from kernels.reference import paged_varlen_attention_ref
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

    def on(*ts):
        return [t.to(DEVICE) for t in ts]

    return (*on(q, k_cache, v_cache, block_tables, seq_lens), on(*ks), on(*vs))


def one_query_each(seq_lens: torch.Tensor) -> tuple[torch.Tensor, list[int]]:
    """cu_seqlens_q giving every sequence with a token one query (its last token), and those sequences."""
    lens = seq_lens.tolist()
    live = [i for i, n in enumerate(lens) if n > 0]
    cu = torch.tensor([0, *torch.tensor([int(n > 0) for n in lens]).cumsum(0).tolist()], dtype=torch.int32)
    return cu.to(seq_lens.device), live


def decode_varlen(q, k_cache, v_cache, block_tables, seq_lens, scale=None, backend="auto"):
    """paged_varlen_attention with len_q = 1 per sequence (0 for empty ones): the engine's decode call."""
    cu, live = one_query_each(seq_lens)
    rows = torch.tensor(live, dtype=torch.long, device=q.device)
    out = paged_varlen_attention(q[rows], k_cache, v_cache, cu, seq_lens, block_tables, 1, scale=scale, backend=backend)
    return out, live


def decode_reference(q, k_cache, v_cache, block_tables, seq_lens, scale=None):
    """The slow reference, one query per sequence that has a token; zeros for sequences with none."""
    cu, live = one_query_each(seq_lens.cpu())
    rows = torch.tensor(live, dtype=torch.long)
    args = (k_cache.cpu(), v_cache.cpu(), cu, seq_lens.cpu(), block_tables.cpu())
    ref = paged_varlen_attention_ref(q.cpu()[rows], *args, causal=True, scale=scale)
    out = torch.zeros(q.shape, dtype=q.dtype)
    out[rows] = ref
    return out


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


def check_decode(q, kc, vc, bt, sl, ks, vs, backend, scale=None, tol=(2e-5, 2e-5)):
    """The wrapper and the len_q = 1 varlen call agree exactly, are NaN-free and match both references."""
    atol, rtol = tol
    scale_value = q.shape[-1] ** -0.5 if scale is None else scale
    out = paged_attention(q, kc, vc, bt, sl, scale=scale, backend=backend)
    assert out.shape == q.shape and out.dtype == q.dtype
    assert torch.isfinite(out).all(), "NaN from an unused slot leaked into the output"
    varlen, live = decode_varlen(q, kc, vc, bt, sl, scale=scale, backend=backend)
    assert torch.equal(varlen, out[live])
    torch.testing.assert_close(
        out.cpu().float(), decode_reference(q, kc, vc, bt, sl, scale).float(), atol=atol, rtol=rtol
    )
    torch.testing.assert_close(out.float(), sdpa_contiguous(q, ks, vs, scale_value), atol=atol, rtol=rtol)
    empty = [i for i, n in enumerate(sl.tolist()) if n == 0]
    assert all((out[i] == 0).all() for i in empty), "a sequence of length 0 must output zeros"
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("block_size", BLOCK_SIZES)
@pytest.mark.parametrize("num_heads,num_kv_heads", NUM_HEADS)
def test_matches_reference_and_sdpa(backend, block_size, num_heads, num_kv_heads):
    lens = [1, block_size, block_size + 1, 3 * block_size + 5, 0]
    q, kc, vc, bt, sl, ks, vs = make_paged(lens, num_heads, num_kv_heads, 16, block_size)
    out = check_decode(q, kc, vc, bt, sl, ks, vs, backend)
    assert (out[-1] == 0).all()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision(backend, dtype):
    q, kc, vc, bt, sl, ks, vs = make_paged([7, 40, 16], 8, 2, 32, 16, dtype=dtype)
    check_decode(q, kc, vc, bt, sl, ks, vs, backend, scale=0.3, tol=TOLERANCES[dtype])


@pytest.mark.parametrize("backend", BACKENDS)
def test_odd_head_dim_and_long_sequence(backend):
    """Head dim 24 (not a power of two) and a sequence spanning several Triton key tiles."""
    q, kc, vc, bt, sl, ks, vs = make_paged([150, 3], 6, 3, 24, 16)
    check_decode(q, kc, vc, bt, sl, ks, vs, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_shared_blocks_and_empty_batch(backend):
    """Two sequences may share a physical prefix block (prefix caching); an empty batch returns [0, Hq, D]."""
    q, kc, vc, bt, sl, ks, vs = make_paged([20, 20], 4, 2, 16, 8)
    bt[1, 0] = bt[0, 0]  # sequence 1 now reads sequence 0's first block
    vs[1] = torch.cat([vs[0][:8], vs[1][8:]])
    ks[1] = torch.cat([ks[0][:8], ks[1][8:]])
    check_decode(q, kc, vc, bt, sl, ks, vs, backend)
    empty = paged_attention(q[:0], kc, vc, bt[:0], sl[:0], backend=backend)
    assert empty.shape == (0, 4, 16)
    all_empty = paged_attention(q, kc, vc, bt, torch.zeros_like(sl), backend=backend)
    assert all_empty.shape == q.shape and not all_empty.any()


# ------------------------------------------------------------------------- the torch twin's decode helper
def helper_index(bt, sl, block_size, heads):
    return decode_torch.token_slots(bt, sl, block_size, heads)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_torch_chunked_split_k_matches_single_gather(monkeypatch, dtype):
    """The gather path attends to chunks and merges them by log-sum-exp; force many uneven chunks (and chunks
    that a short sequence ends before)."""
    q, kc, vc, bt, sl, ks, vs = make_paged([200, 1, 64, 65, 130], 8, 2, 16, 16, dtype=dtype)
    index = helper_index(bt, sl, 16, None)  # no sparse index: the gather path, also for fp32
    whole = decode_torch.decode_attention(q, kc, vc, index, sl, 0.25)
    monkeypatch.setattr(decode_torch, "TORCH_CHUNK_BYTES", 1)  # -> the 64-token minimum chunk
    chunked = decode_torch.decode_attention(q, kc, vc, index, sl, 0.25)
    expected = sdpa_contiguous(q, ks, vs, 0.25)
    atol, rtol = TOLERANCES[dtype]
    assert chunked.dtype == dtype
    torch.testing.assert_close(whole.float(), expected, atol=atol, rtol=rtol)
    torch.testing.assert_close(chunked.float(), expected, atol=atol, rtol=rtol)
    if dtype == torch.bfloat16:  # not the sparse dtype: the public call takes the same chunked gather
        torch.testing.assert_close(paged_attention(q, kc, vc, bt, sl, scale=0.25, backend="torch"), chunked)


# lens, whether the sparse index scores only the real tokens (too much padding) once empty sequences are dropped
SPARSE_CASES = [
    ([37, 37, 37], False),  # equal lengths: no padding
    ([40, 38, 39], False),  # padding scored and masked
    ([1, 16, 0, 70, 33], False),  # ... with an empty sequence, which has no query (1280 padding entries)
    ([70, 1, 0, 2, 3, 1], False),  # 2184 padding entries (8 heads): few enough to score them
    ([2000, 10, 1990, 5], False),  # 31960: still scored
    ([2100, 10, 2090, 5], True),  # 33560: only the real tokens are scored and summed
    ([4200, 1, 0, 2, 3], True),  # ... with an empty sequence
]


@pytest.mark.parametrize("sparse", [True, False])
@pytest.mark.parametrize(("lens", "real_only"), SPARSE_CASES)
def test_sparse_and_gather_paths_agree_with_reference(sparse, lens, real_only):
    """fp32 on CPU reads the cache in place (sampled_addmm + embedding_bag); the gather path is the fallback.

    The plan picks the sparse path for fp32 contiguous CPU caches; the helper is also called with each path
    forced. Unused slots hold NaN in every case."""
    q, kc, vc, bt, sl, ks, vs = make_paged(lens, 8, 2, 16, 16)
    cu, live = one_query_each(sl)
    plan = plan_attention(cu, sl, bt, 1, None, kc, vc, num_heads=8, q_dtype=torch.float32, backend="torch")
    assert (plan.index.decode_slots.sparse is not None) == (DEVICE == "cpu")
    rows = torch.tensor(live, device=DEVICE)
    live_lens = [lens[i] for i in live]
    index = helper_index(bt[rows], sl[rows], 16, (8, 2) if sparse else None)
    assert (index.sparse is not None) == sparse
    if sparse:
        padding = 8 * (len(live_lens) * max(live_lens) - sum(live_lens))  # entries: heads x padded positions
        compact = padding > decode_torch.SPARSE_MAX_PADDING_ENTRIES
        assert (index.sparse.pad is not None) == (index.sparse.real is not None) == compact == real_only
    out = decode_torch.decode_attention(q[rows], kc, vc, index, sl[rows], 0.25)
    assert torch.isfinite(out).all(), "NaN from an unused slot leaked into the output"
    expected = decode_reference(q, kc, vc, bt, sl, 0.25)[live]
    torch.testing.assert_close(out.cpu(), expected, atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(out, sdpa_contiguous(q, ks, vs, 0.25)[rows], atol=2e-5, rtol=2e-5)
    public = paged_varlen_attention_planned(q[rows], KVCache(kc, vc), plan, scale=0.25)
    torch.testing.assert_close(public, out, atol=2e-6, rtol=2e-6)


def test_sparse_index_for_other_heads_is_refused():
    q, kc, vc, bt, sl, _, _ = make_paged([37, 5, 70], 8, 2, 16, 16)
    index = helper_index(bt, sl, 16, (4, 2))
    with pytest.raises(ValueError, match="built for 4 query heads but q has 8"):
        decode_torch.decode_attention(q, kc, vc, index, sl, 0.25)


def test_sparse_decode_applies_to_fp32_contiguous_cpu_caches_only():
    kc = torch.zeros(4, 8, 2, 16)
    assert decode_torch.sparse_decode_applies(torch.float32, kc, kc)
    assert not decode_torch.sparse_decode_applies(torch.bfloat16, kc.bfloat16(), kc.bfloat16())
    assert not decode_torch.sparse_decode_applies(torch.float32, kc[:, :, :1], kc[:, :, :1])  # strided view
    assert not decode_torch.sparse_decode_applies(torch.float16, kc, kc)  # q's dtype is not the cache's


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
        (lambda a: a.update(q=a["q"][None]), r"q has shape \(1, 2, 4, 16\) but must be 3-D"),
        (lambda a: a.update(v_cache=a["v_cache"][:-1]), "must match"),
        (lambda a: a.update(q=a["q"].double()), "q has dtype torch.float64"),
        (lambda a: a.update(q=a["q"].half()), "dtypes"),
    ],
)
@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_inputs_raise_clear_errors(change, message, backend):
    args = _valid_inputs()
    change(args)
    with pytest.raises(ValueError, match=message):
        paged_attention(**args, backend=backend)
