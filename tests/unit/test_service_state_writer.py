"""Tests for ai_tools.service.state_writer: group commit of assistant state."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest
from twisted.internet import defer, task

from ai_tools.service.state_writer import StateWriter
from ai_tools.store.memory import MemoryStore


class SlowStore:
    """save_many answers when the test says so; can refuse chosen names."""

    def __init__(self, refuse: set[str] | None = None) -> None:
        self.calls: list[dict[str, Any]] = []
        self.pending: list[defer.Deferred[None]] = []
        self.refuse = refuse or set()
        self.saved: dict[str, Any] = {}
        self.sync = False

    def save_many(self, states: Mapping[str, Any]) -> defer.Deferred[None]:
        encoded = {n: json.dumps(s) for n, s in states.items()}  # snapshot now
        self.calls.append(dict(encoded))
        if self.refuse & set(states):
            return defer.fail(OSError("disk full"))
        d: defer.Deferred[None] = defer.Deferred()
        d.addCallback(lambda _: self.saved.update(encoded))
        if self.sync:
            d.callback(None)
        else:
            self.pending.append(d)
        return d

    def release(self) -> None:
        pending, self.pending = self.pending, []
        for d in pending:
            d.callback(None)


def make(
    store: Any, states: dict[str, Any]
) -> tuple[task.Clock, StateWriter]:
    clock = task.Clock()
    return clock, StateWriter(store=store, state_of=states.get, clock=clock)


def test_saves_in_one_turn_share_one_transaction() -> None:
    store = SlowStore()
    states = {n: {"n": n} for n in "abc"}
    clock, writer = make(store, states)
    ds = [writer.save(n) for n in "abc"]
    assert store.calls == []
    clock.advance(0)
    assert len(store.calls) == 1
    assert set(store.calls[0]) == {"a", "b", "c"}
    assert not any(d.called for d in ds)  # not durable yet
    store.release()
    assert all(d.called for d in ds)
    assert writer.transactions == 1 and writer.states_written == 3


def test_saves_during_a_transaction_form_the_next_batch() -> None:
    store = SlowStore()
    states: dict[str, Any] = {"a": {"v": 1}, "b": {"v": 1}}
    clock, writer = make(store, states)
    writer.save("a")
    clock.advance(0)
    states["a"] = {"v": 2}
    d_a2 = writer.save("a")
    d_b = writer.save("b")
    d_a3 = writer.save("a")  # same assistant twice: one entry, both fire
    clock.advance(0)
    assert len(store.calls) == 1  # still waiting for the first transaction
    store.release()
    clock.advance(0)
    assert len(store.calls) == 2
    assert json.loads(store.calls[1]["a"]) == {"v": 2}
    assert set(store.calls[1]) == {"a", "b"}
    store.release()
    assert d_a2.called and d_b.called and d_a3.called


def test_state_is_taken_when_written_not_when_requested() -> None:
    store = SlowStore()
    states: dict[str, Any] = {"a": {"v": 1}}
    clock, writer = make(store, states)
    writer.save("a")
    states["a"] = {"v": 5}
    clock.advance(0)
    assert json.loads(store.calls[0]["a"]) == {"v": 5}


def test_a_failing_state_fails_only_its_own_requests() -> None:
    """A batch that fails is retried name by name: the others are still written."""
    store = SlowStore(refuse={"bad"})
    store.sync = True
    states = {"good": {"ok": True}, "bad": {"ok": False}}
    clock, writer = make(store, states)
    good, bad = writer.save("good"), writer.save("bad")
    clock.advance(0)
    assert good.called and good.result is None
    failures: list[Any] = []
    bad.addErrback(failures.append)
    assert failures and failures[0].check(OSError)
    assert "good" in store.saved and "bad" not in store.saved
    assert writer.failures == 1


def test_single_failure_is_reported() -> None:
    store = SlowStore(refuse={"a"})
    clock, writer = make(store, {"a": {}})
    d = writer.save("a")
    clock.advance(0)
    with pytest.raises(OSError, match="disk full"):
        d.result.raiseException()
    d.addErrback(lambda f: None)
    # The writer keeps working afterwards.
    store.refuse.clear()
    store.sync = True
    d2 = writer.save("a")
    clock.advance(0)
    assert d2.called and d2.result is None


def test_unserialisable_state_in_a_real_store_is_isolated() -> None:
    """With MemoryStore: one bad state (a set) does not stop the others."""
    store = MemoryStore()
    states: dict[str, Any] = {"ok": {"x": 1}, "bad": {"x": {1, 2}}}
    clock, writer = make(store, states)
    ok, bad = writer.save("ok"), writer.save("bad")
    clock.advance(0)
    assert ok.result is None
    errors: list[Any] = []
    bad.addErrback(errors.append)
    assert errors and errors[0].check(TypeError)
    assert store.load_assistant("ok").result == {"x": 1}
    assert store.load_assistant("bad").result is None


def test_state_of_raising_or_gone() -> None:
    store = SlowStore()
    store.sync = True

    def state_of(name: str) -> Any:
        if name == "boom":
            raise RuntimeError("broken to_state")
        return None if name == "gone" else {"n": name}

    clock = task.Clock()
    writer = StateWriter(store=store, state_of=state_of, clock=clock)
    boom, gone, fine = writer.save("boom"), writer.save("gone"), writer.save("fine")
    clock.advance(0)
    errors: list[Any] = []
    boom.addErrback(errors.append)
    assert errors[0].check(RuntimeError)
    assert gone.result is None and fine.result is None
    assert set(store.calls[0]) == {"fine"}


def test_flush_waits_for_queued_and_in_flight() -> None:
    store = SlowStore()
    clock, writer = make(store, {"a": {}, "b": {}})
    assert writer.flush().called  # nothing to do
    writer.save("a")
    flushed = writer.flush()  # writes at once, without waiting for the turn
    assert len(store.calls) == 1
    writer.save("b")
    assert not flushed.called
    assert writer.pending == 1
    store.release()
    clock.advance(0)
    assert not flushed.called
    store.release()
    assert flushed.called
    assert writer.pending == 0


def test_max_batch_splits_large_rounds() -> None:
    store = SlowStore()
    store.sync = True
    states = {f"a{i}": {} for i in range(25)}
    clock = task.Clock()
    writer = StateWriter(store=store, state_of=states.get, clock=clock, max_batch=10)
    ds = [writer.save(n) for n in states]
    for _ in range(5):
        clock.advance(0)
    assert [len(c) for c in store.calls] == [10, 10, 5]
    assert all(d.called for d in ds)


def test_save_soon_waits_and_is_covered_by_any_save() -> None:
    store = SlowStore()
    store.sync = True
    clock, writer = make(store, {"a": {"v": 1}, "b": {"v": 1}})
    writer.save_soon("a")
    writer.save_soon("a")
    writer.save_soon("b")
    assert writer.pending == 2
    clock.advance(0)
    assert store.calls == []  # not yet
    writer.save("b")  # covers b's lazy request
    clock.advance(0)
    assert [set(c) for c in store.calls] == [{"b"}]
    clock.advance(1.0)
    clock.advance(0)
    assert [set(c) for c in store.calls] == [{"b"}, {"a"}]
    assert clock.getDelayedCalls() == []


def test_save_soon_failure_is_logged_not_raised() -> None:
    from tests.unit.service_fakes import LogCapture

    store = SlowStore(refuse={"a"})
    clock, writer = make(store, {"a": {}})
    with LogCapture() as logs:
        writer.save_soon("a")
        clock.advance(1.0)
        clock.advance(0)
    assert any("Could not save" in e.get("log_format", "") for e in logs.events)


def test_flush_writes_lazy_requests_at_once() -> None:
    store = SlowStore()
    store.sync = True
    clock, writer = make(store, {"a": {}})
    writer.save_soon("a")
    flushed = writer.flush()
    clock.advance(0)
    assert flushed.called and [set(c) for c in store.calls] == [{"a"}]
    assert clock.getDelayedCalls() == []
