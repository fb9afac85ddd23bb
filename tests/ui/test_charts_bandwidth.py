"""The roofline figure (ui/charts_bandwidth.py): the roof is min(peak, intensity x bandwidth), points are labelled."""

import pytest

from lessons.labs.bandwidth import RooflinePoint
from tests.ui.chart_inputs import sweep_point
from ui import charts_bandwidth


def test_roofline_roof_is_min_of_peak_and_bandwidth_line():
    peak, bw = 1000e12, 3e12
    fig = charts_bandwidth.roofline(peak, bw, [RooflinePoint("decode", 1.0, 3e12)])
    roof = fig.data[0]
    for x, y in zip(roof.x, roof.y, strict=True):
        assert y == pytest.approx(min(peak, x * bw))
    assert peak / bw in list(roof.x)  # the ridge point is a vertex of the roof
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    assert fig.data[-1].name == "decode" and list(fig.data[-1].text) == ["decode"]
    assert list(fig.data[-1].x) == [1.0] and list(fig.data[-1].y) == [3e12]
    with pytest.raises(ValueError, match="positive"):
        charts_bandwidth.roofline(0, bw, [])


def test_batch_sweep_draws_batches_that_do_not_fit_apart():
    rows = [sweep_point(b, 10.0 * b, fits=b <= 111) for b in (1, 16, 111, 256)]
    fits, over = charts_bandwidth.batch_sweep(rows, 111).data
    assert list(fits.x) == [1, 16, 111] and list(over.x) == [256] and list(over.text) == ["does not fit"]
    assert list(fits.y) == [10.0, 160.0, 1110.0] and list(over.y) == [2560.0]
    assert fig_has_text(charts_bandwidth.batch_sweep(rows, 111), "largest batch that fits: 111")
    with pytest.raises(ValueError, match="no batches"):
        charts_bandwidth.batch_sweep([], 1)


def fig_has_text(fig, text: str) -> bool:
    return any(text in (a.text or "") for a in fig.layout.annotations)
