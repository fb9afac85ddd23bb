"""Driving the app in a real browser: press a key and wait for the re-run it caused to finish.

Needs bench/st_client.py's RUNS_FINISHED_JS as an init script (the `page` fixture adds it): it counts the
finished script runs a page receives on its websocket. stApp's `data-test-script-state` attribute is not
enough, because React can render a whole quick run in one batch and the attribute never leaves
"notRunning" (see RUNS_FINISHED_JS).
"""

from __future__ import annotations

from typing import Any

from bench.app_server import APP_IDLE


def runs_finished(page: Any) -> int:
    """Script runs this page has seen finish so far."""
    return page.evaluate("window.__kvFinished")


def wait_for_runs(page: Any, more_than: int, timeout_ms: float = 60_000) -> None:
    """Wait until more than ``more_than`` runs have finished and the app shows the last one."""
    page.wait_for_function(f"window.__kvFinished > {more_than}", timeout=timeout_ms, polling=20)
    page.wait_for_selector(APP_IDLE, timeout=timeout_ms)


def press_and_wait(page: Any, target: Any, key: str, timeout_ms: float = 60_000) -> None:
    """Press ``key`` on ``target`` and wait for the re-run it triggers to finish."""
    before = runs_finished(page)
    target.press(key)
    wait_for_runs(page, before, timeout_ms)
