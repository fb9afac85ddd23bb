"""What one page run costs the server, lesson by lesson, and how long a learner's first contact takes.

`python -m bench.app.page_cost --json` starts `streamlit run app.py` on a free 127.0.0.1 port and, with one
protocol client (bench/app/client.py, the messages a browser sends) at a time, so the server's CPU between
two answers is that run's alone:

- ``first_contact``: from spawning the server to the end of the first lesson's first full render
  (``server_start_to_first_render_ms``, split into the wait for the health check and the render itself);
  then, on the warm server, a new learner's first render of every lesson (a fresh session each time).
- ``pages``: for every lesson, the server CPU per run (ms, from /proc, all threads) at the page's defaults
  (the same request again, as a reload does) and after one widget move (the widget of ``MOVES`` alternating
  between two values; a widget inside an ``st.fragment`` is moved as a browser moves it, by a run of that
  fragment). Each figure is the median over ``--repeats`` batches of ``--batch`` runs (the kernel counts CPU
  in 10 ms ticks, so one batch's total is divided by its runs); a few untimed moves first fill the caches.
  ``median_cpu_ms_per_run`` is the median over the lessons of the per-page figures, defaults and moves alike.

``streamlit_floor``: the same CPU per run for bare scripts of 1, 60 and 200 ``st.markdown`` lines, and the
line through them (``cpu_ms_per_message``, ``cpu_ms_per_run_fixed``): what Streamlit itself charges on this
machine, the floor under every lesson's figure (``*_messages_per_run`` counts a lesson's messages).

``--profile DIR`` runs the app under cProfile (bench/app/profiled_app.py): one stats file per script run in
DIR, for ``python -m pstats``; the CPU figures are then inflated by the profiler. The machine's 1-minute load
is recorded before and after: other processes on a shared machine do not count in the server's CPU time,
but they slow its caches and clock.

Run: python -m bench.app.page_cost --json [--save] [--pages gqa,paged] [--profile DIR] [--no-floor]
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.app.client import PageRun, StreamlitSession, choose, slider_position, slider_value, text_value
from bench.app_server import ROOT, process_cpu_seconds, running_app
from bench.harness import emit, env_info, log, parser, save
from ui.course import LESSON_IDS, page

PROFILED_APP = ROOT / "bench" / "app" / "profiled_app.py"
PROFILE_ENV = "KVLAB_BENCH_PROFILE_DIR"
MAX_BATCH, MAX_REPEATS = 50, 20


@dataclass(frozen=True)
class Move:
    """The widget a learner moves on one lesson: element kind in the protocol, user-key prefix, how to move it."""

    kind: str  # "slider" (also select sliders), "text_input", "radio", "selectbox"
    key_prefix: str
    values: tuple[str, str] | None = None  # text inputs: the two texts to alternate between


MOVES: dict[str, Move] = {
    "bandwidth": Move("slider", "bw_batch"),
    "gqa": Move("slider", "gqa_groups_"),
    "packing": Move("text_input", "pack_lengths", ("5, 12, 3, 20", "5, 12, 3, 21")),
    "fragmentation": Move("slider", "frag_max_len"),
    "paged": Move("slider", "paged_block"),
    "pressure": Move("slider", "pr_rate"),
    "diagnosis": Move("selectbox", "diag_scenario"),
    "golden_rules": Move("radio", "quiz_golden_rules.decode"),
}


def route_of(page_id: str) -> str:
    """The page's URL path, as app.py's navigation publishes it (ui/course.py)."""
    return page(page_id).url


def two_states(run: PageRun, move: Move) -> tuple[list[Any], str]:
    """The widget's two alternating states (a value next to the current one, then the current one) and the
    fragment whose run a browser asks for when it changes ("" for a full run). LookupError if it is missing."""
    # Streamlit's widget ids are "$$ID-<hash>-<user key>"; a user key may itself hold dashes.
    found = [w for k, w in run.widgets if k == move.kind and w.id.split("-", 2)[-1].startswith(move.key_prefix)]
    if not found:
        raise LookupError(f"no {move.kind} with a key starting {move.key_prefix!r}; the move table needs updating")
    proto = found[0]
    if move.kind == "slider":
        pos, low, high, step = slider_position(proto)
        other = pos + step if pos + step <= high else pos - step
        states = [slider_value(proto, other), slider_value(proto, pos)]
    elif move.kind == "text_input":
        states = [text_value(proto, v) for v in move.values or ()]
    else:  # radio or selectbox: the first two options, sent as their text
        states = [choose(proto, proto.options[1]), choose(proto, proto.options[0])]
    return states, run.fragment_of(proto)


async def _timed(fn: Callable[[], Any], pid: int, runs: int) -> float:
    """Server CPU ms per run over ``runs`` sequential requests made by ``fn``."""
    start = process_cpu_seconds(pid) or 0.0
    for i in range(runs):
        shown = await fn(i)
        if shown.errors:
            raise RuntimeError(f"the run showed an error: {shown.errors[0]}")
    return 1000 * ((process_cpu_seconds(pid) or 0.0) - start) / runs


async def page_cost(url: str, pid: int, page_id: str, batch: int, repeats: int) -> dict[str, Any]:
    """CPU per run at the defaults and after a widget move, for one lesson (medians over batches)."""
    route, move = route_of(page_id), MOVES[page_id]
    async with StreamlitSession(url, timeout_s=300) as s:
        cpu0, t0 = process_cpu_seconds(pid) or 0.0, time.perf_counter()
        first = await s.run(route)
        first_ms, first_cpu = 1000 * (time.perf_counter() - t0), 1000 * ((process_cpu_seconds(pid) or 0.0) - cpu0)
        if first.errors:
            raise RuntimeError(f"{page_id}: the first run showed an error: {first.errors[0]}")
        states, fragment = two_states(first, move)
        for state in states * 2:  # untimed: fill the caches for both values
            await s.run(route, [state], fragment_id=fragment)

        async def defaults(_: int) -> PageRun:
            return await s.run(route)

        async def moved(i: int) -> PageRun:
            return await s.run(route, [states[i % 2]], fragment_id=fragment)

        default_ms, move_ms = [], []
        for _ in range(repeats):  # interleaved, so a burst of load hits both alike
            default_ms.append(await _timed(defaults, pid, batch))
            move_ms.append(await _timed(moved, pid, batch))
        full, moved_run = await defaults(0), await moved(0)
    return {
        "defaults_cpu_ms_per_run": round(statistics.median(default_ms), 1),
        "move_cpu_ms_per_run": round(statistics.median(move_ms), 1),
        "defaults_messages_per_run": full.messages,
        "move_messages_per_run": moved_run.messages,
        "defaults_kib_per_run": round(full.message_bytes / 1024, 1),
        "move_kib_per_run": round(moved_run.message_bytes / 1024, 1),
        "moved": f"{move.kind} {move.key_prefix}",
        "move_is_fragment_run": bool(fragment),
        "first_render_ms": round(first_ms, 1),
        "first_render_cpu_ms": round(first_cpu, 1),
    }


async def new_learner(url: str, pid: int, page_id: str) -> tuple[float, float]:
    """(wall ms, server CPU ms) of a fresh session's first render of the lesson."""
    async with StreamlitSession(url, timeout_s=300) as s:
        cpu0, t0 = process_cpu_seconds(pid) or 0.0, time.perf_counter()
        shown = await s.run(route_of(page_id))
        wall, cpu = 1000 * (time.perf_counter() - t0), 1000 * ((process_cpu_seconds(pid) or 0.0) - cpu0)
    if shown.errors:
        raise RuntimeError(f"{page_id}: a new learner's first render showed an error: {shown.errors[0]}")
    return wall, cpu


def _arguments():
    p = parser(__doc__.splitlines()[0])
    p.set_defaults(repeats=3)
    p.add_argument("--batch", type=int, default=6, help=f"runs per timed batch (1..{MAX_BATCH})")
    p.add_argument("--pages", default=",".join(LESSON_IDS), help="comma-separated lesson ids (default: all)")
    p.add_argument(
        "--no-floor",
        dest="floor",
        action="store_false",
        help="skip timing bare scripts of 1, 60 and 200 st.markdown lines (Streamlit's own cost per run and message)",
    )
    p.add_argument("--profile", type=Path, default=None, help="write one cProfile stats file per run into DIR")
    args = p.parse_args()
    args.pages = [x.strip() for x in args.pages.split(",") if x.strip()]
    unknown = [x for x in args.pages if x not in MOVES]
    if unknown:
        p.error(f"--pages: {', '.join(unknown)} unknown; use some of {', '.join(MOVES)}")
    if not 1 <= args.batch <= MAX_BATCH or not 1 <= args.repeats <= MAX_REPEATS:
        p.error(f"--batch must be 1..{MAX_BATCH} and --repeats 1..{MAX_REPEATS}")
    return args


async def _measure(url: str, pid: int, args, spawned: float, healthy: float, out: dict) -> None:
    first_page = args.pages[0]
    wall, cpu = await new_learner(url, pid, first_page)
    out["first_contact"] = {
        "page": first_page,
        "server_start_to_first_render_ms": round(1000 * (time.perf_counter() - spawned), 1),
        "server_start_to_healthy_ms": round(1000 * (healthy - spawned), 1),
        "first_render_after_start_ms": round(wall, 1),
        "first_render_after_start_cpu_ms": round(cpu, 1),
    }
    for page_id in args.pages:
        out["pages"][page_id] = await page_cost(url, pid, page_id, args.batch, args.repeats)
        log(f"page_cost {page_id}: {out['pages'][page_id]}")
    warm: dict[str, dict[str, float]] = {}
    for page_id in args.pages:
        samples = [await new_learner(url, pid, page_id) for _ in range(3)]
        warm[page_id] = {
            "wall_ms": round(statistics.median(w for w, _ in samples), 1),
            "cpu_ms": round(statistics.median(c for _, c in samples), 1),
        }
    out["first_contact"]["new_learner_warm_server"] = warm


FLOOR_ELEMENTS = (1, 60, 200)
FLOOR_RUNS = 40


async def _floor_cost(url: str, pid: int) -> float:
    async with StreamlitSession(url, timeout_s=60) as s:
        await s.run("")
        cpu0 = process_cpu_seconds(pid) or 0.0
        for _ in range(FLOOR_RUNS):
            await s.run("")
        return 1000 * ((process_cpu_seconds(pid) or 0.0) - cpu0) / FLOOR_RUNS


def streamlit_floor(work: Path) -> dict[str, Any]:
    """Server CPU per run of a bare script of N `st.markdown` lines (no app, no widget): what Streamlit itself
    charges per run and per message on this machine, the floor under any page's cost."""
    out: dict[str, Any] = {}
    for n in FLOOR_ELEMENTS:
        script = work / f"floor_{n}.py"
        script.write_text(f"import streamlit as st\n\nfor i in range({n}):\n    st.markdown(f'line {{i}}')\n")
        server: dict = {}
        with running_app(work, work / f"floor_{n}.log", info=server, script=script) as url:
            out[str(n)] = round(asyncio.run(_floor_cost(url, server["pid"])), 1)
    first, last = FLOOR_ELEMENTS[0], FLOOR_ELEMENTS[-1]
    per = (out[str(last)] - out[str(first)]) / (last - first)
    return {
        "cpu_ms_per_run_by_elements": out,
        "cpu_ms_per_message": round(per, 3),
        "cpu_ms_per_run_fixed": round(out[str(first)] - per * first, 1),
    }


def main() -> None:
    """Measure; print one JSON line."""
    args = _arguments()
    result: dict[str, Any] = {"bench": "page_cost", "batch": args.batch, "repeats": args.repeats, "pages": {}}
    result["load_average_1m_before"] = round(os.getloadavg()[0], 2)
    extra_env, script = None, None
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
        extra_env, script = {PROFILE_ENV: str(args.profile.resolve())}, PROFILED_APP
        result["profiled"] = True
    with tempfile.TemporaryDirectory() as data_dir:
        server: dict = {}
        spawned = time.perf_counter()
        kwargs = {"script": script} if script else {}
        with running_app(
            Path(data_dir), Path(data_dir) / "streamlit.log", extra_env=extra_env, info=server, **kwargs
        ) as url:
            healthy = time.perf_counter()
            asyncio.run(_measure(url, server["pid"], args, spawned, healthy, result))
        if args.floor:
            result["streamlit_floor"] = streamlit_floor(Path(data_dir))
    result["load_average_1m_after"] = round(os.getloadavg()[0], 2)
    both = [v for p in result["pages"].values() for v in (p["defaults_cpu_ms_per_run"], p["move_cpu_ms_per_run"])]
    result["median_cpu_ms_per_run"] = round(statistics.median(both), 1) if both else None
    result["median_move_cpu_ms_per_run"] = (
        round(statistics.median(p["move_cpu_ms_per_run"] for p in result["pages"].values()), 1) if both else None
    )
    result["env"] = env_info()
    if args.save:
        log(f"saved {save('page_cost', result)}")
    emit(result)


if __name__ == "__main__":
    main()
