"""Chart builders (ui/charts.py) and exports (ui/export.py): structure, accessibility cues, bad input."""

import csv
import io
import json

import plotly.graph_objects as go
import pytest
import torch

from kernels.reference import block_diagonal_mask
from ui import charts
from ui.export import columns_of, rows_to_csv, to_json


def test_bar_labels_every_value_and_highlights_with_pattern():
    fig = charts.bar(["a", "b", "c"], [1.0, 20.5, 11277.6], "t", "y", highlight=1)
    (trace,) = fig.data
    assert list(trace.y) == [1.0, 20.5, 11277.6]
    assert list(trace.text) == ["1", "20.5", "11,278"]  # readable labels, no e-notation
    shapes = list(trace.marker.pattern.shape)
    assert shapes[1] != "" and shapes[0] == shapes[2] == ""  # the highlight is not colour-only
    with pytest.raises(ValueError, match="2 labels but 3 values"):
        charts.bar(["a", "b"], [1, 2, 3], "t")


def test_grouped_bar_stacked_area_lines_one_trace_per_series_with_distinct_cues():
    series = {"stored": [1, 2, 3], "reserved": [3, 2, 1], "free": [0, 0, 1]}
    area = charts.stacked_area([0, 1, 2], series, "t")
    assert [t.name for t in area.data] == list(series)
    assert len({t.fillpattern.shape for t in area.data}) == 3
    line = charts.lines([1, 2, 3], series, "t", log_x=True)
    assert len({t.line.dash for t in line.data}) == 3 and line.layout.xaxis.type == "log"
    grouped = charts.grouped_bar(["x", "y", "z"], series, "t")
    assert grouped.layout.barmode == "group" and len(grouped.data) == 3
    with pytest.raises(ValueError, match="series 'free' has 2 values but x has 3"):
        charts.lines([1, 2, 3], {"free": [1, 2]}, "t")


def test_labelled_grid_shows_text_in_cells_and_checks_shape():
    fig = charts.labelled_grid([[1, 0], [2, 3]], [["b1", ""], ["b2", "b3"]], "table")
    assert fig.data[0].texttemplate == "%{text}"
    assert fig.data[0].text[1][1] == "b3"
    with pytest.raises(ValueError):
        charts.labelled_grid([[1, 0]], [["a"]], "t")


def test_roofline_roof_is_min_of_peak_and_bandwidth_line():
    peak, bw = 1000e12, 3e12
    fig = charts.roofline(peak, bw, [{"name": "decode", "intensity": 1.0, "flops": 3e12}])
    roof = fig.data[0]
    for x, y in zip(roof.x, roof.y, strict=True):
        assert y == pytest.approx(min(peak, x * bw))
    assert peak / bw in list(roof.x)  # the ridge point is a vertex of the roof
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    assert fig.data[-1].name == "decode" and list(fig.data[-1].text) == ["decode"]
    with pytest.raises(ValueError, match="positive"):
        charts.roofline(0, bw, [])


@pytest.mark.parametrize(("heads", "groups"), [(32, 32), (32, 8), (32, 1), (14, 7)])
def test_head_sharing_draws_one_edge_per_query_head_to_its_group(heads, groups):
    fig = charts.head_sharing(heads, groups)
    edges = [t for t in fig.data if t.mode == "lines"]
    assert len(edges) == heads
    per_group = heads // groups
    kv_trace = next(t for t in fig.data if t.name and t.name.startswith("KV head"))
    kv_x = dict(zip([int(s[2:]) for s in kv_trace.text], kv_trace.x, strict=True))
    for h, edge in enumerate(edges):
        assert edge.x[0] == h and edge.x[1] == pytest.approx(kv_x[h // per_group])
    with pytest.raises(ValueError, match="pick a divisor"):
        charts.head_sharing(32, 5)


def test_mask_heatmap_matches_reference_mask_and_marks_cells():
    lengths = [2, 3]
    mask = block_diagonal_mask(lengths, causal="top_left").tolist()
    fig = charts.mask_heatmap(mask, lengths, "m")
    z = fig.data[0].z
    assert [[bool(v) for v in row] for row in z] == mask
    assert fig.data[0].text[0][0] == "■" and fig.data[0].text[0][1] == ""  # glyphs, not only colour
    assert len(fig.layout.shapes) == 2  # one vertical + one horizontal boundary between the two requests


def test_kv_by_groups_and_padding_chart():
    fig = charts.kv_by_groups([1, 2, 4], [1.0, 2.0, 4.0], 2, "kv", "GiB")
    assert list(fig.data[0].x) == ["G=1", "G=2", "G=4"]
    with pytest.raises(ValueError, match="not one of"):
        charts.kv_by_groups([1, 2, 4], [1.0, 2.0, 4.0], 3, "kv", "GiB")
    pad = charts.padding_vs_packed(40, 80)
    assert [list(t.y) for t in pad.data] == [[40, 40], [40, 0]]
    with pytest.raises(ValueError):
        charts.padding_vs_packed(50, 40)


def test_every_builder_returns_a_figure():
    assert isinstance(charts.bar(["a"], [1], "t"), go.Figure)
    assert isinstance(charts.mask_heatmap([[True]], [1], "t"), go.Figure)


def test_csv_and_json_round_trip_ragged_rows():
    rows = [{"a": 1, "b": 2.5}, {"b": "x", "c": True}]
    assert columns_of(rows) == ["a", "b", "c"]
    parsed = list(csv.DictReader(io.StringIO(rows_to_csv(rows))))
    assert parsed == [{"a": "1", "b": "2.5", "c": ""}, {"a": "", "b": "x", "c": "True"}]
    assert json.loads(to_json({"t": torch.float32, "rows": rows}))["t"] == "torch.float32"
