"""Real services for the tests: a throwaway PostgreSQL cluster (session fixture) and the rule for a missing one.

``postgres_url`` starts Debian's PostgreSQL (scripts/install_postgres.sh installs it) as the ``postgres``
user in a temporary folder, on 127.0.0.1 at a free port, and yields a ``postgresql+psycopg://`` URL; the
cluster is stopped and deleted after the session (bench/app_server.py: postgres_cluster). A conftest
imports the fixture to use it. Where PostgreSQL, nginx or the driver cannot be had, the tests that need
them skip with the reason, and fail with it under CI (``CI`` set), like the browser tests.
"""

from __future__ import annotations

import os
import sys

import pytest

from bench.app_server import find_nginx, find_postgres_bindir, postgres_cluster


def unavailable(msg: str) -> None:
    """Skip the running test with ``msg``, or fail it under CI, where every test must run."""
    print(f"\n*** {msg} ***", file=sys.stderr)
    if os.environ.get("CI"):
        pytest.fail(msg)
    pytest.skip(msg)


def require_postgres() -> None:
    """The PostgreSQL server binaries and the psycopg driver, or `unavailable` with what to install."""
    if find_postgres_bindir() is None:
        unavailable(
            "POSTGRESQL TESTS CANNOT RUN: no PostgreSQL server; run scripts/install_postgres.sh "
            "(or set KVLAB_PG_BINDIR)"
        )
    try:
        import psycopg  # noqa: F401
    except ImportError:
        unavailable('POSTGRESQL TESTS CANNOT RUN: the psycopg driver is missing; pip install "psycopg[binary]"')


def require_nginx() -> None:
    """nginx, or `unavailable` with what to install."""
    if find_nginx() is None:
        unavailable("REPLICA TESTS CANNOT RUN: no nginx; run scripts/install_nginx.sh (or set KVLAB_NGINX)")


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """SQLAlchemy URL of a database in a fresh PostgreSQL cluster that lives for the test session."""
    require_postgres()
    try:
        with postgres_cluster() as pg:
            yield pg["url"]
    except RuntimeError as exc:  # installed but cannot start (e.g. no 'postgres' user): same rule
        unavailable(f"POSTGRESQL TESTS CANNOT RUN: {exc}")
