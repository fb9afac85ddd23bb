"""Warm start: how long a server takes to report healthy, and how long the first and the second learner wait
for the lessons that compute on first use, with the warm-up (ui/warm.py) off and on.

`python -m bench.app.warm_start --json` starts the real server (ui.serve, as ./run.sh does) on loopback, once
with KVLAB_WARM=0 and once with KVLAB_WARM=1 (in that order, each from a fresh process: a start cannot be
interleaved), times spawn to a healthy `/_stcore/health`, then a first learner and then a second one open
each of the slow lessons at their defaults (protocol clients, bench/app/client.py). Reported per side:
`start_s`, the server's resident memory when healthy and after the visits, and per page `first_s` /
`second_s`. The goal: with the warm-up, first ≈ second.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.app.client import StreamlitSession
from bench.app_server import running_app
from bench.harness import emit, env_info, log, parser, save

ROUTES = ("gqa", "packing", "paged_attention", "pressure")  # the lessons whose first visit took seconds


async def _visit(url: str, route: str) -> tuple[float, list[str]]:
    async with StreamlitSession(url, timeout_s=300) as session:
        shown = await session.run(route)
    return shown.seconds, shown.errors


async def _learners(url: str) -> dict[str, Any]:
    pages: dict[str, Any] = {}
    for route in ROUTES:
        first, errors = await _visit(url, route)
        second, _ = await _visit(url, route)
        pages[route] = {"first_s": round(first, 2), "second_s": round(second, 2), "errors": errors}
        log(f"  {route}: first {first:.2f} s, second {second:.2f} s")
    return pages


def _rss_mib(pid: int) -> float:
    """The process's resident memory (VmRSS in /proc), MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def _side(warm: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as data_dir:
        server: dict[str, Any] = {}
        started = time.perf_counter()
        with running_app(
            Path(data_dir),
            Path(data_dir) / "streamlit.log",
            timeout_s=600,
            extra_env={"KVLAB_WARM": str(int(warm))},
            info=server,
        ) as url:
            start_s = time.perf_counter() - started
            rss_healthy = _rss_mib(server["pid"])
            log(f"warm={warm}: healthy after {start_s:.1f} s, {rss_healthy} MiB")
            pages = asyncio.run(_learners(url))
            return {
                "warm": warm,
                "start_s": round(start_s, 1),
                "rss_mib_healthy": rss_healthy,
                "rss_mib_after_visits": _rss_mib(server["pid"]),
                "pages": pages,
            }


def main() -> None:
    """Measure; print one JSON line."""
    args = parser(__doc__.splitlines()[0]).parse_args()
    result: dict[str, Any] = {"bench": "warm_start", "load_average_1m_before": round(os.getloadavg()[0], 2)}
    result["sides"] = [_side(False), _side(True)]
    result["load_average_1m_after"] = round(os.getloadavg()[0], 2)
    result["env"] = env_info()
    emit(result)
    if args.save:
        save("warm_start", result)


if __name__ == "__main__":
    main()
