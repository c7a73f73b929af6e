
"""One timer for many assistants: the tick scheduler behind :class:`AssistantService`.

Ten thousand assistants must not mean ten thousand timers.  A single
``LoopingCall`` wakes every ``interval`` seconds and starts the assistants that
are *due*; each assistant has its own tick rate (for example 5 s awake, 60 s
asleep), read through ``rate_of(name)`` whenever its next due time is computed.

Rules, in order of importance:

* an assistant is never started while its previous tick is still running;
* at most ``max_concurrent`` ticks run at once;
* assistants with pending events (marked with :meth:`TickScheduler.notify`) go
  first, in the order they were notified;
* the others go oldest-due first, so an assistant held back by the cap is at the
  front of the queue next time (round-robin, nobody starves).

Due times live in a heap, so a wake-up costs ``O(k log n)`` for the ``k``
assistants actually due, not a scan of all ``n``.  Entries made stale by
:meth:`remove` or :meth:`notify` are discarded lazily when they reach the top.

The tick function is called with the assistant's name and returns a value or a
Deferred.  The scheduler never lets one of its failures escape into the
``LoopingCall`` (which would stop it for good): failures are logged and the
assistant is rescheduled like any other.
"""

from __future__ import annotations

import functools
import heapq
import itertools
from collections.abc import Callable

import attrs
from twisted.internet import defer, task
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

_GOLDEN = 0.6180339887498949

def _cancel_other(other: defer.Deferred[object], _: defer.Deferred[object]) -> None:
    """Canceller of a Deferred standing for ``other``: cancel ``other``."""
    other.cancel()


def _hand_on(outcome: object, waiters: list[defer.Deferred[object]]) -> None:
    """Give a tick's outcome to the callers who joined it (those who gave up excepted)."""
    for waiter in waiters:
        if waiter.called:  # cancelled by its caller
            continue
        if isinstance(outcome, Failure):
            waiter.errback(outcome)
        else:
            waiter.callback(outcome)


TickFunction = Callable[[str], object]
"""Runs one tick of the named assistant; returns a value or a Deferred."""


@attrs.define(eq=False)
class _Entry:
    """Scheduling record of one assistant."""

    name: str
    due: float
    token: int = -1
    """Token of its one valid heap item (-1: not in the heap)."""
    running: defer.Deferred[object] | None = None
    ticks_started: int = 0
    joined: list[defer.Deferred[object]] = attrs.field(factory=list)
    """Callers of ``run_now`` waiting for the tick in flight (see :meth:`run_now`)."""


@attrs.define(eq=False)
class TickScheduler:
    """Starts due assistants from one ``LoopingCall``; see the module docstring.

    ``clock`` is the reactor (or a ``task.Clock`` in tests).  ``rate_of(name)``
    returns the assistant's current tick period in seconds.
    """

    clock: IReactorTime
    tick: TickFunction
    rate_of: Callable[[str], float]
    interval: float = 1.0
    max_concurrent: int = 100
    stagger: bool = True

    _log = Logger()

    _entries: dict[str, _Entry] = attrs.field(init=False, factory=dict)
    _heap: list[tuple[float, int, str]] = attrs.field(init=False, factory=list)
    _urgent: dict[str, None] = attrs.field(init=False, factory=dict)
    _running: dict[str, defer.Deferred[object]] = attrs.field(init=False, factory=dict)
    _seq: itertools.count[int] = attrs.field(init=False, factory=itertools.count)
    _added: int = attrs.field(init=False, default=0)
    _loop: task.LoopingCall | None = attrs.field(init=False, default=None)
    _fill_call: IDelayedCall | None = attrs.field(init=False, default=None)
    _idle_waiters: list[defer.Deferred[None]] = attrs.field(init=False, factory=list)
    _filling: bool = attrs.field(init=False, default=False)
    wakeups: int = attrs.field(init=False, default=0)
    """How many times the timer fired (for status and benchmarks)."""

    def __attrs_post_init__(self) -> None:
        if self.interval <= 0:
            raise ValueError(f"interval must be positive, not {self.interval!r}")
        if self.max_concurrent < 1:
            raise ValueError(f"max_concurrent must be at least 1, not {self.max_concurrent!r}")

    # -- membership ---------------------------------------------------------

    def add(self, name: str, first_due: float | None = None) -> None:
        """Schedule ``name``; its first tick is due at ``first_due`` (clock seconds).

        Without ``first_due`` the first ticks of many assistants added together
        are spread over one tick period (``stagger``), so ten thousand
        assistants do not all fall due in the same second.
        """
        if name in self._entries:
            raise ValueError(f"assistant {name!r} is already scheduled")
        now = self.clock.seconds()
        if first_due is None:
            offset = 0.0
            if self.stagger:
                offset = self._rate(name) * ((self._added * _GOLDEN) % 1.0)
            first_due = now + offset
        self._added += 1
        entry = _Entry(name=name, due=first_due)
        self._entries[name] = entry
        # Removed and added again while its old tick still runs: wait for that tick.
        entry.running = self._running.get(name)
        self._push(entry)

    def remove(self, name: str) -> None:
        """Stop scheduling ``name`` (a tick in flight is left to finish)."""
        entry = self._entries.pop(name, None)
        if entry is not None:
            entry.token = -1
        self._urgent.pop(name, None)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def notify(self, name: str) -> None:
        """Mark ``name`` as having pending events: it goes first at the next wake-up.

        If its tick is running, it is started again as soon as that tick ends.
        """
        if name in self._entries:
            self._urgent[name] = None
            self._schedule_fill()

    def reschedule(self, name: str, due: float | None = None) -> None:
        """Move ``name``'s next tick to ``due`` (default: now + its current rate).

        Used when the rate changes (falling asleep, waking up).  A running
        assistant is rescheduled when its tick ends anyway.
        """
        entry = self._entries.get(name)
        if entry is None or entry.running is not None:
            return
        entry.due = self.clock.seconds() + self._rate(name) if due is None else due
        self._push(entry)

    def due_at(self, name: str) -> float | None:
        """When ``name`` is next due (None if unknown or running)."""
        entry = self._entries.get(name)
        if entry is None or entry.running is not None:
            return None
        return entry.due

    def is_running(self, name: str) -> bool:
        """Whether a tick of ``name`` started here is in flight."""
        return name in self._running

    def running(self) -> dict[str, defer.Deferred[object]]:
        """The ticks in flight by assistant name (a copy)."""
        return dict(self._running)

    # -- the timer ----------------------------------------------------------

    def start(self) -> None:
        """Start the timer (idempotent)."""
        if self._loop is not None and self._loop.running:
            return
        loop = task.LoopingCall(self._wake)
        loop.clock = self.clock
        self._loop = loop
        d = loop.start(self.interval, now=True)
        d.addErrback(self._loop_died)

    def stop(self) -> None:
        """Stop the timer; ticks in flight go on (see :meth:`running`)."""
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        self._loop = None
        if self._fill_call is not None and self._fill_call.active():
            self._fill_call.cancel()
        self._fill_call = None

    @property
    def started(self) -> bool:
        """Whether the timer runs."""
        return self._loop is not None and self._loop.running

    def _loop_died(self, failure: Failure) -> None:
        # _wake catches everything; this is the last line of defence.
        self._log.failure("tick scheduler timer stopped unexpectedly", failure)

    def _wake(self) -> None:
        """IDelayedCall callback: start what is due.  Never raises."""
        self.wakeups += 1
        try:
            self.start_due()
        except Exception:
            self._log.failure("tick scheduler wake-up failed")

    def start_due(self) -> int:
        """Start the due assistants now, within the cap; returns how many started."""
        self._filling = True
        try:
            started = self._start_due()
        finally:
            self._filling = False
        if self._urgent and any(
            (entry := self._entries.get(name)) is not None and entry.running is None
            for name in self._urgent
        ):
            # Notified while we were starting others (e.g. a tick that finished at
            # once and queued more work): pick them up at the next reactor turn.
            self._schedule_fill()
        return started

    def _start_due(self) -> int:
        # The cap counts ticks still running: an idle tick that finishes at once
        # does not use up a slot, so ten thousand idle assistants fit one wake-up.
        cap = self.max_concurrent
        running = self._running
        started = 0
        if self._urgent:
            for name in list(self._urgent):
                if len(running) >= cap:
                    break
                entry = self._entries.get(name)
                if entry is None:
                    del self._urgent[name]
                    continue
                if entry.running is not None:
                    continue  # started again when its tick ends
                del self._urgent[name]
                self._start(entry, consume=True)
                started += 1
        now = self.clock.seconds()
        heap = self._heap
        while heap and len(running) < cap and heap[0][0] <= now:
            _due, token, name = heapq.heappop(heap)
            entry = self._entries.get(name)
            if entry is None or entry.token != token or entry.running is not None:
                continue  # stale
            self._start(entry, consume=True)
            started += 1
        return started

    def run_now(self, name: str) -> defer.Deferred[object]:
        """Run ``name``'s tick at once, outside the timer (``run_tick``).

        The concurrency cap does not apply to an explicit request.  If a tick
        is already running, nothing starts: the result is that tick's outcome
        once it ends (an event just queued started it, so "run a tick now"
        gets the tick that answers it).  Cancelling the result leaves that
        tick running.  An assistant not scheduled here is handed to the tick
        function, whose guard decides.
        """
        entry = self._entries.get(name)
        if entry is None:
            return self._call(name)
        if entry.running is not None:
            joined: defer.Deferred[object] = defer.Deferred()
            entry.joined.append(joined)
            return joined
        self._urgent.pop(name, None)
        return self._start(entry)

    # -- internals ----------------------------------------------------------

    def _rate(self, name: str) -> float:
        try:
            rate = float(self.rate_of(name))
        except Exception:
            self._log.failure("tick rate of {assistant} unavailable; using 60 s", assistant=name)
            return 60.0
        return rate if rate > 0 else self.interval

    def _push(self, entry: _Entry) -> None:
        heap = self._heap
        entry.token = next(self._seq)
        heapq.heappush(heap, (entry.due, entry.token, entry.name))
        if len(heap) > 2 * len(self._entries) + 64:
            self._compact()

    def _compact(self) -> None:
        """Drop stale heap entries (left by remove/reschedule) so the heap stays O(n)."""
        entries = self._entries
        self._heap = [
            item for item in self._heap
            if (entry := entries.get(item[2])) is not None and entry.token == item[1]
        ]
        heapq.heapify(self._heap)

    def _call(self, name: str) -> defer.Deferred[object]:
        try:
            return defer.maybeDeferred(self.tick, name)
        except Exception:  # maybeDeferred already catches; belt and braces
            return defer.fail(Failure())

    def _start(self, entry: _Entry, consume: bool = False) -> defer.Deferred[object]:
        """Call the tick function for ``entry``; reschedule it when it ends.

        Returns a Deferred of the tick's outcome for the caller; the tick's own
        Deferred is kept in :meth:`running` (cancelling it cancels the tick).
        With ``consume`` (timer starts, nobody waits) a failure is logged here.
        """
        entry.token = -1  # any heap item for it is now stale
        entry.ticks_started += 1
        started_at = self.clock.seconds()
        d = self._call(entry.name)
        if d.called:
            # Finished synchronously (an idle tick): no bookkeeping round trip.
            self._finished(entry, started_at)
            if consume:
                d.addErrback(self._tick_failed, entry.name)
            return d
        entry.running = d
        self._running[entry.name] = d
        # A started tick costs no closures: its bookkeeping is a bound method with arguments.
        result: defer.Deferred[object] | None = (
            None if consume else defer.Deferred(functools.partial(_cancel_other, d)))
        d.addBoth(self._tick_done, entry, d, started_at, result)
        return d if result is None else result

    def _tick_done(
        self,
        outcome: object,
        entry: _Entry,
        d: defer.Deferred[object],
        started_at: float,
        result: defer.Deferred[object] | None,
    ) -> object:
        """A started tick ended: free its slot, reschedule it, hand on its outcome."""
        self._running.pop(entry.name, None)
        entry.running = None
        joined, entry.joined = entry.joined, []
        current = self._entries.get(entry.name)
        if current is not None and current is not entry and current.running is d:
            current.running = None  # re-added meanwhile: its turn now
            joined, current.joined = joined + current.joined, []
            self._push(current)
            self._schedule_fill()
        _hand_on(outcome, joined)
        self._finished(entry, started_at)
        if not self._running:
            waiters, self._idle_waiters = self._idle_waiters, []
            for waiter in waiters:
                waiter.callback(None)
        if result is None:  # started by the timer: nobody waits, failures are logged here
            if isinstance(outcome, Failure):
                self._tick_failed(outcome, entry.name)
                return None
            return outcome
        if isinstance(outcome, Failure):
            result.errback(outcome)
            return None  # handed to ``result``; not left unhandled here
        result.callback(outcome)
        return outcome

    def _tick_failed(self, failure: Failure, name: str) -> None:
        if failure.check(defer.CancelledError):
            return
        self._log.failure("tick of {assistant} failed", failure, assistant=name)

    def when_idle(self) -> defer.Deferred[None]:
        """A Deferred firing once no tick started here is in flight."""
        if not self._running:
            return defer.succeed(None)
        waiter: defer.Deferred[None] = defer.Deferred()
        self._idle_waiters.append(waiter)
        return waiter

    def cancel_running(self) -> int:
        """Cancel every tick in flight; returns how many were cancelled."""
        running = list(self._running.values())
        for d in running:
            d.cancel()
        return len(running)

    def _finished(self, entry: _Entry, started_at: float) -> None:
        if self._entries.get(entry.name) is not entry:
            return  # removed while running
        now = self.clock.seconds()
        # Count the period from when the tick was due, not from when the timer
        # got to it: otherwise every tick slips a little and, once past a
        # wake-up, waits a whole extra interval.  A tick started early (events,
        # run_now) counts from its start.
        base = min(entry.due, started_at)
        entry.due = max(base + self._rate(entry.name), now)
        self._push(entry)
        if entry.name in self._urgent or (self._heap and self._heap[0][0] <= now):
            self._schedule_fill()

    def _schedule_fill(self) -> None:
        """Start waiting work at the next reactor turn instead of the next wake-up."""
        if not self.started or self._filling or self._fill_call is not None:
            return
        if len(self._running) >= self.max_concurrent:
            return

        def fill() -> None:
            self._fill_call = None
            try:
                self.start_due()
            except Exception:
                self._log.failure("tick scheduler fill failed")

        self._fill_call = self.clock.callLater(0, fill)
