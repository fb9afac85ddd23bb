"""Lesson 7's lab: incident variants, the fix widgets' options, grading by re-simulation, and what to record.

The incidents, their replay and their grading are the `lessons.diagnosis` package; this module is what page 7
needs on top (no Streamlit): `scenario_for` picks an incident or a seeded variant, `current_values` and
`options_for` feed the fix widgets, `changed_fixes` keeps only what the learner changed, and `graded_run`
grades a diagnosis with its fixes into a `GradedRun` the page lays out (verdict, before / after table, the
progress record). Imports point one way: this lab uses the package, the package never imports a lab.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.memory.catalog import GPUS, MODELS
from engine.memory.startup import default_max_num_batched_tokens
from engine.memory.units import GiB
from kernels.validate import is_whole
from lessons.diagnosis.grading import grade
from lessons.diagnosis.incidents import get_scenario
from lessons.diagnosis.scenarios import FIX_PARAMS, Grade, Outcome, Scenario, ServeConfig, Symptoms

MAX_VARIANT = 999  # variant 0 is the incident as written; 1 … MAX_VARIANT are seeded variants
FIX_LABELS: dict[str, str] = {
    "policy": "KV memory policy (static reservation or paged blocks)",
    "block_size": "--block-size (tokens per KV block; FlashAttention needs a multiple of 16)",
    "model": "Model",
    "quantization": "--quantization (weights)",
    "kv_cache_dtype": "--kv-cache-dtype",
    "max_model_len": "--max-model-len (auto: the longest the KV cache holds)",
    "max_num_seqs": "--max-num-seqs",
    "max_num_batched_tokens": "--max-num-batched-tokens (tokens per step)",
    "enforce_eager": "--enforce-eager (no CUDA graphs)",
    "kv_cache_memory_bytes": "--kv-cache-memory-bytes (0 = not set)",
    "tensor_parallel_size": "--tensor-parallel-size (GPUs)",
    "gpu_memory_utilization": "--gpu-memory-utilization",
}


def scenario_for(scenario_id: str, variant: int) -> Scenario:
    """The incident (variant 0) or one of its seeded variants; ValueError for an unknown id or variant."""
    if not is_whole(variant) or not 0 <= variant <= MAX_VARIANT:
        raise ValueError(f"variant {variant!r} must be a whole number from 0 (the original) to {MAX_VARIANT}")
    return get_scenario(scenario_id, None if variant == 0 else variant)


def current_values(config: ServeConfig) -> dict[str, Any]:
    """The deployment's value of every fixable parameter (what the fix widgets start from)."""
    return {
        "policy": config.policy,
        "block_size": config.block_size,
        "model": config.model,
        "quantization": config.quantization,
        "kv_cache_dtype": config.kv_cache_dtype,
        "max_model_len": config.context_len,
        "max_num_seqs": config.max_num_seqs,
        "max_num_batched_tokens": config.max_num_batched_tokens or default_max_num_batched_tokens(GPUS[config.gpu]),
        "enforce_eager": config.enforce_eager,
        "kv_cache_memory_bytes": config.kv_cache_memory_bytes,
        "tensor_parallel_size": config.tensor_parallel_size,
        "gpu_memory_utilization": config.gpu_memory_utilization,
    }


def options_for(param: str, current: Any) -> list[Any]:
    """The values a fix widget offers: FIX_PARAMS' list plus the deployment's own value, sorted when numeric."""
    if param not in FIX_PARAMS:
        raise ValueError(f"unknown fix {param!r}; fixes are {list(FIX_PARAMS)}")
    opts = list(FIX_PARAMS[param])
    if current not in opts:
        opts.append(current)
    words = [o for o in opts if isinstance(o, str) and param == "max_model_len"]  # "auto" goes last
    opts = [o for o in opts if o not in words]
    numeric = all(isinstance(o, (int, float)) and not isinstance(o, bool) for o in opts)
    return (sorted(opts) if numeric else opts) + words


def changed_fixes(config: ServeConfig, chosen: dict[str, Any]) -> dict[str, Any]:
    """Only the parameters the learner changed from the deployment (the fix set to grade)."""
    now = current_values(config)
    unknown = [k for k in chosen if k not in now]
    if unknown:
        raise ValueError(f"unknown fixes {unknown}; fixes are {list(now)}")
    return {k: v for k, v in chosen.items() if v != now[k]}


def run_grade(scenario_id: str, variant: int, diagnosis_ids: tuple[str, ...], fixes: dict[str, Any]) -> Grade:
    """Grade the learner's diagnosis and re-run the incident's traffic with their fixes."""
    scenario = scenario_for(scenario_id, variant)
    return grade(scenario, list(diagnosis_ids), changed_fixes(scenario.config, fixes))


@dataclass(frozen=True)
class GradedRun:
    """One graded re-run as page 7 shows it: the verdict in words, what happened, and what to record."""

    verdict: str  # one line, "RESOLVED — …" or "NOT RESOLVED — …" (never colour alone)
    resolved: bool
    explanation: tuple[str, ...]  # what the re-run showed, one Markdown line each
    diagnosis_feedback: tuple[str, ...]  # on each diagnosis the learner ticked or missed
    costs: tuple[str, ...]  # what the fixes cost (memory, speed, context)
    rows: tuple[dict[str, str], ...]  # the before / after table (`before_after_rows`), also its download
    record: dict[str, Any]  # what the learner's progress keeps (`record`)
    command: str  # the fixed `vllm serve` line


def graded_run(scenario_id: str, variant: int, diagnosis_ids: tuple[str, ...], fixes: dict[str, Any]) -> GradedRun:
    """`run_grade`, laid out for the page: verdict, explanations, before / after rows and the progress record."""
    g = run_grade(scenario_id, variant, diagnosis_ids, fixes)
    return GradedRun(
        verdict=verdict(g),
        resolved=g.resolved,
        explanation=tuple(g.explanation),
        diagnosis_feedback=tuple(g.diagnosis_feedback),
        costs=tuple(g.costs),
        rows=tuple(before_after_rows(g)),
        record=record(g, variant, diagnosis_ids),
        command=g.command,
    )


def memory_title(scenario: Scenario) -> str:
    """The title of the incident's GPU memory chart: the GPU and the model as deployed."""
    return f"{GPUS[scenario.config.gpu].name} memory as deployed ({MODELS[scenario.config.model].name})"


def traffic_rows(sym: Symptoms) -> list[dict[str, str]]:
    """The incident's traffic numbers as a two-column table (measure, value)."""
    return [{"measure": k, "value": str(v)} for k, v in sym.traffic.items()]


def _outcome_numbers(o: Outcome) -> dict[str, Any]:
    fp, s = o.footprint, o.summary
    return {
        "server starts": "no" if o.startup_error else "yes",
        "KV pool (GiB)": round(max(fp.kv_budget_bytes, 0) / GiB, 2),
        "KV per token (KiB)": fp.kv_bytes_per_token // 1024,
        "finished requests": s.num_finished if s else 0,
        "out-of-memory failures": s.num_oom if s else "—",
        "rejected": s.num_rejected if s else "—",
        "peak running": s.peak_concurrency if s else 0,
        "p95 wait (s)": round(s.p95_wait_s, 2) if s else "—",
        "tokens/s": round(s.tokens_per_s, 1) if s else 0,
        "problems left": len(o.problems),
    }


def before_after_rows(g: Grade) -> list[dict[str, Any]]:
    """One row per measure: the incident as deployed vs with the learner's fixes (numbers, not colours)."""
    before, after = _outcome_numbers(g.before), _outcome_numbers(g.after)
    return [{"measure": k, "as deployed": str(before[k]), "with your fixes": str(after[k])} for k in before]


def verdict(g: Grade) -> str:
    """A one-line verdict in words (the page never signals it by colour alone)."""
    head = "RESOLVED — every requirement is met" if g.resolved else "NOT RESOLVED — requirements still fail"
    dx = "diagnosis right" if g.diagnosis_correct else "diagnosis incomplete or wrong"
    return f"{head}; {dx}."


def record(g: Grade, variant: int, diagnosis_ids: tuple[str, ...]) -> dict[str, Any]:
    """What the progress store keeps for this incident."""
    return {
        "variant": variant,
        "diagnoses": list(diagnosis_ids),
        "fixes": dict(g.fixes),
        "resolved": g.resolved,
        "diagnosis_correct": g.diagnosis_correct,
        "problems": list(g.after.problems),
    }


def model_label(key: str) -> str:
    """A catalog model's display name with its KV heads (the GQA clue)."""
    m = MODELS[key]
    return f"{m.name} ({m.num_kv_heads} KV heads)"


PASTE_MODELS: tuple[str, ...] = ("", *(k for k in MODELS if k != "demo"))  # "" = the log's own figures


def paste_model_index(guess: str | None) -> int:
    """Where the paste box's model choice starts: the model the log names (`own_log.guess_model`), else ""."""
    return PASTE_MODELS.index(guess) if guess in PASTE_MODELS else 0


def model_label_or_log(key: str) -> str:
    """model_label, or "(from the log)" for the empty choice of the paste box."""
    return model_label(key) if key else "(from the log)"


def gib_label(num_bytes: int) -> str:
    """A byte count as the fix widget shows it: "not set" for 0, else GiB."""
    return "not set" if not num_bytes else f"{num_bytes / GiB:g} GiB"


__all__ = [
    "FIX_LABELS",
    "MAX_VARIANT",
    "PASTE_MODELS",
    "GradedRun",
    "before_after_rows",
    "changed_fixes",
    "current_values",
    "gib_label",
    "graded_run",
    "memory_title",
    "model_label",
    "model_label_or_log",
    "options_for",
    "paste_model_index",
    "record",
    "run_grade",
    "scenario_for",
    "traffic_rows",
    "verdict",
]
