"""A live classroom round on real components: a teacher leads, the class predicts, the projector counts every answer.

`python -m bench.app.classroom_live --json` starts, all on 127.0.0.1: a throwaway PostgreSQL cluster (the only
shared state), `--replicas` app servers with one teacher key and one cookie secret (as in compose.yaml) and
nginx with the project's sticky-session config (bench/app_server.py). Then, through nginx, as browsers on the
classroom's DNS name (bench/app/client.py's protocol client, which also runs each polling fragment on its
timer, flagged as the browser flags it):

1. `--learners` learners sign in with one class code and wait on the welcome page; their live banner polls
   the class's board (`st.fragment(run_every=...)`, ui/live_screens.py).
2. The teacher opens the teacher view, gives the key, types the class code, switches to the live round and
   starts it on the GQA lesson; their projector screen polls the class's answers every second.
3. Each learner's banner says the teacher is on the lesson (`banner_within_s`: from the teacher's start to the
   banner showing it); the learner clicks Follow, lands on the lesson, thinks for a moment and checks a
   prediction (seeded: some right, some with the lesson's known slips, some anywhere); the page must say the
   answer joined the live round.
4. When every learner has answered, the teacher's screen must show every answer (`missing`: answers the
   page accepted that the projector's count and histogram never showed; `complete_within_s`: p95 over the
   answers of the time from a learner pressing Check to the projector first showing that many answers;
   `last_answer_s`: the same for the last answer).
5. Everyone stays, idle, for `--idle` seconds while only the fragments poll, the teacher's projector still
   once a second (the round is not revealed yet: the busiest the polling gets). The replicas' CPU over that
   window, less what the same replicas spend with nobody connected (measured for `--baseline` seconds before
   the class: Streamlit's own event loop, about 0.3 s a minute per server here), divided by learners and
   minutes, is `polling_cpu_s_per_learner_min` (the teacher's polls are counted in it too);
   `server_cpu_s_per_learner_10min` is the window's whole CPU, nothing subtracted.
6. The teacher reveals; each learner's banner must show the engine's answer with their own
   (`reveal_within_s`). Goal (docs/BENCHMARKS.md): missing 0, complete_within_s <= 3 with 30 learners on 2
   replicas, polling <= 1 s per learner per 10 minutes; not asserted here.

Bounded: at most 200 learners and 8 replicas, a hard `--timeout` and a watchdog after it; every service is
stopped (and its files deleted) on every exit.
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.app.classroom import percentile
from bench.app.classroom_scale import route_of, sign_in
from bench.app.client import PageRun, StreamlitSession, choose, click, number_value, text_value
from bench.app_server import nginx_balancer, postgres_cluster, process_cpu_seconds, running_apps
from bench.harness import emit, env_info, log, parser, save
from lessons import predictions
from progress.live import LiveBoard
from progress.store import ProgressStore
from ui import live
from ui.course import page

LESSON = "gqa"  # the round's lesson: its question has three named slips
CLASS_CODE = "live-bench"
TEACHER_KEY = "the bench's teacher key"
SITE_NAME = "kvlab.test"
MAX_LEARNERS, MAX_REPLICAS = 200, 8
BANNER_MARK = "your teacher is on"  # the learner banner before the reveal (ui/live_screens.py)
JOINED_MARK = "joined your class's live round"  # under the checked prediction (ui/predict.py)
REVEAL_MARK = "The engine:"  # the learner's line after the reveal (lessons/live.py: learner_line)
LIVE_MODE = "Live round (projector)"  # pages/teacher.py's view switch


@dataclass
class LiveLearner:
    """One learner: who they are, what they answer, and what they saw when."""

    idx: int
    value: float  # the prediction they check
    rng: random.Random
    name: str = ""
    code: str = CLASS_CODE
    passphrase: str = ""
    cookies: dict[str, str] = field(default_factory=dict)
    runs_ms: list[tuple[str, float]] = field(default_factory=list)  # (replica, ms): sign-in, follow, check
    polls_ms: list[float] = field(default_factory=list)  # the banner fragment's runs
    replica: str = "?"
    banner_at: float | None = None  # when the banner first said the teacher is on the lesson
    check_sent: float | None = None  # when they pressed Check
    check_done: float | None = None
    joined: bool = False  # the page said the answer joined the round
    reveal_at: float | None = None  # when the banner first showed the engine's answer with theirs
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.name, self.passphrase = f"learner {self.idx}", f"passphrase {self.idx}"


@dataclass
class Room:
    """The run's shared state: the learners, the teacher's observations and the phases."""

    learners: list[LiveLearner]
    url: str
    site: str
    think_s: float
    step_timeout_s: float
    started_at: float | None = None  # the teacher's Start finished
    revealed_at: float | None = None
    seen: list[tuple[float, int]] = field(default_factory=list)  # (time a projector run ended, answers shown)
    teacher_polls_ms: list[float] = field(default_factory=list)
    teacher_errors: list[str] = field(default_factory=list)
    reveal_now: asyncio.Event = field(default_factory=asyncio.Event)  # the polling window is over: reveal
    stop: asyncio.Event = field(default_factory=asyncio.Event)


def prediction_for(idx: int, rng: random.Random) -> float:
    """A seeded class: right answers, the lesson's slips (query heads, K or V, one layer) and stray guesses."""
    pred = predictions.for_page(LESSON)
    choice = idx % 6
    if choice < 2:
        return round(pred.answer)
    if choice < 5 and choice - 2 < len(pred.traps):
        return round(pred.traps[choice - 2].value, 2)
    return float(rng.randrange(10, 4000))


def polling_fragment(shown: PageRun, interval_s: float) -> str:
    """The id of the fragment the page asks the browser to re-run every ``interval_s``; LookupError if none."""
    for fragment_id, every in shown.auto_reruns.items():
        if abs(every - interval_s) < 1e-6:
            return fragment_id
    raise LookupError(f"no fragment polling every {interval_s} s; the page asked for {shown.auto_reruns}")


async def teacher_task(room: Room) -> None:
    """Open the live round, watch the projector, reveal when every learner has answered, keep watching."""
    try:
        async with StreamlitSession(room.url, room.site, timeout_s=room.step_timeout_s) as t:
            await t.run("")
            route = route_of(t, "teacher")
            shown = await t.run(route)
            key = text_value(shown.widget("text_input", "Teacher key"), TEACHER_KEY)
            shown = await t.run(route, [key, click(shown.widget("button", "Open the teacher view"))])
            t.keep(text_value(shown.widget("text_input", "Class code"), CLASS_CODE))  # a browser keeps what was typed
            shown = await t.run(route)
            t.keep(choose(shown.widget("radio", "Show"), LIVE_MODE))
            shown = await t.run(route)
            lesson = choose(shown.widget("selectbox", "Lesson"), page(LESSON).title)
            shown = await t.run(route, [lesson, click(shown.widget("button", "Start the live round"))])
            if shown.errors:
                raise ValueError(f"starting the round: {shown.errors[0]}")
            controls = shown.widget("button", "Reveal the answer")  # outside the projector's fragment
            room.started_at = time.perf_counter()
            projector = polling_fragment(shown, live.TEACHER_POLL_S)
            while not room.stop.is_set():
                await asyncio.sleep(live.TEACHER_POLL_S)
                run = await t.run(route, fragment_id=projector, auto_rerun=True)
                room.teacher_polls_ms.append(1000 * run.seconds)
                count = int(run.metrics.get("Answers", "-1"))
                bars = sum(sum(trace.get("y", ())) for trace in run.charts[0].get("data", ())) if run.charts else 0
                if count > 0 and bars != count:
                    room.teacher_errors.append(f"histogram counts {bars} answers, the screen says {count}")
                room.seen.append((time.perf_counter(), count))
                if run.errors:
                    room.teacher_errors.append(run.errors[0])
                if room.reveal_now.is_set() and room.revealed_at is None:
                    shown = await t.run(route, [click(controls)])
                    if shown.errors:
                        room.teacher_errors.append(f"reveal: {shown.errors[0]}")
                    room.revealed_at = time.perf_counter()
                    projector = polling_fragment(shown, live.REVEALED_POLL_S)
    except Exception as exc:  # noqa: BLE001 - reported
        room.teacher_errors.append(f"{type(exc).__name__}: {str(exc)[:200]}")


async def learner_task(room: Room, lr: LiveLearner, delay_s: float) -> None:
    """Sign in, wait for the teacher, follow, answer, see the reveal, stay until the class ends."""
    await asyncio.sleep(delay_s)
    try:
        async with StreamlitSession(room.url, room.site, timeout_s=room.step_timeout_s) as s:
            lr.replica = s.upstream or "?"
            shown = await sign_in(s, lr)
            banner = polling_fragment(shown, live.LEARNER_POLL_S)
            route = ""
            while not room.stop.is_set():
                await asyncio.sleep(live.LEARNER_POLL_S)
                run = await s.run(route, fragment_id=banner, auto_rerun=True)
                lr.polls_ms.append(1000 * run.seconds)
                if run.errors:
                    lr.errors.append(f"banner: {run.errors[0]}")
                text = " ".join(run.texts)
                if lr.banner_at is None and BANNER_MARK in text:
                    lr.banner_at = time.perf_counter()
                    follow = run.widget("button", "Follow")
                    shown = await s.run(route, [click(follow)], fragment_id=banner)
                    lr.runs_ms.append((lr.replica, 1000 * shown.seconds))
                    route = route_of(s, LESSON)
                    entry = shown.widget("number_input", "Your prediction")  # the lesson's exercise: followed
                    banner = polling_fragment(shown, live.LEARNER_POLL_S)
                    await asyncio.sleep(room.think_s * lr.rng.uniform(0.5, 1.5))
                    lr.check_sent = time.perf_counter()
                    checked = await s.run(
                        route, [number_value(entry, lr.value), click(shown.widget("button", "Check"))]
                    )
                    lr.check_done = time.perf_counter()
                    lr.runs_ms.append((lr.replica, 1000 * checked.seconds))
                    lr.joined = any(JOINED_MARK in t for t in checked.texts)
                    if not lr.joined or checked.errors:
                        lr.errors.append(f"check: not joined ({checked.errors[:1]})")
                    banner = polling_fragment(checked, live.LEARNER_POLL_S)
                elif lr.reveal_at is None and REVEAL_MARK in text:
                    lr.reveal_at = time.perf_counter()
                    if f"{lr.value:g}" not in text.replace(",", ""):
                        lr.errors.append(f"reveal: the banner does not show their answer {lr.value:g}: {text[:200]}")
    except Exception as exc:  # noqa: BLE001 - every failure is a counted, reported error
        lr.errors.append(f"{type(exc).__name__}: {str(exc)[:200]}")


async def drive(room: Room, apps: list[dict[str, Any]], ramp_s: float, idle_s: float, timeout_s: float) -> dict:
    """The whole round; returns the polling window's CPU measurement (everyone answered, nothing revealed yet:
    the teacher's projector still re-reads the answers every second, the busiest the polling gets)."""
    gap = ramp_s / max(1, len(room.learners) - 1)
    tasks = [asyncio.create_task(learner_task(room, lr, i * gap)) for i, lr in enumerate(room.learners)]
    deadline = time.perf_counter() + timeout_s
    while time.perf_counter() < deadline and not all(lr.polls_ms or lr.errors for lr in room.learners):
        await asyncio.sleep(0.25)  # everyone signed in and polling before the teacher starts
    teacher = asyncio.create_task(teacher_task(room))

    def shown_all() -> bool:
        everyone = all(lr.check_done is not None or lr.errors for lr in room.learners)
        accepted = sum(lr.joined for lr in room.learners)
        return everyone and bool(room.seen) and room.seen[-1][1] >= accepted

    while time.perf_counter() < deadline and not shown_all() and not room.teacher_errors:
        await asyncio.sleep(0.25)
    before = {a["pid"]: process_cpu_seconds(a["pid"]) or 0.0 for a in apps}
    window_start = time.perf_counter()
    await asyncio.sleep(idle_s)
    cpu = sum((process_cpu_seconds(a["pid"]) or 0.0) - before[a["pid"]] for a in apps)
    window_s = time.perf_counter() - window_start
    room.reveal_now.set()
    while time.perf_counter() < deadline and not all(lr.reveal_at is not None or lr.errors for lr in room.learners):
        await asyncio.sleep(0.25)
    room.stop.set()
    await asyncio.gather(teacher, *tasks)
    return {"idle_cpu_s": cpu, "idle_window_s": window_s}


def completion_times(room: Room) -> list[float]:
    """For the k-th answer to finish, the time from its Check to the projector's first run showing k answers."""
    done = sorted((lr.check_done, lr.check_sent) for lr in room.learners if lr.joined)
    out = []
    for k, (finished, sent) in enumerate(done, start=1):
        shown = next((t for t, count in room.seen if t >= finished and count >= k), None)
        if shown is not None:
            out.append(shown - sent)
    return out


def stored_answers(url: str) -> int:
    """The answers the database holds for the class's round at the end (read with a fresh engine)."""
    store = ProgressStore(url)
    try:
        current = LiveBoard(store).current(CLASS_CODE)
        return current.answers if current else 0
    finally:
        store.close()


def summarize(room: Room, window: dict, stored: int, n_replicas: int) -> dict[str, Any]:
    """The JSON result from everyone's records."""
    learners = room.learners
    accepted = sum(lr.joined for lr in learners)
    shown_max = max((count for _, count in room.seen), default=0)
    times = completion_times(room)
    banner = [lr.banner_at - room.started_at for lr in learners if lr.banner_at and room.started_at]
    reveal = [lr.reveal_at - room.revealed_at for lr in learners if lr.reveal_at and room.revealed_at]
    polls = [ms for lr in learners for ms in lr.polls_ms]
    minutes = window["idle_window_s"] / 60
    baseline = window["baseline_cpu_per_s"] * window["idle_window_s"]  # the servers with nobody connected
    polling = max(0.0, window["idle_cpu_s"] - baseline)
    per_learner_min = polling / max(1, len(learners)) / minutes if minutes else None
    raw_min = window["idle_cpu_s"] / max(1, len(learners)) / minutes if minutes else None
    errors = [f"learner {lr.idx}: {e}" for lr in learners for e in lr.errors] + [
        f"teacher: {e}" for e in room.teacher_errors
    ]
    return {
        "learners": len(learners),
        "replicas": n_replicas,
        "answers_accepted": accepted,
        "answers_stored": stored,
        "answers_shown": shown_max,
        "missing": accepted - len(times),  # accepted answers no projector run ever counted
        "complete_within_s": round(percentile(times, 95), 2) if times else None,
        "complete_median_s": round(statistics.median(times), 2) if times else None,
        "last_answer_s": round(times[-1], 2) if times else None,
        "banner_within_s": round(percentile(banner, 95), 2) if banner else None,
        "followed": sum(lr.banner_at is not None for lr in learners),
        "reveal_within_s": round(percentile(reveal, 95), 2) if reveal else None,
        "saw_reveal": len(reveal),
        "polling_cpu_s_per_learner_min": round(per_learner_min, 4) if per_learner_min is not None else None,
        "polling_cpu_s_per_learner_10min": round(10 * per_learner_min, 3) if per_learner_min is not None else None,
        "server_cpu_s_per_learner_10min": round(10 * raw_min, 3) if raw_min is not None else None,
        "idle_window_s": round(window["idle_window_s"], 1),
        "idle_cpu_s": round(window["idle_cpu_s"], 2),
        "baseline_cpu_s": round(baseline, 2),
        "learner_poll_s": live.LEARNER_POLL_S,
        "teacher_poll_s": live.TEACHER_POLL_S,
        "learner_poll_p95_ms": round(percentile(polls, 95), 1) if polls else None,
        "teacher_poll_p95_ms": round(percentile(room.teacher_polls_ms, 95), 1) if room.teacher_polls_ms else None,
        "errors": len(errors),
        "error_samples": errors[:10],
    }


def run_live(
    replicas: int = 2,
    learners: int = 30,
    think_s: float = 2.0,
    ramp_s: float = 5.0,
    idle_s: float = 60.0,
    timeout_s: float = 300.0,
    step_timeout_s: float = 60.0,
    baseline_s: float = 15.0,
) -> dict[str, Any]:
    """Start everything, run one live round, stop everything; the summary dict."""
    if not 1 <= replicas <= MAX_REPLICAS:
        raise ValueError(f"replicas={replicas} must be 1..{MAX_REPLICAS}")
    if not 1 <= learners <= MAX_LEARNERS:
        raise ValueError(f"learners={learners} must be 1..{MAX_LEARNERS}")
    if not idle_s > 0:
        raise ValueError(f"idle_s={idle_s} must be a positive number of seconds (the polling window)")
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kvlab-live-") as work, postgres_cluster() as pg:
        work_dir = Path(work)
        env = {
            "KVLAB_DATABASE_URL": pg["url"],
            "KVLAB_TEACHER_KEY": TEACHER_KEY,
            "STREAMLIT_SERVER_COOKIE_SECRET": os.urandom(16).hex(),
        }
        log(f"classroom_live: PostgreSQL on port {pg['port']}; starting {replicas} replicas")
        with running_apps(replicas, work_dir / "data", work_dir / "logs", 180, env) as apps:
            asyncio.run(asyncio.wait_for(warm_up(apps), timeout=timeout_s))
            startup_s = time.perf_counter() - start
            with nginx_balancer([a["port"] for a in apps]) as lb:
                rng = random.Random(25)
                roster = [LiveLearner(i, prediction_for(i, rng), random.Random(i)) for i in range(learners)]
                room = Room(roster, lb["url"], f"{SITE_NAME}:{lb['port']}", think_s, step_timeout_s)
                idle = idle_cpu_per_s(apps, baseline_s)
                log(f"classroom_live: nginx on port {lb['port']}; {learners} learners")
                window = asyncio.run(
                    asyncio.wait_for(drive(room, apps, ramp_s, idle_s, timeout_s), timeout_s + idle_s + 60)
                )
                result = summarize(room, {**window, "baseline_cpu_per_s": idle}, stored_answers(pg["url"]), replicas)
                per_replica = {}
                for i, app in enumerate(apps):
                    addr = f"127.0.0.1:{app['port']}"
                    per_replica[f"replica-{i}"] = {
                        "address": addr,
                        "learners": sum(lr.replica == addr for lr in roster),
                    }
                return {**result, "per_replica": per_replica, "startup_s": round(startup_s, 1)}


def idle_cpu_per_s(apps: list[dict[str, Any]], seconds: float) -> float:
    """The replicas' CPU per second with nobody connected (Streamlit's own event loop, the database pool):
    what the servers cost without the class, subtracted from the polling window's CPU."""
    before = [process_cpu_seconds(a["pid"]) or 0.0 for a in apps]
    start = time.perf_counter()
    time.sleep(seconds)
    spent = sum((process_cpu_seconds(a["pid"]) or 0.0) - b for a, b in zip(apps, before, strict=True))
    return spent / (time.perf_counter() - start)


async def warm_up(apps: list[dict[str, Any]]) -> None:
    """Untimed: each replica imports the engine and draws the welcome page and the lesson once, directly."""
    for app in apps:
        async with StreamlitSession(app["url"], timeout_s=240) as s:
            await s.run("")
            await s.run(route_of(s, LESSON))


def _arguments():
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--replicas", type=int, default=2, help=f"app replicas behind nginx (1..{MAX_REPLICAS})")
    p.add_argument("--learners", type=int, default=30, help=f"learners in the class (1..{MAX_LEARNERS})")
    p.add_argument("--think", type=float, default=2.0, help="mean pause between following and checking, seconds")
    p.add_argument("--ramp", type=float, default=5.0, help="learners sign in evenly over this many seconds")
    p.add_argument(
        "--idle", type=float, default=60.0, help="seconds of polling only, before the reveal (the CPU window)"
    )
    p.add_argument("--timeout", type=float, default=300.0, help="hard limit for the round, seconds")
    p.add_argument(
        "--baseline", type=float, default=15.0, help="seconds of the replicas' own CPU with nobody connected"
    )
    p.add_argument("--step-timeout", type=float, default=60.0, help="limit for one page run, seconds")
    args = p.parse_args()
    if not 1 <= args.replicas <= MAX_REPLICAS:
        p.error(f"--replicas {args.replicas} must be between 1 and {MAX_REPLICAS}")
    if not 1 <= args.learners <= MAX_LEARNERS:
        p.error(f"--learners {args.learners} must be between 1 and {MAX_LEARNERS}")
    if not args.idle > 0:
        p.error(f"--idle {args.idle} must be a positive number of seconds")
    return args


def main() -> None:
    """Run the round; print one JSON line."""
    args = _arguments()
    watchdog = threading.Timer(args.timeout + args.idle + 420, lambda: os._exit(3))  # if shutdown itself hangs
    watchdog.daemon = True
    watchdog.start()
    result: dict[str, Any] = {"bench": "classroom_live", "host": "127.0.0.1", "lesson": LESSON, "think_s": args.think}
    try:
        result.update(
            run_live(
                args.replicas,
                args.learners,
                args.think,
                args.ramp,
                args.idle,
                args.timeout,
                args.step_timeout,
                args.baseline,
            )
        )
    except RuntimeError as exc:  # a service did not start: say which and why
        result.update(error=str(exc)[:600])
    except KeyboardInterrupt:
        log("classroom_live: interrupted; the database, replicas and nginx are stopped")
        os._exit(130)
    result["load_average_1m"] = round(os.getloadavg()[0], 2)
    result["env"] = env_info()
    log(
        f"classroom_live: missing {result.get('missing')}, complete_within_s {result.get('complete_within_s')}, "
        f"polling {result.get('polling_cpu_s_per_learner_10min')} s per learner per 10 min, "
        f"errors {result.get('errors')}"
    )
    if args.save:
        log(f"saved {save('classroom_live', result)}")
    emit(result)
    sys.stdout.flush()
    os._exit(0 if "error" not in result else 1)


if __name__ == "__main__":
    main()
