"""AppTest set-up shared by the page tests: `app_test("diagnosis", timeout=60)` builds an unstarted AppTest.

The argument is a course page id (ui/course.py finds its script) or a script path relative to the
repository root, such as "app.py". Session-scoped, so module-scoped page fixtures can use it too.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from streamlit.testing.v1 import AppTest

from ui.chart_view import CHART_TABLE_OPEN
from ui.course import COURSE, ROOT
from ui.signin import BOX_KEY


def make_app_test(page: str, timeout: float = 30) -> AppTest:
    """An AppTest of a course page (by id) or of a repository script (by path), not yet run."""
    by_id = {p.id: p.path for p in COURSE}
    path = by_id.get(page, ROOT / page)
    if not path.is_file():
        raise ValueError(f"no page {page!r}: use a course page id ({', '.join(by_id)}) or a script path like 'app.py'")
    return AppTest.from_file(str(path), default_timeout=timeout)


@pytest.fixture(scope="session")
def app_test() -> Callable[..., AppTest]:
    """The factory `app_test(page, timeout=30)` -> AppTest (see `make_app_test`)."""
    return make_app_test


def open_chart_tables(at: AppTest) -> AppTest:
    """Open every chart's data table on the page and run it again if that drew any (see ui.chart_view.chart_table).

    A chart's table is made only while its expander is open, as a learner opens it; tests that read a chart's
    numbers from its table call this first. A table that is open already stays open across runs."""
    closed = [k for k in at.session_state.keys() if k.endswith(CHART_TABLE_OPEN) and not at.session_state[k]]
    for key in closed:
        at.session_state[key] = True
    return at.run() if closed else at


def open_signin(at: AppTest) -> AppTest:
    """Open the sidebar's "Save my progress" box, as a learner does before signing in (its form is made only
    while it is open), and run the page if it was closed."""
    if BOX_KEY in at.session_state and at.session_state[BOX_KEY]:
        return at
    at.session_state[BOX_KEY] = True
    return at.run()
