"""bench/app/playground_memory.py's own pieces (a full run starts a server: python -m bench.app.playground_memory)."""

from __future__ import annotations

import os

import pytest

from bench.app import playground_memory as pm


def test_rss_is_read_from_proc_in_mib():
    with open(f"/proc/{os.getpid()}/statm") as f:
        resident_pages = int(f.read().split()[1])
    by_statm = resident_pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    assert pm.rss_mib(os.getpid()) == pytest.approx(by_statm, rel=0.2)
    with pytest.raises(OSError):
        pm.rss_mib(2**22 + 12345)  # no such process


@pytest.mark.parametrize("argv", [["--sessions", "0"], ["--sessions", "17"], ["--idle-s", "0"]])
def test_a_run_out_of_bounds_is_refused_before_any_server_starts(argv):
    with pytest.raises(SystemExit):
        pm.main(argv)
