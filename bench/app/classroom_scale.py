"""Classroom at scale on real components: app replicas behind nginx on one PostgreSQL; one replica dies mid-run.

`python -m bench.app.classroom_scale --json` starts, all on 127.0.0.1: a throwaway PostgreSQL cluster
(Debian's package), `--replicas` app servers (`streamlit run app.py`, each its own process and port,
all pointed at that database with one cookie secret, as in compose.yaml) and nginx with the project's
sticky-session config (deploy/nginx.conf, rendered for loopback by bench/app_server.py). Then
`--learners` protocol clients (bench/app/client.py: a browser's messages, the site's name as Host and
Origin as a browser on the classroom's DNS name sends them, the balancer's cookie kept) join over a few
seconds; each signs in with a name, a class code and a passphrase (pairs of learners share a name in
two classes; the first sign-in sets the passphrase, the one after a reconnect gives it),
opens three lessons and answers up to three check questions on each, reading the page for a moment
(`--think`) between actions. An action counts as *saved* only when the page that answered showed it:
the sidebar's lesson tick for a visit, the check's feedback for an answer, while signed in and with no
"session only" note.

Once `--kill-at` of all planned actions are done, the replica serving the most learners is killed
(SIGKILL: no shutdown, as in a crash). Its learners' websockets drop; each reconnects through nginx
with its cookie, lands on a survivor, signs in again and must find every saved lesson tick in the
sidebar and every saved answer selected on its lesson page; then it finishes its path there. At the end
every learner's saved actions are read back from PostgreSQL directly.

Reports `replicas`, `learners`, `database` (the URL scheme), `lost_progress` (saved actions missing from
the database at the end or not shown after a reconnect), `errors_on_survivors` (errors seen on replicas
that lived: exceptions, st.error, timeouts, dropped connections, saves not shown), `reconnected`
(learners of the dead replica who resumed elsewhere with all their progress), `p95_ms` (page runs) and
`per_replica` load. Goal (docs/BENCHMARKS.md): lost_progress 0 and errors_on_survivors 0; not asserted.

Bounded: at most 200 learners and 8 replicas, a hard `--timeout` for the run and a watchdog after it;
the database, the replicas and nginx are stopped (and their files deleted) on every exit, Ctrl-C included.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from bench.app.classroom import percentile
from bench.app.client import PageRun, StreamlitSession, choose, click, opened, radio_value, text_value
from bench.app_server import nginx_balancer, postgres_cluster, process_cpu_seconds, running_apps
from bench.harness import emit, env_info, log, parser, save
from lessons import quizzes
from progress.store import ProgressStore
from ui.course import page

SIGNIN_BOX = "Save my progress"  # the sidebar expander that holds the sign-in form (ui/signin.py)
PROGRESS_BOX = "My progress"  # the sidebar expander that holds the learner's progress table (ui/sidebar.py)

MAX_LEARNERS, MAX_REPLICAS = 200, 8
LESSON_ROTATION = ("gqa", "paged", "fragmentation", "golden_rules", "bandwidth")  # each learner takes three
LESSONS_PER_LEARNER, MAX_ANSWERS_PER_PAGE = 3, 3
NOT_SAVED_MARKS = ("session only", "not saved", "could not be saved")  # ui/signin.py's fallback wording
DISCONNECT_NAMES = ("ConnectionClosed", "ConnectionClosedError", "ConnectionClosedOK", "InvalidStatus")  # websockets
SITE_NAME = "kvlab.test"  # the name the learners' browsers use for the balancer; only its 127.0.0.1 port is dialled


@dataclass
class Learner:
    """One learner's plan and everything they saw."""

    idx: int
    name: str
    code: str
    steps: list[tuple[str, str, str]]  # ("visit", page id, "") or ("answer", page id, question id)
    rng: random.Random
    passphrase: str = "a learner's passphrase"  # the first sign-in sets it, later ones must give it
    cookies: dict[str, str] = field(default_factory=dict)  # what the balancer set (its sticky-session cookie)
    upstreams: list[str] = field(default_factory=list)  # replica of each session, in order
    saved_visits: set[str] = field(default_factory=set)  # what the learner saw saved
    saved_answers: dict[str, str] = field(default_factory=dict)
    errors: list[tuple[str, str]] = field(default_factory=list)  # (replica, message)
    runs_ms: list[tuple[str, float]] = field(default_factory=list)  # (replica, ms) of every page run
    dropped: bool = False  # their replica died under them
    restored: bool | None = None  # after the reconnect: everything saved was shown again
    lost_on_reconnect: list[str] = field(default_factory=list)


@dataclass
class Classroom:
    """The run's shared state: the learners, the services and the kill."""

    learners: list[Learner]
    balancer_url: str
    site: str  # the Host (and Origin) the learners' browsers send: SITE_NAME and the balancer's port
    apps: list[dict[str, Any]]
    think_s: float
    step_timeout_s: float
    kill_after: int  # actions done before the kill
    done: int = 0
    connected: dict[str, set[int]] = field(default_factory=dict)  # replica -> learners connected now
    victim: str | None = None  # "127.0.0.1:PORT" of the killed replica
    victim_learners: int = 0
    killed: asyncio.Event = field(default_factory=asyncio.Event)
    due: asyncio.Event = field(default_factory=asyncio.Event)


def plan(idx: int) -> Learner:
    """Learner ``idx``: a name shared with one learner of the other class, three lessons, seeded answers."""
    lessons = [LESSON_ROTATION[(idx + k) % len(LESSON_ROTATION)] for k in range(LESSONS_PER_LEARNER)]
    steps: list[tuple[str, str, str]] = []
    for pid in lessons:
        steps.append(("visit", pid, ""))
        steps += [("answer", pid, q.id) for q in quizzes.for_page(pid)[:MAX_ANSWERS_PER_PAGE]]
    return Learner(idx, f"learner {idx // 2}", f"class-{'ab'[idx % 2]}", steps, random.Random(idx), f"passphrase {idx}")


def not_saved_note(shown: PageRun) -> str | None:
    """The page's 'progress is not saved' note, if it showed one."""
    for text in [*shown.texts, *(body for _, body in shown.alerts)]:
        if any(mark in text for mark in NOT_SAVED_MARKS):
            return text[:160]
    return None


def lesson_row(shown: PageRun, pid: str) -> dict[str, Any] | None:
    """The sidebar progress table's row of lesson ``pid`` (lessons/progress_table.py: progress_rows)."""
    from lessons import content

    title = content.load(pid).title
    for table in shown.sidebar_tables:
        for row in table:
            if row.get("lesson") == title:
                return row
    return None


async def sign_in(session: StreamlitSession, learner: Learner) -> PageRun:
    """Open the course and submit the sidebar's sign-in form; ValueError unless it says signed in and saving."""
    first = await session.run("")
    box = first.expanders.get(SIGNIN_BOX)
    if box is None:
        raise ValueError(f"no {SIGNIN_BOX!r} expander in the sidebar; found {list(first.expanders)}")
    session.keep(opened(box))  # the form is made only while its box is open, as in a browser
    home = await session.run("")
    progress = home.expanders.get(PROGRESS_BOX)
    if progress is None:
        raise ValueError(f"no {PROGRESS_BOX!r} expander in the sidebar; found {list(home.expanders)}")
    session.keep(opened(progress))  # and the progress table (the ticks this benchmark checks) only while open
    form = [
        text_value(home.widget("text_input", "Your name"), learner.name),
        text_value(home.widget("text_input", "Class code"), learner.code),
        text_value(home.widget("text_input", "Passphrase"), learner.passphrase),
        click(home.widget("button", "Sign in")),
    ]
    shown = await session.run("", form)
    learner.runs_ms += [(session.upstream or "?", 1000 * r.seconds) for r in (first, home, shown)]
    if not any(t.startswith("Signed in as") for t in shown.sidebar_texts):
        raise ValueError(f"sign-in did not take: sidebar shows {shown.sidebar_texts[:4]}")
    if note := not_saved_note(shown):
        raise ValueError(f"signed in but not saving: {note}")
    return shown


def route_of(session: StreamlitSession, pid: str) -> str:
    """URL path of course page ``pid`` from the app's own navigation (title -> url_pathname)."""
    title = page(pid).title
    if title not in session.pages:
        raise LookupError(f"page {title!r} not in the app's navigation {sorted(session.pages)}")
    return session.pages[title]


async def do_step(session: StreamlitSession, learner: Learner, step, on_page: dict[str, Any]) -> None:
    """Perform one planned action and record it as saved if the page showed it saved; ValueError otherwise."""
    kind, pid, qid = step
    route = route_of(session, pid)
    if kind == "visit" or on_page.get("route") != route:
        shown = await session.run(route)
        learner.runs_ms.append((session.upstream or "?", 1000 * shown.seconds))
        check_page(shown, f"visit {pid}")
        row = lesson_row(shown, pid)
        if not row or row.get("visited") is not True:
            raise ValueError(f"visit {pid}: the sidebar shows no tick ({row})")
        learner.saved_visits.add(pid)
        on_page.clear()
        on_page.update(route=route, shown=shown, answers={})
    if kind != "answer":
        return
    radio = next(iter(on_page["shown"].keyed("radio", f"quiz_{qid}")), None)
    if radio is None:
        raise ValueError(f"answer {qid}: no radio for it on {pid}")
    option = learner.rng.choice(list(radio.options))
    on_page["answers"][radio.id] = choose(radio, option)
    shown = await session.run(route, list(on_page["answers"].values()))
    learner.runs_ms.append((session.upstream or "?", 1000 * shown.seconds))
    check_page(shown, f"answer {qid}")
    graded = quizzes.grade(qid, option)
    verdict = "SUCCESS" if graded.correct else "WARNING"
    if not any(fmt == verdict and body == graded.feedback for fmt, body in shown.alerts):
        raise ValueError(f"answer {qid}: the page shows no feedback for {option!r}")
    learner.saved_answers[qid] = option
    on_page["shown"] = shown


def check_page(shown: PageRun, what: str) -> None:
    """ValueError on an exception, st.error or a 'not saved' note on the page."""
    if shown.errors:
        raise ValueError(f"{what}: {shown.errors[0]}")
    if note := not_saved_note(shown):
        raise ValueError(f"{what}: {note}")


async def verify_restored(session: StreamlitSession, learner: Learner, signed_in: PageRun) -> None:
    """After a reconnect: every saved tick in the sidebar, every saved answer selected on its page."""
    missing = [
        f"tick {pid}"
        for pid in sorted(learner.saved_visits)
        if (lesson_row(signed_in, pid) or {}).get("visited") is not True
    ]
    for pid in sorted({qid.split(".", 1)[0] for qid in learner.saved_answers}):
        shown = await session.run(route_of(session, pid))
        learner.runs_ms.append((session.upstream or "?", 1000 * shown.seconds))
        for qid, answer in learner.saved_answers.items():
            if not qid.startswith(pid + "."):
                continue
            radio = next(iter(shown.keyed("radio", f"quiz_{qid}")), None)
            if radio is None or radio_value(radio) != answer:
                missing.append(f"answer {qid}={answer!r} shows {radio_value(radio) if radio else 'no radio'}")
    learner.lost_on_reconnect = missing
    learner.restored = not missing


def is_disconnect(exc: BaseException) -> bool:
    """A dropped or refused websocket (what a learner of a dead replica sees)."""
    return isinstance(exc, ConnectionError | EOFError) or type(exc).__name__ in DISCONNECT_NAMES


async def learner_task(room: Classroom, learner: Learner, delay_s: float) -> None:
    """One learner's whole visit, with one reconnect if their replica dies."""
    await asyncio.sleep(delay_s)
    step = 0
    for _attempt in range(2):
        replica = "?"
        try:
            async with StreamlitSession(room.balancer_url, room.site, learner.cookies, room.step_timeout_s) as session:
                replica = session.upstream or "?"
                learner.cookies = session.cookies
                learner.upstreams.append(replica)
                room.connected.setdefault(replica, set()).add(learner.idx)
                try:
                    signed_in = await sign_in(session, learner)
                    if learner.dropped:
                        await verify_restored(session, learner, signed_in)
                    on_page: dict[str, Any] = {}
                    while step < len(learner.steps):
                        await think(room.think_s, learner)
                        await do_step(session, learner, learner.steps[step], on_page)
                        step += 1
                        room.done += 1
                        if room.done >= room.kill_after:
                            room.due.set()
                finally:
                    room.connected[replica].discard(learner.idx)
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - every failure is a counted, reported error
            if replica == room.victim and room.killed.is_set() and is_disconnect(exc) and not learner.dropped:
                learner.dropped = True  # expected: reconnect through nginx, land on a survivor
                continue
            learner.errors.append(
                (replica, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}")
            )
            return


async def think(mean_s: float, learner: Learner) -> None:
    """A learner reads the page: mean_s ± 50 %, seeded per learner."""
    if mean_s > 0:
        await asyncio.sleep(mean_s * learner.rng.uniform(0.5, 1.5))


async def killer(room: Classroom) -> None:
    """When the planned share of actions is done, SIGKILL the replica with the most connected learners."""
    await room.due.wait()
    victim = max(room.connected, key=lambda r: (len(room.connected[r]), r))
    app = next(a for a in room.apps if victim.endswith(f":{a['port']}"))
    app["cpu_s"] = process_cpu_seconds(app["pid"])
    room.victim, room.victim_learners = victim, len(room.connected[victim])
    os.kill(app["pid"], signal.SIGKILL)
    app["killed_after_actions"] = room.done
    room.killed.set()
    log(f"classroom_scale: killed replica {victim} with {room.victim_learners} learners after {room.done} actions")


async def warm_up(apps: list[dict[str, Any]]) -> None:
    """Untimed: each replica imports the engine and fills its caches once (a teacher opened it), directly."""
    for app in apps:
        async with StreamlitSession(app["url"], timeout_s=240) as s:
            await s.run("")
            for pid in LESSON_ROTATION:
                await s.run(route_of(s, pid))


async def drive(room: Classroom, ramp_s: float) -> None:
    """All learners (joining over ramp_s) and the killer."""
    gap = ramp_s / max(1, len(room.learners) - 1)
    kill = asyncio.create_task(killer(room))
    try:
        await asyncio.gather(*(learner_task(room, lr, i * gap) for i, lr in enumerate(room.learners)))
    finally:
        kill.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await kill


def lost_in_database(url: str, learners: list[Learner]) -> list[str]:
    """Saved actions that PostgreSQL does not hold at the end (read with a fresh engine)."""
    store = ProgressStore(url)
    lost = []
    try:
        for lr in learners:
            got = store.load(lr.code, lr.name)
            lost += [f"{lr.code}/{lr.name}: visit {p}" for p in sorted(lr.saved_visits - set(got["visited"]))]
            for qid, answer in lr.saved_answers.items():
                if got["quiz"].get(qid, {}).get("answer") != answer:
                    lost.append(f"{lr.code}/{lr.name}: answer {qid}={answer!r} stored {got['quiz'].get(qid)}")
    finally:
        store.close()
    return lost


def summarize(room: Classroom, db_url: str, lost_db: list[str], class_s: float, timed_out: bool) -> dict[str, Any]:
    """The JSON result from the learners' records."""
    learners = room.learners
    runs = [ms for lr in learners for _, ms in lr.runs_ms]
    survivor_errors = [
        f"learner {lr.idx} on {rep}: {msg}" for lr in learners for rep, msg in lr.errors if rep != room.victim
    ]
    victim_errors = [
        f"learner {lr.idx} on {rep}: {msg}" for lr in learners for rep, msg in lr.errors if rep == room.victim
    ]
    lost_reconnect = [f"{lr.code}/{lr.name}: {m}" for lr in learners for m in lr.lost_on_reconnect]
    per_replica = {}
    for i, app in enumerate(room.apps):
        addr = f"127.0.0.1:{app['port']}"
        first = sum(1 for lr in learners if lr.upstreams[:1] == [addr])
        after = sum(1 for lr in learners if lr.dropped and addr in lr.upstreams[1:])
        cpu = app.get("cpu_s") if app.get("killed_after_actions") is not None else process_cpu_seconds(app["pid"])
        served = [ms for lr in learners for rep, ms in lr.runs_ms if rep == addr]
        per_replica[f"replica-{i}"] = {
            "address": addr,
            "killed": addr == room.victim,
            "learners_first": first,
            "learners_after_failover": after,
            "page_runs": len(served),
            "p95_ms": round(percentile(served, 95), 1) if served else None,
            "server_cpu_s": round(cpu, 1) if cpu else None,
        }
    return {
        "replicas": len(room.apps),
        "learners": len(learners),
        "database": sa.make_url(db_url).drivername,
        "lost_progress": len(lost_db) + len(lost_reconnect),
        "errors_on_survivors": len(survivor_errors),
        "reconnected": sum(1 for lr in learners if lr.dropped and lr.restored),
        "dead_replica_learners": room.victim_learners,
        "dropped_learners": sum(1 for lr in learners if lr.dropped),
        "p50_ms": round(statistics.median(runs), 1) if runs else None,
        "p95_ms": round(percentile(runs, 95), 1) if runs else None,
        "max_ms": round(max(runs), 1) if runs else None,
        "page_runs": len(runs),
        "saved_actions": sum(len(lr.saved_visits) + len(lr.saved_answers) for lr in learners),
        "actions_planned": sum(len(lr.steps) for lr in learners),
        "actions_done": room.done,
        "killed_replica": room.victim,
        "killed_after_actions": room.kill_after if room.victim else None,
        "per_replica": per_replica,
        "lost_samples": (lost_db + lost_reconnect)[:10],
        "error_samples": survivor_errors[:10],
        "errors_on_killed_replica": victim_errors[:10],
        "timed_out": timed_out,
        "class_s": round(class_s, 1),
    }


def run_scale(
    replicas: int = 3,
    learners: int = 40,
    think_s: float = 1.0,
    kill_at: float = 0.4,
    ramp_s: float = 5.0,
    timeout_s: float = 600.0,
    step_timeout_s: float = 60.0,
) -> dict[str, Any]:
    """Start everything, run the class with one replica killed, stop everything; the summary dict."""
    if not 2 <= replicas <= MAX_REPLICAS:
        raise ValueError(f"replicas={replicas} must be 2..{MAX_REPLICAS} (one of them is killed)")
    if not 1 <= learners <= MAX_LEARNERS:
        raise ValueError(f"learners={learners} must be 1..{MAX_LEARNERS}")
    if not 0 < kill_at < 1:
        raise ValueError(f"kill_at={kill_at} must be a fraction of the planned actions, between 0 and 1")
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kvlab-scale-") as work, postgres_cluster() as pg:
        work_dir = Path(work)
        env = {"KVLAB_DATABASE_URL": pg["url"], "STREAMLIT_SERVER_COOKIE_SECRET": os.urandom(16).hex()}
        log(f"classroom_scale: PostgreSQL on port {pg['port']}; starting {replicas} replicas")
        with running_apps(replicas, work_dir / "data", work_dir / "logs", 180, env) as apps:
            asyncio.run(asyncio.wait_for(warm_up(apps), timeout=timeout_s))
            startup_s = time.perf_counter() - start
            with nginx_balancer([a["port"] for a in apps]) as lb:
                roster = [plan(i) for i in range(learners)]
                total = sum(len(lr.steps) for lr in roster)
                site = f"{SITE_NAME}:{lb['port']}"
                room = Classroom(roster, lb["url"], site, apps, think_s, step_timeout_s, max(1, int(kill_at * total)))
                log(f"classroom_scale: nginx on port {lb['port']}; {learners} learners, {total} actions")
                timed_out = False
                try:
                    asyncio.run(asyncio.wait_for(drive(room, ramp_s), timeout=timeout_s))
                except (TimeoutError, asyncio.TimeoutError):
                    timed_out = True
                lost_db = lost_in_database(pg["url"], roster)
                class_s = time.perf_counter() - start - startup_s
                return {**summarize(room, pg["url"], lost_db, class_s, timed_out), "startup_s": round(startup_s, 1)}


def _arguments():
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--replicas", type=int, default=3, help=f"app replicas behind nginx (2..{MAX_REPLICAS})")
    p.add_argument("--learners", type=int, default=40, help=f"simultaneous learners (1..{MAX_LEARNERS})")
    p.add_argument("--think", type=float, default=1.0, help="mean pause between a learner's actions, seconds")
    p.add_argument("--kill-at", type=float, default=0.4, help="kill one replica after this share of all actions")
    p.add_argument("--ramp", type=float, default=5.0, help="learners join evenly over this many seconds")
    p.add_argument("--timeout", type=float, default=600.0, help="hard limit for the class run, seconds")
    p.add_argument("--step-timeout", type=float, default=60.0, help="limit for one page run, seconds")
    args = p.parse_args()
    if not 2 <= args.replicas <= MAX_REPLICAS:
        p.error(f"--replicas {args.replicas} must be between 2 and {MAX_REPLICAS}")
    if not 1 <= args.learners <= MAX_LEARNERS:
        p.error(f"--learners {args.learners} must be between 1 and {MAX_LEARNERS}")
    if not 0 < args.kill_at < 1:
        p.error(f"--kill-at {args.kill_at} must be between 0 and 1")
    return args


def main() -> None:
    """Run the check; print one JSON line."""
    args = _arguments()
    # Last resort if shutdown itself hangs: end the process well after the hard limit.
    watchdog = threading.Timer(args.timeout + 420, lambda: os._exit(3))
    watchdog.daemon = True
    watchdog.start()
    result = {
        "bench": "classroom_scale",
        "host": "127.0.0.1",
        "think_s": args.think,
        "kill_at": args.kill_at,
        "balancer": "nginx, deploy/nginx.conf rendered for loopback",
        "lessons": list(LESSON_ROTATION),
    }
    try:
        result.update(
            run_scale(
                args.replicas, args.learners, args.think, args.kill_at, args.ramp, args.timeout, args.step_timeout
            )
        )
    except RuntimeError as exc:  # a service did not start: say which and why
        result.update(error=str(exc)[:600])
    except KeyboardInterrupt:  # the context managers have stopped every service by now
        log("classroom_scale: interrupted; the database, replicas and nginx are stopped")
        os._exit(130)
    result["load_average_1m"] = round(os.getloadavg()[0], 2)  # a busy shared machine inflates every number
    result["env"] = env_info()
    log(
        f"classroom_scale: lost {result.get('lost_progress')}, survivor errors {result.get('errors_on_survivors')}, "
        f"reconnected {result.get('reconnected')}/{result.get('dead_replica_learners')}, p95 {result.get('p95_ms')} ms"
    )
    if args.save:
        log(f"saved {save('classroom_scale', result)}")
    emit(result)
    sys.stdout.flush()
    os._exit(0 if "error" not in result else 1)


if __name__ == "__main__":
    main()
