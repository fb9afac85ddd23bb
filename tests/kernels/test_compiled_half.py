"""The Triton kernels compiled, in bf16 and fp16 at serving shapes, against the fp32 references (CUDA only).

Under TRITON_INTERPRET (CPU) the kernels upcast half-precision operands to fp32 first, because Triton 3.7's
interpreter returns garbage from tl.dot on bf16, so the bf16/fp16 dots and the 128 x 64 tiles never run on
CPU. This file runs them compiled: head dim 128, GQA 32:8, sequences spanning several query and key tiles with
len_k - len_q on and around tile edges, decode (paged varlen with one query per sequence) over scattered
blocks up to 4099 tokens long, and store_kv. bench/gpu_check.sh runs it as its own step; on CPU every test is skipped.
"""

from __future__ import annotations

import pytest
import torch

from kernels.ops import paged_attention, store_kv, varlen_attention
from kernels.reference import store_kv_ref, varlen_attention_ref
from tests.conftest import DEVICE, requires_cuda
from tests.kernels.test_paged_decode import decode_reference, decode_varlen, make_paged
from tests.kernels.test_varlen_attention import make, tile_edge_cases

pytestmark = requires_cuda

HALF = [torch.bfloat16, torch.float16]
# Worst case per element: p rounded to the dtype before the P @ V dot plus the output's own rounding
# (bf16: 2^-8 relative, fp16: 2^-11) on outputs of magnitude up to ~3. The mean bound catches a small
# systematic error (a dropped key, a wrong scale) that the per-element bound would let through.
TOL = {torch.bfloat16: (3e-2, 3e-2, 4e-3), torch.float16: (4e-3, 4e-3, 5e-4)}  # atol, rtol, mean abs error
HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128  # Llama-3-8B's attention shape


def assert_half_close(out: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> None:
    atol, rtol, mean = TOL[dtype]
    assert out.dtype == dtype and torch.isfinite(out).all()
    torch.testing.assert_close(out.float(), expected.float(), atol=atol, rtol=rtol)
    assert (out.float() - expected.float()).abs().mean() <= mean


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("causal", [False, True])
def test_varlen_compiled_half(dtype, causal):
    group = HEADS // KV_HEADS
    lens = tile_edge_cases(dtype, group, HEAD_DIM) + [(1, 1), (200, 200), (130, 330), (64, 127), (0, 5)]
    lens_q, lens_k = [a for a, _ in lens], [b for _, b in lens]
    q, k, v, cu_q, cu_k = make(lens_q, lens_k, HEADS, KV_HEADS, d=HEAD_DIM, dtype=dtype)
    out = varlen_attention(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=causal, backend="triton")
    expected = varlen_attention_ref(q.float(), k.float(), v.float(), cu_q, cu_k, causal=causal)
    assert_half_close(out, expected, dtype)


@pytest.mark.parametrize("dtype", HALF)
def test_paged_decode_compiled_half(dtype):
    lens = [1, 15, 16, 17, 63, 64, 65, 1000, 4099, 0]  # block edges, tile edges (64), long contexts, empty
    q, kc, vc, bt, sl, _, _ = make_paged(lens, HEADS, KV_HEADS, HEAD_DIM, 16, dtype=dtype)
    out = paged_attention(q, kc, vc, bt, sl, backend="triton")
    expected = decode_reference(q.float(), kc.float(), vc.float(), bt, sl).to(DEVICE)
    assert_half_close(out, expected, dtype)
    varlen, live = decode_varlen(q, kc, vc, bt, sl, backend="triton")
    assert torch.equal(varlen, out[live]) and not out[-1].any()


@pytest.mark.parametrize("dtype", HALF)
def test_store_kv_compiled_half(dtype):
    k_cache = torch.randn(40, 16, KV_HEADS, HEAD_DIM, device=DEVICE).to(dtype)
    v_cache = torch.randn_like(k_cache)
    k = torch.randn(300, KV_HEADS, HEAD_DIM, device=DEVICE).to(dtype)
    v = torch.randn_like(k)
    slots = torch.randperm(40 * 16, device=DEVICE)[:300].to(torch.int32)
    slots[::7] = -1  # padding tokens are skipped
    expected_k, expected_v = k_cache.clone(), v_cache.clone()
    store_kv_ref(k, v, expected_k, expected_v, slots)
    store_kv(k, v, k_cache, v_cache, slots, backend="triton")
    assert torch.equal(k_cache, expected_k) and torch.equal(v_cache, expected_v)  # a copy: bit for bit
