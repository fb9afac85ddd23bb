"""What the playground's learners cost the server in memory, and that it gets it back.

`python -m bench.app.playground_memory --json` starts `streamlit run app.py` on a free 127.0.0.1 port with a
short idle time (KVLAB_PLAYGROUND_IDLE_S) and reads the server's resident memory (VmRSS, /proc) while
protocol clients (bench/app/client.py, the messages a browser sends) use the playground, all sessions open at
once:

- ``defaults``: ``--sessions`` learners each press Generate at the page's default engine settings; the
  RSS after each one, and the mean growth per learner.
- ``largest``: as many learners each ask for the largest pool the sliders allow (256 blocks of 256 tokens:
  256 MiB of KV with the demo model); the pool (KVLAB_PLAYGROUND_KV_BYTES, default 512 MiB) gives engines
  to as many as fit and tells the rest the playground is busy; the RSS after each, and who got which answer.
- ``after_close``: every session closed, the RSS once the idle time and a sweep have passed (Streamlit keeps
  a closed tab's session for a while; the pool's sweeper frees its engine anyway).

Run: python -m bench.app.playground_memory --json [--save] [--sessions 6] [--idle-s 15]
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.app.client import PageRun, StreamlitSession, click, slider_value
from bench.app_server import running_app
from bench.harness import emit, env_info, log, parser, save
from lessons.labs.playground import DEFAULT_POOL_BYTES, IDLE_ENV, MAX_BLOCKS, POOL_BYTES_ENV

ROUTE = "playground"
MAX_SESSIONS = 16
BUSY = "the playground is busy"


def rss_mib(pid: int) -> float:
    """Resident memory of process ``pid`` in MiB (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def _keyed(page: PageRun, key: str) -> Any:
    """The widget whose user key is exactly ``key``."""
    (proto,) = [p for _, p in page.widgets if p.id.endswith("-" + key)]
    return proto


async def _generate(session: StreamlitSession, largest: bool) -> str:
    """Open the playground, set the pool (the largest, or the defaults), press Generate; what it answered."""
    page = await session.run(ROUTE)
    states = []
    if largest:
        block, blocks = _keyed(page, "pg_block"), _keyed(page, "pg_blocks")
        states = [slider_value(block, len(block.options) - 1), slider_value(blocks, MAX_BLOCKS)]
    button = _keyed(page, "pg_generate")
    done: PageRun = await session.run(ROUTE, [*states, click(button)])
    if done.exceptions:
        return "exception: " + done.exceptions[0][:120]
    errors = [body for fmt, body in done.alerts if fmt == "ERROR"]
    if any(BUSY in e for e in errors):
        return "busy"
    if errors:
        return "error: " + errors[0][:120]
    return "generated" if "Tokens/s" in done.metrics else "no run shown"


async def _sessions(url: str, pid: int, count: int, largest: bool, stack: contextlib.AsyncExitStack) -> dict:
    rss, answers = [], []
    for _ in range(count):
        session = await stack.enter_async_context(StreamlitSession(url, timeout_s=180))
        answers.append(await _generate(session, largest))
        rss.append(round(rss_mib(pid), 1))
    return {"rss_mib_after_each": rss, "answers": answers}


async def _measure(url: str, pid: int, count: int, idle_s: float) -> dict[str, Any]:
    async with StreamlitSession(url, timeout_s=180) as warm:  # weights loaded, first-run imports done
        await _generate(warm, largest=False)
    await asyncio.sleep(idle_s * 1.5)  # the warm-up's engine is freed too
    base = round(rss_mib(pid), 1)
    result: dict[str, Any] = {"rss_mib_start": base}
    async with contextlib.AsyncExitStack() as stack:
        defaults = await _sessions(url, pid, count, False, stack)
        defaults["mib_per_learner"] = round((defaults["rss_mib_after_each"][-1] - base) / count, 2)
        result["defaults"] = defaults
        before = defaults["rss_mib_after_each"][-1]
        largest = await _sessions(url, pid, count, True, stack)
        got = sum(a == "generated" for a in largest["answers"])
        largest["engines_given"] = got
        largest["mib_over_defaults"] = round(max(largest["rss_mib_after_each"]) - before, 1)
        result["largest"] = largest
    started = time.monotonic()
    await asyncio.sleep(idle_s * 1.5 + 2)  # idle time, then the sweeper's next round (a quarter of it)
    result["after_close"] = {
        "seconds_after_close": round(time.monotonic() - started, 1),
        "rss_mib": round(rss_mib(pid), 1),
    }
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the measurement; print (and with --save write) its JSON."""
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, default=6, help=f"learners per phase (1..{MAX_SESSIONS})")
    p.add_argument("--idle-s", type=int, default=15, help="the server's KVLAB_PLAYGROUND_IDLE_S (>= 1)")
    args = p.parse_args(argv)
    if not 1 <= args.sessions <= MAX_SESSIONS or args.idle_s < 1:
        p.error(f"--sessions must be in 1..{MAX_SESSIONS} and --idle-s >= 1")
    env = {IDLE_ENV: str(args.idle_s), POOL_BYTES_ENV: str(DEFAULT_POOL_BYTES), "KVLAB_MODEL_DIRS": ""}
    with tempfile.TemporaryDirectory(prefix="kvlab-pgmem-") as tmp:
        info: dict[str, Any] = {}
        with running_app(Path(tmp), Path(tmp) / "streamlit.log", extra_env=env, info=info) as url:
            log(f"server {url} pid {info['pid']}")
            measured = asyncio.run(_measure(url, info["pid"], args.sessions, args.idle_s))
    result = {
        "bench": "playground_memory",
        "sessions": args.sessions,
        "idle_s": args.idle_s,
        "pool_budget_mib": DEFAULT_POOL_BYTES / 2**20,
        **measured,
        "env": env_info(),
    }
    if args.save:
        log(f"saved {save('playground_memory', result)}")
    emit(result)
    return result


if __name__ == "__main__":
    main()
