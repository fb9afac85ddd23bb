"""A bounded CPU hog beside the test session: ``KVLAB_TEST_HOG=1 ./test.sh`` keeps every core busy.

The suite must hold on a busy machine (a laptop compiling, a shared CI runner): a test that fails only under
load depends on timing luck. With ``KVLAB_TEST_HOG`` set, the pytest process that runs the session (the xdist
controller, not its workers) starts Debian's ``stress-ng --cpu N`` (scripts/install_stress.sh installs it) at
session start and stops it at session end. It is bounded twice: stress-ng's own ``--timeout`` ends it even
when pytest is killed, and it runs in its own process group, which the session end stops as a whole.

``KVLAB_TEST_HOG_CPUS`` sets N (default: the cores this process may use); ``KVLAB_TEST_HOG_TIMEOUT`` the bound
in seconds (default 3600).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass

DEFAULT_TIMEOUT_S = 3600


def hog_requested(env: dict[str, str] | os._Environ = os.environ) -> bool:
    """Whether ``KVLAB_TEST_HOG`` asks for the hog ("1", "yes", "true", "on"; "", "0", "no", "false", "off" do not)."""
    value = env.get("KVLAB_TEST_HOG", "").strip().lower()
    if value in ("", "0", "no", "false", "off"):
        return False
    if value in ("1", "yes", "true", "on"):
        return True
    raise ValueError(f"KVLAB_TEST_HOG={value!r}: use 1 to keep every core busy beside the tests, or 0 / unset")


def cores() -> int:
    """CPU cores this process may run on (its affinity mask, not the machine's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _positive_int(env: dict[str, str] | os._Environ, name: str, default: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"{name}={raw!r}: use a whole number of at least 1")
    return int(raw)


def find_stress_ng(env: dict[str, str] | os._Environ = os.environ) -> str | None:
    """Path of stress-ng: $KVLAB_STRESS_NG, else stress-ng on the environment's PATH (Debian's package)."""
    for name in (env.get("KVLAB_STRESS_NG"), "stress-ng"):
        if name and (path := shutil.which(name, path=env.get("PATH"))):
            return path
    return None


def hog_command(binary: str, cpus: int, timeout_s: int) -> list[str]:
    """The stress-ng command line: ``cpus`` busy-looping workers that end by themselves after ``timeout_s``."""
    if cpus < 1 or timeout_s < 1:
        raise ValueError(f"cpus={cpus}, timeout_s={timeout_s}: both must be at least 1")
    return [binary, "--cpu", str(cpus), "--cpu-load", "100", "--timeout", f"{timeout_s}s", "--quiet"]


@dataclass
class Hog:
    """A running stress-ng: its process (leader of its own process group), its size and its start time."""

    proc: subprocess.Popen
    cpus: int
    timeout_s: int
    started: float

    def running(self) -> bool:
        """Whether stress-ng is still running."""
        return self.proc.poll() is None

    def stop(self, grace_s: float = 10.0) -> float:
        """Stop stress-ng and its workers (the whole process group); the seconds it ran. A no-op once stopped
        (the group may also have ended on its own, at its --timeout: "no such process" is not an error)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=5)
        # stress-ng's workers share its group; one that outlived the parent's SIGTERM is killed here too
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        return time.monotonic() - self.started


def start_hog(binary: str, cpus: int, timeout_s: int = DEFAULT_TIMEOUT_S) -> Hog:
    """Start ``stress-ng --cpu cpus`` in its own process group; RuntimeError when it exits at once."""
    started = time.monotonic()
    proc = subprocess.Popen(
        hog_command(binary, cpus, timeout_s),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own group: the session end stops stress-ng and every worker it forked
    )
    try:
        proc.wait(timeout=0.5)
    except subprocess.TimeoutExpired:
        return Hog(proc, cpus, timeout_s, started)
    err = proc.stderr.read().decode(errors="replace")[-400:] if proc.stderr else ""
    raise RuntimeError(f"stress-ng exited at once with code {proc.returncode}: {err.strip()}")


def hog_from_env(env: dict[str, str] | os._Environ = os.environ) -> Hog | None:
    """The hog the environment asks for, started; None when ``KVLAB_TEST_HOG`` is unset or off.

    RuntimeError naming the fix when it is asked for but stress-ng is missing."""
    if not hog_requested(env):
        return None
    binary = find_stress_ng(env)
    if binary is None:
        raise RuntimeError(
            "KVLAB_TEST_HOG is set but stress-ng is missing: run scripts/install_stress.sh "
            "(or set KVLAB_STRESS_NG=/path/to/stress-ng)"
        )
    cpus = _positive_int(env, "KVLAB_TEST_HOG_CPUS", cores())
    timeout_s = _positive_int(env, "KVLAB_TEST_HOG_TIMEOUT", DEFAULT_TIMEOUT_S)
    return start_hog(binary, cpus, timeout_s)
