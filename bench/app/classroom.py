"""Classroom load check: N learners at once against one KV Lab server on loopback.

`python -m bench.app.classroom --json` starts `streamlit run app.py` on a free 127.0.0.1 port and runs
the same scripted lesson path in N sessions at once (joining over a few seconds, after one untimed
warm-up visit): open a calculator page, then move its main slider several times, pausing --think
seconds to read as a learner does, timing each move → re-run finished. By default the sessions are
bench/app/client.py clients speaking the app's websocket protocol (the same protobuf messages a browser
sends): the server's cost alone, as in a classroom where every learner has their own computer.
`--client browser` uses N contexts of one headless system Chromium driven by the keyboard instead;
their rendering shares the server's CPUs, so on 2 cores use a handful of sessions. `--think 0` is a
stress test (everyone moves again at once).
Reports p50/p95/max page-update latency and every error (timeouts, exception or st.error elements).
A move's commit is checked, not assumed: it counts as lost (`lost_commits`, also an error) when no script
run finishes after the key press, or when the run that finishes shows another slider value. Browser
sessions see a run finish by its `script_finished` frame on the websocket (bench/app/browser.py's
RUNS_FINISHED_JS); stApp's script-state attribute misses runs whose messages React renders in one batch.
docs/BENCHMARKS.md target on the 2-core CPU: 0 errors, p95 <= 2,000 ms for 20 sessions (not asserted).

Bounded: at most 100 sessions and 20 moves each; a hard timeout cancels everything and still prints
the JSON; the server and browser are always stopped.
"""

from __future__ import annotations

import asyncio
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.app.browser import APP_IDLE, CHROMIUM_ARGS, RUNS_FINISHED_JS, find_chromium
from bench.app.client import StreamlitSession, slider_position, slider_value
from bench.app_server import process_cpu_seconds, running_app
from bench.harness import emit, env_info, log, parser, save

MAX_SESSIONS, MAX_MOVES = 100, 20
# Lesson path: (URL path, label prefix of the slider to move). Calculator pages only.
PATH = (("gqa", "KV groups G"), ("paged_attention", "Block size"), ("bandwidth", "Sequences decoding together"))
CLIENT_NOTES = {
    "browser": "all sessions are contexts of one headless Chromium on the server's CPUs (rendering included)",
    "protocol": "sessions speak the app's websocket protocol; no rendering (the server's cost alone)",
}
SLIDER_SEL = '[data-testid="stSlider"]:has-text("{label}") input[type="range"]'
ERRORS_SEL = '[data-testid="stException"], [data-testid="stAlertContentError"]'
# The earlier detector, kept to count the runs it misses (`runs_unseen_by_dom`): window.__kvRuns counts the
# flips of stApp's script state to "notRunning" (see RUNS_FINISHED_JS for why that misses some runs).
RUN_COUNTER_JS = """
() => {
  window.__kvRuns = 0;
  const attr = 'data-test-script-state';
  const watch = () => {
    const app = document.querySelector('[data-testid="stApp"]');
    if (!app) { setTimeout(watch, 20); return; }
    // Records arrive batched: rebuild the sequence of states from their old values so a run that
    // starts and ends within one batch is still counted.
    new MutationObserver((records) => {
      const states = records.map((r) => r.oldValue).concat([app.getAttribute(attr)]);
      for (let i = 1; i < states.length; i++) {
        if (states[i] === 'notRunning' && states[i - 1] !== 'notRunning') window.__kvRuns += 1;
      }
    }).observe(app, {attributes: true, attributeOldValue: true, attributeFilter: [attr]});
  };
  watch();
}
"""


async def value_changed(thumb, old: str, wait_s: float = 5.0) -> bool:
    """Whether the slider's input shows a value other than ``old`` within ``wait_s``."""
    deadline = time.perf_counter() + wait_s
    while time.perf_counter() < deadline:
        if await thumb.evaluate("e => e.value") != old:
            return True
        await asyncio.sleep(0.03)
    return False


async def value_is(thumb, wanted: str, wait_s: float = 5.0) -> bool:
    """Whether the slider's input shows ``wanted`` within ``wait_s`` (after the re-run that committed it)."""
    deadline = time.perf_counter() + wait_s
    while True:
        if await thumb.evaluate("e => e.value") == wanted:
            return True
        if time.perf_counter() > deadline:
            return False
        await asyncio.sleep(0.03)


async def think(out: dict, idx: int, step: int) -> None:
    """A learner reads the page before the next move: think_s ± 50 %, seeded per learner and step."""
    mean = out.get("think_s", 0.0)
    if mean > 0:
        await asyncio.sleep(mean * random.Random(1000 * idx + step).uniform(0.5, 1.5))


def new_raw() -> dict:
    """Empty raw measurements: latencies, errors, lost commits (also counted as errors), keys pressed again."""
    return {
        "loads_ms": [],
        "updates_ms": [],
        "errors": [],
        "by_page": {},
        "lost_commits": [],
        "keys_resent": 0,
        "runs_unseen_by_dom": 0,
    }


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100) of values, None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


async def move_and_commit(page, thumb, key: str, out: dict, where: str, timeout_ms: float) -> None:
    """Press ``key`` on the focused slider and wait until the re-run it commits has finished and shows the value.

    A commit is lost when the slider moved on screen but no script run finished after the press, or when the
    run that finished shows another value; each is recorded in ``out["lost_commits"]`` and raised.
    """
    before, dom_before = await page.evaluate("[window.__kvFinished, window.__kvRuns]")
    old = await thumb.evaluate("e => e.value")
    for _attempt in range(3):  # a key the page never saw (the value did not move in 5 s) is pressed again
        await thumb.press(key)
        if await value_changed(thumb, old):
            break
        out["keys_resent"] += 1
    shown = await thumb.evaluate("e => e.value")
    try:
        await page.wait_for_function(f"window.__kvFinished > {before}", timeout=timeout_ms, polling=20)
    except Exception:
        out["lost_commits"].append(f"{where}: the slider shows {shown} but no run finished")
        raise
    await page.wait_for_selector(APP_IDLE, timeout=timeout_ms)
    if not await value_is(thumb, shown):
        now = await thumb.evaluate("e => e.value")
        out["lost_commits"].append(f"{where}: the slider showed {shown}, the re-run shows {now}")
        raise RuntimeError(f"commit of {shown} lost: the page shows {now} after its re-run")
    try:  # the old detector (stApp's script-state attribute) for comparison: did it see this run at all?
        await page.wait_for_function(f"window.__kvRuns > {dom_before}", timeout=500, polling=20)
    except Exception:  # noqa: BLE001 - a run the attribute never showed
        out["runs_unseen_by_dom"] += 1


async def learner(browser, url: str, idx: int, path, moves: int, timeout_ms: float, out: dict, delay_s=0.0) -> None:
    """One learner: after `delay_s`, for each page on the path, load it, then move its slider `moves` times."""
    await asyncio.sleep(delay_s)
    context = await browser.new_context(viewport={"width": 1200, "height": 800})
    await context.add_init_script(f"({RUNS_FINISHED_JS})()")
    await context.add_init_script(f"({RUN_COUNTER_JS})()")  # only to count the runs it misses
    page = await context.new_page()
    where = "start"
    try:
        for route, label in path:
            where = route
            start = time.perf_counter()
            await page.goto(f"{url}/{route}", timeout=timeout_ms)
            await page.wait_for_function("window.__kvFinished > 0", timeout=timeout_ms, polling=20)
            await page.wait_for_selector(APP_IDLE, timeout=timeout_ms)
            out["loads_ms"].append(1000 * (time.perf_counter() - start))
            thumb = page.locator(SLIDER_SEL.format(label=label)).first
            await thumb.focus(timeout=timeout_ms)
            direction = 1 if idx % 2 == 0 else -1  # half the class moves each way: fewer shared cache hits
            for move in range(moves):
                await think(out, idx, move)
                value, low, high = (float(a or 0) for a in await thumb.evaluate("e => [e.value, e.min, e.max]"))
                # Turn at either end of the scale: a key that changes nothing triggers no re-run.
                direction = -1 if value >= high else 1 if value <= low else direction
                where = f"{route} move {move} from {value:g} in [{low:g}, {high:g}] by {direction:+d}"
                start = time.perf_counter()
                await move_and_commit(
                    page, thumb, "ArrowRight" if direction > 0 else "ArrowLeft", out, where, timeout_ms
                )
                out["updates_ms"].append(1000 * (time.perf_counter() - start))
                out["by_page"].setdefault(route, []).append(out["updates_ms"][-1])
            errors = await page.locator(ERRORS_SEL).all_inner_texts()
            for text in errors:
                out["errors"].append(f"session {idx} {route}: {text[:200]}")
    except Exception as exc:  # noqa: BLE001 - every failure is a counted, reported error
        try:
            state = await page.evaluate(
                "() => [document.querySelector('[data-testid=\"stApp\"]')?.getAttribute('data-test-script-state'),"
                " document.querySelector('[data-testid=\"stApp\"]')?.getAttribute('data-test-connection-state'),"
                " window.__kvFinished]"
            )
        except Exception:  # noqa: BLE001 - the page itself may be gone
            state = None
        msg = f"session {idx} ({where}; app state {state}): {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
        out["errors"].append(msg)
    finally:
        await context.close()


async def protocol_learner(url: str, idx: int, path, moves: int, timeout_ms: float, out: dict, delay_s=0.0) -> None:
    """One learner without a browser: the same path through the app's websocket protocol."""
    await asyncio.sleep(delay_s)
    try:
        async with StreamlitSession(url, timeout_s=timeout_ms / 1000) as session:
            for route, label in path:
                first = await session.run(route)
                out["loads_ms"].append(1000 * first.seconds)
                out["errors"].extend(f"session {idx} {route}: {e}" for e in first.errors)
                slider = next((s for text, s in first.sliders.items() if text.startswith(label)), None)
                if slider is None:
                    raise LookupError(f"no slider labelled {label!r} on {route}")
                pos, low, high, step = slider_position(slider)
                direction = 1 if idx % 2 == 0 else -1
                for move in range(moves):
                    await think(out, idx, move)
                    direction = -1 if pos >= high else 1 if pos <= low else direction
                    pos += direction * step
                    # a slider inside an st.fragment re-runs only that fragment, as in a browser
                    res = await session.run(route, [slider_value(slider, pos)], fragment_id=first.fragment_of(slider))
                    shown = next((s for text, s in res.sliders.items() if text.startswith(label)), None)
                    # The server sends a slider's value only when it overrides the client's (set_value);
                    # an override to another value, or no slider at all, loses the learner's move.
                    if shown is None or (shown.set_value and slider_position(shown)[0] != pos):
                        lost = f"session {idx} {route} move {move}: set {pos:g}, the re-run " + (
                            "has no slider" if shown is None else f"forced {slider_position(shown)[0]:g}"
                        )
                        out["lost_commits"].append(lost)
                        out["errors"].append(lost)
                    out["updates_ms"].append(1000 * res.seconds)
                    out["by_page"].setdefault(route, []).append(1000 * res.seconds)
                    out["errors"].extend(f"session {idx} {route}: {e}" for e in res.errors)
    except Exception as exc:  # noqa: BLE001 - every failure is a counted, reported error
        out["errors"].append(f"session {idx}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")


async def run_classroom(
    url: str,
    client: str,
    sessions: int,
    moves: int,
    path,
    step_timeout_s: float,
    ramp_s: float,
    think_s: float,
    server_pid: int | None = None,
    out: dict | None = None,
) -> dict:
    """All learners at once (joining over `ramp_s`) after an untimed warm-up visit."""
    from playwright.async_api import async_playwright

    out = new_raw() if out is None else out  # survives a timeout
    out["think_s"] = think_s
    warm = new_raw()
    gap, ms = ramp_s / max(1, sessions - 1), step_timeout_s * 1000
    # Warm-up (untimed): the first visit imports the engine and fills the shared caches; a class
    # measures the server after the teacher has opened it once.
    if client == "protocol":
        await protocol_learner(url, -1, path, 1, 4 * ms, warm)
        out["cpu_start"] = process_cpu_seconds(server_pid) if server_pid else None
        tasks = [protocol_learner(url, i, path, moves, ms, out, delay_s=i * gap) for i in range(sessions)]
        await asyncio.gather(*tasks)
    else:
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=client, headless=True, args=CHROMIUM_ARGS)
            try:
                await learner(browser, url, -1, path, 1, 4 * ms, warm)
                out["cpu_start"] = process_cpu_seconds(server_pid) if server_pid else None
                tasks = [learner(browser, url, i, path, moves, ms, out, delay_s=i * gap) for i in range(sessions)]
                await asyncio.gather(*tasks)
            finally:
                await browser.close()
    out["warmup_errors"] = warm["errors"]
    end = process_cpu_seconds(server_pid) if server_pid else None
    out["server_cpu_s"] = end - out["cpu_start"] if end is not None and out["cpu_start"] is not None else None
    return out


def _arguments():
    """The command line, checked: (args, chromium path or "protocol")."""
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, default=20, help=f"simultaneous learners (1..{MAX_SESSIONS})")
    p.add_argument("--moves", type=int, default=4, help=f"slider moves per page per learner (1..{MAX_MOVES})")
    p.add_argument("--timeout", type=float, default=300.0, help="hard limit for the whole run, seconds")
    p.add_argument("--step-timeout", type=float, default=60.0, help="limit for one page load or update, seconds")
    p.add_argument("--ramp", type=float, default=5.0, help="learners join evenly over this many seconds")
    p.add_argument("--think", type=float, default=2.0, help="mean pause before each slider move, seconds (0: stress)")
    p.add_argument(
        "--client",
        choices=["browser", "protocol"],
        default="protocol",
        help="protocol (default): the app's websocket protocol without rendering, the server's cost alone, "
        "as when every learner has their own computer; browser: headless Chromium contexts whose "
        "rendering shares the server's CPUs (use a handful of sessions on a 2-core machine)",
    )
    args = p.parse_args()
    if not 1 <= args.sessions <= MAX_SESSIONS:
        p.error(f"--sessions {args.sessions} must be between 1 and {MAX_SESSIONS}")
    if not 1 <= args.moves <= MAX_MOVES:
        p.error(f"--moves {args.moves} must be between 1 and {MAX_MOVES}")
    chromium = find_chromium() if args.client == "browser" else "protocol"
    if chromium is None:
        p.error("no chromium found; run scripts/install_browser.sh or set KVLAB_CHROMIUM (or use --client protocol)")
    return args, chromium


def _serve(args, chromium: str) -> tuple[dict, bool]:
    """Start the server, run the class against it within the hard timeout: (raw measurements, timed out)."""
    raw = new_raw()
    with tempfile.TemporaryDirectory() as data_dir:
        log(f"classroom: starting server; {args.sessions} sessions × {len(PATH)} pages × {args.moves} moves")
        try:
            server: dict = {}
            with running_app(Path(data_dir), Path(data_dir) / "streamlit.log", info=server) as url:
                coro = run_classroom(
                    url,
                    chromium,
                    args.sessions,
                    args.moves,
                    PATH,
                    args.step_timeout,
                    args.ramp,
                    args.think,
                    server["pid"],
                    raw,
                )
                asyncio.run(asyncio.wait_for(coro, timeout=args.timeout))
        except (TimeoutError, asyncio.TimeoutError):
            raw["errors"].append(f"hard timeout after {args.timeout:.0f} s")
            return raw, True
        except RuntimeError as exc:  # the server did not start
            raw["errors"].append(str(exc))
    return raw, False


def _summary(args, raw: dict, wall_s: float) -> dict:
    """Latency percentiles, errors and the server's CPU per run from the raw measurements."""
    updates, loads = raw["updates_ms"], raw["loads_ms"]
    runs = len(updates) + len(loads)
    cpu = raw.get("server_cpu_s")
    return {
        "updates": len(updates),
        "updates_expected": args.sessions * len(PATH) * args.moves,
        "errors": len(raw["errors"]),
        "error_samples": raw["errors"][:10],
        # A move whose re-run never finished, or finished showing another value (also counted in errors).
        "lost_commits": len(raw["lost_commits"]),
        "lost_commit_samples": raw["lost_commits"][:5],
        "keys_resent": raw["keys_resent"],
        # Committed moves whose run stApp's script-state attribute never showed: what the earlier client
        # (which waited on that attribute) reported as lost commits.
        "runs_unseen_by_dom": raw["runs_unseen_by_dom"],
        "warmup_errors": raw.get("warmup_errors", []),
        "update_p50_ms": round(statistics.median(updates), 1) if updates else None,
        "update_p95_ms": round(percentile(updates, 95), 1) if updates else None,
        "update_max_ms": round(max(updates), 1) if updates else None,
        "update_p50_ms_by_page": {k: round(statistics.median(v), 1) for k, v in raw["by_page"].items()},
        "load_p50_ms": round(statistics.median(loads), 1) if loads else None,
        "load_p95_ms": round(percentile(loads, 95), 1) if loads else None,
        "wall_s": round(wall_s, 1),
        "target": {"errors": 0, "update_p95_ms": 2000},
        # Load-independent: the server's CPU per script run, and the runs/s two free cores could serve.
        "server_cpu_ms_per_run": round(1000 * cpu / runs, 1) if cpu and runs else None,
        "capacity_runs_per_s_2_cores": round(2 * runs / cpu, 1) if cpu and runs else None,
        "load_average_1m": round(os.getloadavg()[0], 2),  # a busy shared machine inflates every number
        "env": env_info(),
    }


def main() -> None:
    """Run the classroom check; print one JSON line."""
    args, chromium = _arguments()
    result = {
        "bench": "classroom",
        "host": "127.0.0.1",
        "sessions": args.sessions,
        "moves_per_page": args.moves,
        "ramp_s": args.ramp,
        "think_s": args.think,
        "client": args.client,
        "path": [route for route, _ in PATH],
        "client_note": CLIENT_NOTES[args.client],
    }
    start = time.perf_counter()
    # Last resort if shutdown itself hangs: end the process a minute after the hard limit.
    watchdog = threading.Timer(args.timeout + 60, lambda: os._exit(3))
    watchdog.daemon = True
    watchdog.start()
    raw, result["timed_out"] = _serve(args, chromium)
    result.update(_summary(args, raw, time.perf_counter() - start))
    log(
        f"classroom: {result['updates']}/{result['updates_expected']} updates, {result['errors']} errors, "
        f"{result['lost_commits']} lost commits, p95 {result['update_p95_ms']} ms"
    )
    if args.save:
        log(f"saved {save('classroom' if args.client == 'protocol' else 'classroom-browser', result)}")
    emit(result)
    sys.stdout.flush()
    os._exit(0)  # never linger on a stuck browser thread after the result is out


if __name__ == "__main__":
    main()
