"""tests/hog.py: the CPU hog starts only when asked, is bounded by its own timeout, and stops with every worker."""

from __future__ import annotations

import os
import time

import pytest

from tests import hog

# A stand-in for stress-ng that forks two busy children and waits, as stress-ng does: stopping it must stop
# the children too, not only the parent.
FAKE = "#!/bin/sh\nsleep 300 &\nsleep 300 &\nwait\n"


def _members(pgid: int) -> list[int]:
    """Processes of group ``pgid`` that still run (a killed child waiting to be reaped by init does not)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):  # fields: state, ppid, pgrp
                found.append(int(entry))
    return found


@pytest.mark.parametrize("value", ["1", "yes", "TRUE", " on "])
def test_the_hog_is_asked_for_by_a_yes(value):
    assert hog.hog_requested({"KVLAB_TEST_HOG": value})


@pytest.mark.parametrize("value", ["", "0", "no", "false", "OFF"])
def test_no_hog_unless_asked(value):
    assert not hog.hog_requested({"KVLAB_TEST_HOG": value})
    assert hog.hog_from_env({"KVLAB_TEST_HOG": value}) is None
    assert not hog.hog_requested({})


def test_an_unclear_setting_is_refused_by_name():
    with pytest.raises(ValueError, match="KVLAB_TEST_HOG='2cores'"):
        hog.hog_requested({"KVLAB_TEST_HOG": "2cores"})
    with pytest.raises(ValueError, match="KVLAB_TEST_HOG_CPUS='0'"):
        hog.hog_from_env({"KVLAB_TEST_HOG": "1", "KVLAB_TEST_HOG_CPUS": "0", "KVLAB_STRESS_NG": "/bin/true"})


def test_the_command_is_bounded_by_its_own_timeout():
    cmd = hog.hog_command("/usr/bin/stress-ng", 2, 90)
    assert cmd[0] == "/usr/bin/stress-ng"
    assert cmd[cmd.index("--cpu") + 1] == "2" and cmd[cmd.index("--timeout") + 1] == "90s"
    with pytest.raises(ValueError, match="timeout_s=0"):
        hog.hog_command("/usr/bin/stress-ng", 2, 0)


def test_a_missing_stress_ng_names_the_install_script(tmp_path):
    env = {"KVLAB_TEST_HOG": "1", "PATH": str(tmp_path)}  # an empty PATH folder: no stress-ng anywhere
    assert hog.find_stress_ng(env) is None
    with pytest.raises(RuntimeError, match="scripts/install_stress.sh"):
        hog.hog_from_env(env)


def test_stop_ends_the_hog_and_every_process_it_forked(tmp_path):
    fake = tmp_path / "stress-ng"
    fake.write_text(FAKE)
    fake.chmod(0o755)
    running = hog.hog_from_env({"KVLAB_TEST_HOG": "1", "KVLAB_TEST_HOG_CPUS": "2", "PATH": str(tmp_path)})
    assert running is not None and running.cpus == 2 and running.timeout_s == hog.DEFAULT_TIMEOUT_S
    pgid = running.proc.pid
    try:
        assert running.running() and os.getpgid(pgid) == pgid != os.getpgid(0)  # its own group, not pytest's
        deadline = time.monotonic() + 30
        while len(_members(pgid)) < 3 and time.monotonic() < deadline:  # the shell forks its sleeps
            time.sleep(0.05)
        assert len(_members(pgid)) == 3  # the shell and its two sleeps
    finally:
        seconds = running.stop()
    assert seconds >= 0 and not running.running() and _members(pgid) == []
    assert running.stop() >= seconds  # stopping twice is harmless


def test_a_binary_that_exits_at_once_is_an_error(tmp_path):
    with pytest.raises(RuntimeError, match="exited at once with code 3"):
        hog.start_hog(_script(tmp_path, "#!/bin/sh\necho bad option >&2\nexit 3\n"), 1, 10)


def test_real_stress_ng_ends_by_itself_at_its_timeout():
    binary = hog.find_stress_ng()
    if binary is None:
        pytest.skip("stress-ng is not installed (scripts/install_stress.sh); the fake above covers stop()")
    running = hog.start_hog(binary, 1, 1)
    try:
        running.proc.wait(timeout=60)  # the bound, not a stop() call, ends it
        assert running.proc.returncode == 0
    finally:
        running.stop()
    assert time.monotonic() - running.started >= 1


def _script(folder, text: str) -> str:
    path = folder / "fake-stress-ng"
    path.write_text(text)
    path.chmod(0o755)
    return str(path)
