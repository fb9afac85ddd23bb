"""The references themselves, checked against torch SDPA and against masks written out by hand."""

import pytest
import torch
import torch.nn.functional as F

from kernels.reference import (
    attention_ref,
    block_diagonal_mask,
    causal_mask,
    masked_attention_ref,
    repeat_kv,
    varlen_attention_ref,
)

NUM_HEADS = [(4, 4), (8, 2), (5, 1)]
LENGTHS = [(1, 1), (5, 5), (3, 7), (7, 3)]  # (len_q, len_k): square, q shorter, q longer


def sdpa(q, k, v, mask=None):
    """SDPA on one sequence in [L, H, D] layout, K/V heads repeated by SDPA itself (enable_gqa)."""
    out = F.scaled_dot_product_attention(
        q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=mask, enable_gqa=True
    )
    return out.transpose(0, 1)


def test_causal_mask_by_hand():
    top_left = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0]], dtype=torch.bool)
    bottom_right = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(causal_mask(2, 4, "top_left"), top_left)
    assert torch.equal(causal_mask(2, 4, "bottom_right"), bottom_right)
    # More queries than keys, bottom-right: the first rows see nothing.
    assert causal_mask(4, 2, "bottom_right").sum(1).tolist() == [0, 0, 1, 2]
    assert causal_mask(4, 2, "top_left").sum(1).tolist() == [1, 2, 2, 2]
    with pytest.raises(ValueError, match="align"):
        causal_mask(2, 2, "middle")


def test_repeat_kv_maps_query_head_to_group():
    k = torch.arange(3 * 2).reshape(1, 3, 2).float()  # [L=1, Hkv=3, D=2]
    rep = repeat_kv(k, 2)  # query head h reads KV head h // 2
    assert [int(rep[0, h, 0]) for h in range(6)] == [0, 0, 2, 2, 4, 4]


@pytest.mark.parametrize("heads", NUM_HEADS)
@pytest.mark.parametrize("lens", LENGTHS)
@pytest.mark.parametrize("causal", [False, True])
def test_attention_ref_matches_sdpa(heads, lens, causal):
    (hq, hkv), (lq, lk) = heads, lens
    q, k, v = torch.randn(lq, hq, 16), torch.randn(lk, hkv, 16), torch.randn(lk, hkv, 16)
    mask = causal_mask(lq, lk, "bottom_right") if causal else None
    expected = sdpa(q, k, v, mask)
    out = attention_ref(q, k, v, causal=causal)
    if mask is not None:  # SDPA gives NaN on rows without a visible key; the reference gives zeros
        seen = mask.any(1)
        expected = torch.where(seen[:, None, None], expected, torch.zeros_like(expected))
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def test_fully_masked_rows_are_zero_not_nan():
    q, k, v = torch.randn(5, 2, 8), torch.randn(2, 2, 8), torch.randn(2, 2, 8)
    out = attention_ref(q, k, v, causal=True, align="bottom_right")
    assert not out.isnan().any()
    assert torch.equal(out[:3], torch.zeros_like(out[:3]))
    empty = attention_ref(q, k[:0], v[:0])
    assert torch.equal(empty, torch.zeros_like(empty))


def test_scale_and_top_left():
    q, k, v = torch.randn(3, 2, 8), torch.randn(6, 2, 8), torch.randn(6, 2, 8)
    out = attention_ref(q, k, v, causal=True, align="top_left", scale=0.3)
    expected = F.scaled_dot_product_attention(
        q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=causal_mask(3, 6, "top_left"), scale=0.3
    ).transpose(0, 1)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def test_block_diagonal_mask_counts():
    mask = block_diagonal_mask([2, 3], [4, 1])
    assert mask.shape == (5, 5)
    assert mask.sum(1).tolist() == [4, 4, 1, 1, 1]
    assert not mask[:2, 4].any() and not mask[2:, :4].any()
    causal = block_diagonal_mask([3], [3], causal="top_left")
    assert int(causal.sum()) == 6
    with pytest.raises(ValueError, match="2 query lengths but 1 key"):
        block_diagonal_mask([1, 2], [3])


@pytest.mark.parametrize("causal", [False, True])
def test_varlen_ref_equals_masked_ref(causal):
    lens_q, lens_k = [3, 1, 4], [5, 2, 4]
    q, k, v = torch.randn(8, 4, 8), torch.randn(11, 2, 8), torch.randn(11, 2, 8)
    cu_q = torch.tensor([0, 3, 4, 8], dtype=torch.int32)
    cu_k = torch.tensor([0, 5, 7, 11], dtype=torch.int32)
    out = varlen_attention_ref(q, k, v, cu_q, cu_k, causal=causal)
    mask = block_diagonal_mask(lens_q, lens_k, causal="bottom_right" if causal else None)
    torch.testing.assert_close(out, masked_attention_ref(q, k, v, mask), atol=1e-6, rtol=1e-6)
