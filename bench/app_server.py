"""Run the real app for end-to-end checks: `streamlit run app.py` on a free loopback port + system Chromium.

Shared by the browser tests (tests/browser/) and the classroom load check (bench/classroom.py). The
browser is Debian's ``chromium`` driven by Playwright's Python package through ``executable_path``;
Playwright never downloads a browser here. Everything binds to 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",  # CI containers run as root, where the sandbox cannot start
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",  # small /dev/shm in containers
    # Many contexts in one browser: pages not in front must keep their timers (Streamlit debounces widget
    # values with setTimeout; a throttled background page sends a slider move a minute late).
    "--disable-background-timer-throttling",
    "--disable-renderer-backgrounding",
    "--disable-backgrounding-occluded-windows",
]


def find_chromium() -> str | None:
    """Path of a system Chromium: $KVLAB_CHROMIUM, else chromium / chromium-browser on PATH."""
    for name in (os.environ.get("KVLAB_CHROMIUM"), "chromium", "chromium-browser"):
        if name and (path := shutil.which(name)):
            return path
    return None


def free_port() -> int:
    """A TCP port that is free on the loopback interface right now."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


@contextlib.contextmanager
def running_app(
    data_dir: Path,
    log_path: Path,
    timeout_s: float = 90.0,
    extra_env: dict[str, str] | None = None,
    info: dict[str, Any] | None = None,
):
    """Start ``streamlit run app.py`` on a free loopback port; yield its base URL; stop it afterwards.

    ``info``, when given, receives the server's ``pid`` (for CPU accounting).
    """
    port = free_port()
    url = f"http://{HOST}:{port}"
    env = {**os.environ, "KVLAB_DATA_DIR": str(data_dir), **(extra_env or {})}
    env.pop("TRITON_INTERPRET", None)  # the app picks its backend like a normal run, not like pytest
    cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
           "--server.port", str(port), "--server.address", HOST, "--browser.gatherUsageStats", "false"]  # fmt: skip
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        if info is not None:
            info["pid"] = proc.pid
        try:
            deadline = time.monotonic() + timeout_s
            while not _healthy(url):
                if proc.poll() is not None:
                    raise RuntimeError(f"streamlit exited with code {proc.returncode}; see {log_path}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"streamlit not healthy after {timeout_s:.0f} s; see {log_path}")
                time.sleep(0.3)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)


@contextlib.contextmanager
def chromium_browser(executable: str) -> Iterator[Any]:
    """A headless Chromium (Playwright sync API) from ``executable``; closed afterwards."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds used so far by process ``pid`` (all its threads); None off Linux."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime in clock ticks


APP_IDLE = '[data-testid="stApp"][data-test-script-state="notRunning"][data-test-connection-state="CONNECTED"]'


def wait_for_app(page: Any, timeout_ms: float = 60_000) -> None:
    """Wait until the app is connected and its script run has finished (Streamlit's own e2e signal)."""
    page.wait_for_selector(APP_IDLE, timeout=timeout_ms)
    # A rerun triggered by the last widget event may start just after; settle for a moment.
    page.wait_for_timeout(150)
    page.wait_for_selector(APP_IDLE, timeout=timeout_ms)


# Counts finished script runs: the app element's script state flips to "notRunning" after every run.
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


def press_and_wait(page: Any, target: Any, key: str, timeout_ms: float = 60_000) -> None:
    """Press ``key`` on ``target`` and wait for the re-run it triggers to finish (needs RUN_COUNTER_JS)."""
    before = page.evaluate("window.__kvRuns")
    target.press(key)
    page.wait_for_function(f"window.__kvRuns > {before}", timeout=timeout_ms, polling=20)
    page.wait_for_selector(APP_IDLE, timeout=timeout_ms)


def slider_input(page: Any, label_prefix: str) -> Any:
    """The keyboard-focusable range input of the slider whose label starts with ``label_prefix``."""
    return page.locator(f'[data-testid="stSlider"]:has-text("{label_prefix}") input[type="range"]').first


def metric_value(page: Any, label_prefix: str) -> str:
    """Displayed value of the st.metric whose label contains ``label_prefix``."""
    return page.locator(
        f'[data-testid="stMetric"]:has-text("{label_prefix}") [data-testid="stMetricValue"]'
    ).first.inner_text()


def error_texts(page: Any) -> list[str]:
    """Texts of exception and st.error elements on the page (empty when the page is healthy)."""
    loc = page.locator('[data-testid="stException"], [data-testid="stAlertContentError"]')
    return [loc.nth(i).inner_text()[:300] for i in range(loc.count())]
