"""lessons/run_limit.py: a session's uncached runs are counted in a sliding window (a fake clock, no sleeping)."""

from __future__ import annotations

import math

import pytest

from lessons.run_limit import MAX_RUNS, WINDOW_S, RunAllowance, RunLimitReached


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_run_past_the_limit_is_refused_with_the_limit_and_the_wait_named():
    clock = Clock()
    allowance = RunAllowance(limit=3, window_s=60, clock=clock)
    for _ in range(3):
        clock.now += 5  # runs at 1005, 1010, 1015
        allowance.charge()
    assert allowance.started == 3
    clock.now = 1020.0
    with pytest.raises(RunLimitReached) as info:
        allowance.charge()
    assert info.value.wait_s == pytest.approx(45.0)  # the first run (at 1005) leaves the window at 1065
    text = str(info.value)
    assert "started 3 new engine runs in the last 1 minute," in text and "in 45 s" in text
    assert "settings are kept" in text.lower()
    assert allowance.started == 3  # a refused run is not counted


def test_the_window_slides_one_run_at_a_time():
    clock = Clock()
    allowance = RunAllowance(limit=2, window_s=10, clock=clock)
    allowance.charge()
    clock.now += 4
    allowance.charge()
    clock.now += 5.9  # 9.9 s after the first: still inside
    with pytest.raises(RunLimitReached):
        allowance.charge()
    clock.now += 0.1  # exactly 10 s after the first: it has left the window, the second has not
    allowance.charge()
    with pytest.raises(RunLimitReached) as info:
        allowance.charge()
    assert info.value.wait_s == pytest.approx(4.0)
    assert allowance.started == 2
    assert "in the last 10 s," in str(info.value) and "in 4 s" in str(info.value)
    assert "in the last 5 minutes," in str(RunLimitReached(MAX_RUNS, WINDOW_S, 1.2))  # and a wait rounded up: 2 s
    assert "can run in 2 s" in str(RunLimitReached(MAX_RUNS, WINDOW_S, 1.2))


def test_a_script_moving_sliders_starts_at_most_the_limit_per_window():
    clock = Clock()
    allowance = RunAllowance(clock=clock)
    started = refused = 0
    for _ in range(10 * MAX_RUNS):  # one attempt a second for 300 seconds: a window's worth
        clock.now += WINDOW_S / (10 * MAX_RUNS)
        try:
            allowance.charge()
            started += 1
        except RunLimitReached:
            refused += 1
    assert started == MAX_RUNS and refused == 9 * MAX_RUNS


@pytest.mark.parametrize("limit", [0, -1, 2.5, True, "3"])
def test_a_bad_limit_is_refused_by_name(limit):
    with pytest.raises(ValueError, match="limit="):
        RunAllowance(limit=limit)


@pytest.mark.parametrize("window", [0, -1.0, math.nan, math.inf, "60"])
def test_a_bad_window_is_refused_by_name(window):
    with pytest.raises(ValueError, match="window_s="):
        RunAllowance(window_s=window)
