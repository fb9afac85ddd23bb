"""tests/workers.py: the tests of a file that shares a fixture go to one xdist worker, serial groups stay together."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import workers
from tests.conftest import SERIAL_GROUPS, SPLIT_FILES

ROOT = Path(__file__).resolve().parent.parent
SHARED = 'import pytest\n\n@pytest.fixture(scope="module")\ndef page():\n    return 1\n'
CLASS_SHARED = "import pytest\n\n@pytest.fixture(scope='class')\ndef page():\n    return 1\n"
PLAIN = "import pytest\n\n@pytest.fixture\ndef page():\n    return 1\n"


@pytest.fixture
def tree(tmp_path) -> Path:
    (tmp_path / "tests").mkdir()
    for name, text in {"test_shared.py": SHARED, "test_class.py": CLASS_SHARED, "test_plain.py": PLAIN}.items():
        (tmp_path / "tests" / name).write_text(text)
    return tmp_path


def test_a_file_with_a_module_or_class_fixture_is_one_unit(tree):
    for file in ("tests/test_shared.py", "tests/test_class.py"):
        units = {workers.unit_of(f"{file}::test_{i}", tree, {}) for i in range(3)}
        assert units == {f"file:{file}"}
    assert workers.unit_of("tests/test_class.py::TestPage::test_a[1]", tree, {}) == "file:tests/test_class.py"


def test_other_tests_are_units_of_their_own(tree):
    ids = [f"tests/test_plain.py::test_{i}" for i in range(3)] + ["tests/test_plain.py::test_p[a-1]"]
    assert [workers.unit_of(i, tree, {}) for i in ids] == ids
    assert workers.unit_of("tests/test_gone.py::test_x", tree, {}) == "tests/test_gone.py::test_x"  # unreadable


def test_a_split_file_spreads_its_tests_despite_its_shared_fixture(tree):
    ids = [f"tests/test_shared.py::test_{i}" for i in range(2)]
    assert [workers.unit_of(i, tree, {}, {"tests/test_shared.py"}) for i in ids] == ids
    assert (
        workers.unit_of("tests/test_class.py::test_0", tree, {}, {"tests/test_shared.py"}) == "file:tests/test_class.py"
    )


@pytest.mark.parametrize("file", sorted(SPLIT_FILES))
def test_every_split_file_exists_and_shares_a_fixture(file):
    assert workers.shares_a_fixture(ROOT / file), f"{file} is in SPLIT_FILES but shares no fixture (drop it)"


def test_a_serial_group_holds_its_tests_and_their_parameters(tree):
    groups = {"tests/test_plain.py::test_a": "replicas", "tests/test_shared.py::test_b": "replicas"}
    assert workers.unit_of("tests/test_plain.py::test_a", tree, groups) == "group:replicas"
    assert workers.unit_of("tests/test_plain.py::test_a[2-x]", tree, groups) == "group:replicas"
    assert workers.unit_of("tests/test_shared.py::test_b", tree, groups) == "group:replicas"  # the group wins
    assert workers.unit_of("tests/test_plain.py::test_ab", tree, groups) == "tests/test_plain.py::test_ab"


@pytest.mark.parametrize("nodeid", sorted(SERIAL_GROUPS))
def test_every_serial_test_exists(nodeid):
    # a renamed test would silently fall out of its group and run beside the others again
    file, name = nodeid.split("::")
    assert f"\ndef {name}(" in (ROOT / file).read_text(), f"{nodeid} is in SERIAL_GROUPS but not in {file}"


def test_the_scheduler_splits_by_these_units(pytestconfig):
    pytest.importorskip("xdist")
    # built without its xdist set-up (which needs -n): only its split of node ids into units is checked
    sched = workers.SharedFixtureScheduling.__new__(workers.SharedFixtureScheduling)
    sched.config, sched.serial_groups, sched.split_files = pytestconfig, SERIAL_GROUPS, frozenset(SPLIT_FILES)
    serial = next(iter(SERIAL_GROUPS))
    shared = "tests/engine/model/test_tokenizer.py"  # its `tok` fixture is module-scoped
    assert sched._split_scope(f"{shared}::test_save_load") == f"file:{shared}"
    mine = "tests/test_hog.py::test_the_command_is_bounded_by_its_own_timeout"  # no shared fixture
    assert sched._split_scope(mine) == mine
    assert sched._split_scope(serial) == f"group:{SERIAL_GROUPS[serial]}"
    a11y = "tests/browser/test_a11y.py::test_navigation_names_are_the_page_titles_without_icon_words"
    assert sched._split_scope(a11y) == a11y
