"""Fixtures of the real-process tests: a throwaway PostgreSQL cluster and databases in it.

The cluster (tests/postgres_cluster.py) starts once per session, on the
first test that asks for it, on 127.0.0.1 and a free port, and is removed at
the end.  Each test gets a database of its own.  A missing server fails the
tests that need it, with a message saying how to install it; it is never a
skip.  Do not import the reactor here (pytest-twisted installs it).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import attrs
import pytest

from tests.postgres_cluster import ClusterUnavailable, ThrowawayCluster

_numbers = itertools.count(1)


@attrs.frozen
class PostgresDatabase:
    """A fresh database: its DSN (no password) and the password, as a deployment has them."""

    dsn: str
    password: str
    name: str


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[ThrowawayCluster]:
    """The session's PostgreSQL cluster (fails the test if none can be started)."""
    try:
        cluster = ThrowawayCluster().start()
    except ClusterUnavailable as exc:
        pytest.fail(f"PostgreSQL is needed for this test: {exc}", pytrace=False)
    yield cluster
    cluster.stop()


def _admin(cluster: ThrowawayCluster, statement: str) -> None:
    import psycopg

    with psycopg.connect(cluster.dsn(), password=cluster.password, autocommit=True) as conn:
        conn.execute(statement)


@pytest.fixture
def postgres_db(postgres_cluster: ThrowawayCluster) -> Iterator[PostgresDatabase]:
    """A new empty database for one test, dropped afterwards (connections closed by force)."""
    name = f"test_{next(_numbers)}"
    _admin(postgres_cluster, f"CREATE DATABASE {name}")
    yield PostgresDatabase(postgres_cluster.dsn(name), postgres_cluster.password, name)
    _admin(postgres_cluster, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
