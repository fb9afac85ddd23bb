"""bench.packing's logic at tiny sizes: FLOP counting, which time is over which, and the equal-work check."""

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from bench.harness import assert_same_rows
from bench.packing import (
    BASELINES,
    attention_flops,
    check_same_work,
    ideal_speedup,
    make_workload,
    packed_side,
    padded_sides,
    real_rows,
    summarize,
)
from kernels.reference import varlen_attention_ref


def tiny_args(causal: bool = True, heads: int = 4, kv_heads: int = 2, seed: int = 0) -> SimpleNamespace:
    return SimpleNamespace(
        seed=seed,
        batch=4,
        min_len=3,
        max_len=12,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=8,
        dtype="float32",
        causal=causal,
    )


def test_attention_flops_by_hand():
    # QK^T and PV: 2 matmuls x 2 FLOPs per multiply-add x n^2 x D, per head
    assert attention_flops([4], heads=1, head_dim=1, causal=False) == 4 * 16
    assert attention_flops([4, 2], heads=3, head_dim=8, causal=False) == 4 * 3 * 8 * (16 + 4)
    assert attention_flops([4, 2], heads=3, head_dim=8, causal=True) == 2 * 3 * 8 * (16 + 4)


@pytest.mark.parametrize("causal", [True, False])
def test_ideal_speedup_is_padded_over_packed(causal):
    # padded: 2 sequences at the longest length 4 -> 2 * 16; packed: 16 + 4; causal halves both sides alike
    assert ideal_speedup([4, 2], causal) == pytest.approx(32 / 20)
    assert ideal_speedup([5, 5, 5], causal) == 1.0


@pytest.mark.parametrize("causal", [True, False])
def test_summarize_divides_padded_by_packed(causal):
    times = {"padded": 2.0, "masked": 5.0, "packed": 0.5}
    row = summarize(times, [4, 2], causal)
    assert row["baseline"] == BASELINES[causal]
    assert row["padded_s"] == 2.0 and row["padded_masked_s"] == 5.0 and row["packed_s"] == 0.5
    assert row["speedup"] == 4.0  # > 1: packed is faster than the fair padded baseline
    assert row["speedup_vs_masked"] == 10.0
    assert row["ideal_speedup"] == pytest.approx(1.6)
    assert row["speedup_over_ideal"] == pytest.approx(4.0 / 1.6)
    assert row["real_token_fraction"] == pytest.approx(6 / 8)


def test_baseline_names():
    assert BASELINES == {True: "sdpa_is_causal", False: "sdpa_key_padding_mask"}


def test_workload_pads_the_same_values_right_aligned():
    w = make_workload(tiny_args(), "cpu")
    lens = w["lens"]
    assert max(lens) == 12 and len(lens) == 4 and w["cu"].tolist()[-1] == sum(lens)
    for name in ("q", "k", "v"):
        torch.testing.assert_close(real_rows(w[name + "p"], lens), w[name], rtol=0, atol=0)
    for i, n in enumerate(lens):
        assert not w["qp"][i, :, n:].any()  # right padding is zeros
    assert w["full_mask"].shape == (4, 1, 12, 12) and w["key_mask"].shape == (4, 1, 1, 12)


def test_fixed_lengths_replace_the_random_ones():
    args = tiny_args()
    args.lengths, args.batch = [5, 1, 9], 3
    w = make_workload(args, "cpu")
    assert w["lens"] == [5, 1, 9] and w["q"].shape == (15, 4, 8) and w["qp"].shape == (3, 4, 9, 8)
    assert w["full_mask"].shape == (3, 1, 9, 9)


def test_real_rows_takes_each_request_in_order():
    out = torch.arange(2 * 1 * 3 * 1, dtype=torch.float32).reshape(2, 1, 3, 1)  # [B=2, H=1, L=3, D=1]
    assert real_rows(out, [2, 1]).flatten().tolist() == [0.0, 1.0, 3.0]


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("heads,kv_heads", [(4, 2), (2, 2)])
def test_padded_sides_match_an_independent_reference(causal, heads, kv_heads):
    w = make_workload(tiny_args(causal, heads, kv_heads), "cpu")
    group = heads // kv_heads
    expected = varlen_attention_ref(
        w["q"], w["k"].repeat_interleave(group, 1), w["v"].repeat_interleave(group, 1), w["cu"], w["cu"], causal=causal
    )
    torch.testing.assert_close(packed_side(w, causal)(), expected, rtol=1e-4, atol=1e-5)
    for fn in padded_sides(w, causal).values():
        torch.testing.assert_close(real_rows(fn(), w["lens"]), expected, rtol=1e-4, atol=1e-5)
    diffs = check_same_work(w, causal)
    assert set(diffs) == {"padded", "masked"} and max(diffs.values()) < 1e-5


def test_the_equal_work_check_rejects_a_padded_side_that_sees_padding():
    # Without causality, SDPA with no mask lets real rows attend to the padding keys: not the same work.
    w = make_workload(tiny_args(causal=False), "cpu")
    wrong = F.scaled_dot_product_attention(w["qp"], w["kp"], w["vp"], enable_gqa=True)
    with pytest.raises(AssertionError, match="not the same work"):
        assert_same_rows(real_rows(wrong, w["lens"]), packed_side(w, False)(), what="unmasked")


def test_the_causal_baseline_needs_no_mask_because_padding_is_on_the_right():
    # is_causal=True alone gives real rows the packed answer; the same rows left-padded would see padding keys.
    w = make_workload(tiny_args(causal=True), "cpu")
    lens, l_max, expected = w["lens"], max(w["lens"]), packed_side(w, True)()
    fair = padded_sides(w, True)["padded"]()
    assert_same_rows(real_rows(fair, lens), expected, what="is_causal")

    def shift(x: torch.Tensor, sign: int) -> torch.Tensor:  # row i moved right by sign * (Lmax - n_i)
        return torch.stack([x[i].roll(sign * (l_max - n), dims=1) for i, n in enumerate(lens)])

    left = F.scaled_dot_product_attention(
        *(shift(w[n], 1) for n in ("qp", "kp", "vp")), is_causal=True, enable_gqa=True
    )
    with pytest.raises(AssertionError, match="not the same work"):
        assert_same_rows(real_rows(shift(left, -1), lens), expected, what="left padded")
