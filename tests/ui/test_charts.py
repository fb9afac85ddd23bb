"""Generic chart builders (ui/charts.py): structure, accessibility cues, bad input."""

import plotly.graph_objects as go
import pytest

from ui import charts


def test_bar_labels_every_value_and_highlights_with_pattern():
    fig = charts.bar(["a", "b", "c"], [1.0, 20.5, 11277.6], "t", "y", highlight=1)
    (trace,) = fig.data
    assert list(trace.y) == [1.0, 20.5, 11277.6]
    assert list(trace.text) == ["1", "20.5 (chosen)", "11,278"]  # readable labels, no e-notation, the highlight named
    shapes = list(trace.marker.pattern.shape)
    assert shapes[1] != "" and shapes[0] == shapes[2] == ""  # the highlight is not colour-only
    with pytest.raises(ValueError, match="2 labels but 3 values"):
        charts.bar(["a", "b"], [1, 2, 3], "t")


def test_stacked_area_and_lines_one_trace_per_series_with_distinct_cues():
    series = {"stored": [1, 2, 3], "reserved": [3, 2, 1], "free": [0, 0, 1]}
    area = charts.stacked_area([0, 1, 2], series, "t")
    assert [t.name for t in area.data] == list(series)
    assert len({t.fillpattern.shape for t in area.data}) == 3
    line = charts.lines([1, 2, 3], series, "t", log_x=True)
    assert len({t.line.dash for t in line.data}) == 3 and line.layout.xaxis.type == "log"
    with pytest.raises(ValueError, match="series 'free' has 2 values but x has 3"):
        charts.lines([1, 2, 3], {"free": [1, 2]}, "t")


def test_labelled_grid_shows_text_in_cells_and_checks_shape():
    fig = charts.labelled_grid([[1, 0], [2, 3]], [["b1", ""], ["b2", "b3"]], "table")
    assert fig.data[0].texttemplate == "%{text}"
    assert fig.data[0].text[1][1] == "b3"
    with pytest.raises(ValueError):
        charts.labelled_grid([[1, 0]], [["a"]], "t")


def test_every_builder_returns_a_figure():
    assert isinstance(charts.bar(["a"], [1], "t"), go.Figure)
    assert isinstance(charts.stacked_area([0], {"a": [1]}, "t"), go.Figure)


def test_figures_of_typed_values_are_keyed_by_value():
    """ui.figure_cache.figure keys a lab's frozen dataclasses and enums by their values: the same values give the
    one shared figure, any changed field or enum member a new one, and an argument that cannot be a key (a list
    inside a dataclass) is a TypeError naming the builder, never a figure for other settings."""
    from lessons.labs.pool import BlockState, PoolBlock
    from ui import charts_memory
    from ui.figure_cache import figure

    block = PoolBlock(0, BlockState.USED, 1, ("A",), 3)
    first = figure(charts_memory.block_pool_grid, (block,), 4, "typed-key test")
    same = PoolBlock(0, BlockState.USED, 1, ("A",), 3)
    assert figure(charts_memory.block_pool_grid, (same,), 4, "typed-key test") is first
    for other in (
        PoolBlock(0, BlockState.USED, 1, ("A",), 2),  # one field
        PoolBlock(0, BlockState.CACHED, 1, ("A",), 3),  # the enum member
    ):
        assert figure(charts_memory.block_pool_grid, (other,), 4, "typed-key test") is not first
    with pytest.raises(TypeError, match="block_pool_grid"):
        figure(charts_memory.block_pool_grid, (PoolBlock(0, BlockState.USED, 1, ["A"], 3),), 4, "typed-key test")
