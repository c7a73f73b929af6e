"""A world file applied to a sandbox world: built off the reactor, put in place in one step.

:class:`PreparedWorld` is world data (rows) made into the world's objects; it
touches nothing of a world, so it is built anywhere (a thread).
:class:`SeedApplier` is the part of :class:`~ai_tools.world.sandbox.SandboxWorld`
that says at start-up when its world file changed, and applies the file again
(``merge`` or ``reseed``, see :mod:`ai_tools.world.seeding`) on request: the file
is read, parsed and checked in the reactor's thread pool, merged with the world
as it is on the reactor, built off it again, then put in place — unless the game
changed the world meanwhile, when it is merged again (the last attempt all on the
reactor, in one step).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import attrs
from twisted.internet import defer, threads
from twisted.internet.interfaces import IReactorThreads
from twisted.logger import Logger

from ai_tools.default_reactor import or_global_reactor
from ai_tools.errors import ConfigError
from ai_tools.json_types import JSONObject, JSONValue
from ai_tools.world.model import Channel, HelpEntry, Prototype, WorldObject
from ai_tools.world.objects import WorldObjects
from ai_tools.world.persistence import SEQ_FLOOR_KEY
from ai_tools.world.seeding import DIGEST_KEY, merged_world, reseeded_world, world_digest
from ai_tools.world.worldfile import load_world_file

if TYPE_CHECKING:
    from ai_tools.world.sandbox import SandboxWorld

_T = TypeVar("_T")

APPLY_ATTEMPTS = 3
"""Tries to put an applied world file in place while the game keeps changing the world;
the last one runs on the reactor in one step (nothing can change meanwhile)."""

ReadFile = Callable[[Path], tuple[JSONObject, str]]
"""Reads a world file (in a thread): its checked rows and its digest; ConfigError if bad."""


@attrs.frozen
class PreparedWorld:
    """World data (rows) made into the world's objects: built anywhere (a thread: it
    touches nothing of a world), put in place by ``SandboxWorld.install``."""

    objects: list[WorldObject]
    lost: list[tuple[str, JSONValue]]
    """``(id, location)`` of the objects whose location is missing (now nowhere)."""
    channels: dict[str, Channel]
    prototypes: dict[str, Prototype]
    help: dict[str, HelpEntry]
    meta: dict[str, JSONValue]
    rows: JSONObject | None
    """With ``with_rows``: the world as rows again, as ``SandboxWorld.snapshot`` gives it
    once in place (what :meth:`SeedApplier.apply` writes; made off the reactor)."""

    @classmethod
    def build(cls, data: Mapping[str, object], with_rows: bool = False) -> PreparedWorld:
        rows = _rows(data, "objects")
        locations = {row.get("id"): row.get("location") for row in rows}
        objects = [WorldObject.from_row(row) for row in rows]
        lost = WorldObjects().replace(objects)  # the one rule: a missing place is none
        channels = {c.key.casefold(): c for c in map(Channel.from_row, _rows(data, "channels"))}
        prototypes = {p.key.casefold(): p for p in map(Prototype.from_row,
                                                        _rows(data, "prototypes"))}
        help_entries = {h.key.casefold(): h for h in map(HelpEntry.from_row, _rows(data, "help"))}
        meta: dict[str, JSONValue] = copy.deepcopy(dict(_mapping(data.get("meta"))))
        with_meta: JSONObject = {k: copy.deepcopy(v) for k, v in meta.items()
                                 if k != SEQ_FLOOR_KEY}
        rows_again: JSONObject | None = None if not with_rows else {
            "objects": [o.to_row() for o in objects],
            "channels": [c.to_row() for c in channels.values()],
            "prototypes": [p.to_row() for p in prototypes.values()],
            "help": [h.to_row() for h in help_entries.values()],
            "meta": with_meta,
        }
        return cls(objects, [(obj.id, locations.get(obj.id)) for obj in lost], channels,
                   prototypes, help_entries, meta, rows_again)


def _rows(data: Mapping[str, object], section: str) -> list[Mapping[str, JSONValue]]:
    """The rows of one section of world data (none when it is missing)."""
    return list(data.get(section) or ())  # type: ignore[call-overload]


def _mapping(value: object) -> Mapping[str, JSONValue]:
    return value if isinstance(value, Mapping) else {}


@attrs.define(eq=False)
class SeedApplier:
    """The world file of ``world`` (its ``seed_file``): checked at start-up, applied again."""

    world: SandboxWorld
    read: ReadFile

    _log = Logger()

    def check_at_start(self) -> defer.Deferred[None]:
        """Say at start-up when the world file changed since it was applied (not applied now)."""
        world = self.world
        if world.seed_file is None:
            return defer.succeed(None)
        try:
            digest = world_digest(load_world_file(world.seed_file))
        except Exception as exc:
            self._log.warn("The world file {file} cannot be read now ({error}); the world "
                           "saved in the store is used", file=str(world.seed_file),
                           error=str(exc))
            return defer.succeed(None)
        saved = world.meta.get(DIGEST_KEY)
        if saved is None:  # a store seeded before digests were kept: take the file as applied
            world.meta[DIGEST_KEY] = digest
            return world.write_rows({"meta": {DIGEST_KEY: digest}})
        if saved != digest:
            world.file_changed = True
            self._log.warn(
                "The world file {file} changed since the world was seeded from it; the world "
                "saved in the store is used, the file is not applied. To apply it (the "
                "assistants keep their memories): POST /world/apply with {{\"mode\": "
                "\"merge\"}} (add and update the file's rows, keep what was made in the game) "
                "or {{\"mode\": \"reseed\"}} (the world becomes the file's)",
                file=str(world.seed_file))
        return defer.succeed(None)

    def apply(self, mode: str, keep: Iterable[str]) -> defer.Deferred[JSONObject]:
        """See :meth:`ai_tools.world.sandbox.SandboxWorld.apply_seed`."""
        if self.world.seed_file is None:
            return defer.fail(ConfigError("this world was not loaded from a world file"))
        if mode not in ("merge", "reseed"):
            return defer.fail(ConfigError(f"mode must be merge or reseed, not {mode!r}"))
        read = self._off_reactor(self.read, self.world.seed_file)
        return read.addCallback(self._apply_data, mode, frozenset(keep))

    def _apply_data(self, read: tuple[JSONObject, str], mode: str,
                    keep: frozenset[str], attempt: int = 1) -> defer.Deferred[JSONObject]:
        """Merge the checked file's rows with the world as it is now (on the reactor),
        build the new objects off it, then put them in place in one step."""
        data, digest = read
        changes = self.world.changes
        current = self.world.snapshot()
        deletes: dict[str, list[str]]
        if mode == "merge":
            world, deletes = merged_world(current, data), {}
        else:
            world, deletes = reseeded_world(current, data)
        ids = {row.get("id") for row in world["objects"]}
        lost = sorted(keep - ids)
        if lost:
            return defer.fail(ConfigError(
                f"the world file has no {', '.join(lost)}, which an assistant plays"))
        world["meta"][DIGEST_KEY] = digest
        built = (self._off_reactor(PreparedWorld.build, world, True)
                 if attempt < APPLY_ATTEMPTS  # the last attempt: in one step, here
                 else defer.succeed(PreparedWorld.build(world, True)))
        return built.addCallback(self._put_in_place, read, mode, keep, attempt, changes,
                                 deletes)

    def _put_in_place(self, prepared: PreparedWorld, read: tuple[JSONObject, str],
                      mode: str, keep: frozenset[str], attempt: int, changes: int,
                      deletes: dict[str, list[str]]) -> defer.Deferred[JSONObject]:
        """The new world replaces the old one, unless the game changed it meanwhile
        (then merged again with the change: the last attempt all on the reactor)."""
        world = self.world
        if world.changes != changes:
            return self._apply_data(read, mode, keep, attempt + 1)
        world.install(prepared)
        world.file_changed = False
        self._log.info("World file {file} applied ({mode}): {count} objects",
                       file=str(world.seed_file), mode=mode, count=len(world.objects))
        done = world.write_rows(prepared.rows or world.snapshot(), deletes)
        return done.addCallback(lambda _: {"mode": mode, "objects": len(world.objects),
                                           "deleted": sum(map(len, deletes.values()))})

    def _off_reactor(self, work: Callable[..., _T], *args: object) -> defer.Deferred[_T]:
        """``work(*args)`` (blocking, touching nothing of the world) in the reactor's
        thread pool; at once when the clock has none (a ``task.Clock`` in tests)."""
        clock = or_global_reactor(self.world.clock)
        if IReactorThreads.providedBy(clock):
            return threads.deferToThreadPool(clock, clock.getThreadPool(),
                                             work, *args)
        return defer.maybeDeferred(work, *args)
