"""Progress-store fixtures: every ``store`` test runs on SQLite and on a real PostgreSQL server.

``store_url`` is parametrized over both backends; the PostgreSQL one is a database in the session's
throwaway cluster (tests/pg.py: ``postgres_url``), emptied before each test.
"""

from __future__ import annotations

import pytest

from progress.store import ProgressStore, progress_table
from tests.pg import postgres_url  # noqa: F401 - the session fixture, registered here

BACKENDS = ["sqlite", "postgresql"]


@pytest.fixture(params=BACKENDS)
def store_url(request, tmp_path) -> str:
    """A URL of an empty progress database: a new SQLite file, or the PostgreSQL test database wiped."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'p.sqlite3'}"
    url = request.getfixturevalue("postgres_url")
    wipe = ProgressStore(url)
    with wipe.engine.begin() as conn:
        conn.execute(progress_table.delete())
    wipe.close()
    return url


@pytest.fixture
def store(store_url):
    s = ProgressStore(store_url)
    yield s
    s.close()
