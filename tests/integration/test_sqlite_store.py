"""SQLiteStore specifics: WAL, migrations on open, reopen, close draining, failures."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import defer

from ai_tools.store.schema import LATEST_VERSION, SchemaVersionError
from ai_tools.store.sqlite import SQLiteStore, StoreClosed
from ai_tools.store.sqlite_file import DatabaseFileError


def direct(path: Path) -> sqlite3.Connection:
    """A plain sqlite3 connection to inspect the file the way a user would."""
    return sqlite3.connect(str(path), isolation_level=None)


@pytest_twisted.ensureDeferred
async def test_open_creates_file_in_wal_mode_with_schema(tmp_path: Path) -> None:
    """Opening creates missing directories, the schema, and switches to WAL."""
    path = tmp_path / "var" / "nested" / "state.sqlite"
    store = SQLiteStore(str(path))
    await store.open()
    try:
        assert store.schema_version == LATEST_VERSION
        assert store.is_open
        assert await store.integrity_check() == "ok"
    finally:
        await store.close()
    conn = direct(path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        versions = [r[0] for r in conn.execute("SELECT version FROM schema_migrations")]
        assert versions == list(range(1, LATEST_VERSION + 1))
    finally:
        conn.close()


@pytest_twisted.ensureDeferred
async def test_everything_survives_reopen(tmp_path: Path) -> None:
    """State, cache, records (and their index) and the world are there after reopening."""
    path = str(tmp_path / "state.sqlite")
    store = SQLiteStore(path)
    await store.open()
    await store.save_assistant("ada", {"history": [{"role": "user", "content": "hi"}]})
    await store.cache_put("ada", "k", {"v": 1}, None)
    record = await store.add_record("ada", "memory", "the lighthouse keeper is Marta")
    await store.write_world(put={"objects": [{"id": "room:a", "key": "A"}], "meta": {"n": 1}})
    await store.close()

    again = SQLiteStore(path)
    await again.open()
    try:
        assert await again.load_assistant("ada") == {"history": [{"role": "user", "content": "hi"}]}
        assert await again.cache_get("ada", "k", 0) == {"v": 1}
        found = await again.search_records("ada", "memory", "lighthouse")
        assert [r["id"] for r in found] == [record["id"]]
        world = await again.load_world()
        assert world["objects"] == [{"id": "room:a", "key": "A"}]
        assert world["meta"] == {"n": 1}
    finally:
        await again.close()


@pytest_twisted.ensureDeferred
async def test_close_finishes_queued_writes(tmp_path: Path) -> None:
    """Writes asked for before close() are all applied, in order."""
    path = str(tmp_path / "state.sqlite")
    store = SQLiteStore(path, synchronous="NORMAL")
    await store.open()
    pending = [store.save_assistant("ada", {"n": n}) for n in range(50)]
    await store.close()
    await defer.gatherResults(pending)
    again = SQLiteStore(path)
    await again.open()
    try:
        assert await again.load_assistant("ada") == {"n": 49}
    finally:
        await again.close()


@pytest_twisted.ensureDeferred
async def test_closed_store_fails_cleanly(tmp_path: Path) -> None:
    """Calls before open() or after close() fail with StoreClosed; close twice is fine."""
    store = SQLiteStore(str(tmp_path / "s.sqlite"))
    with pytest.raises(StoreClosed):
        await store.load_assistant("ada")
    await store.open()
    await store.close()
    await store.close()
    with pytest.raises(StoreClosed):
        await store.save_assistant("ada", {})
    assert not store.is_open


@pytest_twisted.ensureDeferred
async def test_newer_schema_is_refused_and_pool_released(tmp_path: Path) -> None:
    """A file from a newer version fails open() with SchemaVersionError; the store stays closed."""
    path = tmp_path / "future.sqlite"
    store = SQLiteStore(str(path))
    await store.open()
    await store.close()
    conn = direct(path)
    conn.execute("INSERT INTO schema_migrations VALUES (999, 'future', 0)")
    conn.close()
    newer = SQLiteStore(str(path))
    with pytest.raises(SchemaVersionError):
        await newer.open()
    assert not newer.is_open


@pytest_twisted.ensureDeferred
async def test_not_a_database_fails_open(tmp_path: Path) -> None:
    """A file that is not SQLite fails open() saying so, naming the file; store closed."""
    path = tmp_path / "junk.sqlite"
    path.write_bytes(b"this is not a database, just some text" * 100)
    store = SQLiteStore(str(path))
    with pytest.raises(DatabaseFileError, match=re.escape(f"{path} is damaged or not a database")):
        await store.open()
    assert not store.is_open


@pytest_twisted.ensureDeferred
async def test_unwritable_directory_fails_open(tmp_path: Path) -> None:
    """A path whose directory cannot be created fails the Deferred (no exception at the call)."""
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    store = SQLiteStore(str(blocker / "sub" / "state.sqlite"))
    d = store.open()
    with pytest.raises(OSError):
        await d
    assert not store.is_open


def test_bad_synchronous_mode_refused() -> None:
    """Only SQLite's synchronous modes are accepted."""
    with pytest.raises(ValueError, match="synchronous"):
        SQLiteStore(":memory:", synchronous="SOMETIMES")


@pytest_twisted.ensureDeferred
async def test_run_in_transaction_commits_or_rolls_back(tmp_path: Path) -> None:
    """A transaction function's writes all land, or none do when it raises."""
    store = SQLiteStore(str(tmp_path / "t.sqlite"))
    await store.open()
    try:

        def two_writes(cursor: Any, fail: bool) -> str:
            cursor.execute("INSERT INTO assistants (name, state, updated_at) VALUES ('x', '{}', 0)")
            cursor.execute("INSERT INTO assistants (name, state, updated_at) VALUES ('y', '{}', 0)")
            if fail:
                raise RuntimeError("changed my mind")
            return "done"

        with pytest.raises(RuntimeError):
            await store.run_in_transaction(two_writes, True)
        assert await store.list_assistants() == []
        assert await store.run_in_transaction(two_writes, False) == "done"
        assert await store.list_assistants() == ["x", "y"]
    finally:
        await store.close()


@pytest_twisted.ensureDeferred
async def test_failed_write_does_not_break_later_writes(tmp_path: Path) -> None:
    """After a write fails inside its transaction, the store keeps working."""
    store = SQLiteStore(str(tmp_path / "f.sqlite"))
    await store.open()
    try:

        def broken(cursor: Any) -> None:
            cursor.execute("INSERT INTO no_such_table VALUES (1)")

        with pytest.raises(sqlite3.OperationalError):
            await store.run_in_transaction(broken)
        await store.save_assistant("ada", {"ok": True})
        assert await store.load_assistant("ada") == {"ok": True}
    finally:
        await store.close()


@pytest_twisted.ensureDeferred
async def test_readers_see_committed_state_while_open(tmp_path: Path) -> None:
    """Another connection (e.g. the sqlite3 shell) reads the file while the store is open."""
    path = tmp_path / "r.sqlite"
    store = SQLiteStore(str(path))
    await store.open()
    try:
        await store.save_assistant("ada", {"n": 1})
        conn = direct(path)
        try:
            row = conn.execute(
                "SELECT json_extract(state, '$.n') FROM assistants WHERE name = 'ada'"
            ).fetchone()
            assert row == (1,)
        finally:
            conn.close()
    finally:
        await store.close()
