"""Learners per core: how many learners one server answers within a latency bound, on this machine.

`python -m bench.app.learners_per_core --json` starts one server (`ui.serve`, as run.sh does) on 127.0.0.1 and runs
`bench.app.classroom`'s protocol class against it with more and more learners (``--learners``, default
10, 20, 30, 40, 60), each class after the last has finished: every learner opens the classroom path's three
lessons and moves each one's main slider ``--moves`` times, pausing ``--think`` seconds (default 2) to read.
Two untimed learners first move every slider both ways, so each setting the classes reach is computed once
(an engine or kernel measurement on first use) before any class is timed. A class size passes when every
move committed with no error and the p95 of its page updates is within
``--p95-ms`` (default 1,000). It stops at the first size that fails.

Reported: every class size's p50/p95, errors and server CPU per run; ``learners_at_p95`` (the largest size
that passed), ``cores`` (this machine's) and ``learners_per_core`` (their ratio). The server is one process
and a Streamlit app's script runs share its interpreter lock, so its page runs use about one core; the
protocol learners run in this benchmark's own process on the same machine. A figure from a machine other
jobs were using is low: the JSON records the 1-minute load before and after.

Run: python -m bench.app.learners_per_core --json [--learners 10,20,40] [--think 2] [--moves 4] [--p95-ms 1000] [--save]
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

from bench.app.classroom import PATH, new_raw, percentile, run_classroom
from bench.app_server import running_app
from bench.harness import emit, env_info, log, parser, save

MAX_LEARNERS = 100


def _arguments():
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--learners", default="10,20,30,40,60", help=f"class sizes to try, ascending (1..{MAX_LEARNERS})")
    p.add_argument("--think", type=float, default=2.0, help="mean pause before each slider move, seconds")
    p.add_argument("--moves", type=int, default=4, help="slider moves per lesson per learner (1..20)")
    p.add_argument("--p95-ms", type=float, default=1000.0, help="the latency bound a class size must meet")
    p.add_argument("--ramp", type=float, default=5.0, help="learners join evenly over this many seconds")
    p.add_argument("--step-timeout", type=float, default=60.0, help="limit for one page run, seconds")
    args = p.parse_args()
    try:
        sizes = [int(x) for x in args.learners.split(",") if x.strip()]
    except ValueError:
        p.error(f"--learners {args.learners!r}: give comma-separated whole numbers, e.g. 10,20,40")
    if not sizes or sizes != sorted(set(sizes)) or not all(1 <= n <= MAX_LEARNERS for n in sizes):
        p.error(f"--learners {args.learners!r}: ascending, distinct sizes between 1 and {MAX_LEARNERS}")
    if not 1 <= args.moves <= 20 or not args.think >= 0 or not args.p95_ms > 0:
        p.error("--moves must be 1..20, --think >= 0 and --p95-ms > 0")
    args.sizes = sizes
    return args


def _class_summary(size: int, raw: dict, p95_ms: float) -> dict[str, Any]:
    updates, loads = raw["updates_ms"], raw["loads_ms"]
    runs, cpu = len(updates) + len(loads), raw.get("server_cpu_s")
    p95 = percentile(updates, 95) if updates else None
    return {
        "learners": size,
        "updates": len(updates),
        "errors": len(raw["errors"]),
        "error_samples": raw["errors"][:5],
        "lost_commits": len(raw["lost_commits"]),
        "update_p50_ms": round(statistics.median(updates), 1) if updates else None,
        "update_p95_ms": round(p95, 1) if p95 is not None else None,
        "server_cpu_ms_per_run": round(1000 * cpu / runs, 1) if cpu and runs else None,
        "passes": bool(updates) and not raw["errors"] and p95 is not None and p95 <= p95_ms,
        "load_average_1m_after": round(os.getloadavg()[0], 2),
    }


async def _sweep(url: str, pid: int, args, out: dict) -> None:
    # Untimed: two learners moving every slider both ways compute each setting the classes will reach once
    # (an engine or kernel measurement on first use, then shared from the process's cache), as when the
    # teacher tried the lessons before class.
    warm = new_raw()
    await run_classroom(url, "protocol", 2, args.moves, PATH, args.step_timeout, 0.0, 0.0, pid, warm)
    out["warmup_errors"] = warm["errors"][:5]
    for size in args.sizes:
        raw = new_raw()
        log(f"learners_per_core: {size} learners")
        await run_classroom(url, "protocol", size, args.moves, PATH, args.step_timeout, args.ramp, args.think, pid, raw)
        summary = _class_summary(size, raw, args.p95_ms)
        out["classes"].append(summary)
        log(f"learners_per_core: {summary}")
        if not summary["passes"]:
            break


def main() -> None:
    """Measure; print one JSON line."""
    args = _arguments()
    result: dict[str, Any] = {
        "bench": "learners_per_core",
        "think_s": args.think,
        "moves_per_lesson": args.moves,
        "path": [route for route, _ in PATH],
        "p95_bound_ms": args.p95_ms,
        "load_average_1m_before": round(os.getloadavg()[0], 2),
        "classes": [],
    }
    with tempfile.TemporaryDirectory() as data_dir:
        server: dict = {}
        with running_app(Path(data_dir), Path(data_dir) / "streamlit.log", info=server) as url:
            asyncio.run(_sweep(url, server["pid"], args, result))
    passed = [c["learners"] for c in result["classes"] if c["passes"]]
    cores = os.cpu_count() or 1
    result["learners_at_p95"] = max(passed) if passed else 0
    result["cores"] = cores
    result["learners_per_core"] = round(result["learners_at_p95"] / cores, 1)
    result["bound_reached"] = any(not c["passes"] for c in result["classes"])  # false: the largest size passed
    result["load_average_1m_after"] = round(os.getloadavg()[0], 2)
    result["env"] = env_info()
    emit(result)
    if args.save:
        save("learners_per_core", result)


if __name__ == "__main__":
    main()
