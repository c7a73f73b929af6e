"""Fixtures of the real-process tests: a throwaway PostgreSQL cluster and databases in it.

The cluster (tests/postgres_cluster.py) starts once per session, on the
first test that asks for it, on 127.0.0.1 and a free port, and is removed at
the end.  Each test gets a database of its own.  A missing server fails the
tests that need it, with a message saying how to install it; it is never a
skip.  Do not import the reactor here (pytest-twisted installs it).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Any

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

    def sql(self, statement: str, params: Sequence[Any] = ()) -> list[Any]:
        """Run one statement in this database (as an operator would); its rows."""
        return run_sql(self.dsn, self.password, statement, params)


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[ThrowawayCluster]:
    """The session's PostgreSQL cluster (fails the test if none can be started)."""
    try:
        cluster = ThrowawayCluster().start()
    except ClusterUnavailable as exc:
        pytest.fail(f"PostgreSQL is needed for this test: {exc}", pytrace=False)
    yield cluster
    cluster.stop()


def run_sql(dsn: str, password: str, statement: str, params: Sequence[Any] = ()) -> list[Any]:
    """Run one statement on its own autocommit connection; the rows it returned."""
    import psycopg2

    conn = psycopg2.connect(dsn, password=password)
    try:
        conn.autocommit = True
        with conn.cursor() as cursor:
            cursor.execute(statement, params)
            return list(cursor.fetchall()) if cursor.description is not None else []
    finally:
        conn.close()


def _admin(cluster: ThrowawayCluster, statement: str) -> None:
    run_sql(cluster.dsn(), cluster.password, statement)


@pytest.fixture
def postgres_db(postgres_cluster: ThrowawayCluster) -> Iterator[PostgresDatabase]:
    """A new empty database for one test, dropped afterwards (connections closed by force)."""
    name = f"test_{next(_numbers)}"
    _admin(postgres_cluster, f"CREATE DATABASE {name}")
    yield PostgresDatabase(postgres_cluster.dsn(name), postgres_cluster.password, name)
    _admin(postgres_cluster, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
