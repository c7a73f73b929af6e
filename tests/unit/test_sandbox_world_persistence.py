"""SandboxWorld write-through: changes survive a reload from the same store; failures surface.

(The same on a real SQLite file: tests/integration/test_sqlite_store_world.py.)
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from twisted.internet import defer, task
from twisted.logger import LogLevel, formatEvent

from ai_tools.errors import ConfigError
from ai_tools.store.memory import MemoryStore
from ai_tools.world.sandbox import SEQ_BLOCK, SEQ_FLOOR_KEY, SandboxWorld, first_message_seq
from tests.unit.sandbox_world_fixtures import (  # noqa: F401 (fixtures)
    ALICE,
    BOB,
    EXAMPLE,
    MASON,
    PIP,
    clock_fixture,
    fired,
    logged_failures_fixture,
    store_fixture,
    world_fixture,
)
from tests.unit.service_fakes import LogCapture


def reload(store: MemoryStore, clock: task.Clock) -> SandboxWorld:
    """A fresh world object from what the store holds (no seed)."""
    return fired(SandboxWorld.load(store, clock=clock))


def test_seeding_writes_the_whole_world(store: MemoryStore, world: SandboxWorld) -> None:
    """The first load copies the world file into the store."""
    saved = fired(store.load_world())
    assert saved is not None
    assert len(saved["objects"]) == len(world.snapshot()["objects"])
    assert saved["meta"]["name"] == "Saltmarsh"
    assert [c["key"] for c in saved["channels"]] == ["public", "builders"]


def test_changes_survive_reload(store: MemoryStore, world: SandboxWorld, clock: task.Clock) -> None:
    """Attributes, tags, spawns, digs, moves, descriptions, channel joins, new characters."""
    fired(world.set_attribute(MASON, "obj:fountain", "wishes", 3))
    fired(world.delete_attribute(MASON, "obj:fountain", "coins_in_basin"))
    fired(world.add_tag(MASON, "obj:workbench", "sturdy"))
    fired(world.remove_tag(MASON, "obj:fountain", "landmark"))
    lamp = fired(world.spawn_prototype(MASON, "lantern"))
    fired(world.dig(MASON, "Cellar", (), "down", (), "up", ()))
    fired(world.move_character(BOB, "east"))
    fired(world.set_description(PIP, "obj:slate", "Leek soup."))
    fired(world.channel_subscribe(BOB, "builders"))
    fired(world.create_character("Carol"))
    fired(world.execute_command(MASON, "create rope"))

    again = reload(store, clock)
    assert again.get_attributes("obj:fountain") == {"wishes": 3}
    assert again.get_tags("obj:workbench") == [{"tag": "sturdy", "category": None}]
    assert again.get_tags("obj:fountain") == []
    assert again.get_object(lamp["id"])["owner"] == MASON
    assert again.get_attributes(lamp["id"])["fuel"] == 10
    assert again.find_exit(MASON, "down")["destination"] == "room:cellar"
    assert again.get_object(BOB)["location"] == "room:plaza"
    assert BOB in [c["id"] for c in again.describe_location(ALICE)["characters"]]
    assert again.get_object("obj:slate")["description"] == "Leek soup."
    assert BOB in again.channel_send(ALICE, "builders", "hi")
    assert again.get_object("char:carol")["location"] == "room:plaza"
    assert again.search("rope")[0]["location"] == "room:workshop"
    assert again.snapshot() == world.snapshot()


def test_seed_is_ignored_once_a_world_is_saved(
    store: MemoryStore, world: SandboxWorld, clock: task.Clock
) -> None:
    """A store that holds a world is the truth; the seed is not read again."""
    fired(world.set_attribute(MASON, "obj:fountain", "wishes", 1))
    again = fired(SandboxWorld.load(store, seed={"objects": []}, clock=clock))
    assert again.get_attributes("obj:fountain")["wishes"] == 1


def test_no_seed_gives_an_empty_world(clock: task.Clock) -> None:
    """Without a saved world or a seed the world is empty (and saved as such)."""
    store = MemoryStore(clock=clock)
    world = fired(SandboxWorld.load(store, clock=clock))
    assert world.snapshot()["objects"] == []
    meta = fired(store.load_world())["meta"]
    assert type(meta.pop(SEQ_FLOOR_KEY)) is int  # the message numbers reserved (see below)
    assert meta == {"name": "Sandbox"}


def test_bad_world_file_fails_load(clock: task.Clock, tmp_path: Any) -> None:
    """A broken seed file fails the Deferred with ConfigError; nothing is written."""
    path = tmp_path / "w.toml"
    path.write_text("[[rooms]]\nkey = 1\n")
    store = MemoryStore(clock=clock)
    with pytest.raises(ConfigError, match="rooms"):
        fired(SandboxWorld.load(store, seed=path, clock=clock))
    assert fired(store.load_world()) is None


def test_load_without_store_keeps_the_world_in_memory() -> None:
    """load(None, seed) works like from_file."""
    world = fired(SandboxWorld.load(None, seed=EXAMPLE, clock=task.Clock()))
    assert world.store is None
    assert world.get_object(MASON) is not None


def test_from_file_has_no_store() -> None:
    """from_file builds an in-memory world whose writes fire at once."""
    world = SandboxWorld.from_file(EXAMPLE, clock=task.Clock())
    assert world.store is None
    assert fired(world.set_attribute(MASON, "obj:fountain", "x", 1))["id"] == "obj:fountain"


@attrs.define(eq=False)
class BrokenStore:
    """A world store whose writes fail (after seeding)."""

    inner: MemoryStore
    broken: bool = False

    def load_world(self) -> defer.Deferred[Any]:
        return self.inner.load_world()

    def write_world(self, put: Any = None, delete: Any = None) -> defer.Deferred[None]:
        if self.broken:
            return defer.fail(OSError("disk full"))
        return self.inner.write_world(put, delete)


def test_failed_write_fails_the_change_and_is_logged(
    clock: task.Clock, logged_failures: Any
) -> None:
    """The Deferred of a change fails when the store cannot write; the failure is logged
    once per class, as one line without a traceback, until a write works again."""
    store = BrokenStore(MemoryStore(clock=clock))
    world = fired(SandboxWorld.load(store, seed=EXAMPLE, clock=clock))
    store.broken = True
    with LogCapture(LogLevel.info) as logs:
        with pytest.raises(OSError, match="disk full"):
            fired(world.set_attribute(MASON, "obj:fountain", "wishes", 2))
        with pytest.raises(OSError):  # a store failure is not a refusal: it fails the command
            fired(world.execute_command(MASON, "create rope"))
        store.broken = False
        fired(world.set_attribute(MASON, "obj:fountain", "wishes", 3))
    lines = [formatEvent(e) for e in logs.events if "writing changes" in formatEvent(e)]
    assert len(lines) == 2 and "OSError: disk full" in lines[0], lines
    assert "works again (2 failure(s) before)" in lines[1]
    assert logged_failures == []
    again = fired(SandboxWorld.load(store.inner, clock=clock))
    assert again.get_attributes("obj:fountain")["wishes"] == 3


def test_message_numbers_go_up_across_runs_even_when_the_clock_went_back(
        clock: task.Clock) -> None:
    """A run reserves a block of numbers in the store; a later run whose clock is behind
    the earlier run's numbers starts above the reserved block, not at its clock.  (The
    shared world numbers messages in its store, whatever the clocks say.)"""
    store = MemoryStore(clock=clock)
    world = fired(SandboxWorld.load(store, seed=EXAMPLE, clock=clock))
    fired(world.message_location(BOB, "before"))
    before = world.heard(PIP)[-1]["seq"]
    clock.advance(-3600)  # the machine's clock was set back an hour before the restart
    again = reload(store, clock)
    assert first_message_seq(clock.seconds()) < before
    fired(again.message_location(BOB, "after"))
    assert again.heard(PIP)[-1]["seq"] > before
    assert SEQ_FLOOR_KEY not in again.snapshot()["meta"]  # bookkeeping, not world content


def test_a_run_reserves_the_next_block_when_it_uses_up_its_own(clock: task.Clock) -> None:
    """Passing the reserved block writes the next floor; a restart starts above it."""
    store = MemoryStore(clock=clock)
    world = fired(SandboxWorld.load(store, seed=EXAMPLE, clock=clock))
    floor = fired(store.load_world())["meta"][SEQ_FLOOR_KEY]
    world._seq = floor - 2  # as if the run had numbered almost a whole block of messages
    fired(world.message_location(BOB, "the block's last number"))
    assert fired(store.load_world())["meta"][SEQ_FLOOR_KEY] == floor
    fired(world.message_location(BOB, "the next block's first"))
    assert fired(store.load_world())["meta"][SEQ_FLOOR_KEY] == floor + SEQ_BLOCK
    clock.advance(-3600)
    again = reload(store, clock)
    fired(again.message_location(BOB, "after a restart"))
    assert again.heard(PIP)[-1]["seq"] >= floor + SEQ_BLOCK


def test_what_characters_heard_survives_a_restart(clock: task.Clock) -> None:
    """The store keeps the heard log: after a reload each character hears the same lines
    with the same numbers, and a player polling with ``after=`` misses nothing."""
    store = MemoryStore(clock=clock)
    world = fired(SandboxWorld.load(store, seed=EXAMPLE, clock=clock))
    for n in range(3):
        fired(world.message_location(BOB, f"line {n}"))
    fired(world.heard_kept())
    before = world.heard(PIP)
    again = reload(store, clock)
    assert again.heard(PIP) == before
    fired(again.message_location(BOB, "after"))
    assert [m["text"] for m in again.heard(PIP, after=before[-1]["seq"])] == ["after"]


def test_a_heard_message_the_store_holds_badly_is_skipped(clock: task.Clock) -> None:
    store = MemoryStore(clock=clock)
    world = fired(SandboxWorld.load(store, seed=EXAMPLE, clock=clock))
    fired(world.message_location(BOB, "fine"))
    fired(store.append_heard([(10**15, "{not json", "[]")], 100))
    assert [m["text"] for m in reload(store, clock).heard(PIP)] == ["fine"]


@attrs.define(eq=False)
class FlakyHeardLog(MemoryStore):
    """A memory store whose heard-log writes can fail, or wait until released."""

    broken: bool = attrs.field(default=False, init=False)
    held: list[defer.Deferred[None]] | None = attrs.field(default=None, init=False)

    def append_heard(self, messages: Any, keep: int) -> defer.Deferred[None]:
        if self.broken:
            return defer.fail(OSError("disk full"))
        if self.held is not None:
            d: defer.Deferred[None] = defer.Deferred()
            self.held.append(d)
            return d
        return super().append_heard(messages, keep)


def test_heard_kept_fails_when_the_heard_log_cannot_be_written(clock: task.Clock) -> None:
    """The HTTP API answers a player after ``heard_kept()``: a failed write is a failure
    there (503), never a silent loss; the next message's good write answers for it alone."""
    store = FlakyHeardLog(clock=clock)
    world = fired(SandboxWorld.load(store, seed=EXAMPLE, clock=clock))
    store.broken = True
    fired(world.message_location(BOB, "lost?"))
    failures: list[Any] = []
    world.heard_kept().addErrback(failures.append)
    assert len(failures) == 1 and "disk full" in str(failures[0].value)
    store.broken = False
    fired(world.message_location(BOB, "kept"))
    assert fired(world.heard_kept()) is None


def test_heard_kept_waits_for_its_own_message_whatever_came_after(clock: task.Clock) -> None:
    """Writes still in flight: each caller waits for the write of the message it said,
    and learns that write's fate, not the fate of a later one."""
    store = FlakyHeardLog(clock=clock)
    world = fired(SandboxWorld.load(store, seed=EXAMPLE, clock=clock))
    store.held = []
    fired(world.message_location(BOB, "first"))
    first: list[Any] = []
    world.heard_kept().addBoth(first.append)
    fired(world.message_location(BOB, "second"))
    second: list[Any] = []
    world.heard_kept().addBoth(second.append)
    assert first == [] and second == []  # nothing written yet: nobody answered
    later_write, = store.held[1:]
    later_write.callback(None)
    assert second == [None] and first == []
    store.held[0].errback(OSError("disk full"))
    assert len(first) == 1 and "disk full" in str(first[0].value)
