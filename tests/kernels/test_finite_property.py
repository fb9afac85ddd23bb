"""The torch backend never returns NaN (or inf) where the slow reference is finite: a property over hostile inputs.

Hypothesis draws softmax scales from 1e-30 to 1e30, query / key / value magnitudes from tiny to near the
dtype's limit (independently, so q . k can be modest while q alone is huge), fp32 / fp16 / bf16, GQA and MQA
head layouts, causal and not, and the attention entry points (varlen, paged varlen with and without a sliding
window, and decode through it: the decode-only wrapper and the torch decode helper's split-K path too).
Wherever kernels/reference.py's output is finite, the torch backend's must be finite, inside the range of the
values it averages, and, where the
softmax is not chaotic (scale x |q| x |k| x head_dim small enough that one ulp of a score cannot flip which
key wins), close to the reference. The NaN sources this guards: a score that overflows when q is scaled
before the matmul (or after, where the reference scales after), `-inf - -inf` in a fully masked row, a
split-K merge of chunks whose log-sum-exp is -inf or +inf.
A few of the same cases run through the Triton kernels too (the interpreter on CPU: small sizes).
"""

from __future__ import annotations

import math
from unittest import mock

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kernels.paged_decode_torch as decode_torch
from kernels.ops import paged_attention, paged_varlen_attention, varlen_attention
from kernels.reference import paged_varlen_attention_ref, varlen_attention_ref
from tests.conftest import DEVICE, TRITON_OK
from tests.kernels.test_paged_decode import decode_reference

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
TOLERANCES = {torch.float32: 2e-4, torch.float16: 4e-3, torch.bfloat16: 3e-2}
HEADS = [(1, 1), (2, 1), (4, 2), (3, 1), (4, 4)]  # (Hq, Hkv)
SCALES = st.one_of(
    st.sampled_from([1e-30, 1e-12, 1e-6, 0.125, 1.0, 1e3, 1e12, 1e30]),
    st.floats(min_value=1e-30, max_value=1e30, allow_nan=False, allow_infinity=False, allow_subnormal=False),
)
# Magnitudes per dtype: randn * magnitude stays finite in the dtype (fp16 tops out at 65504).
MAGNITUDES = {
    torch.float32: [1e-20, 1e-3, 1.0, 1e3, 1e10, 1e18],
    torch.float16: [1e-3, 1.0, 30.0, 1e3],
    torch.bfloat16: [1e-20, 1e-3, 1.0, 1e3, 1e10, 1e18],
}
PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def case(draw, max_len: int = 9):
    dtype = draw(st.sampled_from(DTYPES))
    heads = draw(st.sampled_from(HEADS))
    head_dim = draw(st.sampled_from([1, 4, 8]))
    mags = MAGNITUDES[dtype]
    return {
        "dtype": dtype,
        "heads": heads,
        "head_dim": head_dim,
        "scale": draw(SCALES),
        "mag": (draw(st.sampled_from(mags)), draw(st.sampled_from(mags)), draw(st.sampled_from(mags))),
        "causal": draw(st.booleans()),
        "seed": draw(st.integers(0, 2**16)),
        "lens": draw(st.lists(st.integers(0, max_len), min_size=1, max_size=4)),
        "ties": draw(st.booleans()),  # every key of a head equal: exact ties in every score
    }


def rand(gen: torch.Generator, shape: tuple[int, ...], mag: float, dtype: torch.dtype, ties: bool = False):
    x = torch.randn(shape, generator=gen, dtype=torch.float64)
    if ties and len(shape) == 3 and shape[0]:
        x = x[:1].expand(shape)
    return (x * mag).to(dtype)


def tame(c: dict) -> bool:
    """Whether one ulp of a score is far below 1 after scaling, so the two softmaxes must agree closely."""
    q_mag, k_mag, _ = c["mag"]
    spread = c["scale"] * q_mag * k_mag * c["head_dim"] * 16  # |q . k| * scale, generously bounded
    return spread < 64 and c["scale"] * q_mag * k_mag > 1e-30


def check_against(out: torch.Tensor, ref: torch.Tensor, v_max: float, c: dict) -> None:
    """Finite where the reference is finite, a convex combination of values, and close when tame."""
    assert out.shape == ref.shape and out.dtype == ref.dtype
    finite = ref.isfinite()
    bad = finite & ~out.isfinite()
    assert not bad.any(), f"non-finite output where the reference is finite: {out[bad][:4].tolist()}"
    o, r = out.double(), ref.double()
    tol = TOLERANCES[c["dtype"]]
    assert bool((o[finite].abs() <= v_max * (1 + tol) + 1e-30).all()), "output outside the values' range"
    if tame(c):
        diff = (o - r).abs()[finite]
        assert bool((diff <= tol * v_max + tol * r.abs()[finite]).all()), f"max diff {diff.max().item()}"


def cu_of(lens: list[int]) -> torch.Tensor:
    return torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32) if lens else None


# ------------------------------------------------------------------------------------------------- varlen


def varlen_inputs(c: dict):
    gen = torch.Generator().manual_seed(c["seed"])
    (hq, hkv), d, dtype = c["heads"], c["head_dim"], c["dtype"]
    lens_q = [max(1, n) if i == 0 else n for i, n in enumerate(c["lens"])]
    lens_k = [n + (i % 3) for i, n in enumerate(lens_q)]  # some sequences have more keys than queries
    q = rand(gen, (sum(lens_q), hq, d), c["mag"][0], dtype)
    k = rand(gen, (sum(lens_k), hkv, d), c["mag"][1], dtype, c["ties"])
    v = rand(gen, (sum(lens_k), hkv, d), c["mag"][2], dtype)
    return q, k, v, cu_of(lens_q), cu_of(lens_k), max(lens_q), max(lens_k)


def run_varlen(c: dict, backend: str) -> None:
    q, k, v, cu_q, cu_k, mq, mk = varlen_inputs(c)
    ref = varlen_attention_ref(q, k, v, cu_q, cu_k, causal=c["causal"], scale=c["scale"])
    dev = [x.to(DEVICE) for x in (q, k, v, cu_q, cu_k)]
    out = varlen_attention(*dev, mq, mk, causal=c["causal"], scale=c["scale"], backend=backend).cpu()
    check_against(out, ref, float(v.double().abs().max()) if v.numel() else 0.0, c)


@PROPERTY
@given(case())
def test_varlen_torch_is_finite_where_the_reference_is(c):
    run_varlen(c, "torch")


# -------------------------------------------------------------------------------------------------- paged


def paged_inputs(c: dict, block_size: int, lens_q: list[int] | None = None, window: int | None = None):
    """A NaN-filled cache with each sequence's K/V scattered over shuffled blocks, plus q and the tables."""
    gen = torch.Generator().manual_seed(c["seed"])
    (hq, hkv), d, dtype = c["heads"], c["head_dim"], c["dtype"]
    lens = c["lens"]
    per_seq = [-(-n // block_size) for n in lens]
    num_blocks = sum(per_seq) + 1
    physical = torch.randperm(num_blocks, generator=gen).tolist()
    k_cache = torch.full((num_blocks, block_size, hkv, d), float("nan"), dtype=dtype)
    v_cache = torch.full((num_blocks, block_size, hkv, d), float("nan"), dtype=dtype)
    tables = torch.zeros(len(lens), max(max(per_seq), 1), dtype=torch.int32)
    v_max = 0.0
    for i, n in enumerate(lens):
        k = rand(gen, (n, hkv, d), c["mag"][1], dtype, c["ties"])
        v = rand(gen, (n, hkv, d), c["mag"][2], dtype)
        v_max = max(v_max, float(v.double().abs().max()) if n else 0.0)
        for b in range(per_seq[i]):
            block = physical.pop()
            tables[i, b] = block
            rows = slice(b * block_size, min(n, (b + 1) * block_size))
            k_cache[block, : rows.stop - rows.start] = k[rows]
            v_cache[block, : rows.stop - rows.start] = v[rows]
    total_q = len(lens) if lens_q is None else sum(lens_q)
    q = rand(gen, (total_q, hq, d), c["mag"][0], dtype)
    return q, k_cache, v_cache, tables, torch.tensor(lens, dtype=torch.int32), v_max


@PROPERTY
@given(case(max_len=20), st.sampled_from([1, 4, 8]))
def test_paged_decode_torch_is_finite_where_the_reference_is(c, block_size):
    q, k_cache, v_cache, tables, lens, v_max = paged_inputs(c, block_size)
    ref = decode_reference(q, k_cache, v_cache, tables, lens, scale=c["scale"])
    dev = [x.to(DEVICE) for x in (q, k_cache, v_cache, tables, lens)]
    out = paged_attention(*dev, scale=c["scale"], backend="torch").cpu()
    check_against(out, ref, v_max, c)


@PROPERTY
@given(case(max_len=12), st.sampled_from([1, 4, 8]), st.sampled_from([None, 1, 3]), st.data())
def test_paged_varlen_torch_is_finite_where_the_reference_is(c, block_size, window, data):
    causal = c["causal"] or window is not None
    lens_q = [data.draw(st.integers(0, n)) for n in c["lens"]]
    q, k_cache, v_cache, tables, lens, v_max = paged_inputs(c, block_size, lens_q, window)
    cu = cu_of(lens_q)
    ref = paged_varlen_attention_ref(q, k_cache, v_cache, cu, lens, tables, causal, c["scale"], window)
    dev = [x.to(DEVICE) for x in (q, k_cache, v_cache, cu, lens, tables)]
    out = paged_varlen_attention(
        *dev, max(lens_q), causal=causal, scale=c["scale"], sliding_window=window, backend="torch"
    ).cpu()
    check_against(out, ref, v_max, c)


@pytest.mark.parametrize("scale", [1e-30, 1e30])
def test_split_k_merge_stays_finite_at_extreme_scales(scale):
    """Long bf16 decode rows through the split-K gather path (several 64-token chunks merged by log-sum-exp)."""
    c = {
        "dtype": torch.bfloat16,
        "heads": (4, 2),
        "head_dim": 8,
        "scale": scale,
        "mag": (1.0, 1.0, 1.0),
        "causal": False,
        "seed": 3,
        "lens": [150, 70, 0, 1],
        "ties": False,
    }
    q, k_cache, v_cache, tables, lens, v_max = paged_inputs(c, 16)
    ref = decode_reference(q, k_cache, v_cache, tables, lens, scale=scale)
    with mock.patch.object(decode_torch, "TORCH_CHUNK_BYTES", 1):
        out = paged_attention(q, k_cache, v_cache, tables, lens, scale=scale, backend="torch")
    check_against(out, ref, v_max, c)


# ------------------------------------------------------------------------------------------------- triton

TRITON_CASES = [
    {
        "dtype": torch.float32,
        "heads": (4, 2),
        "head_dim": 8,
        "scale": 1e30,
        "mag": (1.0, 1.0, 1.0),
        "causal": True,
        "seed": 1,
        "lens": [3, 5],
        "ties": False,
    },
    {
        "dtype": torch.float32,
        "heads": (2, 1),
        "head_dim": 4,
        "scale": 1e-30,
        "mag": (1e18, 1e18, 1.0),
        "causal": False,
        "seed": 2,
        "lens": [4, 1],
        "ties": True,
    },
    {
        "dtype": torch.float16,
        "heads": (2, 2),
        "head_dim": 8,
        "scale": 1e12,
        "mag": (1e3, 1e-3, 1e3),
        "causal": True,
        "seed": 3,
        "lens": [2, 6],
        "ties": False,
    },
]


@pytest.mark.skipif(not TRITON_OK, reason="triton not installed")
@pytest.mark.parametrize("c", TRITON_CASES, ids=lambda c: f"{c['dtype']}-scale{c['scale']:g}")
def test_triton_is_finite_where_the_reference_is(c):
    run_varlen(c, "triton")
    q, k_cache, v_cache, tables, lens, v_max = paged_inputs(c, 4)
    ref = decode_reference(q, k_cache, v_cache, tables, lens, scale=c["scale"])
    dev = [x.to(DEVICE) for x in (q, k_cache, v_cache, tables, lens)]
    check_against(paged_attention(*dev, scale=c["scale"], backend="triton").cpu(), ref, v_max, c)
    lens_q = [min(2, n) for n in c["lens"]]
    q, k_cache, v_cache, tables, lens, v_max = paged_inputs(c, 4, lens_q)
    cu = cu_of(lens_q)
    ref = paged_varlen_attention_ref(q, k_cache, v_cache, cu, lens, tables, True, c["scale"])
    dev = [x.to(DEVICE) for x in (q, k_cache, v_cache, cu, lens, tables)]
    out = paged_varlen_attention(*dev, max(lens_q), causal=True, scale=c["scale"], backend="triton").cpu()
    check_against(out, ref, v_max, c)


def test_tame_is_not_vacuous():
    """The closeness check runs for ordinary cases (scale 1/sqrt(D), unit inputs)."""
    c = {"scale": 8**-0.5, "mag": (1.0, 1.0, 1.0), "head_dim": 8}
    assert tame(c) and not tame(c | {"scale": 1e30}) and math.isfinite(c["scale"])
