"""bench.evidence: collects every lab's claims, reports failures by name and never crashes on a bad lab."""

from __future__ import annotations

import importlib

import pytest

from bench import evidence


def test_collect_reports_each_claim_and_the_failing_ones():
    labs = {
        "a": lambda: {"a_fast": {"claim": "A is fast", "holds": True, "ratio": 2.0}},
        "b": lambda: {"b_fits": {"claim": "B fits", "holds": False}, "b_other": {"claim": "B2", "holds": True}},
    }
    out = evidence.collect(labs)
    assert set(out["claims"]) == {"a_fast", "b_fits", "b_other"}
    assert out["claims"]["a_fast"]["ratio"] == 2.0
    assert out["failing"] == ["b_fits"]
    assert out["all_hold"] is False
    assert set(out["seconds"]) == {"a", "b"}


def test_all_hold_only_when_every_claim_holds():
    out = evidence.collect({"a": lambda: {"x": {"claim": "x", "holds": True}}})
    assert out["all_hold"] is True and out["failing"] == []


def test_a_lab_that_raises_or_returns_junk_is_a_failed_claim_not_a_crash():
    def boom():
        raise RuntimeError("kernel exploded")

    out = evidence.collect({"boom": boom, "junk": lambda: {"j": {"holds": "yes"}}})
    assert out["claims"]["boom"]["holds"] is False and "kernel exploded" in out["claims"]["boom"]["error"]
    assert out["claims"]["j"]["holds"] is False  # "yes" is not a bool: no claim passes by accident
    assert out["failing"] == ["boom", "j"]


@pytest.mark.parametrize("name", evidence.LABS)
def test_every_listed_lab_has_a_claims_function(name):
    assert callable(importlib.import_module(f"lessons.labs.{name}").claims)
