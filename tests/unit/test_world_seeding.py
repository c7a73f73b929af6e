"""The world file after the first start: a change is said at start-up and applied only on
purpose (merge or reseed), keeping what must stay."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from twisted.internet import task
from twisted.internet.interfaces import IReactorThreads
from twisted.logger import LogEvent, globalLogPublisher
from zope.interface import implementer

from ai_tools.errors import ConfigError
from ai_tools.store.memory import MemoryStore
from ai_tools.world import sandbox
from ai_tools.world.sandbox import SandboxWorld
from ai_tools.world.seeding import DIGEST_KEY, merged_world, reseeded_world, world_digest
from ai_tools.world.worldfile import load_world_file
from tests.unit.sandbox_world_fixtures import BOB, EXAMPLE, MASON, PIP, fired

NEW_ROOM = '''
[[rooms]]
id = "room:cellar2"
key = "Wine Cellar"
description = "Casks."
'''


def world_file(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "world.toml"
    path.write_text(EXAMPLE.read_text() + extra)
    return path


def load(store: MemoryStore, path: Path, clock: task.Clock) -> tuple[SandboxWorld, list[str]]:
    warnings: list[str] = []

    def observe(event: LogEvent) -> None:
        if "changed since the world was seeded" in str(event.get("log_format", "")):
            warnings.append(str(event["file"]))

    globalLogPublisher.addObserver(observe)
    try:
        world = fired(SandboxWorld.load(store, seed=path, clock=clock))
    finally:
        globalLogPublisher.removeObserver(observe)
    return world, warnings


def test_digest_ignores_key_order() -> None:
    assert world_digest({"a": 1, "b": [1, 2]}) == world_digest({"b": [1, 2], "a": 1})
    assert world_digest({"a": 1}) != world_digest({"a": 2})


def test_merge_and_reseed_data() -> None:
    current = {"objects": [{"id": "r1", "location": None, "key": "Old"},
                           {"id": "c1", "location": "r2", "key": "Char"},
                           {"id": "made", "location": "r1", "key": "Made in game"}],
               "channels": [], "prototypes": [], "help": [], "meta": {"name": "W", "x": 1}}
    file = {"objects": [{"id": "r1", "location": None, "key": "New"},
                        {"id": "c1", "location": "r1", "key": "Char v2"},
                        {"id": "r3", "location": None, "key": "Added"}],
            "meta": {"name": "W2"}}
    merged = merged_world(current, file)
    by_id = {o["id"]: o for o in merged["objects"]}
    assert by_id["r1"]["key"] == "New" and by_id["r3"]["key"] == "Added"
    assert by_id["c1"]["key"] == "Char v2" and by_id["c1"]["location"] == "r2"  # not moved
    assert "made" in by_id and merged["meta"] == {"name": "W2", "x": 1}
    world, deletes = reseeded_world(current, file)
    assert [o["id"] for o in world["objects"]] == ["r1", "c1", "r3"]
    assert deletes == {"objects": ["made"]} and world["meta"] == {"name": "W2"}


def test_an_unchanged_file_says_nothing_a_changed_one_says_so(tmp_path: Path) -> None:
    clock = task.Clock()
    store = MemoryStore(clock=clock)
    path = world_file(tmp_path)
    first, warnings = load(store, path, clock)
    assert not first.file_changed and warnings == []
    digest = world_digest(load_world_file(path))
    assert fired(store.load_world())["meta"][DIGEST_KEY] == digest
    again, warnings = load(store, path, clock)
    assert not again.file_changed and warnings == []
    world_file(tmp_path, NEW_ROOM)
    changed, warnings = load(store, path, clock)
    assert changed.file_changed and warnings == [str(path)]
    assert changed.get_object("room:cellar2") is None  # not applied by itself


def test_merge_keeps_the_game_and_where_everyone_is(tmp_path: Path) -> None:
    clock = task.Clock()
    store = MemoryStore(clock=clock)
    path = world_file(tmp_path)
    world, _ = load(store, path, clock)
    fired(world.move_character(BOB, "east"))  # Bob walks to the plaza
    fired(world.execute_command(MASON, "create rope"))  # made in the game
    world_file(tmp_path, NEW_ROOM)
    world, _ = load(store, path, clock)
    applied = fired(world.apply_seed("merge", keep=[PIP]))
    assert applied == {"mode": "merge", "objects": len(world.objects), "deleted": 0}
    assert world.get_object("room:cellar2")["key"] == "Wine Cellar"
    assert world.get_object(BOB)["location"] == "room:plaza"
    assert world.search("rope")
    assert not world.file_changed
    reloaded, warnings = load(store, path, clock)  # saved, and the file counts as applied
    assert reloaded.get_object("room:cellar2") is not None and warnings == []
    assert reloaded.search("rope")


def test_reseed_makes_the_file_the_world(tmp_path: Path) -> None:
    clock = task.Clock()
    store = MemoryStore(clock=clock)
    path = world_file(tmp_path)
    world, _ = load(store, path, clock)
    fired(world.execute_command(MASON, "create rope"))
    fired(world.move_character(BOB, "east"))
    world_file(tmp_path, NEW_ROOM)
    world, _ = load(store, path, clock)
    applied = fired(world.apply_seed("reseed", keep=[PIP, MASON]))
    assert applied["deleted"] == 1
    assert not world.search("rope") and world.get_object(BOB)["location"] == "room:inn"
    reloaded, _ = load(store, path, clock)
    assert not reloaded.search("rope") and reloaded.get_object("room:cellar2")


def test_apply_refuses_what_it_cannot_do(tmp_path: Path) -> None:
    clock = task.Clock()
    store = MemoryStore(clock=clock)
    path = world_file(tmp_path)
    world, _ = load(store, path, clock)
    before = world.snapshot()
    with pytest.raises(ConfigError, match="char:zed"):
        fired(world.apply_seed("reseed", keep=["char:zed"]))
    with pytest.raises(ConfigError, match="mode"):
        fired(world.apply_seed("replace"))
    path.write_text("[[rooms]]\nkey = 1\n")
    with pytest.raises(ConfigError, match="cannot be applied"):
        fired(world.apply_seed("merge"))
    assert world.snapshot() == before
    with pytest.raises(ConfigError, match="not loaded from a world file"):
        fired(SandboxWorld.from_file(EXAMPLE).apply_seed("merge"))


@implementer(IReactorThreads)
class ThreadedClock(task.Clock):
    """A task.Clock with a thread pool that runs nothing until :meth:`run_threads`: what
    would run off the reactor waits there, visibly."""

    def __init__(self) -> None:
        super().__init__()
        self.jobs: list[tuple[Any, Any, tuple[Any, ...]]] = []

    def getThreadPool(self) -> Any:
        return self

    def callInThreadWithCallback(self, on_result: Any, work: Any, *args: Any) -> None:
        self.jobs.append((on_result, work, args))

    def callFromThread(self, f: Any, *args: Any, **kw: Any) -> None:
        f(*args, **kw)

    def callInThread(self, f: Any, *args: Any, **kw: Any) -> None:
        raise AssertionError("not used")

    def suggestThreadPoolSize(self, size: int) -> None:
        pass

    def run_threads(self) -> int:
        """Run the queued work (as the pool's threads would); how many ran."""
        jobs, self.jobs = self.jobs, []
        for on_result, work, args in jobs:
            on_result(True, work(*args))
        return len(jobs)


def test_a_world_file_is_parsed_and_built_off_the_reactor(tmp_path: Path) -> None:
    """POST /world/apply with a large file must not hold the reactor: reading, parsing,
    checking and building the objects run in the thread pool; the world changes in one
    step on the reactor once they are done."""
    clock = ThreadedClock()
    store = MemoryStore(clock=clock)
    path = world_file(tmp_path)
    world, _ = load(store, path, clock)
    world_file(tmp_path, NEW_ROOM)
    applied: list[Any] = []
    world.apply_seed("merge", keep=[PIP]).addBoth(applied.append)
    assert applied == [] and world.get_object("room:cellar2") is None
    assert clock.run_threads() == 1  # the file: read, parsed, checked
    assert applied == [] and world.get_object("room:cellar2") is None
    assert clock.run_threads() == 1  # the merged world: made into objects
    assert applied[0]["mode"] == "merge"
    assert world.get_object("room:cellar2")["key"] == "Wine Cellar"


def test_a_change_of_the_game_while_the_file_is_built_is_kept(tmp_path: Path) -> None:
    """The world changed while the merged world was being built off the reactor: merged
    again with the change, never put in place without it."""
    clock = ThreadedClock()
    store = MemoryStore(clock=clock)
    path = world_file(tmp_path)
    world, _ = load(store, path, clock)
    world_file(tmp_path, NEW_ROOM)
    applied: list[Any] = []
    world.apply_seed("merge").addBoth(applied.append)
    clock.run_threads()
    fired(world.execute_command(MASON, "create rope"))  # made meanwhile
    clock.run_threads()
    assert applied == []  # built on a world that has changed: merged again
    clock.run_threads()
    assert applied[0]["mode"] == "merge"
    assert world.search("rope") and world.get_object("room:cellar2") is not None


def test_a_world_file_too_large_to_apply_is_refused(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    clock = task.Clock()
    store = MemoryStore(clock=clock)
    path = world_file(tmp_path)
    world, _ = load(store, path, clock)
    before = world.snapshot()
    monkeypatch.setattr(sandbox, "MAX_APPLY_BYTES", path.stat().st_size - 1)
    with pytest.raises(ConfigError, match="more than"):
        fired(world.apply_seed("merge"))
    assert world.snapshot() == before
