"""BlockDiagonal biases: offsets, split round trips, materialized masks written out by hand, bad input."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.attention.attn_bias import (
    BlockDiagonalCausalFromBottomRightMask,
    BlockDiagonalCausalMask,
    BlockDiagonalMask,
    SeqLenInfo,
)

MASKS = [BlockDiagonalMask, BlockDiagonalCausalMask, BlockDiagonalCausalFromBottomRightMask]


def test_from_seqlens_offsets():
    bias = BlockDiagonalMask.from_seqlens(q_seqlen=[3, 5, 1])
    assert bias.q_seqinfo.seqstart.dtype == torch.int32
    assert bias.q_seqinfo.seqstart.tolist() == [0, 3, 8, 9]
    assert bias.q_seqinfo.seqstart_py == [0, 3, 8, 9]
    assert bias.q_seqinfo.max_seqlen == 5 and bias.q_seqinfo.min_seqlen == 1
    assert bias.k_seqinfo.seqstart_py == [0, 3, 8, 9]  # kv defaults to q
    cross = BlockDiagonalMask.from_seqlens([2, 2], kv_seqlen=[4, 1])
    assert cross.k_seqinfo.seqstart_py == [0, 4, 5] and cross.k_seqinfo.max_seqlen == 4
    assert list(cross.q_seqinfo.intervals()) == [(0, 2), (2, 4)]


def test_materialize_by_hand():
    bias = BlockDiagonalMask.from_seqlens([2, 1], kv_seqlen=[1, 3])
    m = bias.materialize((3, 4))
    inf = -math.inf
    expected = torch.tensor([[0, inf, inf, inf], [0, inf, inf, inf], [inf, 0, 0, 0]])
    assert torch.equal(m, expected)
    batched = bias.materialize((2, 5, 3, 4), dtype=torch.float16)
    assert batched.shape == (2, 5, 3, 4) and batched.dtype == torch.float16
    assert torch.equal(batched[1, 4].float(), expected)


def test_causal_alignments_by_hand():
    inf = -math.inf
    base = BlockDiagonalMask.from_seqlens([2], kv_seqlen=[3])
    top_left = base.make_causal()
    bottom_right = base.make_causal_from_bottomright()
    assert type(top_left) is BlockDiagonalCausalMask
    assert type(bottom_right) is BlockDiagonalCausalFromBottomRightMask
    assert torch.equal(top_left.materialize((2, 3)), torch.tensor([[0, inf, inf], [0, 0, inf]]))
    assert torch.equal(bottom_right.materialize((2, 3)), torch.tensor([[0, 0, inf], [0, 0, 0]]))
    # Same offsets are kept.
    assert top_left.q_seqinfo.seqstart_py == bottom_right.q_seqinfo.seqstart_py == [0, 2]


@pytest.mark.parametrize("cls", MASKS)
def test_visible_counts(cls):
    lens_q, lens_k = [4, 1, 3], [4, 1, 3]
    m = cls.from_seqlens(lens_q, lens_k).materialize((8, 8))
    visible = int((m == 0).sum())
    # Square blocks: full = sum n^2; causal (either alignment) = sum n (n + 1) / 2.
    expected = 26 if cls is BlockDiagonalMask else 10 + 1 + 6
    assert visible == expected
    assert int(torch.isinf(m).sum()) == 64 - expected


def test_split_round_trip_and_split_kv():
    bias = BlockDiagonalMask.from_seqlens([2, 3], kv_seqlen=[1, 4])
    x = torch.arange(5 * 2).reshape(1, 5, 2)
    parts = bias.split(x)
    assert [tuple(p.shape) for p in parts] == [(1, 2, 2), (1, 3, 2)]
    assert torch.equal(torch.cat(parts, dim=1), x)
    assert [p.shape[1] for p in bias.split_queries(x)] == [2, 3]
    kv = torch.randn(1, 5, 3)
    assert [p.shape[1] for p in bias.split_kv(kv)] == [1, 4]


def test_from_tensor_list_round_trip():
    a, b = torch.randn(2, 3, 4), torch.randn(1, 5, 4)  # [B, T, ...] with different B and T
    bias, packed = BlockDiagonalMask.from_tensor_list([a, b])
    assert packed.shape == (1, 11, 4)
    assert bias.q_seqinfo.seqstart_py == [0, 3, 6, 11]
    back = bias.split(packed)
    assert len(back) == 2 and torch.equal(back[0], a) and torch.equal(back[1], b)
    causal = bias.make_causal()  # batch grouping survives make_causal
    assert [tuple(t.shape) for t in causal.split(packed)] == [(2, 3, 4), (1, 5, 4)]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=1, max_size=6))
def test_split_round_trip_property(lens):
    bias = BlockDiagonalMask.from_seqlens(lens)
    x = torch.randn(1, sum(lens), 3)
    parts = bias.split(x)
    assert [p.shape[1] for p in parts] == lens
    assert torch.equal(torch.cat(parts, dim=1), x)
    m = bias.materialize((sum(lens), sum(lens)))
    assert int((m == 0).sum()) == sum(n * n for n in lens)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"q_seqlen": [2, -1]}, "negative"),
        ({"q_seqlen": []}, "empty"),
        ({"q_seqlen": [2, 1.5]}, "not an int"),
        ({"q_seqlen": [2, 3], "kv_seqlen": [1]}, "2 sequences but kv_seqlen has 1"),
        ({"q_seqlen": [2], "kv_seqlen": [-3]}, "negative"),
    ],
)
def test_bad_seqlens(kwargs, match):
    with pytest.raises(ValueError, match=match):
        BlockDiagonalMask.from_seqlens(**kwargs)


def test_bad_split_and_materialize():
    bias = BlockDiagonalMask.from_seqlens([2, 3])
    with pytest.raises(ValueError, match="B == 1"):
        bias.split(torch.randn(2, 5, 4))
    with pytest.raises(ValueError, match="packed total 5"):
        bias.split(torch.randn(1, 6, 4))
    with pytest.raises(ValueError, match="must end with"):
        bias.materialize((5, 4))
    with pytest.raises(ValueError, match="no tensors"):
        BlockDiagonalMask.from_tensor_list([])
    with pytest.raises(ValueError, match="tensor 1 has shape"):
        BlockDiagonalMask.from_tensor_list([torch.randn(1, 2, 4), torch.randn(1, 2, 5)])
    info = SeqLenInfo.from_seqlens([1])
    with pytest.raises(ValueError, match="1 query sequences but 2 key"):
        BlockDiagonalMask(info, SeqLenInfo.from_seqlens([1, 1]))


def test_lengths_past_int32_offsets_are_refused_not_overflowed():
    with pytest.raises(ValueError, match="offsets are int32"):
        BlockDiagonalMask.from_seqlens([10**12])
    with pytest.raises(ValueError, match="offsets are int32"):
        BlockDiagonalMask.from_seqlens([2**30, 2**30])
    assert BlockDiagonalMask.from_seqlens([2**30, 2**30 - 1]).q_seqinfo.seqstart_py[-1] == 2**31 - 1
