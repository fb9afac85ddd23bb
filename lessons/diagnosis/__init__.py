"""Lesson 7, production diagnosis: OOM incidents, running them with a learner's fixes, and grading.

Public API (page 7's lab, `lessons.labs.diagnosis`, builds on it; nothing here imports a lab):
- what an incident is: `Scenario`, `ServeConfig`, `Traffic`, `Diagnosis`, `Outcome`, `Symptoms`, `Grade`,
  `FIX_PARAMS`, `apply_fixes`, `vllm_command` (lessons/diagnosis/scenarios.py);
- the incidents: `scenario_ids`, `get_scenario`, `all_scenarios` (incidents.py);
- running one: `run_outcome`, `symptoms` (replay.py; its log lines come from logs.py);
- grading: `grade` (grading.py);
- a learner's own server: `read_vllm_log`, `VllmLog` (readlog.py, no other project import);
  what the page makes of it (memory bar, room for requests, flag changes) is `own_log`, imported by path;
- reading a server's /metrics scrape: `read_vllm_metrics`, `VllmMetrics`, `metrics_rows` (metrics.py, no other
  project import; lesson 6, serving under KV pressure, shows it).
No import cycle: incidents and logs import scenarios, replay imports logs, grading imports replay.
"""

from lessons.diagnosis.grading import grade
from lessons.diagnosis.incidents import all_scenarios, get_scenario, scenario_ids
from lessons.diagnosis.metrics import VllmMetrics, metrics_rows, read_vllm_metrics
from lessons.diagnosis.readlog import VllmLog, read_vllm_log
from lessons.diagnosis.replay import run_outcome, symptoms
from lessons.diagnosis.scenarios import (
    FIX_PARAMS,
    Diagnosis,
    Grade,
    Outcome,
    Scenario,
    ServeConfig,
    Symptoms,
    Traffic,
    apply_fixes,
    vllm_command,
)

__all__ = [
    "FIX_PARAMS",
    "Diagnosis",
    "Grade",
    "Outcome",
    "Scenario",
    "ServeConfig",
    "Symptoms",
    "Traffic",
    "VllmLog",
    "VllmMetrics",
    "all_scenarios",
    "apply_fixes",
    "get_scenario",
    "grade",
    "metrics_rows",
    "read_vllm_log",
    "read_vllm_metrics",
    "run_outcome",
    "scenario_ids",
    "symptoms",
    "vllm_command",
]
