"""The sandbox world: a small persistent MUD-like world for the standalone service.

The whole world lives in memory (like Evennia's object cache), so reads are
plain synchronous calls; every change is written through to a store
(``IWorldStore``: the memory or SQLite store) so it survives a restart.

What returns what:

* **reads** return plain values: :meth:`get_object`, :meth:`describe_location`,
  :meth:`search`, :meth:`get_attributes`, :meth:`get_tags`,
  :meth:`search_by_tag`, :meth:`has_permission`, :meth:`list_prototypes`,
  :meth:`list_channels`, :meth:`help_search`, :meth:`heard`, :meth:`snapshot`;
* **messages** (nothing to persist) return plain values at once and raise on
  refusal: :meth:`message_location`, :meth:`message_character`,
  :meth:`channel_send`, :meth:`subscribe`, :meth:`add_observer`;
* **changes** return a Deferred that fires once the change is durable (and
  fails with ``PermissionDenied``, ``NotFound``, ``ValueError``...):
  :meth:`set_attribute`, :meth:`delete_attribute`, :meth:`add_tag`,
  :meth:`remove_tag`, :meth:`spawn_prototype`, :meth:`create_object`,
  :meth:`dig`, :meth:`set_description`, :meth:`move_character`,
  :meth:`create_character`, :meth:`execute_command`.

The change is applied in memory first, then written; if the write fails the
Deferred fails (and the failure is logged) while memory keeps the change, which
the next write of the same object persists.  With the memory store, or with no
store, every Deferred has already fired when the method returns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Protocol, cast

import attrs
from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from ai_tools.default_reactor import or_global_reactor
from ai_tools.errors import ConfigError
from ai_tools.failure_lines import RepeatedFailure
from ai_tools.interfaces import IHeardLog, IWorld
from ai_tools.json_types import JSONMapping, JSONObject
from ai_tools.world.applying import PreparedWorld, SeedApplier
from ai_tools.world.building import FORBIDDEN_OVERRIDES, MAX_VALUE_CHARS, Building
from ai_tools.world.commands import run_command
from ai_tools.world.hearing import Hearing, Listener, Observer
from ai_tools.world.messages import WorldMessage
from ai_tools.world.model import Channel
from ai_tools.world.persistence import (
    HEARD_KEEP,
    SEQ_BLOCK,
    SEQ_FLOOR_KEY,
    SEQS_PER_MS,
    HeardKeeper,
    HeardLogStore,
    Numbering,
    WorldStore,
    first_message_seq,
)
from ai_tools.world.seeding import DIGEST_KEY, world_digest
from ai_tools.world.speech import Speech
from ai_tools.world.view import WorldView
from ai_tools.world.worldfile import load_world_file

__all__ = [
    "FORBIDDEN_OVERRIDES", "HEARD_KEEP", "MAX_APPLY_BYTES", "MAX_VALUE_CHARS", "SEQS_PER_MS",
    "SEQ_BLOCK", "SEQ_FLOOR_KEY", "SandboxWorld", "first_message_seq", "seed_data",
]


class _Clock(Protocol):
    def seconds(self) -> float: ...


def seed_data(seed: str | Path | JSONMapping | None) -> JSONMapping:
    """The world data a store without a world starts from: a world file's, given data,
    or (None) an empty world called Sandbox.  ConfigError for a bad world file."""
    if seed is None:
        return {"meta": {"name": "Sandbox"}}
    if isinstance(seed, str | Path):
        return load_world_file(seed)
    return seed


MAX_APPLY_BYTES = 8 * 1024 * 1024
"""The largest world file :meth:`SandboxWorld.apply_seed` applies to a running world
(about 36,000 rooms with their exits).  The file is parsed, checked and made into
objects off the reactor; what is left on it — merging with the world as it is,
putting the new objects in place, encoding the rows for the store — held it about
1 s for 20,000 rooms on a loaded machine, where doing it all there held it 18 s
(``make bench BENCH=world_apply``).  A larger file seeds a world at the first
start (nothing is served yet)."""


def _read_seed_file(path: Path) -> tuple[JSONObject, str]:
    """The checked rows of the world file at ``path`` and its digest (run in a thread);
    ConfigError for a file too large or not valid."""
    try:
        size = Path(path).stat().st_size
    except OSError as exc:
        raise ConfigError(f"the world file cannot be applied: {exc}") from None
    if size > MAX_APPLY_BYTES:
        raise ConfigError(f"the world file cannot be applied to the running world: it is "
                          f"{size} bytes, more than {MAX_APPLY_BYTES} (a world this large "
                          "is seeded at the first start, from an empty store)")
    try:
        data = load_world_file(path)
    except Exception as exc:
        raise ConfigError(f"the world file cannot be applied: {exc}") from None
    return data, world_digest(data)



@implementer(IWorld)
@attrs.define(eq=False)
class SandboxWorld(WorldView):
    """An in-memory world written through to ``store`` (an ``IWorldStore``, or None).

    Build one with :meth:`load` (from a store, seeded from a world file the
    first time) or :meth:`from_file` (no persistence, for tests and tools).
    ``clock`` (a reactor or ``task.Clock``) stamps messages and new objects;
    ``log_size`` bounds what each character's heard log keeps.

    Its parts: the reads and the world's contents (:class:`~ai_tools.world.view.WorldView`,
    its base), ``building`` (the object changes), ``speech`` (who hears what is said),
    ``hearing`` (heard logs, listeners, observers), ``numbering`` and ``keeper`` (message
    numbers and the store's heard log), ``applier`` (its world file).
    """

    store: WorldStore | None = None
    """An ``IWorldStore`` (also an ``IHeardLog`` to keep what the characters heard)."""
    clock: _Clock | None = None
    log_size: int = 200
    hearing: Hearing = attrs.field(init=False, default=attrs.Factory(
        lambda self: Hearing(self.log_size), takes_self=True))
    """The heard logs, listeners and observers (the part that delivers messages)."""
    numbering: Numbering = attrs.field(init=False)
    keeper: HeardKeeper = attrs.field(init=False, factory=HeardKeeper)
    speech: Speech = attrs.field(init=False)
    building: Building = attrs.field(init=False)
    applier: SeedApplier = attrs.field(init=False)
    _write_failures: RepeatedFailure = attrs.field(init=False, default=attrs.Factory(
        lambda self: RepeatedFailure("Sandbox world: writing changes to the store failed",
                                     self._log), takes_self=True))
    """Failed store writes, one log line per class (a full disk fails them all)."""
    changes: int = attrs.field(default=0, init=False)
    """Changes made to the world (each written): a world file applied off the reactor is
    put in place only if none came meanwhile."""
    seed_file: Path | None = attrs.field(default=None, init=False)
    """The world file :meth:`load` was given (None: none, or world data)."""
    file_changed: bool = attrs.field(default=False, init=False)
    """The world file changed since it was last applied (see :meth:`apply_seed`)."""

    _log = Logger()

    def __attrs_post_init__(self) -> None:
        self.numbering = Numbering(
            reserve=lambda limit: self.write_rows({"meta": {SEQ_FLOOR_KEY: limit}}))
        self.speech = Speech(self.objects, self.channels, self.numbering.next, self._now,
                             self._deliver)
        self.building = Building(self.objects, self.channels, self.prototypes,
                                 lambda: self.meta, self._now, self.write_rows, self.speech)
        self.applier = SeedApplier(self, _read_seed_file)

    # ------------------------------------------------------------------
    # building the world
    # ------------------------------------------------------------------

    @classmethod
    def load(
        cls,
        store: WorldStore | None,
        seed: str | Path | JSONMapping | None = None,
        clock: _Clock | None = None,
        log_size: int = 200,
    ) -> defer.Deferred[SandboxWorld]:
        """Load the world saved in ``store`` (already open; None: keep it in memory only).

        When the store holds no world yet, the world comes from ``seed`` — a
        world file path or world data (``parse_world``'s result) — and is
        written to the store in one transaction before the Deferred fires.
        With a store, message numbers (``seq``) start above every number the
        runs before this one gave (:func:`first_message_seq`), so a reader
        that polls with ``after=SEQ`` is never shown an old number again.
        Without a seed the world starts empty.  A bad world file fails the
        Deferred with :class:`~ai_tools.errors.ConfigError`.
        """
        world = cls(store=store, clock=clock, log_size=log_size)
        if isinstance(seed, str | Path):
            world.seed_file = Path(seed)

        def loaded(data: JSONMapping | None) -> defer.Deferred[SandboxWorld]:
            if data is not None:
                world.populate(data)
                world._log.info("Sandbox world {name} loaded: {count} objects",
                                name=world.meta.get("name"), count=len(world.objects))
                started = world._start_numbering()
                started.addCallback(lambda _: world.keeper.restore(world.hearing))
                return started.addCallback(lambda _: world.applier.check_at_start()) \
                    .addCallback(lambda _: world)
            data = seed_data(seed)
            world.populate(data)
            if world.seed_file is not None:
                world.meta[DIGEST_KEY] = world_digest(data)
            world._log.info("Sandbox world {name} seeded: {count} objects",
                            name=world.meta.get("name"), count=len(world.objects))
            world._start_numbering()
            return world.write_rows(world.snapshot()).addCallback(lambda _: world)

        if store is None:
            return defer.maybeDeferred(loaded, None)
        return defer.maybeDeferred(store.load_world).addCallback(loaded)

    def _start_numbering(self) -> defer.Deferred[None]:
        """With a store: message numbers start above every number an earlier run gave
        (its start time, or the store's floor when the clock is behind it), and the
        first block of numbers is reserved (see :func:`first_message_seq`)."""
        if self.store is None:
            return defer.succeed(None)
        self.keeper.heard_log = (cast(HeardLogStore, self.store)
                                 if IHeardLog.providedBy(self.store) else None)
        return self.numbering.start(self._now())

    def apply_seed(self, mode: str, keep: Iterable[str] = ()) -> defer.Deferred[JSONObject]:
        """Apply the world file again: ``merge`` or ``reseed`` (see :mod:`ai_tools.world.seeding`).

        ``keep``: object ids that must still exist afterwards (the assistants'
        characters): else ConfigError and nothing changes.  Fires with
        ``{"mode", "objects", "deleted"}`` once written.  ConfigError when the
        world was not loaded from a world file, the file is larger than
        :data:`MAX_APPLY_BYTES` or not valid.  The file is read, parsed and
        checked in the reactor's thread pool (it may be megabytes: the reactor
        goes on serving meanwhile); the world is then changed in one step.
        """
        return self.applier.apply(mode, keep)

    @classmethod
    def from_file(cls, path: str | Path, clock: _Clock | None = None) -> SandboxWorld:
        """A world from a world file, kept in memory only (no store)."""
        world = cls(clock=clock)
        world.populate(load_world_file(path))
        return world

    def populate(self, data: JSONMapping) -> None:
        """Replace the in-memory world with world data (rows), without writing anything."""
        self.install(PreparedWorld.build(data))

    def install(self, prepared: PreparedWorld) -> None:
        """Put a built world in place (quick: the objects are made already)."""
        self.changes += 1
        self.objects.replace(prepared.objects)  # (none lost: build placed them)
        for obj_id, location in prepared.lost:
            self._log.warn("Object {id} is in missing location {location}; it is now nowhere",
                           id=obj_id, location=location)
        self.channels.replace(prepared.channels.values())
        self.prototypes.clear()
        self.prototypes.update(prepared.prototypes)
        self.help_entries.clear()
        self.help_entries.update(prepared.help)
        self.meta = prepared.meta
        self.numbering.take_floor(self.meta)

    # ------------------------------------------------------------------
    # persistence
    # ------------------------------------------------------------------

    def _now(self) -> float:
        clock = or_global_reactor(self.clock)
        return float(clock.seconds())

    def write_rows(
        self, put: JSONMapping, delete: Mapping[str, list[str]] | None = None
    ) -> defer.Deferred[None]:
        """Write changed rows through to the store (every part's changes go here);
        fires once durable (at once without a store)."""
        self.changes += 1  # (every change of the world is written: see apply_seed)
        if self.store is None:
            return defer.succeed(None)

        def failed(failure: Failure) -> Failure:
            self._write_failures.failed(failure)
            return failure

        def written(result: None) -> None:
            self._write_failures.worked()
            return result

        d: defer.Deferred[None] = defer.maybeDeferred(self.store.write_world, put, delete)
        d.addCallbacks(written, failed)
        return d

    # ------------------------------------------------------------------
    # changes (the building part, as one Deferred each)
    # ------------------------------------------------------------------

    def set_attribute(
        self, char_id: str, obj_id: str, name: str, value: object
    ) -> defer.Deferred[JSONObject]:
        """Set attribute ``name`` of ``obj_id`` to a JSON value, as ``char_id``."""
        return defer.maybeDeferred(self.building.set_attribute, char_id, obj_id, name, value)

    def delete_attribute(self, char_id: str, obj_id: str, name: str) -> defer.Deferred[bool]:
        """Remove attribute ``name`` of ``obj_id`` as ``char_id``; fires True if it existed."""
        return defer.maybeDeferred(self.building.delete_attribute, char_id, obj_id, name)

    def add_tag(
        self, char_id: str, obj_id: str, tag: str, category: str | None = None
    ) -> defer.Deferred[JSONObject]:
        """Add a tag as ``char_id``; fires with the object dict."""
        return defer.maybeDeferred(self.building.add_tag, char_id, obj_id, tag, category)

    def remove_tag(
        self, char_id: str, obj_id: str, tag: str, category: str | None = None
    ) -> defer.Deferred[bool]:
        """Remove a tag as ``char_id``; fires True if it was there."""
        return defer.maybeDeferred(self.building.remove_tag, char_id, obj_id, tag, category)

    def spawn_prototype(
        self,
        char_id: str,
        prototype_key: str,
        location: str | None = None,
        overrides: JSONMapping | None = None,
    ) -> defer.Deferred[JSONObject]:
        """Create an object from a prototype as ``char_id`` (Builder, or the prototype's
        permission); it goes to ``location`` or the character's room and is owned by it.

        ``overrides``: ``key``, ``aliases``, ``description`` (or ``desc``),
        ``attributes`` (a mapping), ``tags``; any other key is an attribute.
        Keys that would change identity or rights are refused.
        """
        return defer.maybeDeferred(
            self.building.spawn, char_id, prototype_key, location, overrides
        )

    def create_object(
        self,
        char_id: str,
        key: str,
        description: str = "",
        aliases: Iterable[str] = (),
        location: str | None = None,
    ) -> defer.Deferred[JSONObject]:
        """Create a plain object as ``char_id`` (Builder) in ``location`` or its room."""
        return defer.maybeDeferred(
            self.building.create_object, char_id, key, description, aliases, location
        )

    def dig(
        self,
        char_id: str,
        room_key: str,
        room_aliases: Iterable[str] = (),
        exit_key: str | None = None,
        exit_aliases: Iterable[str] = (),
        back_key: str | None = None,
        back_aliases: Iterable[str] = (),
    ) -> defer.Deferred[JSONObject]:
        """Create a room as ``char_id`` (Builder), optionally with an exit to it from
        the character's room and one back; all written in one transaction.

        Fires with ``{"room": {...}, "exits": [{...}]}``.
        """
        return defer.maybeDeferred(self.building.dig, char_id, room_key, room_aliases,
                                   exit_key, exit_aliases, back_key, back_aliases)

    def set_description(
        self, char_id: str, obj_id: str, text: str
    ) -> defer.Deferred[JSONObject]:
        """Change ``obj_id``'s description as ``char_id`` (edit rights)."""
        return defer.maybeDeferred(self.building.set_description, char_id, obj_id, text)

    def create_character(
        self,
        key: str,
        location: str | None = None,
        permissions: Iterable[str] = ("Player",),
        char_id: str | None = None,
        description: str = "",
    ) -> defer.Deferred[JSONObject]:
        """Add a character (an operator action: no acting character, no permission check).

        Goes to ``location`` or the world's start room and joins the channels
        every character joins (``auto_join``).
        """
        return defer.maybeDeferred(self.building.create_character, key, location,
                                   permissions, char_id, description)

    def move_character(self, char_id: str, destination: str) -> defer.Deferred[JSONObject]:
        """Move ``char_id`` through an exit of its room (``destination``: the exit's
        id, key or alias).  The rooms hear it leave and arrive (``system``
        messages).  Fires with the new room's dict."""
        return defer.maybeDeferred(self.building.move_character, char_id, destination)

    def channel_subscribe(
        self, char_id: str, channel: str, subscribe: bool = True
    ) -> defer.Deferred[bool]:
        """Join (or leave) a channel; fires True if that changed anything."""
        return defer.maybeDeferred(self._channel_subscribe, char_id, channel, subscribe)

    def _channel_subscribe(
        self, char_id: str, channel: str, subscribe: bool
    ) -> defer.Deferred[bool]:
        char = self.objects.character(char_id)
        chan = self.channels.named(channel)
        if not self.channels.set_subscribed(char.id, chan, subscribe):
            return defer.succeed(False)
        return self.write_rows({"channels": [chan.to_row()]}).addCallback(lambda _: True)

    # ------------------------------------------------------------------
    # commands
    # ------------------------------------------------------------------

    def execute_command(self, char_id: str, command: str) -> defer.Deferred[JSONObject]:
        """Run one command line as ``char_id`` with its own rights.

        Fires with ``{"command", "output": [lines], "success": bool}`` and, when
        it did not succeed, ``"error"`` (``unknown_command``, ``usage``,
        ``permission_denied``, ``not_found``, ``ambiguous``, ``invalid``).
        Refusals are reported in the output like a game would; only an unknown
        acting character (``NotFound``) or a failed store write fails the Deferred.  See
        :mod:`ai_tools.world.commands` for the commands.
        """
        return defer.maybeDeferred(run_command, self, char_id, command)

    # ------------------------------------------------------------------
    # messages and hearing
    # ------------------------------------------------------------------

    def _deliver(self, message: WorldMessage, receivers: list[str]) -> None:
        """A message said in this world: heard now, and kept in the store's heard log."""
        self.hearing.hear(message, receivers)
        if self.keeper.heard_log is not None:
            self.keeper.keep(message, receivers)

    def heard_kept(self) -> defer.Deferred[None]:
        """Fires once the newest message said is in the store's heard log (at once
        without one); fails with :class:`~ai_tools.errors.AIToolsError` if that write
        failed.  The HTTP API calls it right after a player's message, and answers
        once it fires."""
        return self.keeper.kept(self.numbering.seq)

    def message_location(
        self, char_id: str, text: str, kind: str = "say", exclude: Iterable[str] = (),
        dedupe_key: str | None = None,
    ) -> list[str]:
        """Say, pose or emit (Builder) ``text`` in the character's room; returns who heard it.

        The speaker does not hear itself.  ``dedupe_key`` is kept by the shared
        world only: in one process each call runs once.
        """
        return self.speech.to_room(char_id, text, kind, exclude)

    def message_character(
        self, char_id: str, target_id: str, text: str, kind: str = "whisper",
        dedupe_key: str | None = None,
    ) -> list[str]:
        """Whisper (same room) or page (anywhere) ``text`` to one character.

        Returns ``[target_id]``.  ``dedupe_key``: as for :meth:`message_location`.
        """
        return self.speech.to_character(char_id, target_id, text, kind)

    def channel_send(self, char_id: str, channel: str, text: str,
                     dedupe_key: str | None = None) -> list[str]:
        """Post ``text`` on a channel as ``char_id``; returns the subscribers who received it.

        ``dedupe_key``: as for :meth:`message_location`.
        """
        return self.speech.on_channel(char_id, channel, text)

    def subscribe(self, char_id: str, listener: Listener) -> Callable[[], None]:
        """Call ``listener(WorldMessage)`` for everything ``char_id`` hears.

        Returns the function that unsubscribes (calling it twice is harmless).
        A listener that raises is logged; delivery to the others goes on.
        """
        return self.hearing.subscribe(self.objects.character(char_id).id, listener)

    def add_observer(self, observer: Observer) -> Callable[[], None]:
        """Call ``observer(message, receivers)`` for every message in the world
        (for the HTTP API's event stream).  Returns the function that removes it."""
        return self.hearing.add_observer(observer)

    def heard(
        self, char_id: str, limit: int | None = None, after: int | None = None
    ) -> list[JSONObject]:
        """What ``char_id`` heard, oldest first, as message dicts.

        The log keeps the last ``log_size`` messages; ``after`` keeps only
        messages with a larger ``seq``; ``limit`` keeps the newest ``limit``.
        """
        self.objects.character(char_id)
        return self.hearing.heard(char_id, limit, after)

    # ------------------------------------------------------------------
    # the names tests of the HTTP API and of numbering look at (from before the parts)
    # ------------------------------------------------------------------

    @property
    def _observers(self) -> list[Observer]:
        return self.hearing.observers

    @property
    def _logs(self) -> Mapping[str, Iterable[WorldMessage]]:
        return self.hearing.logs

    @property
    def _channels(self) -> dict[str, Channel]:
        return self.channels.by_key

    @property
    def _seq(self) -> int:
        return self.numbering.seq

    @_seq.setter
    def _seq(self, value: int) -> None:
        self.numbering.seq = value
