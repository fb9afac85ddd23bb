"""Does every lesson page's live evidence show what its prose claims, at the page's default settings?

Each lesson lab module in `lessons/labs/` exposes `claims()`: it runs the page's own live computation at the
page's defaults (the same functions, sizes and baselines the page uses) and returns, per page,
`{"claim": sentence, "holds": bool, ...the measured numbers}`. This benchmark collects them all, so a change
that makes a page teach the opposite of its lesson (GQA slower than MHA, packing slower than padding, a best
block size of 1, a batch shown fitting that cannot) shows up as `"holds": false` here, on the machine that
runs it. It never asserts: tests/bench/test_evidence.py checks the collection logic, and each lab's tests
check its claim logic on small inputs.

Run: python -m bench.evidence --json [--only gqa,packing] [--save]
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable

from bench.harness import emit, env_info, log, parser, save

# lab module -> the pages whose claims it reports (module order = course order)
LABS = ("bandwidth", "gqa", "packing", "fragmentation", "paged", "pressure")


def lab_claims(name: str) -> Callable[[], dict[str, dict]]:
    """The `claims` function of lessons/labs/<name>.py."""
    return importlib.import_module(f"lessons.labs.{name}").claims


def collect(labs: dict[str, Callable[[], dict[str, dict]]]) -> dict:
    """Run every lab's claims; a lab that raises is reported as a failed claim with its error, not a crash."""
    claims: dict[str, dict] = {}
    seconds: dict[str, float] = {}
    for name, fn in labs.items():
        t0 = time.perf_counter()
        try:
            found = fn()
        except Exception as exc:  # noqa: BLE001 - the report names the lab and the error
            found = {name: {"claim": f"lessons.labs.{name}.claims() ran", "holds": False, "error": repr(exc)}}
        seconds[name] = round(time.perf_counter() - t0, 2)
        for page, entry in found.items():
            if not isinstance(entry, dict) or "claim" not in entry or not isinstance(entry.get("holds"), bool):
                entry = {"claim": f"{name}: malformed claim {page!r}", "holds": False, "got": repr(entry)[:200]}
            claims[page] = entry
    failing = sorted(page for page, entry in claims.items() if not entry["holds"])
    return {"claims": claims, "all_hold": not failing, "failing": failing, "seconds": seconds}


def main() -> None:
    p = parser("Run each lesson page's live evidence at its defaults and report whether its claims hold.")
    p.add_argument("--only", default="", help="comma-separated lab names (default: all of " + ", ".join(LABS) + ")")
    args = p.parse_args()
    names = [n for n in args.only.split(",") if n] or list(LABS)
    unknown = sorted(set(names) - set(LABS))
    if unknown:
        p.error(f"unknown lab(s) {unknown}; choose from {', '.join(LABS)}")
    log(f"evidence: running the live computations of {', '.join(names)} at their page defaults ...")
    result = {"benchmark": "evidence", "env": env_info(), **collect({n: lab_claims(n) for n in names})}
    if args.save:
        log(f"saved {save('evidence', result)}")
    emit(result)


if __name__ == "__main__":
    main()
