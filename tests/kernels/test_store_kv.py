"""Writing K/V into the paged cache (kernels.ops.store_kv) and reading it back through paged_attention."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kernels.ops import paged_attention, plan_attention, store_kv, store_kv_planned
from kernels.plan import KVCache
from kernels.reference import store_kv_ref
from tests.conftest import DEVICE, TRITON_OK

BACKENDS = ["torch", pytest.param("triton", marks=pytest.mark.skipif(not TRITON_OK, reason="triton not installed"))]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _cache(num_blocks, block_size, num_kv_heads, head_dim, dtype=torch.float32):
    k_cache = torch.randn(num_blocks, block_size, num_kv_heads, head_dim).to(dtype=dtype, device=DEVICE)
    return k_cache, torch.randn_like(k_cache)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("slot_dtype", [torch.int32, torch.int64])
def test_matches_reference_and_skips_negative_slots(backend, dtype, slot_dtype):
    k_cache, v_cache = _cache(6, 8, 3, 24, dtype)  # head dim 24 and 3 heads: not powers of two
    k = torch.randn(7, 3, 24).to(dtype=dtype, device=DEVICE)
    v = torch.randn(7, 3, 24).to(dtype=dtype, device=DEVICE)
    slots = torch.tensor([3, -1, 17, 47, -7, 0, 8], dtype=slot_dtype, device=DEVICE)
    expected_k, expected_v = k_cache.clone(), v_cache.clone()
    store_kv_ref(k, v, expected_k, expected_v, slots)
    before = k_cache.clone()
    store_kv(k, v, k_cache, v_cache, slots, backend=backend)
    assert torch.equal(k_cache, expected_k) and torch.equal(v_cache, expected_v)
    # Independent of the reference: each live token sits at (slot // block_size, slot % block_size) ...
    for i, slot in enumerate(slots.tolist()):
        if slot >= 0:
            assert torch.equal(k_cache[slot // 8, slot % 8], k[i]) and torch.equal(v_cache[slot // 8, slot % 8], v[i])
    # ... and every other slot is untouched.
    written = torch.zeros(6 * 8, dtype=torch.bool)
    written[[s for s in slots.tolist() if s >= 0]] = True
    assert torch.equal(k_cache.view(48, 3, 24)[~written], before.view(48, 3, 24)[~written])


@pytest.mark.parametrize("backend", BACKENDS)
def test_all_slots_negative_and_no_tokens(backend):
    k_cache, v_cache = _cache(2, 4, 2, 8)
    before = k_cache.clone(), v_cache.clone()
    k = torch.randn(3, 2, 8, device=DEVICE)
    store_kv(k, k.clone(), k_cache, v_cache, torch.full((3,), -1, device=DEVICE), backend=backend)
    store_kv(k[:0], k[:0], k_cache, v_cache, torch.zeros(0, dtype=torch.int64, device=DEVICE), backend=backend)
    assert torch.equal(k_cache, before[0]) and torch.equal(v_cache, before[1])


def test_torch_backend_writes_into_a_strided_cache():
    """A cache that is a view (e.g. one layer's half of a fused K|V buffer) must be written in place."""
    fused = torch.zeros(4, 8, 2, 32, device=DEVICE)
    k_cache, v_cache = fused[..., :16], fused[..., 16:]
    k, v = torch.randn(3, 2, 16, device=DEVICE), torch.randn(3, 2, 16, device=DEVICE)
    store_kv(k, v, k_cache, v_cache, torch.tensor([0, 9, 31], device=DEVICE), backend="torch")
    assert torch.equal(fused[1, 1, :, :16], k[1]) and torch.equal(fused[3, 7, :, 16:], v[2])


@pytest.mark.parametrize("backend", BACKENDS)
def test_round_trip_prefill_then_decode(backend):
    """Store two sequences token by token through scattered blocks, then attend: equals contiguous SDPA."""
    block_size, num_kv_heads, head_dim, num_heads = 8, 2, 16, 4
    k_cache, v_cache = _cache(10, block_size, num_kv_heads, head_dim)
    k_cache.fill_(float("nan"))  # nothing but the stored tokens may be read
    v_cache.fill_(float("nan"))
    lens = [13, 21]
    tables = [[7, 2], [0, 9, 4]]
    ks = [torch.randn(n, num_kv_heads, head_dim, device=DEVICE) for n in lens]
    vs = [torch.randn(n, num_kv_heads, head_dim, device=DEVICE) for n in lens]
    for i, n in enumerate(lens):
        positions = torch.arange(n)
        slots = torch.tensor(tables[i])[positions // block_size] * block_size + positions % block_size
        store_kv(ks[i], vs[i], k_cache, v_cache, slots.to(DEVICE), backend=backend)
    block_tables = torch.tensor([tables[0] + [0], tables[1]], dtype=torch.int32, device=DEVICE)
    q = torch.randn(2, num_heads, head_dim, device=DEVICE)
    out = paged_attention(q, k_cache, v_cache, block_tables, torch.tensor(lens, dtype=torch.int32, device=DEVICE))
    for i in range(2):
        expected = F.scaled_dot_product_attention(
            q[i, :, None], ks[i].transpose(0, 1), vs[i].transpose(0, 1), enable_gqa=True
        )[:, 0]  # [Hq, D]
        torch.testing.assert_close(out[i], expected, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_planned_store_matches_the_validated_store(backend):
    """With a step plan (its slot mapping validated once) store_kv writes exactly what a validating call writes."""
    k, v = torch.randn(5, 3, 24, device=DEVICE), torch.randn(5, 3, 24, device=DEVICE)
    slots = torch.tensor([3, -1, 17, 47, 0], device=DEVICE)
    checked = _cache(6, 8, 3, 24)
    planned = tuple(c.clone() for c in checked)
    cu = torch.arange(6, dtype=torch.int32, device=DEVICE)  # five sequences decoding one token each
    tables = torch.arange(6, dtype=torch.int32, device=DEVICE).repeat(5, 1)
    lens = torch.tensor([4, 1, 18, 48, 1], dtype=torch.int32, device=DEVICE)
    plan = plan_attention(cu, lens, tables, 1, slots, *planned, num_heads=3, q_dtype=torch.float32, backend=backend)
    store_kv(k, v, *checked, slots, backend=backend)
    store_kv_planned(k, v, KVCache(*planned), plan)
    assert torch.equal(planned[0], checked[0]) and torch.equal(planned[1], checked[1])
    assert torch.equal(planned[0][17 // 8, 17 % 8], k[2]) and torch.equal(planned[1][47 // 8, 47 % 8], v[3])


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda a: a.update(slot_mapping=a["slot_mapping"].float()), "slot_mapping has dtype"),
        (lambda a: a["slot_mapping"].__setitem__(1, 64), "slots must be < 64"),
        (lambda a: a["slot_mapping"].__setitem__(1, 3), "same slot twice"),
        (lambda a: a.update(slot_mapping=a["slot_mapping"][:2]), "give one each"),
        (lambda a: a.update(k=a["k"][:, :1], v=a["v"][:, :1]), "must match"),
        (lambda a: a.update(v=a["v"].half()), "dtypes"),
    ],
)
@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_inputs_raise_clear_errors(change, message, backend):
    k_cache, v_cache = _cache(8, 8, 2, 16)
    args = dict(
        k=torch.randn(3, 2, 16, device=DEVICE),
        v=torch.randn(3, 2, 16, device=DEVICE),
        k_cache=k_cache,
        v_cache=v_cache,
        slot_mapping=torch.tensor([3, 5, -1], device=DEVICE),
    )
    change(args)
    with pytest.raises(ValueError, match=message):
        store_kv(**args, backend=backend)
