"""SQLiteStore write grouping: writes asked for during a transaction share the next one."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import defer

from ai_tools.errors import NotFound
from ai_tools.store.sqlite import SQLiteStore, StoreClosed


def _insert(name: str, fail: bool = False) -> Any:
    def write(cursor: Any) -> str:
        cursor.execute("INSERT INTO assistants (name, state, updated_at) VALUES (?, '{}', 0)",
                       (name,))
        if fail:
            raise RuntimeError(f"{name} changed its mind")
        return name

    return write


@pytest_twisted.ensureDeferred
async def test_writes_during_a_transaction_share_the_next_one(tmp_path: Path) -> None:
    """The first write goes alone; the ones asked for meanwhile form one group."""
    store = SQLiteStore(str(tmp_path / "g.sqlite"))
    await store.open()
    try:
        before = store.transactions
        results = await defer.gatherResults(
            [store.run_in_transaction(_insert(f"a{i}")) for i in range(50)])
        assert results == [f"a{i}" for i in range(50)]  # each write gets its own result
        assert store.transactions - before == 2
        assert len(await store.list_assistants()) == 50
    finally:
        await store.close()


@pytest_twisted.ensureDeferred
async def test_a_failing_write_in_a_group_fails_alone(tmp_path: Path) -> None:
    """Savepoints: the failing write is rolled back, the others of its group commit."""
    store = SQLiteStore(str(tmp_path / "f.sqlite"))
    await store.open()
    try:
        first = store.run_in_transaction(_insert("first"))
        grouped = [
            store.run_in_transaction(_insert("x")),
            store.run_in_transaction(_insert("bad", fail=True)),
            store.add_record("ada", "notes", "child", parent_id=12345),  # NotFound
            store.run_in_transaction(_insert("y")),
        ]
        outcomes = await defer.DeferredList(grouped, consumeErrors=True)
        await first
        assert outcomes[0] == (True, "x")
        assert not outcomes[1][0] and outcomes[1][1].check(RuntimeError)
        assert not outcomes[2][0] and outcomes[2][1].check(NotFound)
        assert outcomes[3] == (True, "y")
        assert await store.list_assistants() == ["first", "x", "y"]
        assert await store.list_records("ada", "notes") == []
    finally:
        await store.close()


@pytest_twisted.ensureDeferred
async def test_a_read_sees_every_write_asked_for_before_it(tmp_path: Path) -> None:
    """A read does not overtake writes still waiting for the next group."""
    store = SQLiteStore(str(tmp_path / "r.sqlite"))
    await store.open()
    try:
        writes = [store.save_assistant(f"a{i}", {"i": i}) for i in range(5)]
        names = await store.list_assistants()  # not awaited the writes first
        assert names == [f"a{i}" for i in range(5)]
        await defer.gatherResults(writes)
    finally:
        await store.close()


@pytest_twisted.ensureDeferred
async def test_close_finishes_grouped_writes_then_refuses_more(tmp_path: Path) -> None:
    """Writes queued behind a transaction in flight are written before the close."""
    path = str(tmp_path / "c.sqlite")
    store = SQLiteStore(path)
    await store.open()
    writes = [store.save_assistant(f"a{i}", {"i": i}) for i in range(10)]
    await store.close()
    await defer.gatherResults(writes)
    with pytest.raises(StoreClosed):
        await store.save_assistant("late", {})
    again = SQLiteStore(path)
    await again.open()
    try:
        assert len(await again.list_assistants()) == 10
    finally:
        await again.close()


@pytest_twisted.ensureDeferred
async def test_a_failed_commit_fails_every_write_of_its_group(tmp_path: Path) -> None:
    """If the group's transaction cannot be written, none of its writes claim success."""
    store = SQLiteStore(str(tmp_path / "b.sqlite"))
    await store.open()
    try:
        def corrupt(cursor: Any) -> None:
            # Leaves no transaction to commit: the COMMIT of the group fails.
            cursor.execute("ROLLBACK")
            cursor.execute("BEGIN")
            cursor.execute("INSERT INTO no_such_table VALUES (1)")

        first = store.run_in_transaction(_insert("first"))
        group = [store.run_in_transaction(_insert("x")),
                 store.run_in_transaction(corrupt)]
        outcomes = await defer.DeferredList(group, consumeErrors=True)
        await first
        assert not outcomes[1][0] and outcomes[1][1].check(sqlite3.OperationalError)
        names = await store.list_assistants()
        assert "first" in names
        # "x" either committed with its group or failed with it, never half-written.
        assert outcomes[0][0] == ("x" in names)
    finally:
        await store.close()
