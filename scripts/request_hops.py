"""Count a request's hops from `LLM.generate` to its first token: the number docs/ARCHITECTURE.md quotes.

A hop is one distinct call from a project function to another (engine/ or kernels/), recorded with
`sys.setprofile` while `LLM(model="demo").generate([...], SamplingParams(max_tokens=1))` runs, up to the
first `Sequence.append_token`. Each layer repeats the same calls, so a call counts once however often it
runs; comprehensions and lambdas are not functions of their own. `--path` prints the calls in order, indented
by depth, so a change that lengthens the path shows where.

    python -m scripts.request_hops            # {"hops": ..., "engine_hops": ..., "files": ...}
    python -m scripts.request_hops --path     # and the calls themselves
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import FrameType

ROOT = Path(__file__).resolve().parents[1]
COUNTED = ("engine", "kernels")
NOT_FUNCTIONS = {"<genexpr>", "<listcomp>", "<dictcomp>", "<setcomp>", "<lambda>"}
Function = tuple[str, str]  # (qualified name, file relative to the repository)


def _function(frame: FrameType) -> Function | None:
    """The project function `frame` runs, or None for anything else (the standard library, torch, ...)."""
    code = frame.f_code
    path = Path(code.co_filename)
    if code.co_name in NOT_FUNCTIONS or not path.is_relative_to(ROOT):
        return None
    rel = path.relative_to(ROOT)
    return (code.co_qualname, str(rel)) if rel.parts[0] in COUNTED else None


def trace_first_token(prompt: str = "def fibonacci(n):") -> list[tuple[int, Function, Function | None]]:
    """(depth, function, its caller) for each project call from `generate` to the first sampled token."""
    from engine import LLM, SamplingParams  # imported here so the trace starts with a loaded engine

    llm = LLM(model="demo", device="cpu")
    calls: list[tuple[int, Function, Function | None]] = []
    stack: list[Function] = []
    done = False

    def profile(frame: FrameType, event: str, arg: object) -> None:
        nonlocal done
        if done or event not in ("call", "return"):
            return
        function = _function(frame)
        if function is None:
            return
        if event == "return":
            if stack:
                stack.pop()
            return
        calls.append((len(stack), function, stack[-1] if stack else None))
        stack.append(function)
        done = function[0] == "Sequence.append_token"

    sys.setprofile(profile)
    try:
        llm.generate([prompt], SamplingParams(max_tokens=1, temperature=0.0))
    finally:
        sys.setprofile(None)
    return calls


def count(calls: list[tuple[int, Function, Function | None]]) -> dict[str, int]:
    """Distinct caller -> callee calls (hops), those landing in engine/, and the files the path touches."""
    hops = {(caller, callee) for _, callee, caller in calls if caller is not None}
    return {
        "hops": len(hops),
        "engine_hops": sum(1 for _, callee in hops if callee[1].startswith("engine/")),
        "files": len({callee[1] for _, callee, _ in calls}),
    }


def main() -> None:
    """Print the counts as JSON, and with --path the calls in order."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", action="store_true", help="also print each call, indented by depth")
    calls = trace_first_token()
    if parser.parse_args().path:
        for depth, (name, file), _ in calls:
            print(f"{'  ' * depth}{name}  ({file})")
    print(json.dumps(count(calls)))


if __name__ == "__main__":
    main()
