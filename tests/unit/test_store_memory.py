"""MemoryStore specifics: synchronous Deferreds, clock-driven timestamps, isolation.

The behaviour shared with the SQLite store is covered by the contract tests
(tests/unit/test_store_contract.py, run against both stores).
"""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet import defer, task
from twisted.python.failure import Failure
from zope.interface.verify import verifyObject

from ai_tools.errors import NotFound
from ai_tools.interfaces import IStore, IWorldStore
from ai_tools.store.memory import MemoryStore


def fired(d: defer.Deferred[Any]) -> Any:
    """The result of an already-fired Deferred (fails the test otherwise)."""
    results: list[Any] = []
    d.addBoth(results.append)
    assert results, "Deferred has not fired"
    if isinstance(results[0], Failure):
        results[0].raiseException()
    return results[0]


@pytest.fixture
def clock() -> task.Clock:
    """A clock at t=1000."""
    c = task.Clock()
    c.advance(1000)
    return c


@pytest.fixture
def store(clock: task.Clock) -> MemoryStore:
    """An open memory store on ``clock``."""
    s = MemoryStore(clock=clock)
    fired(s.open())
    return s


def test_provides_interfaces(store: MemoryStore) -> None:
    """MemoryStore implements IStore and IWorldStore."""
    assert verifyObject(IStore, store)
    assert verifyObject(IWorldStore, store)


def test_timestamps_come_from_the_clock(store: MemoryStore, clock: task.Clock) -> None:
    """created_at/updated_at use the injected clock."""
    record = fired(store.add_record("ada", "memory", "the well is deep"))
    assert record["created_at"] == record["updated_at"] == 1000
    clock.advance(5)
    updated = fired(store.update_record(record["id"], content="the well is dry"))
    assert updated["created_at"] == 1000
    assert updated["updated_at"] == 1005


def test_saved_state_is_a_snapshot(store: MemoryStore) -> None:
    """Mutating the dict after saving, or the loaded dict, does not change the store."""
    state: dict[str, Any] = {"history": [], "counters": {"ticks": 1}}
    fired(store.save_assistant("ada", state))
    state["counters"]["ticks"] = 99
    loaded = fired(store.load_assistant("ada"))
    assert loaded["counters"]["ticks"] == 1
    loaded["counters"]["ticks"] = 50
    assert fired(store.load_assistant("ada"))["counters"]["ticks"] == 1


def test_save_many_is_all_or_nothing(store: MemoryStore) -> None:
    """One unserialisable state leaves every other state of the batch unwritten."""
    fired(store.save_assistant("a", {"v": 1}))
    with pytest.raises(TypeError, match="not JSON-serialisable"):
        fired(store.save_many({"a": {"v": 2}, "b": {"bad": object()}}))
    assert fired(store.load_assistant("a")) == {"v": 1}
    assert fired(store.load_assistant("b")) is None


def test_errors_come_back_as_failed_deferreds(store: MemoryStore) -> None:
    """Bad arguments fail the Deferred rather than raising at the call."""
    d = store.add_record("ada", "memory", "x", parent_id=12345)
    assert isinstance(d, defer.Deferred)
    with pytest.raises(NotFound):
        fired(d)
    with pytest.raises(TypeError):
        fired(store.add_record("ada", "memory", 42))  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        fired(store.list_records("ada", "memory", limit=0))


def test_default_clock_is_the_reactor_lazily() -> None:
    """Without a clock the store works (the reactor is looked up only when needed)."""
    s = MemoryStore()
    record = fired(s.add_record("ada", "memory", "hello"))
    assert record["created_at"] > 0
