"""The sandbox world shared by several worker processes through the database.

:class:`SharedWorld` is a :class:`~ai_tools.world.sandbox.SandboxWorld` whose
memory is a **replica** of the world held in an
:class:`~ai_tools.interfaces.ISharedWorldStore` (PostgreSQL; the memory store
offers the same contract for tests).  The rules — who may do what, who hears
what, what a command does — are the sandbox world's, unchanged; what differs
is where a change goes and how hearing travels:

* **Reads** are plain calls on the replica, as in the sandbox world.
* **A change is one transaction step.**  An operation runs on the replica as
  usual, but what it writes (rows) and says (messages) is captured, with
  every row it read (the acting character, the rooms whose contents it
  looked at, the channel...).  The store then applies it only if each of
  those rows still has the version the replica saw; a place whose contents
  change gets a new version too, so hearers are never worked out from a
  stale room.  If another worker changed one of them meanwhile
  (:class:`~ai_tools.errors.WorldConflict`), the replica catches up and the
  operation runs again (up to :data:`MAX_ATTEMPTS` times).  The operation's
  Deferred fires once its transaction committed.
* **Hearing reaches every worker.**  Messages are rows with one global
  sequence (the world clock, in commit order).  Every worker follows the
  world from the database — on each ``NOTIFY``, after each of its own
  changes, and every ``poll_interval`` seconds in case a notification was
  lost — and delivers the new messages in order to its listeners, observers
  and heard logs, exactly as the sandbox world delivers them.  So a message
  a player posts through any worker reaches the listener of the assistant's
  character on the worker that hosts it.

Messages, like other changes, now answer with a Deferred (firing with the
receivers once the message is durable) instead of a list: callers already go
through ``maybeDeferred`` (IWorld).  A message sent with a ``dedupe_key`` (a
tool call's effect key) is stored once: the same call made again by another
worker after a failover changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs
from twisted.internet import defer, task
from twisted.logger import Logger
from twisted.python.failure import Failure

from ai_tools.default_reactor import global_reactor
from ai_tools.errors import WorldConflict
from ai_tools.interfaces import WORLD_SECTIONS
from ai_tools.world.messages import WorldMessage
from ai_tools.world.model import Channel, HelpEntry, Prototype, WorldObject
from ai_tools.world.sandbox import SEQ_FLOOR_KEY, SandboxWorld, seed_data

__all__ = ["MAX_ATTEMPTS", "SharedWorld"]

MAX_ATTEMPTS = 5
"""How many times an operation is computed again after a conflict before it fails."""

CATCH_UP_BATCH = 1000
"""Messages fetched per catch-up query (a backlog takes several)."""

Key = tuple[str, str]

_ROW_TYPES: dict[str, Any] = {"channels": Channel, "prototypes": Prototype, "help": HelpEntry}


@attrs.define(eq=False)
class _Change:
    """What one operation did to the replica: rows, messages, rows read; its waiters."""

    rows: dict[str, dict[str, dict[str, Any]]] = attrs.field(factory=dict)
    meta: dict[str, Any] = attrs.field(factory=dict)
    deletes: dict[str, list[str]] = attrs.field(factory=dict)
    reads: set[Key] = attrs.field(factory=set)
    messages: list[tuple[WorldMessage, list[str]]] = attrs.field(factory=list)
    waiters: list[defer.Deferred[None]] = attrs.field(factory=list)
    dedupe_key: str | None = None
    """The operation's effect key: the database keeps its messages once (None: no key)."""

    def add(self, put: Mapping[str, Any], delete: Mapping[str, Iterable[str]] | None) -> None:
        for section, items in put.items():
            if section == "meta":
                self.meta.update(items)
                continue
            field = WORLD_SECTIONS[section]
            rows = self.rows.setdefault(section, {})
            for row in items:
                rows[str(row[field])] = dict(row)
        for section, keys in (delete or {}).items():
            self.deletes.setdefault(section, []).extend(keys)

    def empty(self) -> bool:
        return not (self.rows or self.meta or self.deletes or self.messages)

    def written(self) -> set[Key]:
        keys = {(section, key) for section, rows in self.rows.items() for key in rows}
        keys.update(("meta", key) for key in self.meta)
        keys.update((section, key) for section, items in self.deletes.items() for key in items)
        return keys

    def message_rows(self) -> list[dict[str, Any]]:
        """The messages as the store takes them; the ``n``-th one keyed ``key`` or ``key/n``."""
        key = self.dedupe_key
        return [{"data": _message_data(message), "receivers": receivers,
                 "dedupe_key": None if key is None else key if n == 0 else f"{key}/{n}"}
                for n, (message, receivers) in enumerate(self.messages)]

    def settle(self, failure: Failure | None) -> None:
        waiters, self.waiters = self.waiters, []
        for waiter in waiters:
            if failure is None:
                waiter.callback(None)
            else:
                waiter.errback(failure)


def _message_data(message: WorldMessage) -> dict[str, Any]:
    data = attrs.asdict(message)
    data.pop("seq")
    return data


@attrs.define(eq=False)
class SharedWorld(SandboxWorld):
    """A sandbox world kept in an ISharedWorldStore and followed from it (see the module).

    Build it with :meth:`load`; call :meth:`stop` when done.  ``poll_interval``
    is the safety net's period (seconds); ``retention`` how many messages the
    database keeps (the oldest are pruned as the clock moves on).
    """

    poll_interval: float = 5.0
    retention: int = 100_000
    conflicts: int = attrs.field(default=0, init=False)
    """Operations computed again because another worker changed their rows."""
    _change: _Change | None = attrs.field(default=None, init=False)
    _versions: dict[Key, int] = attrs.field(factory=dict, init=False)
    _placed: dict[str, str | None] = attrs.field(factory=dict, init=False)
    """Where each object is in the database (the replica may be ahead)."""
    _clock: int = attrs.field(default=0, init=False)
    _delivered: int = attrs.field(default=0, init=False)
    _pruned: int = attrs.field(default=0, init=False)
    _dirty: set[Key] = attrs.field(factory=set, init=False)
    _busy: dict[Key, defer.Deferred[bool]] = attrs.field(factory=dict, init=False)
    _catching: bool = attrs.field(default=False, init=False)
    _wanted: bool = attrs.field(default=False, init=False)
    _caught_up: list[defer.Deferred[None]] = attrs.field(factory=list, init=False)
    _stop_listening: Any = attrs.field(default=None, init=False)
    _poll: task.LoopingCall | None = attrs.field(default=None, init=False)

    _log = Logger()

    # ------------------------------------------------------------------
    # loading, following, stopping
    # ------------------------------------------------------------------

    @classmethod
    def load(  # type: ignore[override]
        cls,
        store: Any,
        seed: str | Path | Mapping[str, Any] | None = None,
        clock: Any = None,
        log_size: int = 200,
        poll_interval: float = 5.0,
    ) -> defer.Deferred[SharedWorld]:
        """The world held in ``store``, seeded from ``seed`` if it holds none yet; following.

        Several workers may start at once: one seeds, the others load its world.
        """
        world = cls(store=store, clock=clock, log_size=log_size, poll_interval=poll_interval)
        return defer.ensureDeferred(world._load(seed))

    async def _load(self, seed: str | Path | Mapping[str, Any] | None) -> SharedWorld:
        for _ in range(MAX_ATTEMPTS):
            data = await self.store.load_shared_world(self.log_size)
            if data is not None:
                self._take(data)
                self._log.info("Shared world {name} loaded: {count} objects at clock {clock}",
                               name=self.meta.get("name"), count=len(self.objects),
                               clock=self._clock)
                self._follow()
                return self
            self.populate(seed_data(seed))
            rows = self.snapshot()
            expect: dict[Key, int | None] = {("meta", key): None for key in rows["meta"]}
            for section, field in WORLD_SECTIONS.items():
                expect.update(((section, str(row[field])), None) for row in rows[section])
            try:
                await self.store.change_world(rows, expect=expect)
            except WorldConflict:
                continue  # another worker seeded first: load its world
            self._log.info("Shared world {name} seeded", name=self.meta.get("name"))
        raise WorldConflict("could not load the shared world: it kept changing while loading")

    def _take(self, data: Mapping[str, Any]) -> None:
        """Replace the replica with a full load (rows with versions, heard messages)."""
        self.populate({**{s: [row for row, _ in data[s]] for s in WORLD_SECTIONS},
                       "meta": {key: value for key, (value, _) in data["meta"].items()}})
        self._versions = {(s, str(row[field])): version for s, field in WORLD_SECTIONS.items()
                          for row, version in data[s]}
        self._versions.update((("meta", key), version)
                              for key, (_, version) in data["meta"].items())
        self._placed = {obj.id: obj.location for obj in self.objects.values()}
        self._clock = self._delivered = self._pruned = int(data["clock"])
        self.hearing.forget_all()
        for seq, message, receivers in data["messages"]:
            self.hearing.hear(WorldMessage(**message, seq=seq), receivers)

    def _follow(self) -> None:
        self._stop_listening = self.store.listen_world(self._notified, self._poke)
        self._poll = task.LoopingCall(self._poll_once)
        self._poll.clock = self._reactor()
        self._poll.start(self.poll_interval, now=False)

    def _reactor(self) -> Any:
        if self.clock is not None and hasattr(self.clock, "callLater"):
            return self.clock
        return global_reactor()

    def stop(self) -> None:
        """Stop following the database (the store stays open); harmless twice."""
        stop, self._stop_listening = self._stop_listening, None
        if stop is not None:
            stop()
        poll, self._poll = self._poll, None
        if poll is not None and poll.running:
            poll.stop()

    @property
    def clock_value(self) -> int:
        """The world clock value this replica has caught up to."""
        return self._clock

    # ------------------------------------------------------------------
    # capturing what an operation does
    # ------------------------------------------------------------------

    def __attrs_post_init__(self) -> None:
        # Every object lookup an operation (or a command) relies on is one of its reads.
        self.objects.on_read = self._depend_object

    def _depend(self, section: str, key: str | None) -> None:
        if self._change is not None and key is not None:
            self._change.reads.add((section, key))

    def _depend_object(self, obj_id: str | None) -> None:
        self._depend("objects", obj_id)

    def _channel(self, key: Any) -> Channel:
        channel = super()._channel(key)
        self._depend("channels", channel.key)
        return channel

    def _write(
        self, put: Mapping[str, Any], delete: Mapping[str, list[str]] | None = None
    ) -> defer.Deferred[None]:
        change = self._current("write")
        change.add(put, delete)
        waiter: defer.Deferred[None] = defer.Deferred()
        change.waiters.append(waiter)
        return waiter

    def _deliver(self, message: WorldMessage, receivers: list[str]) -> None:
        self._current("message").messages.append((message, list(receivers)))

    def _current(self, what: str) -> _Change:
        if self._change is None:
            raise RuntimeError(f"SharedWorld: a {what} outside a world operation")
        return self._change

    # ------------------------------------------------------------------
    # running an operation as a change
    # ------------------------------------------------------------------

    def _run(self, fn: Any, *args: Any, dedupe_key: str | None = None) -> defer.Deferred[Any]:
        """Run ``fn(*args)`` (a sandbox operation) as one change; fires once committed.

        ``dedupe_key`` keys the change's messages: one committed already under
        that key (a call made again after a failover) is not stored again.
        """
        if self._change is not None:  # called by another operation: part of its change
            return defer.maybeDeferred(fn, *args)
        return defer.ensureDeferred(self._attempts(fn, args, dedupe_key))

    async def _attempts(self, fn: Any, args: tuple[Any, ...], dedupe_key: str | None) -> Any:
        for _ in range(MAX_ATTEMPTS):
            change = _Change(dedupe_key=dedupe_key)
            self._change = change
            try:
                outcome = defer.maybeDeferred(fn, *args)
            finally:
                self._change = None
            if change.empty():
                return await outcome
            try:
                await self._commit(change)
            except WorldConflict as exc:
                self.conflicts += 1
                self._abandon(change, Failure(exc), outcome)
                await self.catch_up()
                continue
            except Exception:
                self._abandon(change, Failure(), outcome)
                self._poke()
                raise
            return await outcome
        raise WorldConflict(f"the world kept changing under this operation "
                            f"({MAX_ATTEMPTS} attempts)")

    def _abandon(self, change: _Change, failure: Failure, outcome: defer.Deferred[Any]) -> None:
        """A change that did not commit: its rows are read again, its waiters fail."""
        self._dirty.update(change.written())
        self._dirty.update(self._moved_places(change))
        outcome.addErrback(lambda _: None)
        change.settle(failure)

    async def _commit(self, change: _Change) -> None:
        """Wait for earlier changes of the same rows, then commit this one."""
        keys = change.written() | change.reads
        await self._after_busy(keys)
        touch = self._moved_places(change)
        written = change.written() | touch
        expect = {key: self._versions.get(key) for key in keys | touch}
        done: defer.Deferred[bool] = defer.Deferred()
        for key in written:
            self._busy[key] = done
        try:
            outcome = await self.store.change_world(
                {**{s: list(rows.values()) for s, rows in change.rows.items()},
                 "meta": change.meta},
                change.deletes, expect=expect, touch=sorted(touch),
                messages=change.message_rows())
        except BaseException:
            done.callback(False)
            raise
        finally:
            for key in written:
                if self._busy.get(key) is done:
                    del self._busy[key]
        self._committed(change, int(outcome["clock"]), touch)
        done.callback(True)
        self._poke()  # deliver its messages (and whatever else is new) in order

    async def _after_busy(self, keys: set[Key]) -> None:
        """Wait for this worker's changes in flight on ``keys``; WorldConflict if one failed."""
        while True:
            blockers = {self._busy[key] for key in keys if key in self._busy}
            if not blockers:
                return
            results = await defer.gatherResults(list(blockers))
            if not all(results):
                raise WorldConflict("an earlier change of the same rows did not commit")

    def _moved_places(self, change: _Change) -> set[Key]:
        """Places whose contents the change alters (an object arrives or leaves)."""
        places: set[Key] = set()
        for key, row in change.rows.get("objects", {}).items():
            before = self._placed.get(key) if ("objects", key) in self._versions else None
            after = row.get("location")
            if before != after:
                places.update(("objects", p) for p in (before, after) if p is not None)
        return places

    def _committed(self, change: _Change, clock: int, touch: set[Key]) -> None:
        """The replica takes the rows as committed; versions move to ``clock``."""
        for section, rows in change.rows.items():
            for row in rows.values():
                self._apply_row(section, row, clock, force=True)
        for key, value in change.meta.items():
            self.meta[key] = value
            self._versions["meta", key] = clock
        for section, keys in change.deletes.items():
            for key in keys:
                self._remove_row(section, key)
        for place in touch:
            if place in self._versions:
                self._versions[place] = max(self._versions[place], clock)
        change.settle(None)

    # ------------------------------------------------------------------
    # following the database
    # ------------------------------------------------------------------

    def _notified(self, clock: int) -> None:
        if clock > self._clock:
            self._poke()

    def _poll_once(self) -> None:
        self._poke()
        if self._clock - self._pruned > max(1, self.retention // 10):
            self._pruned = self._clock
            d = defer.maybeDeferred(self.store.prune_world_messages, self.retention)
            d.addErrback(lambda f: self._log.failure("Pruning world messages failed", f))

    def _poke(self) -> None:
        """Catch up with the database soon (coalesced: one query in flight at a time)."""
        self._wanted = True
        if not self._catching:
            self._start_catch_up()

    def catch_up(self) -> defer.Deferred[None]:
        """Fires after a catch-up that started after this call (failures are logged).

        Then the replica holds every change committed before the call, and
        the listeners got every message committed before it.
        """
        waiter: defer.Deferred[None] = defer.Deferred()
        self._caught_up.append(waiter)
        self._poke()
        return waiter

    def _start_catch_up(self) -> None:
        self._catching, self._wanted = True, False
        waiters, self._caught_up = self._caught_up, []
        dirty, self._dirty = sorted(self._dirty), set()
        d = defer.maybeDeferred(self.store.world_since, self._clock, dirty, CATCH_UP_BATCH)
        d.addCallbacks(self._apply_since, self._catch_up_failed, errbackArgs=(dirty,))
        d.addBoth(self._catch_up_done, waiters)

    def _catch_up_failed(self, failure: Failure, dirty: list[Key]) -> None:
        self._dirty.update(dirty)
        if self._stop_listening is not None:  # not a store closed under a stopped world
            self._log.failure("Shared world: catching up with the database failed", failure)
        return None  # the next poll (or notification) tries again

    def _catch_up_done(self, more: bool | None, waiters: list[defer.Deferred[None]]) -> None:
        self._catching = False
        if more is None:  # failed: whoever waits goes on (and fails or retries on its own)
            waiters += self._caught_up
            self._caught_up = []
        elif self._caught_up or (self._stop_listening is not None and (more or self._wanted)):
            self._start_catch_up()
        for waiter in waiters:
            waiter.callback(None)

    def _apply_since(self, data: Mapping[str, Any]) -> bool:
        """Apply a catch-up: rows, meta, deletions, dirty rows, then the messages in order.

        Returns True when a backlog is left (a full batch of messages).
        """
        for section, rows in data["rows"].items():
            for row, version in rows:
                self._apply_row(section, row, version)
        for key, (value, version) in data["meta"].items():
            if key == SEQ_FLOOR_KEY:  # a single-process world's numbering, not world content
                continue
            if version > self._versions.get(("meta", key), -1):
                self.meta[key] = value
                self._versions["meta", key] = version
        for section, key in data["deleted"]:
            self._remove_row(section, key)
        for (section, key), found in data["dirty_rows"].items():
            if found is None:
                self._remove_row(section, key)
            elif section == "meta":
                self.meta[key], self._versions["meta", key] = found
            else:
                self._apply_row(section, found[0], found[1], force=True)
        self._clock = max(self._clock, int(data["clock"]))
        for seq, message, receivers in data["messages"]:
            if seq > self._delivered:
                self._delivered = seq
                self.hearing.hear(WorldMessage(**message, seq=seq), receivers)
        return len(data["messages"]) >= CATCH_UP_BATCH

    def _apply_row(self, section: str, row: Mapping[str, Any], version: int,
                   force: bool = False) -> None:
        key = str(row[WORLD_SECTIONS[section]])
        if not force and version <= self._versions.get((section, key), -1):
            return
        self._versions[section, key] = version
        if section == "objects":
            self._replace_object(WorldObject.from_row(row))
            return
        self._table(section)[key.casefold()] = _ROW_TYPES[section].from_row(row)

    def _table(self, section: str) -> dict[str, Any]:
        """The replica's mapping of channels, prototypes or help entries (by folded key)."""
        tables: dict[str, dict[str, Any]] = {
            "channels": self._channels, "prototypes": self._prototypes, "help": self._help}
        return tables[section]

    def _replace_object(self, obj: WorldObject) -> None:
        self.objects.put(obj)
        self._placed[obj.id] = obj.location

    def _remove_row(self, section: str, key: str) -> None:
        self._versions.pop((section, key), None)
        if section == "meta":
            self.meta.pop(key, None)
        elif section == "objects":
            self.objects.remove(key)
            self._placed.pop(key, None)
        else:
            self._table(section).pop(key.casefold(), None)

    # ------------------------------------------------------------------
    # the operations: each one change
    # ------------------------------------------------------------------

    def set_attribute(self, char_id: str, obj_id: str, name: str, value: Any) -> Any:
        """As in the sandbox world; one shared-world change."""
        return self._run(super().set_attribute, char_id, obj_id, name, value)

    def delete_attribute(self, char_id: str, obj_id: str, name: str) -> Any:
        """As in the sandbox world; one shared-world change."""
        return self._run(super().delete_attribute, char_id, obj_id, name)

    def add_tag(self, char_id: str, obj_id: str, tag: str, category: str | None = None) -> Any:
        """As in the sandbox world; one shared-world change."""
        return self._run(super().add_tag, char_id, obj_id, tag, category)

    def remove_tag(self, char_id: str, obj_id: str, tag: str,
                   category: str | None = None) -> Any:
        """As in the sandbox world; one shared-world change."""
        return self._run(super().remove_tag, char_id, obj_id, tag, category)

    def spawn_prototype(self, char_id: str, prototype_key: str, location: str | None = None,
                        overrides: Mapping[str, Any] | None = None) -> Any:
        """As in the sandbox world; one shared-world change."""
        return self._run(super().spawn_prototype, char_id, prototype_key, location, overrides)

    def create_object(self, char_id: str, key: str, description: str = "",
                      aliases: Iterable[str] = (), location: str | None = None) -> Any:
        """As in the sandbox world; one shared-world change."""
        return self._run(super().create_object, char_id, key, description, aliases, location)

    def dig(self, char_id: str, room_key: str, room_aliases: Iterable[str] = (),
            exit_key: str | None = None, exit_aliases: Iterable[str] = (),
            back_key: str | None = None, back_aliases: Iterable[str] = ()) -> Any:
        """As in the sandbox world; the room and its exits are one shared-world change."""
        return self._run(super().dig, char_id, room_key, room_aliases, exit_key, exit_aliases,
                         back_key, back_aliases)

    def set_description(self, char_id: str, obj_id: str, text: str) -> Any:
        """As in the sandbox world; one shared-world change."""
        return self._run(super().set_description, char_id, obj_id, text)

    def create_character(self, key: str, location: str | None = None,
                         permissions: Iterable[str] = ("Player",), char_id: str | None = None,
                         description: str = "") -> Any:
        """As in the sandbox world; one shared-world change."""
        return self._run(super().create_character, key, location, permissions, char_id,
                         description)

    def move_character(self, char_id: str, destination: str) -> Any:
        """As in the sandbox world: the move and what both rooms hear are one change."""
        return self._run(super().move_character, char_id, destination)

    def channel_subscribe(self, char_id: str, channel: str, subscribe: bool = True) -> Any:
        """As in the sandbox world; one shared-world change."""
        return self._run(super().channel_subscribe, char_id, channel, subscribe)

    def message_location(  # type: ignore[override]
        self, char_id: str, text: str, kind: str = "say", exclude: Iterable[str] = (),
        dedupe_key: str | None = None,
    ) -> defer.Deferred[list[str]]:
        """As in the sandbox world, but a Deferred firing with the hearers once durable.

        A message already stored under ``dedupe_key`` is not stored (nor heard) again.
        """
        return self._run(super().message_location, char_id, text, kind, exclude,
                         dedupe_key=dedupe_key)

    def message_character(  # type: ignore[override]
        self, char_id: str, target_id: str, text: str, kind: str = "whisper",
        dedupe_key: str | None = None,
    ) -> defer.Deferred[list[str]]:
        """As in the sandbox world, but a Deferred firing with ``[target]`` once durable
        (once per ``dedupe_key``)."""
        return self._run(super().message_character, char_id, target_id, text, kind,
                         dedupe_key=dedupe_key)

    def channel_send(  # type: ignore[override]
        self, char_id: str, channel: str, text: str, dedupe_key: str | None = None
    ) -> defer.Deferred[list[str]]:
        """As in the sandbox world, but a Deferred firing with the receivers once durable
        (once per ``dedupe_key``)."""
        return self._run(super().channel_send, char_id, channel, text, dedupe_key=dedupe_key)
