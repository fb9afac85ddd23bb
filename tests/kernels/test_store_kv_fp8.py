"""store_kv into an fp8 (float8 e4m3) cache: values quantized with the given scale, nothing else touched, and
a scale that holds 0 calibrated from the first values written, once.

The reference is torch's own float8 cast of x / scale (saturated to +-448); round trips stay within e4m3's
half step (2^-4 relative) and values past the range clamp instead of becoming inf or NaN. Calibration is
checked against its definition, amax(|x| of the stored tokens) * FP8_HEADROOM / 448 (per KV head for a
per-head scale), on both backends, with and without a step plan.
"""

from __future__ import annotations

import pytest
import torch

from kernels.backend import triton_interpreting
from kernels.fp8 import FP8_DTYPE, FP8_HEADROOM, FP8_MAX, calibrate_scale
from kernels.ops import plan_attention, store_kv, store_kv_planned
from kernels.plan import KVCache
from tests.conftest import DEVICE, TRITON_OK

FP8 = torch.float8_e4m3fn
BACKENDS = ["torch", pytest.param("triton", marks=pytest.mark.skipif(not TRITON_OK, reason="triton not installed"))]


def _expected(x: torch.Tensor, scale: float) -> torch.Tensor:
    return (x.float() / scale).clamp(-448, 448).to(FP8).float()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fp8_store_quantizes_with_the_scale(backend, dtype):
    k_cache = torch.zeros(3, 4, 2, 16, dtype=FP8, device=DEVICE)
    v_cache = torch.zeros_like(k_cache)
    k = (torch.randn(5, 2, 16) * 3).to(dtype=dtype, device=DEVICE)
    v = (torch.randn(5, 2, 16) * 0.01).to(dtype=dtype, device=DEVICE)
    k[0, 0, 0] = 1e6  # far past 448 * scale: must saturate, not overflow
    slots = torch.tensor([0, 5, -1, 11, 2], device=DEVICE)
    k_scale, v_scale = torch.tensor([0.05], device=DEVICE), torch.tensor([1e-4], device=DEVICE)
    store_kv(k, v, k_cache, v_cache, slots, backend=backend, k_scale=k_scale, v_scale=v_scale)
    for cache, x, s in ((k_cache, k, 0.05), (v_cache, v, 1e-4)):
        flat = cache.float().view(12, 2, 16)
        got, want = flat[[0, 5, 11, 2]], _expected(x[[0, 1, 3, 4]], s)
        mismatch = got != want
        if backend == "triton" and triton_interpreting():
            # The interpreter's numpy float8 cast puts values that round UP to a power of two one binade
            # low (e.g. 31.6 -> 16 instead of 32); compiled Triton on a GPU rounds like torch.
            assert torch.equal(got[mismatch] * 2, want[mismatch]) and mismatch.float().mean() < 0.1
        else:
            assert not mismatch.any()
        assert torch.isfinite(flat).all()
        untouched = torch.ones(12, dtype=torch.bool)
        untouched[[0, 5, 11, 2]] = False
        assert not flat[untouched].any()  # only the live slots were written
    assert k_cache.float().view(12, 2, 16)[0, 0, 0] == 448  # saturated
    # Round trip: dequantized values within e4m3's half step of the input (normal range).
    back = k_cache.float().view(12, 2, 16)[[5, 11]] * 0.05
    ref = k[[1, 3]].float()
    if not (backend == "triton" and triton_interpreting()):
        assert ((back - ref).abs() <= ref.abs() * 2**-4 + 0.05 * 2**-9).all()


def test_fp8_cache_without_scales_is_a_value_error():
    k_cache = torch.zeros(2, 4, 2, 8, dtype=FP8)
    k = torch.randn(1, 2, 8)
    with pytest.raises(ValueError, match="k_scale is None"):
        store_kv(k, k, k_cache, k_cache.clone(), torch.tensor([0]))


# ---- scale calibration: a scale that holds 0 is set by the first store, from the values it writes -----------


def test_calibrate_scale_is_amax_times_headroom_over_448():
    scale = torch.zeros(1)
    x = torch.tensor([[0.5, -3.0], [1.0, 2.0]])
    calibrate_scale(scale, x)
    assert torch.allclose(scale, torch.tensor([3.0 * FP8_HEADROOM / 448]))
    calibrate_scale(scale, x * 100)  # already set: unchanged
    assert torch.allclose(scale, torch.tensor([3.0 * FP8_HEADROOM / 448]))
    zero = torch.zeros(1)
    calibrate_scale(zero, torch.zeros(3))  # an all-zero first write must not leave a zero (x / 0) scale
    assert zero.item() == 1.0
    assert FP8_HEADROOM == 4.0 and FP8_MAX == 448.0 and FP8_DTYPE == torch.float8_e4m3fn


def test_calibrate_scale_per_kv_head_and_only_from_written_tokens():
    x = torch.tensor([[[1.0, -2.0], [0.5, 0.25]], [[100.0, 0.0], [-300.0, 0.0]], [[0.0, 4.0], [0.0, -8.0]]])
    written = torch.tensor([True, False, True])  # token 1 is a padding token (slot < 0): it must not count
    per_head = torch.zeros(2)
    calibrate_scale(per_head, x, written)
    torch.testing.assert_close(per_head, torch.tensor([4.0, 8.0]) * FP8_HEADROOM / 448)
    per_layer = torch.zeros(())
    calibrate_scale(per_layer, x, written)
    torch.testing.assert_close(per_layer, torch.tensor(8.0 * FP8_HEADROOM / 448))
    nothing = torch.zeros(1)
    calibrate_scale(nothing, x, torch.zeros(3, dtype=torch.bool))  # nothing stored: still not calibrated
    calibrate_scale(nothing, x[:0])
    assert nothing.item() == 0.0


def _store_case(num_kv_heads: int = 2):
    k_cache = torch.zeros(3, 4, num_kv_heads, 16, dtype=FP8, device=DEVICE)
    k = torch.randn(4, num_kv_heads, 16, device=DEVICE) * torch.arange(1, num_kv_heads + 1, device=DEVICE)[:, None]
    v = torch.randn(4, num_kv_heads, 16, device=DEVICE) * 0.01
    k[2] = 1e6  # token 2 is skipped (slot -1): its huge value must not set the scale
    slots = torch.tensor([0, 5, -1, 11], device=DEVICE)
    return k_cache, torch.zeros_like(k_cache), k, v, slots


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("planned", [False, True])
def test_store_kv_calibrates_an_unset_scale_once(backend, planned):
    k_cache, v_cache, k, v, slots = _store_case()
    k_scale, v_scale = torch.zeros(1, device=DEVICE), torch.zeros(1, device=DEVICE)
    plan = None
    if planned:  # decode of 4 sequences, one new token each (the skipped one included)
        cu = torch.arange(5, dtype=torch.int32, device=DEVICE)
        tables = torch.tensor([[0, 1, 2]] * 4, dtype=torch.int32, device=DEVICE)
        lens = torch.tensor([1, 6, 1, 12], dtype=torch.int32, device=DEVICE)
        plan = plan_attention(
            cu,
            lens,
            tables,
            1,
            slots,
            k_cache,
            v_cache,
            num_heads=2,
            q_dtype=torch.float32,
            k_scale=k_scale,
            v_scale=v_scale,
            backend=backend,
        )

    def store(k, v):
        if planned:
            store_kv_planned(k, v, KVCache(k_cache, v_cache, k_scale, v_scale), plan)
        else:
            store_kv(k, v, k_cache, v_cache, slots, backend=backend, k_scale=k_scale, v_scale=v_scale)

    store(k, v)
    live = k[[0, 1, 3]]
    expected_k = live.abs().max() * FP8_HEADROOM / 448
    expected_v = v[[0, 1, 3]].abs().max() * FP8_HEADROOM / 448
    torch.testing.assert_close(k_scale, expected_k.reshape(1))
    torch.testing.assert_close(v_scale, expected_v.reshape(1))
    stored = k_cache.float().view(12, 2, 16)[[0, 5, 11]]
    want = _expected(live, float(k_scale))
    if backend == "triton" and triton_interpreting():  # the interpreter's float8 cast (see above)
        assert (stored == want).float().mean() > 0.9
    else:
        assert torch.equal(stored, want)
    assert stored.abs().max() <= 448 / FP8_HEADROOM * (1 + 2**-3)  # the first write's amax maps to 448 / 4
    first = k_scale.clone(), v_scale.clone()
    store(k * 100, v * 100)  # a set scale stays fixed
    assert torch.equal(k_scale, first[0]) and torch.equal(v_scale, first[1])
    assert k_cache.float().view(12, 2, 16)[[0, 5, 11]].abs().max() == 448  # saturated, not re-scaled


def test_torch_store_calibrates_per_kv_head_scales():
    k_cache, v_cache, k, v, slots = _store_case(num_kv_heads=3)
    k_scale, v_scale = torch.zeros(3, device=DEVICE), torch.tensor([0.5, 0.0, 0.25], device=DEVICE)
    store_kv(k, v, k_cache, v_cache, slots, backend="torch", k_scale=k_scale, v_scale=v_scale)
    live = [0, 1, 3]
    torch.testing.assert_close(k_scale, k[live].abs().amax(dim=(0, 2)) * FP8_HEADROOM / 448)
    assert v_scale[0] == 0.5 and v_scale[2] == 0.25  # set heads keep their scale; only the unset one is set
    torch.testing.assert_close(v_scale[1], v[live, 1].abs().max() * FP8_HEADROOM / 448)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_store_that_writes_nothing_leaves_the_scale_unset(backend):
    k_cache, v_cache, k, v, _ = _store_case()
    k_scale, v_scale = torch.zeros(1, device=DEVICE), torch.zeros(1, device=DEVICE)
    skipped = torch.full((4,), -1, device=DEVICE)
    store_kv(k, v, k_cache, v_cache, skipped, backend=backend, k_scale=k_scale, v_scale=v_scale)
    empty = torch.zeros(0, dtype=torch.int64, device=DEVICE)
    store_kv(k[:0], v[:0], k_cache, v_cache, empty, backend=backend, k_scale=k_scale, v_scale=v_scale)
    assert k_scale.item() == 0.0 and v_scale.item() == 0.0 and not k_cache.float().any()


@pytest.mark.parametrize("bad", [-0.5, float("nan"), float("inf")])
def test_unusable_scales_are_refused_before_anything_is_written(bad):
    k_cache, v_cache, k, v, slots = _store_case()
    k_scale, v_scale = torch.tensor([bad], device=DEVICE), torch.zeros(1, device=DEVICE)
    with pytest.raises(ValueError, match="scales must be finite and >= 0"):
        store_kv(k, v, k_cache, v_cache, slots, backend="torch", k_scale=k_scale, v_scale=v_scale)
    assert v_scale.item() == 0.0 and not k_cache.float().any()  # not calibrated, not written


@pytest.mark.skipif(not TRITON_OK, reason="triton not installed")
def test_triton_store_refuses_per_head_scales():
    k_cache, v_cache, k, v, slots = _store_case()
    with pytest.raises(ValueError, match="the Triton store_kv takes one scale per layer"):
        store_kv(k, v, k_cache, v_cache, slots, backend="triton", k_scale=torch.ones(2), v_scale=torch.ones(1))
