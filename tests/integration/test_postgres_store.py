"""PostgreSQLStore beyond the shared contract: grouped writes, reads after writes,
migrations by several workers, leases and fenced writes, the password's way in."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg2
import psycopg2.errors
import pytest
import pytest_twisted
from twisted.internet import defer

from ai_tools.errors import ConfigError, LeaseLost, NotFound
from ai_tools.store.postgres import PostgreSQLStore, StoreClosed, database_password
from ai_tools.store.postgres_schema import LATEST_VERSION, MIGRATIONS
from ai_tools.store.schema import Migration, SchemaVersionError
from tests.integration.conftest import PostgresDatabase
from tests.unit.test_store_contract import START, make_clock


def open_store(db: PostgresDatabase, **kwargs: Any) -> PostgreSQLStore:
    return PostgreSQLStore(db.dsn, password=db.password, clock=make_clock(), **kwargs)


@pytest_twisted.async_yield_fixture
async def store(postgres_db: PostgresDatabase) -> AsyncIterator[PostgreSQLStore]:
    store = open_store(postgres_db)
    await store.open()
    yield store
    await store.close()


def _insert(name: str, fail: bool = False) -> Any:
    def write(cursor: Any) -> str:
        cursor.execute("INSERT INTO assistants (name, state, updated_at) VALUES (%s, '{}', 0)",
                       (name,))
        if fail:
            raise RuntimeError(f"{name} changed its mind")
        return name

    return write


# -- grouped writes -----------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_writes_during_a_transaction_share_the_next_one(store: PostgreSQLStore) -> None:
    """The first write goes alone; the ones asked for meanwhile form one group."""
    before = store.transactions
    results = await defer.gatherResults(
        [store.run_in_transaction(_insert(f"a{i}")) for i in range(50)])
    assert results == [f"a{i}" for i in range(50)]
    assert store.transactions - before == 2
    assert len(await store.list_assistants()) == 50


@pytest_twisted.ensureDeferred
async def test_a_failing_write_in_a_group_fails_alone(store: PostgreSQLStore) -> None:
    """Savepoints: the failing writes are rolled back (a Python error, a database error,
    a missing parent), the others of the group commit."""
    first = store.run_in_transaction(_insert("first"))
    grouped = [
        store.run_in_transaction(_insert("x")),
        store.run_in_transaction(_insert("bad", fail=True)),
        store.run_in_transaction(_insert("x")),  # duplicate key: the database refuses
        store.add_record("ada", "notes", "child", parent_id=12345),
        store.run_in_transaction(_insert("y")),
    ]
    outcomes = await defer.DeferredList(grouped, consumeErrors=True)
    await first
    assert outcomes[0] == (True, "x")
    assert not outcomes[1][0] and outcomes[1][1].check(RuntimeError)
    assert not outcomes[2][0] and outcomes[2][1].check(psycopg2.errors.UniqueViolation)
    assert not outcomes[3][0] and outcomes[3][1].check(NotFound)
    assert outcomes[4] == (True, "y")
    assert await store.list_assistants() == ["first", "x", "y"]
    assert await store.list_records("ada", "notes") == []


@pytest_twisted.ensureDeferred
async def test_a_read_sees_every_write_asked_for_before_it(store: PostgreSQLStore) -> None:
    """A read on another pool connection still waits for the writes asked for before it."""
    writes = [store.save_assistant(f"a{i}", {"i": i}) for i in range(5)]
    assert await store.list_assistants() == [f"a{i}" for i in range(5)]
    await defer.gatherResults(writes)
    more = [store.save_assistant(f"b{i}", {"i": i}) for i in range(3)]
    assert await store.load_assistant("b2") == {"i": 2}
    await defer.gatherResults(more)


@pytest_twisted.ensureDeferred
async def test_closed_store_refuses_and_close_finishes_the_writes(
    postgres_db: PostgresDatabase,
) -> None:
    """close() waits for queued writes; afterwards every method fails with StoreClosed."""
    store = open_store(postgres_db)
    await store.open()
    queued = [store.save_assistant(f"q{i}", {"i": i}) for i in range(10)]
    await store.close()
    assert all(d.called for d in queued)
    with pytest.raises(StoreClosed):
        await store.load_assistant("q1")
    again = open_store(postgres_db)
    await again.open()
    try:
        assert len(await again.list_assistants()) == 10
    finally:
        await again.close()


# -- schema ---------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_workers_opening_a_new_database_at_once_migrate_it_once(
    postgres_db: PostgresDatabase,
) -> None:
    """Three stores open the same empty database together: each migration runs once."""
    stores = [open_store(postgres_db) for _ in range(3)]
    await defer.gatherResults([s.open() for s in stores])
    try:
        assert [s.schema_version for s in stores] == [LATEST_VERSION] * 3
        rows = postgres_db.sql("SELECT version FROM schema_migrations ORDER BY version")
        assert [r[0] for r in rows] == [m.version for m in MIGRATIONS]
    finally:
        for s in stores:
            await s.close()


@pytest_twisted.ensureDeferred
async def test_a_newer_database_is_refused(postgres_db: PostgresDatabase) -> None:
    """A database written by a newer ai_tools is not touched."""
    store = open_store(postgres_db)
    await store.open()
    await store.close()
    postgres_db.sql("INSERT INTO schema_migrations VALUES (%s, 'from the future', 0)",
                    (LATEST_VERSION + 1,))
    newer = open_store(postgres_db)
    with pytest.raises(SchemaVersionError, match="newer than this ai_tools"):
        await newer.open()
    assert not newer.is_open


@pytest_twisted.ensureDeferred
async def test_a_failing_migration_leaves_the_previous_version(
    postgres_db: PostgresDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A migration that fails is rolled back whole; the database stays at the version before."""
    import ai_tools.store.postgres_schema as schema

    broken = (*MIGRATIONS, Migration(LATEST_VERSION + 1, "broken",
                                     ("CREATE TABLE half_done (x int)", "NOT SQL")))
    monkeypatch.setattr(schema.migrate, "__defaults__", (broken, None))
    store = open_store(postgres_db)
    with pytest.raises(psycopg2.errors.SyntaxError):
        await store.open()
    assert postgres_db.sql("SELECT max(version) FROM schema_migrations") == [(LATEST_VERSION,)]
    assert postgres_db.sql("SELECT to_regclass('half_done')") == [(None,)]


# -- leases and fenced writes -------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_a_lease_has_one_owner_and_a_rising_epoch(store: PostgreSQLStore) -> None:
    """Held leases are refused to others; an expired one changes hands with epoch + 1;
    a release lets it go at once, keeping the epoch."""
    clock = store.clock
    assert await store.acquire_lease("pip", "w1", ttl=10) == 1
    assert await store.acquire_lease("pip", "w2", ttl=10) is None
    assert await store.acquire_lease("pip", "w1", ttl=10) == 1  # its own: same epoch
    clock.advance(5)
    assert await store.renew_leases("w1", ["pip", "mason"], ttl=10) == {"pip": 1}
    clock.advance(11)
    assert await store.acquire_lease("pip", "w2", ttl=10) == 2
    assert await store.renew_leases("w1", ["pip"], ttl=10) == {}
    assert await store.release_leases("w2") == 1
    assert await store.acquire_lease("pip", "w3", ttl=10) == 3
    assert await store.list_leases() == [("pip", "w3", 3, START + 16 + 10)]


@pytest_twisted.ensureDeferred
async def test_a_fenced_write_needs_the_current_lease(store: PostgreSQLStore) -> None:
    """Every state write carries the writer's epoch: a worker that lost the lease cannot
    overwrite the new owner's state, and the epoch of each write is recorded."""
    epoch1 = await store.acquire_lease("pip", "w1", ttl=10)
    await store.save_many({"pip": {"v": 1}}, fence=("w1", {"pip": epoch1}))
    store.clock.advance(11)
    epoch2 = await store.acquire_lease("pip", "w2", ttl=10)
    await store.save_many({"pip": {"v": 2}}, fence=("w2", {"pip": epoch2}))
    with pytest.raises(LeaseLost, match="no longer holds the lease of pip"):
        await store.save_many({"pip": {"v": "stale"}}, fence=("w1", {"pip": epoch1}))
    with pytest.raises(LeaseLost):
        await store.save_many({"pip": {"v": "stale"}}, fence=("w2", {}))
    assert await store.load_assistant("pip") == {"v": 2}
    assert await store.assistant_epochs() == {"pip": epoch2}


@pytest_twisted.ensureDeferred
async def test_a_fenced_group_is_all_or_nothing(store: PostgreSQLStore) -> None:
    """One lost lease in a save_many writes none of its states."""
    e_pip = await store.acquire_lease("pip", "w1", ttl=10)
    await store.acquire_lease("mason", "w2", ttl=10)
    with pytest.raises(LeaseLost, match="mason"):
        await store.save_many({"pip": {"v": 1}, "mason": {"v": 1}},
                              fence=("w1", {"pip": e_pip, "mason": 1}))
    assert await store.list_assistants() == []


# -- the password -------------------------------------------------------------------------


def test_password_from_the_environment_or_a_private_file(tmp_path: Path) -> None:
    """AI_TOOLS_DB_PASSWORD, or AI_TOOLS_DB_PASSWORD_FILE (mode 600, final newline dropped)."""
    assert database_password({}) is None
    assert database_password({"AI_TOOLS_DB_PASSWORD": "s3cret"}) == "s3cret"
    secret = tmp_path / "db_password"
    secret.write_text("from file\n")
    os.chmod(secret, 0o600)
    assert database_password({"AI_TOOLS_DB_PASSWORD_FILE": str(secret)}) == "from file"
    os.chmod(secret, 0o640)
    with pytest.raises(ConfigError, match="readable by others"):
        database_password({"AI_TOOLS_DB_PASSWORD_FILE": str(secret)})
    with pytest.raises(ConfigError, match="only one"):
        database_password({"AI_TOOLS_DB_PASSWORD": "a",
                           "AI_TOOLS_DB_PASSWORD_FILE": str(secret)})
    with pytest.raises(ConfigError, match="cannot read"):
        database_password({"AI_TOOLS_DB_PASSWORD_FILE": str(tmp_path / "missing")})
    empty = tmp_path / "empty"
    empty.write_text("\n")
    os.chmod(empty, 0o600)
    with pytest.raises(ConfigError, match="empty"):
        database_password({"AI_TOOLS_DB_PASSWORD_FILE": str(empty)})


@pytest_twisted.ensureDeferred
async def test_a_wrong_password_fails_open_clearly(postgres_db: PostgresDatabase) -> None:
    """Authentication fails at open(), and the password is not in the message."""
    store = PostgreSQLStore(postgres_db.dsn, password="not-the-password")
    with pytest.raises(psycopg2.OperationalError, match="password authentication failed") as info:
        await store.open()
    assert "not-the-password" not in str(info.value)
    assert not store.is_open
    assert "not-the-password" not in repr(store)


def test_the_label_names_the_database_not_the_password() -> None:
    """What the logs show of a store."""
    store = PostgreSQLStore("host=db.example port=6432 user=ai dbname=assistants",
                            password="pw")
    assert store.label == "PostgreSQL ai@db.example:6432/assistants"
