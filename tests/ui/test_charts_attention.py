"""GQA and packing figures (ui/charts_attention.py): head sharing, block-diagonal masks, KV per group, padding."""

import plotly.graph_objects as go
import pytest

from kernels.reference import block_diagonal_mask
from ui import charts_attention as ca


@pytest.mark.parametrize(("heads", "groups"), [(32, 32), (32, 8), (32, 1), (14, 7)])
def test_head_sharing_draws_one_edge_per_query_head_to_its_group(heads, groups):
    fig = ca.head_sharing(heads, groups)
    edges = [t for t in fig.data if t.mode == "lines"]
    assert len(edges) == heads
    per_group = heads // groups
    kv_trace = next(t for t in fig.data if t.name and t.name.startswith("KV head"))
    kv_x = dict(zip([int(s[2:]) for s in kv_trace.text], kv_trace.x, strict=True))
    for h, edge in enumerate(edges):
        assert edge.x[0] == h and edge.x[1] == pytest.approx(kv_x[h // per_group])
    with pytest.raises(ValueError, match="pick a divisor"):
        ca.head_sharing(32, 5)


def test_mask_heatmap_matches_reference_mask_and_marks_cells():
    lengths = [2, 3]
    mask = block_diagonal_mask(lengths, causal="top_left").tolist()
    fig = ca.mask_heatmap(mask, lengths, "m")
    z = fig.data[0].z
    assert [[bool(v) for v in row] for row in z] == mask
    assert fig.data[0].text[0][0] == "■" and fig.data[0].text[0][1] == ""  # glyphs, not only colour
    assert len(fig.layout.shapes) == 2  # one vertical + one horizontal boundary between the two requests


def test_a_cut_mask_draws_only_the_boundaries_inside_it_and_names_its_colours():
    lengths = [3, 3, 100, 200]  # drawn: the first 8 tokens, so only the boundaries at 3 and 6
    mask = block_diagonal_mask(lengths, causal="top_left")[:8, :8].tolist()
    fig = ca.mask_heatmap(mask, lengths, "m")
    edges = sorted({s.x0 for s in fig.layout.shapes if s.x0 > -0.5})
    assert edges == [2.5, 5.5] and len(fig.layout.shapes) == 4
    assert [t.name for t in fig.data[1:]] == ["may attend (■)", "masked", "request boundary"]
    assert [t.name for t in ca.mask_heatmap([[True]], [1], "t").data[1:]] == ["may attend (■)", "masked"]


def test_kv_by_groups_and_padding_chart():
    fig = ca.kv_by_groups([1, 2, 4], [1.0, 2.0, 4.0], 2, "kv", "GiB")
    assert list(fig.data[0].x) == ["G=1", "G=2", "G=4"]
    with pytest.raises(ValueError, match="not one of"):
        ca.kv_by_groups([1, 2, 4], [1.0, 2.0, 4.0], 3, "kv", "GiB")
    pad = ca.padding_vs_packed(40, 80)
    assert [list(t.y) for t in pad.data] == [[40, 40], [40, 0]]
    with pytest.raises(ValueError):
        ca.padding_vs_packed(50, 40)


def test_mask_heatmap_returns_a_figure():
    assert isinstance(ca.mask_heatmap([[True]], [1], "t"), go.Figure)


def test_gqa_times_groups_both_sides_per_shape():
    fig = ca.gqa_times(["decode", "prefill"], [1.0, 2.0], [3.0, 2.1], "t")
    gqa, mha = fig.data
    assert gqa.name.startswith("GQA") and mha.name.startswith("MHA")
    assert list(gqa.y) == [1.0, 2.0] and list(mha.y) == [3.0, 2.1] and list(gqa.x) == ["decode", "prefill"]
    assert gqa.marker.pattern.shape != mha.marker.pattern.shape  # not colour alone
    with pytest.raises(ValueError, match="one each"):
        ca.gqa_times(["decode"], [1.0], [1.0, 2.0], "t")


@pytest.mark.parametrize("crossover", [None, 12.5])
def test_packing_sweep_draws_both_sides_and_marks_the_crossover(crossover):
    fig = ca.packing_sweep([0, 10, 20], [3.0, 2.0, 1.0], [2.0, 2.0, 2.0], crossover, "s", "padded (x)", 40.0)
    packed, padded = fig.data
    assert packed.name.startswith("packed") and padded.name == "padded (x)"
    assert list(packed.y) == [3.0, 2.0, 1.0] and list(padded.x) == [0, 10, 20]
    lines = [s for s in fig.layout.shapes if s.type == "line"]
    assert [s.x0 for s in lines] == ([] if crossover is None else [crossover]) + [40.0]
    notes = [a.text for a in fig.layout.annotations]
    assert any("your batch: 40%" in t for t in notes)
    assert any("packed faster from 12%" in t for t in notes) == (crossover is not None)
