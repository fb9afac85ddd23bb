"""memory_efficient_attention over BMK / BMHK / BMGHK with and without block-diagonal biases, both backends."""

import pytest
import torch
import torch.nn.functional as F

from engine.attention.attn_bias import (
    BlockDiagonalCausalFromBottomRightMask,
    BlockDiagonalCausalMask,
    BlockDiagonalMask,
)
from engine.attention.fmha import memory_efficient_attention
from kernels.reference import block_diagonal_mask, masked_attention_ref
from tests.conftest import DEVICE, requires_triton

BACKENDS = ["torch", pytest.param("triton", marks=requires_triton)]
BIASES = [
    (BlockDiagonalMask, None),
    (BlockDiagonalCausalMask, "top_left"),
    (BlockDiagonalCausalFromBottomRightMask, "bottom_right"),
]
# (q lengths, kv lengths): self-attention, queries appended to a longer prefix, more queries than keys.
SEQLENS = [([3, 1, 5], None), ([2, 4, 1], [5, 4, 3]), ([4, 3, 2], [2, 0, 2])]
TOL = {"atol": 1e-4, "rtol": 1e-4}


def sdpa_bmhk(q, k, v, scale=None):
    """SDPA in BMHK layout with K/V heads already matching q."""
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), scale=scale)
    return out.transpose(1, 2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_bmhk_no_bias_matches_sdpa(backend):
    q, k, v = (torch.randn(2, n, 4, 16, device=DEVICE) for n in (5, 7, 7))
    out = memory_efficient_attention(q, k, v, backend=backend)
    assert out.shape == q.shape
    torch.testing.assert_close(out, sdpa_bmhk(q, k, v), **TOL)


@pytest.mark.parametrize("backend", BACKENDS)
def test_bmk_layout_and_scale(backend):
    q, k, v = (torch.randn(3, n, 8, device=DEVICE) for n in (4, 6, 6))
    out = memory_efficient_attention(q, k, v, scale=0.5, backend=backend)
    expected = F.scaled_dot_product_attention(q, k, v, scale=0.5)
    assert out.shape == q.shape
    torch.testing.assert_close(out, expected, **TOL)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kv_form", ["size1", "expanded"])
def test_bmghk_gqa_matches_repeated_heads(backend, kv_form):
    """The Llama/Mistral inference pattern: K/V [B, N, G, 1, K] or expanded to H with stride 0."""
    b, m, n, g, h, d = 2, 5, 6, 2, 3, 16
    q = torch.randn(b, m, g, h, d, device=DEVICE)
    k1, v1 = torch.randn(b, n, g, 1, d, device=DEVICE), torch.randn(b, n, g, 1, d, device=DEVICE)
    k, v = (k1, v1) if kv_form == "size1" else (k1.expand(b, n, g, h, d), v1.expand(b, n, g, h, d))
    out = memory_efficient_attention(q, k, v, backend=backend)
    assert out.shape == q.shape
    # Independent check: plain MHA on K/V materialized per query head.
    k_full, v_full = k1.expand(b, n, g, h, d).reshape(b, n, g * h, d), v1.expand(b, n, g, h, d).reshape(b, n, g * h, d)
    expected = sdpa_bmhk(q.reshape(b, m, g * h, d), k_full, v_full).reshape(b, m, g, h, d)
    torch.testing.assert_close(out, expected, **TOL)


@pytest.mark.parametrize("backend", BACKENDS)
def test_bmhk_mqa_expanded_and_gqa_divisor(backend):
    q = torch.randn(1, 4, 6, 8, device=DEVICE)
    k1, v1 = torch.randn(1, 5, 1, 8, device=DEVICE), torch.randn(1, 5, 1, 8, device=DEVICE)
    out = memory_efficient_attention(q, k1.expand(1, 5, 6, 8), v1.expand(1, 5, 6, 8), backend=backend)
    torch.testing.assert_close(out, sdpa_bmhk(q, k1.expand(1, 5, 6, 8), v1.expand(1, 5, 6, 8)), **TOL)
    k2, v2 = torch.randn(1, 5, 2, 8, device=DEVICE), torch.randn(1, 5, 2, 8, device=DEVICE)  # 2 KV heads
    out2 = memory_efficient_attention(q, k2, v2, backend=backend)
    rep = lambda x: x.repeat_interleave(3, dim=2)  # query head h reads KV head h // 3
    torch.testing.assert_close(out2, sdpa_bmhk(q, rep(k2), rep(v2)), **TOL)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("bias_cls", "align"), BIASES)
@pytest.mark.parametrize("seqlens", SEQLENS)
def test_block_diagonal_matches_reference(backend, bias_cls, align, seqlens):
    lens_q, lens_k = seqlens
    lens_k_real = lens_q if lens_k is None else lens_k
    g, h, d = 2, 2, 16
    bias = bias_cls.from_seqlens(lens_q, lens_k)
    q = torch.randn(1, sum(lens_q), g, h, d, device=DEVICE)
    k = torch.randn(1, sum(lens_k_real), g, 1, d, device=DEVICE).expand(-1, -1, -1, h, -1)
    v = torch.randn(1, sum(lens_k_real), g, 1, d, device=DEVICE).expand(-1, -1, -1, h, -1)
    out = memory_efficient_attention(q, k, v, attn_bias=bias, backend=backend)
    mask = block_diagonal_mask(lens_q, lens_k_real, causal=align, device=DEVICE)
    expected = masked_attention_ref(q[0].flatten(1, 2), k[0, :, :, 0], v[0, :, :, 0], mask)  # [Mq, G*H, D]
    assert out.shape == q.shape and not out.isnan().any()
    torch.testing.assert_close(out[0].flatten(1, 2), expected, **TOL)


@pytest.mark.parametrize("backend", BACKENDS)
def test_block_diagonal_matches_sdpa_with_materialized_bias(backend):
    """Independent of our references: SDPA with the bias's own additive mask (no fully masked rows here)."""
    bias = BlockDiagonalCausalMask.from_seqlens([3, 4, 2])
    q, k, v = (torch.randn(1, 9, 4, 8, device=DEVICE) for _ in range(3))
    out = memory_efficient_attention(q, k, v, attn_bias=bias, backend=backend)
    additive = bias.materialize((1, 4, 9, 9), device=DEVICE)
    expected = F.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=additive
    )
    torch.testing.assert_close(out, expected.transpose(1, 2), **TOL)


def test_packed_equals_separate_calls():
    """Packing with from_tensor_list then split gives each request its own unpacked answer."""
    xs = [torch.randn(1, n, 2, 8, device=DEVICE) for n in (3, 6, 1)]
    bias, packed = BlockDiagonalMask.from_tensor_list(xs)
    outs = bias.split(memory_efficient_attention(packed, packed, packed, attn_bias=bias.make_causal()))
    for x, o in zip(xs, outs, strict=True):
        expected = F.scaled_dot_product_attention(
            x.transpose(1, 2), x.transpose(1, 2), x.transpose(1, 2), is_causal=True
        )
        torch.testing.assert_close(o, expected.transpose(1, 2), **TOL)


@pytest.mark.parametrize(
    ("shapes", "kwargs", "match"),
    [
        (((2, 3), (2, 3), (2, 3)), {}, "use one of"),
        (((1, 3, 2, 8), (1, 3, 8), (1, 3, 8)), {}, "one layout"),
        (((1, 3, 2, 8), (1, 4, 2, 8), (1, 3, 2, 8)), {}, "key has shape"),
        (((1, 3, 2, 8), (2, 3, 2, 8), (2, 3, 2, 8)), {}, "batch 1 but key has 2"),
        (((1, 3, 2, 2, 8), (1, 3, 3, 1, 8), (1, 3, 3, 1, 8)), {}, "G=2 groups but key has 3"),
        (((1, 3, 2, 4, 8), (1, 3, 2, 2, 8), (1, 3, 2, 2, 8)), {}, "H dim is 2"),
        (((1, 3, 2, 8), (1, 3, 2, 4), (1, 3, 2, 4)), {}, "head dims must match"),
        (((1, 3, 6, 8), (1, 3, 4, 8), (1, 3, 4, 8)), {}, "query heads must be a multiple"),
        (((1, 3, 2, 8), (1, 3, 2, 8), (1, 3, 2, 8)), {"p": 0.1}, "dropout"),
        (((1, 3, 2, 8), (1, 3, 2, 8), (1, 3, 2, 8)), {"attn_bias": torch.zeros(3, 3)}, "not supported"),
        (((2, 3, 2, 8), (2, 3, 2, 8), (2, 3, 2, 8)), {"attn_bias": BlockDiagonalMask.from_seqlens([3])}, "B == 1"),
        (((1, 4, 2, 8), (1, 4, 2, 8), (1, 4, 2, 8)), {"attn_bias": BlockDiagonalMask.from_seqlens([3])}, "must match"),
        (((1, 3, 2, 8), (1, 3, 2, 8), (1, 3, 2, 8)), {"scale": float("nan")}, "scale"),
    ],
)
def test_errors(shapes, kwargs, match):
    q, k, v = (torch.randn(*s) for s in shapes)
    with pytest.raises(ValueError, match=match):
        memory_efficient_attention(q, k, v, **kwargs)


def test_key_value_expanded_differently():
    q = torch.randn(1, 3, 2, 2, 8)
    k = torch.randn(1, 3, 2, 1, 8).expand(-1, -1, -1, 2, -1)
    v = torch.randn(1, 3, 2, 2, 8)
    with pytest.raises(ValueError, match="expand both"):
        memory_efficient_attention(q, k, v)


@pytest.mark.parametrize("scale", [0.0, -1.0, True, float("inf"), 1e-45])
def test_scale_is_checked_before_any_kernel_call(scale):
    """A bad scale is refused up front (with every block empty no varlen call would have checked it)."""
    q = torch.randn(1, 3, 2, 8)
    with pytest.raises(ValueError, match=r"scale=.* must be a finite number > 0"):
        memory_efficient_attention(q, q.clone(), q.clone(), scale=scale)
    empty = torch.randn(1, 0, 2, 8)
    with pytest.raises(ValueError, match=r"scale=.* must be a finite number > 0"):
        memory_efficient_attention(empty, empty.clone(), empty.clone(), scale=scale)


def test_zero_heads_are_refused():
    q, k = torch.randn(1, 3, 2, 8), torch.randn(1, 3, 0, 8)
    with pytest.raises(ValueError, match="query has 2 heads and key 0; attention needs at least one"):
        memory_efficient_attention(q, k, k.clone())
