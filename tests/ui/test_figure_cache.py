"""ui.figure_cache: a figure is built once per process for each set of arguments and handed out read-only."""

from dataclasses import dataclass

import plotly.graph_objects as go
import pytest

from ui.figure_cache import figure, figure_key, frozen_figure

built = []


def bars(rows, title):
    """A stand-in figure builder that counts its calls."""
    built.append((title, len(rows)))
    return go.Figure(go.Bar(x=[r["x"] for r in rows], y=[r["y"] for r in rows]), layout={"title": title})


@dataclass(frozen=True)
class Sweep:
    """A lab's typed result as a chart might take it (hashable: frozen, tuples)."""

    xs: tuple[int, ...]
    ys: tuple[float, ...]


def sweep_chart(sweep, title):
    built.append((title, sweep))
    return go.Figure(go.Scatter(x=sweep.xs, y=sweep.ys), layout={"title": title})


def test_equal_rows_get_the_same_figure_other_rows_another():
    built.clear()
    rows = [{"x": "a", "y": 1}, {"x": "b", "y": 2}]
    first = figure(bars, rows, "rows")
    assert figure(bars, [dict(r) for r in rows], "rows") is first  # equal values, new objects: one build
    other = figure(bars, [{"x": "a", "y": 1}, {"x": "b", "y": 3}], "rows")
    assert other is not first and built == [("rows", 2), ("rows", 2)]


def test_typed_values_are_keyed_by_value_and_type():
    built.clear()
    one = figure(sweep_chart, Sweep((1, 2), (1.0, 2.0)), "typed")
    assert figure(sweep_chart, Sweep((1, 2), (1.0, 2.0)), "typed") is one
    assert figure(sweep_chart, Sweep((1, 2), (1.0, 2.5)), "typed") is not one
    assert len(built) == 2
    # 1 == 1.0 == True and they hash alike, but a builder may show them differently: three entries
    assert len({figure_key(sweep_chart, (Sweep((1,), (1.0,)), v), {}) for v in (1, 1.0, True)}) == 3


def test_an_argument_that_cannot_be_a_key_is_refused_with_the_fix():
    @dataclass(frozen=True)
    class Loose:
        values: list  # a list inside: not hashable

    with pytest.raises(TypeError, match=r"figure\(sweep_chart.*pass a tuple instead of a list"):
        figure(sweep_chart, Loose([1, 2]), "loose")


def test_a_frozen_figure_hands_out_one_dict():
    fig = frozen_figure(go.Figure(go.Bar(x=[1], y=[2])))
    assert fig.to_dict() is fig.to_dict()  # st.plotly_chart's serialisation copies nothing
    assert list(fig.to_dict()["data"][0]["y"]) == [2]
