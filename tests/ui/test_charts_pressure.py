"""ui/charts_pressure.py: lesson 6's figures draw the labs' typed values (steps, runs, simulated rates) as given."""

import pytest

from lessons.labs.pressure import METRICS, Traffic
from tests.ui.chart_inputs import gpu_point, run_point, step_row
from ui import charts_pressure


def test_dashboard_draws_each_signal_of_each_step():
    steps = [
        step_row(i, kv_usage=u, running=r, waiting=w, preemptions=p)
        for i, u, r, w, p in ((1, 0.25, 2, 3, 0), (2, 1.0, 4, 1, 2))
    ]
    kv, running, waiting, preempted = charts_pressure.dashboard(steps, METRICS, "run").data
    for trace in (kv, running, waiting, preempted):
        assert list(trace.x) == [1, 2]
    assert list(kv.y) == [25.0, 100.0]  # a fraction drawn as %
    assert (list(running.y), list(waiting.y), list(preempted.y)) == ([2, 4], [3, 1], [0, 2])
    assert METRICS["kv_usage"] in kv.name and METRICS["preemptions"] in preempted.name


def test_traffic_sweep_draws_preemptions_and_ttft_in_steps_per_rate():
    points = [
        run_point(Traffic(rate=r), preemptions=p, ttft_p50_steps=a, ttft_p95_steps=b)
        for r, p, a, b in ((0.05, 0, 1.0, 2.0), (0.5, 7, 4.0, 19.0))
    ]
    bars, p50, p95 = charts_pressure.traffic_sweep(points, "traffic").data
    assert list(bars.x) == ["0.05", "0.5"] and list(bars.y) == [0, 7] and list(bars.text) == ["0", "7"]
    assert (list(p50.y), list(p95.y)) == ([1.0, 4.0], [2.0, 19.0])
    assert p50.name == "TTFT p50 (steps)" and p95.name == "TTFT p95 (steps)"


def test_budget_trade_draws_ttft_the_stall_and_tpot_per_budget():
    points = [
        run_point(Traffic(budget=b), ttft_p50_ms=t, stall_ms=g, tpot_p50_ms=d)
        for b, t, g, d in ((16, 300.0, 20.0, 15.0), (512, 120.0, 90.0, 25.0))
    ]
    ttft, stall, tpot = charts_pressure.budget_trade(points, "budget").data
    assert list(ttft.x) == ["16", "512"]
    assert (list(ttft.y), list(stall.y), list(tpot.y)) == ([300.0, 120.0], [20.0, 90.0], [15.0, 25.0])


def test_gpu_sweep_draws_the_simulated_rates():
    points = [
        gpu_point(r, preemptions=p, p95_wait_s=w, peak_kv_usage=u)
        for r, p, w, u in ((1.0, 0, 0.1, 0.4), (16.0, 40, 9.5, 1.0))
    ]
    bars, wait, usage = charts_pressure.gpu_sweep(points, "gpu").data
    assert list(bars.x) == ["1.0", "16.0"] and list(bars.y) == [0, 40]
    assert list(wait.y) == [0.1, 9.5] and list(usage.y) == pytest.approx([40.0, 100.0])
