"""A chart's data table is made only while its expander is open (ui.chart_view.chart_table), and then it is current.

Lesson 1 at its defaults draws three charts and no other table; the sweep chart's table has a row per batch
size in the sweep, and the roofline's rows name the batch the learner picked."""

from streamlit.testing.v1 import AppTest

from lessons.labs import bandwidth as lab
from ui.chart_view import CHART_TABLE_LABEL, CHART_TABLE_OPEN

CHARTS = ("bw_roofline", "bw_bytes", "bw_sweep")
COLUMN = {"phase": "bw_roofline", "fits in memory": "bw_sweep", "MB per token": "bw_bytes"}  # tells them apart


def chart_tables(at: AppTest) -> dict:
    """The page's chart tables, by chart key."""
    return {COLUMN[c]: d.value for d in at.dataframe for c in COLUMN if c in d.value.columns}


def test_tables_are_made_only_while_open_and_follow_the_settings(app_test):
    at = app_test("bandwidth", timeout=30).run()
    assert not at.exception
    assert sum(e.label == CHART_TABLE_LABEL for e in at.expander) == len(CHARTS)  # every chart offers its table
    assert not chart_tables(at)  # closed: nothing computed or sent

    at.session_state[f"bw_sweep{CHART_TABLE_OPEN}"] = True  # the learner opens the sweep's table
    at.run()
    tables = chart_tables(at)
    assert list(tables) == ["bw_sweep"]  # only the one that was opened
    assert set(lab.SWEEP_BATCHES) <= set(tables["bw_sweep"]["batch"])  # and the largest batch that fits

    at.session_state[f"bw_roofline{CHART_TABLE_OPEN}"] = True
    at.slider(key="bw_batch").set_value(7).run()  # a move: both open tables stay open and show the new batch
    tables = chart_tables(at)
    assert set(tables) == {"bw_sweep", "bw_roofline"}
    assert 7 in set(tables["bw_roofline"]["batch"])  # the decode row is the picked batch

    at.session_state[f"bw_sweep{CHART_TABLE_OPEN}"] = False  # closed again: gone
    at.run()
    assert list(chart_tables(at)) == ["bw_roofline"]
