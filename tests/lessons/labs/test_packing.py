"""lessons/labs/packing.py: lengths, padding statistics, the mask, the fair padded baseline, the padding sweep,
the crossover and claims() logic."""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels.reference import block_diagonal_mask
from lessons.labs import packing as lab
from tests.conftest import DEVICE

TOL = 1e-4 if DEVICE == "cpu" else 2e-2


def test_default_lengths_look_like_traffic_and_parse():
    lengths = lab.parse_lengths(lab.DEFAULT_LENGTHS)
    assert lengths == [50, 400, 30, 1000, 120, 7]
    stats = lab.padding_stats(lengths, True)
    assert stats.padding_fraction == pytest.approx(1 - 1607 / 6000)  # 73% of the padded slots are padding
    assert stats.ideal_speedup > 5


@pytest.mark.parametrize("causal", [True, False])
def test_run_times_three_sides_that_agree_on_real_tokens(causal):
    lengths = [3, 9, 1, 6]
    run = lab.run_packed_vs_padded(lengths, causal, num_heads=2, head_dim=8, repeats=1, device=DEVICE)
    assert run.baseline == lab.BASELINES[causal]
    assert run.max_abs_err < TOL  # checked against both padded sides
    assert run.padded_shape == (4, 2, 9, 8) and run.packed_shape == (19, 2, 8)
    rows = run.timing_rows()
    assert [r["side"] for r in rows] == [
        "packed (varlen_attention)",
        f"padded, {run.baseline}",
        "padded, materialized mask",
    ]
    assert [r["ms"] for r in rows] == [run.packed_seconds * 1e3, run.padded_seconds * 1e3, run.masked_seconds * 1e3]
    assert run.speedup == pytest.approx(run.padded_seconds / run.packed_seconds)
    assert not math.isnan(run.masked_seconds)
    assert math.isnan(lab.run_packed_vs_padded(lengths, causal, 2, 8, repeats=1, masked=False).masked_seconds)


def test_is_causal_on_right_padding_is_exact_on_real_rows():
    """Why the fair causal baseline needs no mask: a real row never reaches a padding key under is_causal."""
    lengths, h, d = [5, 2, 4], 2, 8
    lmax = max(lengths)
    qp, kp, vp = (torch.randn(3, h, lmax, d) for _ in range(3))
    for i, n in enumerate(lengths):  # garbage in the padding must not change any real row
        kp[i, :, n:], vp[i, :, n:] = 1e3, -1e3
    fair = F.scaled_dot_product_attention(qp, kp, vp, is_causal=True)
    for i, n in enumerate(lengths):
        alone = F.scaled_dot_product_attention(
            qp[i : i + 1, :, :n], kp[i : i + 1, :, :n], vp[i : i + 1, :, :n], is_causal=True
        )
        torch.testing.assert_close(fair[i : i + 1, :, :n], alone, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("fraction", lab.SWEEP_FRACTIONS)
def test_sweep_lengths_hit_the_padding_fraction(fraction):
    lengths = lab.sweep_lengths(fraction)
    assert len(lengths) == lab.SWEEP_BATCH and max(lengths) == lengths[0] == lab.SWEEP_LONGEST
    assert lengths[1:] == [lengths[1]] * lab.SWEEP_SHORTER  # the others: one shorter length
    assert lab.padding_stats(lengths).padding_fraction == pytest.approx(fraction, abs=0.005)
    with pytest.raises(ValueError, match="fraction"):
        lab.sweep_lengths(1.0)


@pytest.mark.parametrize(
    ("packed", "padded", "expected"),
    [
        ([2, 1.5, 0.5, 0.4], [1, 1, 1, 1], 0.15),  # crosses between the 2nd and 3rd point
        ([0.9, 0.8, 0.5, 0.4], [1, 1, 1, 1], 0.0),  # packed faster everywhere
        ([2, 2, 2, 2], [1, 1, 1, 1], None),  # never faster
        ([0.5, 1.5, 0.9, 0.5], [1, 1, 1, 1], 0.1 + 0.5 / 0.6 * 0.1),  # a noisy early win does not count
        ([1, 1, 1, 1.5], [1, 1, 1, 1], None),  # slower at the last point: no crossover
    ],
)
def test_crossover_is_where_packed_stays_faster(packed, padded, expected):
    found = lab.crossover([0.0, 0.1, 0.2, 0.3], packed, padded)
    assert found == (None if expected is None else pytest.approx(expected))


def test_padding_sweep_rows(monkeypatch):
    seen = []

    def fake_run(lengths, causal, repeats, device, masked):
        seen.append((lengths, causal, masked))
        pad = lab.padding_stats(lengths).padding_fraction
        return lab.PackingRun(1.0 - pad, 0.6, float("nan"), 0.0, (sum(lengths), 4, 32), (8, 4, 256, 32), ())

    monkeypatch.setattr(lab, "run_packed_vs_padded", fake_run)
    sweep = lab.padding_sweep(causal=True)
    assert [s[0] for s in seen] == [lab.sweep_lengths(f) for f in lab.SWEEP_FRACTIONS]
    assert all(c and not m for _, c, m in seen)  # the sweep times the fair baseline only
    assert sweep.padding_pct == pytest.approx([100 * f for f in lab.SWEEP_FRACTIONS], abs=0.5)
    assert sweep.crossover == pytest.approx(0.4, abs=0.01)  # packed time 1 - f drops below 0.6 at f = 0.4
    assert sweep.crossover_pct == pytest.approx(40, abs=1)
    assert sweep.baseline == lab.BASELINES[True]
    assert sweep.padded_ms == [600.0] * len(lab.SWEEP_FRACTIONS)
    assert sweep.packed_ms == pytest.approx([1e3 * (1 - f / 100) for f in sweep.padding_pct])
    rows = sweep.rows()
    assert list(rows[0]) == ["padding %", "lengths", "packed ms", "padded ms", "packed / padded"]
    for row, point, lengths in zip(rows, sweep.points, (s[0] for s in seen), strict=True):
        assert row["lengths"] == str(lengths) and point.lengths == tuple(lengths)
        assert row["padding %"] == 100 * lab.padding_stats(lengths).padding_fraction
        assert row["packed / padded"] == pytest.approx(row["packed ms"] / 600)
    never = lab.PaddingSweep(sweep.points, None, lab.BASELINES[False])
    assert never.crossover_pct is None


@pytest.mark.parametrize(("packed", "padded", "holds"), [(1.0, 4.0, True), (4.0, 1.0, False)])
def test_claims_use_the_page_defaults_and_the_fair_side(monkeypatch, packed, padded, holds):
    seen = {}

    def fake_run(lengths, causal, repeats):
        seen["args"] = (lengths, causal)
        return lab.PackingRun(packed, padded, 2 * padded, 0.0, (1607, 4, 32), (6, 4, 1000, 32), ())

    monkeypatch.setattr(lab, "run_packed_vs_padded", fake_run)
    entry = lab.claims()["packing"]
    assert seen["args"] == (lab.parse_lengths(lab.DEFAULT_LENGTHS), True)
    assert entry["holds"] is holds and entry["speedup"] == round(padded / packed, 3)
    assert entry["speedup_vs_masked"] == round(2 * padded / packed, 3)
    assert isinstance(entry["claim"], str) and entry["padding_fraction"] == pytest.approx(0.7322, abs=1e-4)


@settings(deadline=None, max_examples=40)
@given(st.lists(st.integers(1, 1024), min_size=1, max_size=32), st.sampled_from([", ", " ", ";", ",\n"]))
def test_parse_lengths_round_trips(lengths, sep):
    if sum(lengths) > lab.MAX_TOTAL:
        return
    assert lab.parse_lengths(sep.join(map(str, lengths))) == lengths


@settings(deadline=None, max_examples=40)
@given(st.lists(st.integers(1, 64), min_size=1, max_size=8), st.booleans())
def test_padding_stats_match_brute_force(lengths, causal):
    stats = lab.padding_stats(lengths, causal)
    lmax = max(lengths)
    assert stats.padded_slots == len(lengths) * lmax and stats.real_tokens == sum(lengths)
    mask = block_diagonal_mask(lengths, causal="top_left" if causal else None)
    assert stats.packed_pairs == mask.sum().item()  # exactly the visible score pairs
    per_padded = (torch.ones(lmax, lmax).tril() if causal else torch.ones(lmax, lmax)).sum().item()
    assert stats.padded_pairs == len(lengths) * per_padded
    assert stats.ideal_speedup >= 1


@pytest.mark.parametrize("causal", [False, True])
def test_visibility_matches_reference_mask_and_is_capped(causal):
    lengths = [3, 1, 4]
    ref = block_diagonal_mask(lengths, causal="top_left" if causal else None)
    mask = lab.visibility(lengths, causal)
    assert mask.cells == ref.tolist() and (mask.drawn, mask.total_tokens, mask.cut) == (8, 8, False)
    for row in mask.rows():  # each query's visible keys, read off the reference mask
        assert row["visible keys"] == ", ".join(str(j) for j in range(8) if ref[row["query"], j])
    big = lab.visibility([200, 200], causal)
    assert len(big.cells) == lab.MAX_HEATMAP and len(big.cells[0]) == lab.MAX_HEATMAP
    assert (big.drawn, big.total_tokens, big.cut) == (lab.MAX_HEATMAP, 400, True) and len(big.rows()) == 256


@settings(max_examples=10, deadline=None)
@given(st.lists(st.integers(1, 24), min_size=1, max_size=5), st.booleans())
def test_packed_run_agrees_with_padded_and_splits_back(lengths, causal):
    run = lab.run_packed_vs_padded(lengths, causal, num_heads=2, head_dim=8, repeats=1, device=DEVICE)
    assert run.max_abs_err < TOL
    assert run.packed_shape == (sum(lengths), 2, 8)
    assert run.padded_shape == (len(lengths), 2, max(lengths), 8)
    assert [s[1] for s in run.segment_shapes] == lengths
    assert [r["tokens"] for r in run.segment_rows()] == lengths


def test_stats_and_run_in_the_pages_units():
    stats = lab.padding_stats([50, 400, 30, 1000, 120, 7])
    assert (stats.num_requests, stats.longest, stats.real_tokens, stats.padded_slots) == (6, 1000, 1607, 6000)
    assert stats.padding_pct == pytest.approx(100 * (6000 - 1607) / 6000)
    assert [r["padding %"] for r in stats.rows()] == [stats.padding_pct, 0.0]
    run = lab.PackingRun(0.002, 0.005, 0.009, 0.0, (1607, 4, 32), (6, 4, 1000, 32), ())
    assert (run.packed_ms, run.padded_ms, run.speedup) == (2.0, 5.0, 2.5)
    assert [r["ms"] for r in run.timing_rows()] == [2.0, 5.0, 9.0]
