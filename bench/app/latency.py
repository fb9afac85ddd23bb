"""How long a course page takes to re-run after the learner moves its main widget (Streamlit AppTest).

For every page (welcome + the eight lessons) an AppTest loads the script once, then its main widget is moved
between two values. The first move of each value is untimed warm-up (it fills the page's shared caches,
ui.memo's and st.cache_resource's, reported as `first_move_ms`); then `--repeats` rounds move it back and forth and
time `AppTest.run()`. Rounds are interleaved across pages (page 1, page 2, …, page 1, page 2, …) so a burst
of load on the shared machine hits every page alike. `pages` is the median per page. Targets (docs/BENCHMARKS.md):
calculator / simulator pages <= 100 ms, engine-backed pages <= 1,000 ms on a 2-core CPU; never asserted.

The playground needs a model: the demo weights when installed, else a tiny random Llama folder written to a
temporary directory (recorded in `setup`). Its main widget is the scheduler-step slider over a finished run.

Run: python -m bench.app.latency --json [--save] (results keep the name app_latency)
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamlit.testing.v1 import AppTest

from bench.harness import emit, env_info, log, parser, save
from ui.course import page

CALCULATOR, ENGINE = 100.0, 1000.0  # target re-run ms


@dataclass
class PageCase:
    """One page: its course id, the widget to move (kind, key) and the two values it alternates between."""

    name: str  # the course page id (ui/course.py finds its script)
    kind: str | None  # AppTest accessor: "slider", "select_slider", "selectbox", "text_input", "radio"; None = rerun
    key: str | None
    values: tuple[Any, Any]
    target_ms: float


CASES = [
    PageCase("welcome", None, None, (None, None), CALCULATOR),
    PageCase("bandwidth", "slider", "bw_batch", (1, 64), CALCULATOR),
    PageCase("gqa", "select_slider", "gqa_groups_llama-3-8b", (8, 4), ENGINE),
    PageCase("packing", "text_input", "pack_lengths", ("5, 12, 3, 20", "5, 12, 3, 21"), ENGINE),
    PageCase("fragmentation", "select_slider", "frag_max_len", (2048, 1024), CALCULATOR),
    PageCase("paged", "select_slider", "paged_block", (16, 32), CALCULATOR),
    PageCase("diagnosis", "selectbox", "diag_scenario", ("chat-oom", "mha-rag"), CALCULATOR),
    PageCase("golden_rules", "radio", "quiz_golden_rules.decode", (0, 1), CALCULATOR),
    PageCase("playground", "slider", "pg_step", (1, 2), ENGINE),
]


def _move(at: AppTest, case: PageCase, value: Any) -> None:
    if case.kind is None:
        return
    widget = getattr(at, case.kind)(key=case.key)
    if case.kind == "radio" and isinstance(value, int):
        value = widget.options[value]
    widget.set_value(value)


def _timed_run(at: AppTest, case: PageCase) -> float:
    start = time.perf_counter()
    at.run()
    elapsed = (time.perf_counter() - start) * 1e3
    if at.exception:
        raise RuntimeError(f"page {case.name} raised: {at.exception[0].value}")
    return elapsed


def _playground_model(tmp: Path) -> str:
    """'demo' when its weights are installed, else a tiny random model folder (same builder as the tests)."""
    from lessons.labs.playground import DEMO_DIR

    if any(DEMO_DIR.glob("*.safetensors")):
        return "demo"
    from tests.lessons.labs.test_playground import make_tiny_model

    os.environ["KVLAB_MODEL_DIRS"] = str(tmp)  # the playground loads only from folders the server allows
    return str(make_tiny_model(tmp / "tiny"))


def _prepare_playground(at: AppTest, model: str) -> float:
    """Generate once so the step slider exists; returns the Generate click's re-run time in ms."""
    if model != "demo":
        at.radio(key="pg_source").set_value("folder").run()
        at.text_input(key="pg_path").set_value(model)
    at.button(key="pg_generate").click()
    start = time.perf_counter()
    at.run()
    elapsed = (time.perf_counter() - start) * 1e3
    if at.exception or at.error:
        raise RuntimeError(f"playground could not generate: {(at.exception or at.error)[0].value}")
    return elapsed


def main() -> None:
    """Time every page's re-run after its main widget moves; print one JSON line."""
    p = parser(__doc__.splitlines()[0])
    args = p.parse_args()
    load_ms: dict[str, float] = {}
    first_ms: dict[str, float] = {}
    samples: dict[str, list[float]] = {c.name: [] for c in CASES}
    apps: dict[str, AppTest] = {}
    with tempfile.TemporaryDirectory() as tmp:
        model = _playground_model(Path(tmp))
        generate_ms = None
        for case in CASES:
            at = AppTest.from_file(str(page(case.name).path), default_timeout=300)
            start = time.perf_counter()
            at.run()
            load_ms[case.name] = (time.perf_counter() - start) * 1e3
            if case.name == "playground":
                generate_ms = _prepare_playground(at, model)
            for i, value in enumerate((case.values[1], case.values[0]) * 2):  # B (cold), A, B, A (warm-up)
                _move(at, case, value)
                t = _timed_run(at, case)
                if i == 0:
                    first_ms[case.name] = t
            apps[case.name] = at
            log(f"{case.name}: loaded in {load_ms[case.name]:.0f} ms, first move {first_ms[case.name]:.0f} ms")
        for r in range(args.repeats):
            for case in CASES:
                at = apps[case.name]
                _move(at, case, case.values[(r + 1) % 2])
                samples[case.name].append(_timed_run(at, case))
            log(f"round {r + 1}/{args.repeats}: " + ", ".join(f"{k} {v[-1]:.0f}" for k, v in samples.items()))
    pages = {name: round(statistics.median(v), 1) for name, v in samples.items()}
    result = {
        "benchmark": "app_latency",
        "pages": pages,
        "targets_ms": {c.name: c.target_ms for c in CASES},
        "meets_target": {c.name: pages[c.name] <= c.target_ms for c in CASES},
        "first_move_ms": {k: round(v, 1) for k, v in first_ms.items()},
        "load_ms": {k: round(v, 1) for k, v in load_ms.items()},
        "playground_generate_ms": round(generate_ms, 1) if generate_ms is not None else None,
        "samples_ms": {k: [round(x, 1) for x in v] for k, v in samples.items()},
        "setup": {
            "widgets": {c.name: f"{c.key}: {c.values[0]!r} <-> {c.values[1]!r}" if c.key else "rerun" for c in CASES},
            "repeats": args.repeats,
            "playground_model": "demo" if model == "demo" else "tiny random Llama (hidden 32, 2 layers)",
            "method": "AppTest.run() after moving the widget; values alternate; caches warm (see first_move_ms)",
            "load_average_1m": round(os.getloadavg()[0], 2),  # the machine is shared: context for the numbers
        },
        "env": env_info(),
    }
    if args.save:
        log(f"saved {save('app_latency', result)}")
    emit(result)


if __name__ == "__main__":
    main()
