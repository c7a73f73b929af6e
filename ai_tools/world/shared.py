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

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TypeVar, cast

import attrs
from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from ai_tools.default_reactor import global_reactor
from ai_tools.errors import WorldConflict
from ai_tools.json_types import JSONMapping, JSONObject
from ai_tools.world.following import CATCH_UP_BATCH, Follower, SharedStore
from ai_tools.world.messages import WorldMessage
from ai_tools.world.replica import Change, Key, Replica
from ai_tools.world.sandbox import SandboxWorld, seed_data

__all__ = ["CATCH_UP_BATCH", "MAX_ATTEMPTS", "SharedWorld"]

MAX_ATTEMPTS = 5
"""How many times an operation is computed again after a conflict before it fails."""

_T = TypeVar("_T")


@attrs.define(eq=False)
class SharedWorld(SandboxWorld):
    """A sandbox world kept in an ISharedWorldStore and followed from it (see the module).

    Build it with :meth:`load`; call :meth:`stop` when done.  ``poll_interval``
    is the safety net's period (seconds); ``retention`` how many messages the
    database keeps (the oldest are pruned as the clock moves on).  Its parts
    besides the sandbox world's: ``replica`` (the rows' versions) and ``follower``
    (following the database).
    """

    poll_interval: float = 5.0
    retention: int = 100_000
    conflicts: int = attrs.field(default=0, init=False)
    """Operations computed again because another worker changed their rows."""
    replica: Replica = attrs.field(init=False)
    follower: Follower = attrs.field(init=False)
    _change: Change | None = attrs.field(default=None, init=False)
    _busy: dict[Key, defer.Deferred[bool]] = attrs.field(factory=dict, init=False)

    _log = Logger()

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        # Every object or channel lookup an operation (or a command) relies on is one of
        # its reads.
        self.objects.on_read = lambda obj_id: self._depend("objects", obj_id)
        self.channels.on_read = lambda key: self._depend("channels", key)
        self.replica = Replica(self)
        self.follower = Follower(self._shared, self.replica, self.poll_interval,
                                 self.retention)

    @property
    def _shared(self) -> SharedStore:
        return cast(SharedStore, self.store)

    # ------------------------------------------------------------------
    # loading, following, stopping
    # ------------------------------------------------------------------

    @classmethod
    def load(  # type: ignore[override]
        cls,
        store: SharedStore,
        seed: str | Path | JSONMapping | None = None,
        clock: IReactorTime | None = None,
        log_size: int = 200,
        poll_interval: float = 5.0,
    ) -> defer.Deferred[SharedWorld]:
        """The world held in ``store``, seeded from ``seed`` if it holds none yet; following.

        Several workers may start at once: one seeds, the others load its world.
        """
        world = cls(store=store, clock=clock, log_size=log_size,  # type: ignore[arg-type]
                    poll_interval=poll_interval)
        return defer.ensureDeferred(world._load(seed))

    async def _load(self, seed: str | Path | JSONMapping | None) -> SharedWorld:
        for _ in range(MAX_ATTEMPTS):
            data = await self._shared.load_shared_world(self.log_size)
            if data is not None:
                self.replica.take(data)
                self._log.info("Shared world {name} loaded: {count} objects at clock {clock}",
                               name=self.meta.get("name"), count=len(self.objects),
                               clock=self.replica.clock)
                self.follower.start(self._reactor())  # (the global one looked up late)
                return self
            self.populate(seed_data(seed))
            rows = self.snapshot()
            expect: dict[Key, int | None] = dict.fromkeys(self._keys())  # none may exist
            try:
                await self._shared.change_world(rows, expect=expect)
            except WorldConflict:
                continue  # another worker seeded first: load its world
            self._log.info("Shared world {name} seeded", name=self.meta.get("name"))
        raise WorldConflict("could not load the shared world: it kept changing while loading")

    def _keys(self) -> list[Key]:
        """Every row of the world as it is in memory (what seeding it writes)."""
        return [*(("meta", key) for key in self.meta),
                *(("objects", obj.id) for obj in self.objects.values()),
                *(("channels", channel.key) for channel in self.channels),
                *(("prototypes", proto.key) for proto in self.prototypes.values()),
                *(("help", entry.key) for entry in self.help_entries.values())]

    def _reactor(self) -> IReactorTime:
        if self.clock is not None and hasattr(self.clock, "callLater"):
            return cast(IReactorTime, self.clock)
        return cast(IReactorTime, global_reactor())

    def stop(self) -> None:
        """Stop following the database (the store stays open); harmless twice."""
        self.follower.stop()

    def catch_up(self) -> defer.Deferred[None]:
        """Fires after a catch-up that started after this call (failures are logged).

        Then the replica holds every change committed before the call, and
        the listeners got every message committed before it.
        """
        return self.follower.catch_up()

    @property
    def clock_value(self) -> int:
        """The world clock value this replica has caught up to."""
        return self.replica.clock

    # ------------------------------------------------------------------
    # capturing what an operation does
    # ------------------------------------------------------------------

    def _depend(self, section: str, key: str | None) -> None:
        if self._change is not None and key is not None:
            self._change.reads.add((section, key))

    def write_rows(
        self, put: JSONMapping, delete: Mapping[str, list[str]] | None = None
    ) -> defer.Deferred[None]:
        """Captured into the operation's change (written when it commits)."""
        change = self._current("write")
        change.add(put, delete)
        waiter: defer.Deferred[None] = defer.Deferred()
        change.waiters.append(waiter)
        return waiter

    def _deliver(self, message: WorldMessage, receivers: list[str]) -> None:
        self._current("message").messages.append((message, list(receivers)))

    def _current(self, what: str) -> Change:
        if self._change is None:
            raise RuntimeError(f"SharedWorld: a {what} outside a world operation")
        return self._change

    # ------------------------------------------------------------------
    # running an operation as a change
    # ------------------------------------------------------------------

    def _run(self, fn: Callable[..., _T | defer.Deferred[_T]], *args: object,
             dedupe_key: str | None = None) -> defer.Deferred[_T]:
        """Run ``fn(*args)`` (a sandbox operation) as one change; fires once committed.

        ``dedupe_key`` keys the change's messages: one committed already under
        that key (a call made again after a failover) is not stored again.
        """
        if self._change is not None:  # called by another operation: part of its change
            return defer.maybeDeferred(fn, *args)  # type: ignore[call-overload]
        return defer.ensureDeferred(self._attempts(fn, args, dedupe_key))

    async def _attempts(self, fn: Callable[..., _T | defer.Deferred[_T]],
                        args: tuple[object, ...], dedupe_key: str | None) -> _T:
        for _ in range(MAX_ATTEMPTS):
            change = Change(dedupe_key=dedupe_key)
            self._change = change
            try:
                outcome: defer.Deferred[_T] = defer.maybeDeferred(fn, *args)  # type: ignore
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
                self.follower.poke()
                raise
            return await outcome
        raise WorldConflict(f"the world kept changing under this operation "
                            f"({MAX_ATTEMPTS} attempts)")

    def _abandon(self, change: Change, failure: Failure,
                 outcome: defer.Deferred[_T]) -> None:
        """A change that did not commit: its rows are read again, its waiters fail."""
        self.follower.dirty.update(change.written())
        self.follower.dirty.update(self.replica.moved_places(change))
        outcome.addErrback(lambda _: None)
        change.settle(failure)

    async def _commit(self, change: Change) -> None:
        """Wait for earlier changes of the same rows, then commit this one."""
        keys = change.written() | change.reads
        await self._after_busy(keys)
        touch = self.replica.moved_places(change)
        written = change.written() | touch
        expect = {key: self.replica.versions.get(key) for key in keys | touch}
        done: defer.Deferred[bool] = defer.Deferred()
        for key in written:
            self._busy[key] = done
        try:
            outcome = await self._shared.change_world(
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
        self.replica.committed(change, int(outcome["clock"]), touch)  # type: ignore[arg-type]
        done.callback(True)
        self.follower.poke()  # deliver its messages (and whatever else is new) in order

    async def _after_busy(self, keys: set[Key]) -> None:
        """Wait for this worker's changes in flight on ``keys``; WorldConflict if one failed."""
        while True:
            blockers = {self._busy[key] for key in keys if key in self._busy}
            if not blockers:
                return
            results = await defer.gatherResults(list(blockers))
            if not all(results):
                raise WorldConflict("an earlier change of the same rows did not commit")

    # ------------------------------------------------------------------
    # the operations: each one change
    # ------------------------------------------------------------------

    def set_attribute(self, char_id: str, obj_id: str, name: str,
                      value: object) -> defer.Deferred[JSONObject]:
        """As in the sandbox world; one shared-world change."""
        return self._run(super().set_attribute, char_id, obj_id, name, value)

    def delete_attribute(self, char_id: str, obj_id: str, name: str) -> defer.Deferred[bool]:
        """As in the sandbox world; one shared-world change."""
        return self._run(super().delete_attribute, char_id, obj_id, name)

    def add_tag(self, char_id: str, obj_id: str, tag: str,
                category: str | None = None) -> defer.Deferred[JSONObject]:
        """As in the sandbox world; one shared-world change."""
        return self._run(super().add_tag, char_id, obj_id, tag, category)

    def remove_tag(self, char_id: str, obj_id: str, tag: str,
                   category: str | None = None) -> defer.Deferred[bool]:
        """As in the sandbox world; one shared-world change."""
        return self._run(super().remove_tag, char_id, obj_id, tag, category)

    def spawn_prototype(self, char_id: str, prototype_key: str, location: str | None = None,
                        overrides: JSONMapping | None = None) -> defer.Deferred[JSONObject]:
        """As in the sandbox world; one shared-world change."""
        return self._run(super().spawn_prototype, char_id, prototype_key, location, overrides)

    def create_object(self, char_id: str, key: str, description: str = "",
                      aliases: Iterable[str] = (),
                      location: str | None = None) -> defer.Deferred[JSONObject]:
        """As in the sandbox world; one shared-world change."""
        return self._run(super().create_object, char_id, key, description, aliases, location)

    def dig(self, char_id: str, room_key: str, room_aliases: Iterable[str] = (),
            exit_key: str | None = None, exit_aliases: Iterable[str] = (),
            back_key: str | None = None,
            back_aliases: Iterable[str] = ()) -> defer.Deferred[JSONObject]:
        """As in the sandbox world; the room and its exits are one shared-world change."""
        return self._run(super().dig, char_id, room_key, room_aliases, exit_key, exit_aliases,
                         back_key, back_aliases)

    def set_description(self, char_id: str, obj_id: str,
                        text: str) -> defer.Deferred[JSONObject]:
        """As in the sandbox world; one shared-world change."""
        return self._run(super().set_description, char_id, obj_id, text)

    def create_character(self, key: str, location: str | None = None,
                         permissions: Iterable[str] = ("Player",), char_id: str | None = None,
                         description: str = "") -> defer.Deferred[JSONObject]:
        """As in the sandbox world; one shared-world change."""
        return self._run(super().create_character, key, location, permissions, char_id,
                         description)

    def move_character(self, char_id: str, destination: str) -> defer.Deferred[JSONObject]:
        """As in the sandbox world: the move and what both rooms hear are one change."""
        return self._run(super().move_character, char_id, destination)

    def channel_subscribe(self, char_id: str, channel: str,
                          subscribe: bool = True) -> defer.Deferred[bool]:
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
