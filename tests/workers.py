"""Which tests run together on one pytest-xdist worker: ./test.sh spreads the suite over one worker per core.

A test is its own unit of work (any worker may take it), except
- the tests of a file that defines a module- or class-scoped fixture (an AppTest run, a server, a model): the
  whole file goes to one worker, so that fixture is built once, not once per worker (unless the file is in
  tests/conftest.py's SPLIT_FILES: its shared fixture is cheap and its tests are long, so they are spread);
- the tests named in a serial group (tests/conftest.py: SERIAL_GROUPS): each group runs one test after
  another on one worker, for tests that must not run beside each other.

The scheduler decides from node ids alone, in the controller, which does not collect. xdist's own
``--dist loadgroup`` would read ``xdist_group`` marks, but with pytest 9.2 the group it writes into each node id
no longer reaches the scheduler (pytest-xdist issue 1386) and every test is spread on its own; this scheduler
takes its place for ``--dist loadgroup``. Larger units are handed out first, so a long file does not start last.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection, Mapping
from pathlib import Path

import pytest

try:
    from xdist.scheduler import LoadScopeScheduling
except ImportError:  # plain pytest without xdist (./test.sh installs it): one process, no scheduler needed
    LoadScopeScheduling = object

# a fixture shared by the tests of a file or class: `@pytest.fixture(scope="module")`, also `scope='class'`
SHARED_SCOPE = re.compile(r"""scope\s*=\s*["'](module|class)["']""")


@functools.cache
def shares_a_fixture(path: Path) -> bool:
    """Whether the test file at ``path`` defines a module- or class-scoped fixture (False if it cannot be read)."""
    try:
        return SHARED_SCOPE.search(path.read_text(errors="replace")) is not None
    except OSError:
        return False


def unit_of(nodeid: str, root: Path, serial_groups: Mapping[str, str], split_files: Collection[str] = ()) -> str:
    """The unit of work ``nodeid`` belongs to: its serial group, its file (when the file shares a fixture and
    is not in ``split_files``), or the test itself. Parametrized cases of a serial test share its group."""
    base = nodeid.split("[", 1)[0]
    if base in serial_groups:
        return f"group:{serial_groups[base]}"
    file = nodeid.split("::", 1)[0]
    if file not in split_files and shares_a_fixture(root / file):
        return f"file:{file}"
    return nodeid


class SharedFixtureScheduling(LoadScopeScheduling):
    """xdist's LoadScopeScheduling with KV Lab's units of work (``unit_of``), larger units handed out first."""

    def __init__(
        self,
        config: pytest.Config,
        log=None,
        serial_groups: Mapping[str, str] | None = None,
        split_files: Collection[str] = (),
    ) -> None:
        super().__init__(config, log)
        self.serial_groups = dict(serial_groups or {})
        self.split_files = frozenset(split_files)

    def _split_scope(self, nodeid: str) -> str:
        return unit_of(nodeid, self.config.rootpath, self.serial_groups, self.split_files)
