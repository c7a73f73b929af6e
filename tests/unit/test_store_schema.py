"""Schema migrations: applied in order, once, atomically; newer databases refused."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import pytest

from ai_tools.store.schema import (
    LATEST_VERSION,
    MIGRATIONS,
    Migration,
    SchemaVersionError,
    current_version,
    migrate,
)


@pytest.fixture
def conn() -> Iterator[sqlite3.Connection]:
    """An empty in-memory database in autocommit mode."""
    connection = sqlite3.connect(":memory:", isolation_level=None)
    yield connection
    connection.close()


def tables(conn: sqlite3.Connection) -> set[str]:
    """Names of the ordinary tables."""
    rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    return {row[0] for row in rows}


def test_fresh_database_reaches_latest(conn: sqlite3.Connection) -> None:
    """Every migration is applied and recorded, in order."""
    applied: list[int] = []
    assert migrate(conn, 5.0, on_applied=lambda m: applied.append(m.version)) == LATEST_VERSION
    assert applied == [m.version for m in MIGRATIONS]
    assert {"assistants", "cache_entries", "records", "world_objects", "world_meta"} <= tables(conn)
    rows = conn.execute("SELECT version, applied_at FROM schema_migrations").fetchall()
    assert rows == [(m.version, 5.0) for m in MIGRATIONS]


def test_migrate_twice_applies_nothing(conn: sqlite3.Connection) -> None:
    """A second run finds nothing to do."""
    migrate(conn, 0.0)
    applied: list[Migration] = []
    assert migrate(conn, 1.0, on_applied=applied.append) == LATEST_VERSION
    assert applied == []


def test_partial_database_is_brought_up(conn: sqlite3.Connection) -> None:
    """A database at version 1 gets only the later migrations."""
    migrate(conn, 0.0, migrations=MIGRATIONS[:1])
    assert current_version(conn.cursor()) == 1
    applied: list[int] = []
    migrate(conn, 0.0, on_applied=lambda m: applied.append(m.version))
    assert applied == [m.version for m in MIGRATIONS[1:]]


def test_failing_migration_is_rolled_back(conn: sqlite3.Connection) -> None:
    """A migration that fails halfway leaves neither its tables nor its version."""
    bad = (
        *MIGRATIONS,
        Migration(
            LATEST_VERSION + 1,
            "broken",
            ("CREATE TABLE half_done (x)", "THIS IS NOT SQL"),
        ),
    )
    with pytest.raises(sqlite3.OperationalError):
        migrate(conn, 0.0, migrations=bad)
    assert "half_done" not in tables(conn)
    assert current_version(conn.cursor()) == LATEST_VERSION
    assert not conn.in_transaction


def test_newer_database_is_refused(conn: sqlite3.Connection) -> None:
    """A schema newer than the code is an error that says what to do."""
    migrate(conn, 0.0)
    conn.execute(
        "INSERT INTO schema_migrations VALUES (?, 'from the future', 0)", (LATEST_VERSION + 7,)
    )
    with pytest.raises(SchemaVersionError, match="upgrade ai_tools"):
        migrate(conn, 0.0)
