"""bench.app.learners_per_core: a class size passes only with every move committed, no error and p95 in bound."""

from bench.app.classroom import new_raw
from bench.app.learners_per_core import _class_summary


def raw_with(updates: list[float], errors: tuple[str, ...] = ()) -> dict:
    raw = new_raw()
    raw["updates_ms"].extend(updates)
    raw["loads_ms"].extend([100.0] * 3)
    raw["errors"].extend(errors)
    raw["server_cpu_s"] = 0.5
    return raw


def test_a_class_within_the_bound_passes_and_reports_cpu_per_run():
    summary = _class_summary(10, raw_with([100.0] * 19 + [900.0]), 1000)
    assert summary["passes"] and summary["update_p95_ms"] <= 1000 and summary["updates"] == 20
    assert summary["server_cpu_ms_per_run"] == round(1000 * 0.5 / 23, 1)


def test_a_slow_p95_or_any_error_fails_the_class():
    assert not _class_summary(10, raw_with([100.0] * 10 + [1500.0] * 10), 1000)["passes"]
    assert not _class_summary(10, raw_with([100.0] * 20, ("session 3: TimeoutError",)), 1000)["passes"]
    assert not _class_summary(10, raw_with([]), 1000)["passes"]  # nothing measured is not a pass
