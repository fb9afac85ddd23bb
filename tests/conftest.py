"""Test set-up: Triton kernels run through the interpreter when no CUDA device is present.

TRITON_INTERPRET must be set before anything imports triton, so it happens here, at collection time.
Under CI (``CI`` set) Hypothesis draws the same examples on every run, so a submission's result does not depend
on luck; a developer's runs keep exploring new examples, and a failure they find becomes an ``@example``.

./test.sh runs the suite on pytest-xdist workers (docs/TESTING.md); each worker is its own session, with its
own servers, ports, databases and temporary folders, and gets its share of the cores for torch's threads.
``KVLAB_TEST_HOG=1`` keeps every core busy beside the session (tests/hog.py).
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

from kernels.backend import HAS_TRITON, triton_interpreting  # noqa: E402
from tests import hog, workers  # noqa: E402

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

# Triton tests run on CUDA, or on CPU through the interpreter.
TRITON_OK = HAS_TRITON and (torch.cuda.is_available() or triton_interpreting())
requires_triton = pytest.mark.skipif(not TRITON_OK, reason="triton not installed")
requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

# Each xdist worker gets its share of the cores for torch's intra-op threads: two workers on two cores, each
# with two threads, would fight over the cores and run slower than one thread each.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    torch.set_num_threads(max(1, hog.cores() // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))

# Tests that must not run beside each other: each of these starts PostgreSQL, two app replicas and nginx and
# drives learners through them, so two at once would double the load each measures its round under. Each group
# runs its tests one after another on one worker (tests/workers.py); the other workers go on with the rest.
SERIAL_GROUPS = {
    "tests/deploy/test_classroom_live.py::test_a_live_round_on_two_replicas_shows_every_answer": "replicas",
    "tests/deploy/test_classroom_scale.py::test_a_replica_failure_loses_no_saved_progress": "replicas",
}

# Files with a module-scoped fixture that costs nothing to build twice, whose tests are better spread over the
# workers than kept on one (tests/workers.py): the file, and why its fixture is cheap.
SPLIT_FILES = {
    "tests/browser/test_a11y.py": "axe_script only checks that a file exists; its 30 page scans are the long pole",
}


@pytest.hookimpl(optionalhook=True)  # an xdist hook: without xdist installed it is never called
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """For ``--dist loadgroup`` (./test.sh): KV Lab's units of work (tests/workers.py) in place of xdist's."""
    if config.getvalue("dist") == "loadgroup":
        return workers.SharedFixtureScheduling(config, log, SERIAL_GROUPS, SPLIT_FILES)
    return None


HOG = pytest.StashKey[hog.Hog]()
HOG_SECONDS = pytest.StashKey[float]()


def pytest_sessionstart(session: pytest.Session) -> None:
    """Start the CPU hog when KVLAB_TEST_HOG asks for it, in the process that owns the session only (under
    xdist, the controller: its workers inherit the load, not a hog each)."""
    if hasattr(session.config, "workerinput"):
        return
    try:
        running = hog.hog_from_env()
    except (RuntimeError, ValueError) as exc:
        raise pytest.UsageError(str(exc)) from None
    if running is not None:
        session.config.stash[HOG] = running


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Stop the CPU hog (before the summary, which reports how long it ran)."""
    running = session.config.stash.get(HOG, None)
    if running is not None:
        session.config.stash[HOG_SECONDS] = running.stop()


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    """Say that the run was loaded, and by how much, so a time read off this run is not taken for a quiet one."""
    running = config.stash.get(HOG, None)
    if running is not None:
        seconds = config.stash.get(HOG_SECONDS, 0.0)
        load = " ".join(open("/proc/loadavg").read().split()[:3]) if os.path.exists("/proc/loadavg") else "n/a"
        terminalreporter.write_line(
            f"CPU hog: stress-ng --cpu {running.cpus} ran beside the tests for {seconds:.0f} s "
            f"(bound {running.timeout_s} s); load average at the end: {load}"
        )


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


@pytest.fixture
def playground_pool(monkeypatch):
    """``playground_pool(pool=None)`` makes the playground page's server-wide engine pool (a cached resource of
    pages/9_playground.py) ``pool`` (default: one sized from the environment, as a server makes it) and returns
    it; the page's resources are cleared before and after, so no other test sees this pool."""
    import streamlit as st

    from lessons.labs import playground as lab

    made = lab.EnginePool.from_env

    def install(pool: object = None) -> object:
        chosen = made() if pool is None else pool
        monkeypatch.setattr(lab.EnginePool, "from_env", classmethod(lambda cls, env=None: chosen))
        st.cache_resource.clear()
        return chosen

    yield install
    st.cache_resource.clear()
