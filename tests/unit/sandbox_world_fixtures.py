"""Fixtures and helpers shared by the sandbox world tests.

Import the fixtures by their function names (``world_fixture``...); pytest
registers them under their short names (``world``...).  ``world`` runs each
test on the sandbox world and on the shared world (whose messages answer with
a Deferred: wrap calls in :func:`fired`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from twisted.internet import defer, task
from twisted.logger import LogEvent, globalLogPublisher
from twisted.python.failure import Failure

from ai_tools.store.memory import MemoryStore
from ai_tools.world.sandbox import SandboxWorld
from ai_tools.world.shared import SharedWorld

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "world.toml"
"""The example world: Mason (Builder), Pip (Player, owns the soup slate), Alice, Bob."""

MASON, PIP, ALICE, BOB = "char:mason", "char:pip", "char:alice", "char:bob"


def fired(d: Any) -> Any:
    """The result of an already-fired Deferred (raises its failure); values pass through."""
    if not isinstance(d, defer.Deferred):
        return d
    box: list[Any] = []
    d.addBoth(box.append)
    assert box, "the Deferred has not fired"
    if isinstance(box[0], Failure):
        box[0].raiseException()
    return box[0]


@pytest.fixture(name="clock")
def clock_fixture() -> task.Clock:
    """The world's clock, at t=500."""
    c = task.Clock()
    c.advance(500)
    return c


@pytest.fixture(name="store")
def store_fixture(clock: task.Clock) -> MemoryStore:
    """An open memory store."""
    s = MemoryStore(clock=clock)
    fired(s.open())
    return s


@pytest.fixture(name="world", params=["sandbox", "shared"])
def world_fixture(
    request: pytest.FixtureRequest, store: MemoryStore, clock: task.Clock
) -> Iterator[SandboxWorld]:
    """The example world, seeded into ``store``: the sandbox world, and the shared world
    (the replica of ai_tools.world.shared, on the memory store's shared-world rows)."""
    if request.param == "sandbox":
        yield fired(SandboxWorld.load(store, seed=EXAMPLE, clock=clock))
        return
    world = fired(SharedWorld.load(store, seed=EXAMPLE, clock=clock))
    yield world
    world.stop()


@pytest.fixture(name="logged_failures")
def logged_failures_fixture() -> Iterator[list[LogEvent]]:
    """Failures logged through twisted.logger while the test runs."""
    events: list[LogEvent] = []

    def observe(event: LogEvent) -> None:
        if event.get("log_failure") is not None:
            events.append(event)

    globalLogPublisher.addObserver(observe)
    yield events
    globalLogPublisher.removeObserver(observe)
