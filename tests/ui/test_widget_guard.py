"""ui/widget_guard.py on Streamlit's own session state: a forged widget value is left out where it comes in,
and one stored before its widget was drawn is read as "no value" once, not raised on every run."""

from __future__ import annotations

import pytest
from streamlit.proto.WidgetStates_pb2 import WidgetState
from streamlit.runtime.state.common import WidgetMetadata
from streamlit.runtime.state.session_state import WStates

from ui import widget_guard


def number_metadata(widget_id: str) -> WidgetMetadata:
    """A number input's metadata as Streamlit registers it: int() of what the browser sent, 5 without one."""
    return WidgetMetadata(
        widget_id, lambda v: 5 if v is None else int(v), lambda v: float(v), value_type="double_value"
    )


@pytest.fixture(autouse=True, scope="module")
def guarded():
    widget_guard.install()
    assert widget_guard.install() is False  # once only


def states_with_number() -> WStates:
    states = WStates()
    states.set_widget_metadata(number_metadata("n"))
    return states


@pytest.mark.parametrize(
    "state",
    [
        WidgetState(id="n", string_value="FORGED"),
        WidgetState(id="n", double_value=float("nan")),
        WidgetState(id="n", double_value=float("inf")),
        WidgetState(id="n", json_value="{not json"),
    ],
    ids=["string", "nan", "inf", "json"],
)
def test_a_forged_value_for_a_drawn_widget_is_left_out(state):
    states = states_with_number()
    states.set_from_value("n", 7)  # what the widget holds now
    states.set_widget_from_proto(state)
    assert states["n"] == 7  # kept, not replaced by the forged value


def test_a_real_value_comes_in_as_before():
    states = states_with_number()
    states.set_widget_from_proto(WidgetState(id="n", double_value=42.0))
    assert states["n"] == 42
    states.set_widget_from_proto(WidgetState(id="n", int_value=3))  # the browser sends ints too
    assert states["n"] == 3


def test_a_value_stored_before_its_widget_was_drawn_fails_once_then_reads_as_no_value():
    states = WStates()
    states.set_widget_from_proto(WidgetState(id="n", string_value="FORGED"))  # no metadata yet: stored
    states.set_widget_metadata(number_metadata("n"))
    with pytest.raises(KeyError):  # Streamlit's callers read this as "no value from the browser"
        states["n"]
    assert states["n"] == 5  # the widget's default from then on, no exception on every later run


def test_finite_and_refused():
    meta = number_metadata("n")
    assert widget_guard.finite(WidgetState(id="n", double_value=1.5))
    arr = WidgetState(id="s")
    arr.double_array_value.data.extend([1.0, float("-inf")])
    assert not widget_guard.finite(arr)
    assert widget_guard.refused(WidgetState(id="n", double_value=2.0), meta) is None
    assert "ValueError" in widget_guard.refused(WidgetState(id="n", string_value="x"), meta)
    assert widget_guard.refused(WidgetState(id="n", double_value=float("nan")), meta) == "not a finite number"
