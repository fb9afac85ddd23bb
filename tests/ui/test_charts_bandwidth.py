"""The roofline figure (ui/charts_bandwidth.py): the roof is min(peak, intensity x bandwidth), points are labelled."""

import pytest

from ui import charts_bandwidth


def test_roofline_roof_is_min_of_peak_and_bandwidth_line():
    peak, bw = 1000e12, 3e12
    fig = charts_bandwidth.roofline(peak, bw, [{"name": "decode", "intensity": 1.0, "flops": 3e12}])
    roof = fig.data[0]
    for x, y in zip(roof.x, roof.y, strict=True):
        assert y == pytest.approx(min(peak, x * bw))
    assert peak / bw in list(roof.x)  # the ridge point is a vertex of the roof
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    assert fig.data[-1].name == "decode" and list(fig.data[-1].text) == ["decode"]
    with pytest.raises(ValueError, match="positive"):
        charts_bandwidth.roofline(0, bw, [])
