"""bench.throughput runs (--quick: tiny sizes, one round) and its JSON holds the keys the docs read.

Timings are not checked: on a shared machine they mean nothing at these sizes. The full workload's
definition is checked against the saved result, so a change to it cannot slip in unnoticed.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.throughput import QUICK_STEP_COSTS, hf_steps, workload

ROOT = Path(__file__).resolve().parents[2]
SAVED = ROOT / "bench" / "results" / "throughput-cpu.json"


@pytest.fixture(scope="module")
def quick() -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.throughput", "--json", "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, "stdout must be exactly one JSON line"
    return json.loads(lines[0])


def test_quick_run_reports_every_key(quick):
    for key in ("engine_tok_s", "hf_tok_s", "speedup", "speedup_vs_dynamic", "speedup_vs_unbudgeted", "seconds"):
        assert key in quick, key
    assert set(quick["seconds"]) == {"engine", "hf", "hf_dynamic", "hf_unbudgeted"}
    assert quick["quick"] is True and quick["repeats"] == 1
    assert quick["workload"]["num_requests"] == 4
    assert set(quick["engine"]) >= {"block_size", "num_blocks", "steps", "preemptions"}
    assert set(quick["steps"]["engine"]) == {"prefill_tokens", "decode_steps", "forward_passes", "mean_decode_batch"}
    assert set(quick["steps"]["hf"]) == {"prefill_tokens", "decode_steps", "forward_passes"}


def test_quick_run_reports_decode_step_cost_per_batch(quick):
    costs = quick["decode_step_cost"]
    batches = {str(b) for b in QUICK_STEP_COSTS["batches"]}  # JSON object keys are strings
    for key in ("engine_ms", "hf_static_ms", "ratio"):
        assert set(costs[key]) == batches, key
    for b in batches:  # the ratio is engine / transformers, as the docs' target reads it
        expected = costs["engine_ms"][b] / costs["hf_static_ms"][b]
        assert costs["ratio"][b] == pytest.approx(expected, rel=1e-2, abs=1e-3)


def test_quick_refuses_save():
    proc = subprocess.run(
        [sys.executable, "-m", "bench.throughput", "--quick", "--save"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0 and "--quick" in proc.stderr


def test_full_workload_is_the_saved_one():
    prompts, output_lens = workload()
    saved = json.loads(SAVED.read_text())
    assert len(prompts) == saved["workload"]["num_requests"] == 32
    assert sum(len(p) for p in prompts) == saved["workload"]["prompt_tokens"]
    assert sum(output_lens) == saved["workload"]["output_tokens"]
    assert hf_steps(prompts, output_lens, saved["hf"]["batch_size_under_budget"]) == saved["steps"]["hf"]
    for key in ("engine_ms", "hf_static_ms", "ratio"):
        assert set(saved["decode_step_cost"][key]) == {"1", "8", "16"}, key
