"""A shared world following the database: notified, polled, caught up one query at a time.

Part of :class:`~ai_tools.world.shared.SharedWorld` (which composes it as
``world.follower``).  Every worker follows the world from the database — on each
``NOTIFY``, after each of its own changes, and every ``poll_interval`` seconds in
case a notification was lost — and hands what is new to the
:class:`~ai_tools.world.replica.Replica`, which delivers the new messages in
order.  One catch-up query is in flight at a time; requests meanwhile coalesce.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import attrs
from twisted.internet import defer, task
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from ai_tools.json_types import JSONMapping, JSONObject
from ai_tools.world.replica import Key, Replica, SharedLoad, SharedSince

CATCH_UP_BATCH = 1000
"""Messages fetched per catch-up query (a backlog takes several)."""


class SharedStore(Protocol):
    """What a shared world calls of its :class:`~ai_tools.interfaces.ISharedWorldStore`
    (as mypy reads it: zope's interfaces declare methods without ``self``)."""

    def change_world(self, put: JSONMapping | None = None,
                     delete: dict[str, list[str]] | None = None, *,
                     expect: dict[Key, int | None] | None = None, touch: list[Key] = ...,
                     messages: list[JSONObject] = ...) -> defer.Deferred[JSONObject]: ...
    def load_shared_world(self, log_size: int) -> defer.Deferred[SharedLoad | None]: ...
    def world_since(self, clock: int, dirty: list[Key] = ...,
                    limit: int = ...) -> defer.Deferred[SharedSince]: ...
    def listen_world(self, on_change: Callable[[int], None],
                     on_connect: Callable[[], None]) -> Callable[[], None]: ...
    def prune_world_messages(self, keep: int) -> defer.Deferred[None]: ...


@attrs.define(eq=False)
class Follower:
    """Follows ``store`` for ``replica``: notifications, a poll every ``poll_interval``
    seconds (from :meth:`start`), pruning the messages to ``retention``."""

    store: SharedStore
    replica: Replica
    poll_interval: float = 5.0
    retention: int = 100_000
    dirty: set[Key] = attrs.field(factory=set)
    """Rows to read whatever their version (a change that did not commit wrote them)."""
    _pruned: int = attrs.field(default=0, init=False)
    _catching: bool = attrs.field(default=False, init=False)
    _wanted: bool = attrs.field(default=False, init=False)
    _caught_up: list[defer.Deferred[None]] = attrs.field(factory=list, init=False)
    _stop_listening: Callable[[], None] | None = attrs.field(default=None, init=False)
    _poll: task.LoopingCall | None = attrs.field(default=None, init=False)

    _log = Logger()

    def start(self, clock: IReactorTime) -> None:
        """Listen for the database's notifications and poll on ``clock`` (from the
        replica's world clock on)."""
        self._pruned = self.replica.clock
        self._stop_listening = self.store.listen_world(self._notified, self.poke)
        self._poll = task.LoopingCall(self._poll_once)
        self._poll.clock = clock
        self._poll.start(self.poll_interval, now=False)

    def stop(self) -> None:
        """Stop following (the store stays open); harmless twice."""
        stop, self._stop_listening = self._stop_listening, None
        if stop is not None:
            stop()
        poll, self._poll = self._poll, None
        if poll is not None and poll.running:
            poll.stop()

    def _notified(self, clock: int) -> None:
        if clock > self.replica.clock:
            self.poke()

    def _poll_once(self) -> None:
        self.poke()
        if self.replica.clock - self._pruned > max(1, self.retention // 10):
            self._pruned = self.replica.clock
            d = defer.maybeDeferred(self.store.prune_world_messages, self.retention)
            d.addErrback(lambda f: self._log.failure("Pruning world messages failed", f))

    def poke(self) -> None:
        """Catch up with the database soon (coalesced: one query in flight at a time)."""
        self._wanted = True
        if not self._catching:
            self._start_catch_up()

    def catch_up(self) -> defer.Deferred[None]:
        """Fires after a catch-up that started after this call (failures are logged)."""
        waiter: defer.Deferred[None] = defer.Deferred()
        self._caught_up.append(waiter)
        self.poke()
        return waiter

    def _start_catch_up(self) -> None:
        self._catching, self._wanted = True, False
        waiters, self._caught_up = self._caught_up, []
        dirty, self.dirty = sorted(self.dirty), set()
        d = defer.maybeDeferred(self.store.world_since, self.replica.clock, dirty,
                                CATCH_UP_BATCH)
        d.addCallbacks(self.replica.apply_since, self._catch_up_failed,
                       callbackArgs=(CATCH_UP_BATCH,), errbackArgs=(dirty,))
        d.addBoth(self._catch_up_done, waiters)

    def _catch_up_failed(self, failure: Failure, dirty: list[Key]) -> None:
        self.dirty.update(dirty)
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
