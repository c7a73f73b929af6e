"""Group commit of assistant state: many checkpoints, few transactions.

After every loop iteration an assistant's state must be durable before its
next model call.  With a thousand assistants that is a thousand writes per
round of model answers; written one by one, SQLite's single writer would be
the bottleneck.  :class:`StateWriter` batches them:

* :meth:`StateWriter.save` queues a name and returns a Deferred that fires once
  that assistant's state is on disk (or fails if it could not be written);
* requests made while a transaction is in flight (or within the same reactor
  turn) are written together by one ``IStore.save_many`` call;
* the state is taken (``state_of(name)``) when the batch is written, not when
  it was requested, so a batch always holds each assistant's latest state and
  one request per assistant;
* if a batch fails, each of its assistants is retried alone, so one state that
  cannot be written (not JSON-serialisable, say) fails only its own requests.

A store write that fails never leaves a half-written state: ``save_many``
is one transaction (all or none).

:meth:`StateWriter.save_soon` is for bookkeeping that may lag (counters, the
last tick's summary): it asks for a write within ``lazy_delay`` seconds and is
satisfied by any save of the same assistant in between, so it usually costs
nothing extra.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import attrs
from twisted.internet import defer
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from ai_tools.interfaces import IStore
from ai_tools.json_types import JSONMapping

__all__ = ["StateWriter"]

_Waiters = defer.Deferred[None] | list[defer.Deferred[None]]


@attrs.define(eq=False)
class StateWriter:
    """Batches state saves of many assistants into shared transactions."""

    store: IStore
    state_of: Callable[[str], JSONMapping | None]
    """Returns the current state dict of an assistant (None: it is gone, skip it)."""
    clock: IReactorTime
    max_batch: int = 1000
    lazy_delay: float = 1.0
    """Longest wait of a :meth:`save_soon` request."""
    save_options: Callable[[Mapping[str, JSONMapping]], JSONMapping] | None = None
    """Extra keyword arguments of each ``save_many`` call, given the states it writes:
    the lease fence of workers sharing the assistants (:mod:`ai_tools.service.leases`)."""

    _log = Logger()

    _queued: dict[str, _Waiters] = attrs.field(init=False, factory=dict)
    """Waiters per queued assistant: one Deferred (the usual case) or a list of them."""
    _in_flight: bool = attrs.field(init=False, default=False)
    _call: IDelayedCall | None = attrs.field(init=False, default=None)
    _idle_waiters: list[defer.Deferred[None]] = attrs.field(init=False, factory=list)
    _lazy: dict[str, None] = attrs.field(init=False, factory=dict)
    _lazy_call: IDelayedCall | None = attrs.field(init=False, default=None)
    transactions: int = attrs.field(init=False, default=0)
    """Transactions written (for status and benchmarks)."""
    write_observers: list[Callable[[float, bool], object]] = attrs.field(init=False,
                                                                        factory=list)
    """Called after every batch with its seconds and whether a state in it failed (metrics)."""
    states_written: int = attrs.field(init=False, default=0)
    failures: int = attrs.field(init=False, default=0)

    def save(self, name: str) -> defer.Deferred[None]:
        """Queue ``name``'s state; fires once it is durable (fails if it could not be)."""
        d: defer.Deferred[None] = defer.Deferred()
        queued = self._queued.get(name)
        if queued is None:
            self._queued[name] = d
        elif isinstance(queued, list):
            queued.append(d)
        else:
            self._queued[name] = [queued, d]
        if self._lazy:
            self._lazy.pop(name, None)  # this write covers a lazy request
        self._kick()
        return d

    def save_soon(self, name: str) -> None:
        """Write ``name``'s state within ``lazy_delay`` s, unless a save does it first.

        Failures are counted and logged here (nobody waits for this write).
        """
        if name in self._queued:
            return
        self._lazy[name] = None
        if self._lazy_call is None:
            self._lazy_call = self.clock.callLater(self.lazy_delay, self._save_lazy)

    def _save_lazy(self) -> None:
        self._lazy_call = None
        names, self._lazy = list(self._lazy), {}
        for name in names:
            self.save(name).addErrback(self._lazy_failed, name)

    def _lazy_failed(self, failure: Failure, name: str) -> None:
        self._log.error("Could not save the state of {assistant}: {error}", assistant=name,
                        error=failure.getErrorMessage())

    @property
    def pending(self) -> int:
        """Assistants waiting to be written (lazy requests included)."""
        return len(self._queued) + len(self._lazy)

    def flush(self) -> defer.Deferred[None]:
        """Fires once everything queued so far (and in flight) is written or failed."""
        if self._lazy_call is not None:
            self._lazy_call.cancel()
            self._save_lazy()
        if not self._queued and not self._in_flight:
            return defer.succeed(None)
        d: defer.Deferred[None] = defer.Deferred()
        self._idle_waiters.append(d)
        if self._call is not None and self._call.active():
            self._call.cancel()
            self._call = None
            self._write_batch()
        return d

    def _save_many(self, states: Mapping[str, JSONMapping]) -> defer.Deferred[None]:
        store: IStore = self.store
        if self.save_options is None:
            return store.save_many(states)
        return store.save_many(states, **self.save_options(states))

    def _kick(self) -> None:
        if self._in_flight or self._call is not None:
            return
        # Wait one reactor turn so that saves requested together share a transaction.
        self._call = self.clock.callLater(0, self._write_batch)

    def _write_batch(self) -> None:
        self._call = None
        if self._in_flight or not self._queued:
            self._check_idle()
            return
        names = list(self._queued)[: self.max_batch]
        waiters = {name: self._queued.pop(name) for name in names}
        states: dict[str, JSONMapping] = {}
        for name in names:
            try:
                state = self.state_of(name)
            except Exception:
                self._fail({name: waiters.pop(name)}, Failure())
                continue
            if state is None:
                self._succeed({name: waiters.pop(name)})
            else:
                states[name] = state
        if not states:
            self._after_batch()
            return
        self._in_flight = True
        started, failures = self.clock.seconds(), self.failures
        d = defer.maybeDeferred(self._save_many, states)
        d.addCallbacks(self._batch_written, self._batch_failed,
                       callbackArgs=(states, waiters), errbackArgs=(states, waiters))
        d.addErrback(self._log_bug)
        d.addBoth(self._timed, started, failures)
        d.addBoth(self._done)

    def _batch_written(
        self, _: object, states: Mapping[str, JSONMapping], waiters: dict[str, _Waiters]
    ) -> None:
        self.transactions += 1
        self.states_written += len(states)
        self._succeed(waiters)

    def _batch_failed(
        self,
        failure: Failure,
        states: Mapping[str, JSONMapping],
        waiters: dict[str, _Waiters],
    ) -> defer.Deferred[None] | None:
        if len(states) == 1:
            self.failures += 1
            self._fail(waiters, failure)
            return None
        # Isolate the culprit: write each state alone.
        singles = [
            defer.maybeDeferred(self._save_many, {name: state}).addCallbacks(
                self._batch_written, self._batch_failed,
                callbackArgs=({name: state}, {name: waiters[name]}),
                errbackArgs=({name: state}, {name: waiters[name]}),
            )
            for name, state in states.items()
        ]
        return defer.DeferredList(singles, consumeErrors=True).addCallback(lambda _: None)

    @staticmethod
    def _succeed(waiters: Mapping[str, _Waiters]) -> None:
        for ds in waiters.values():
            if isinstance(ds, list):
                for d in ds:
                    d.callback(None)
            else:
                ds.callback(None)

    @staticmethod
    def _fail(waiters: Mapping[str, _Waiters], failure: Failure) -> None:
        for ds in waiters.values():
            for d in ds if isinstance(ds, list) else (ds,):
                d.errback(failure)

    def _timed(self, result: object, started: float, failures: int) -> object:
        seconds = self.clock.seconds() - started
        for observer in self.write_observers:
            try:
                observer(seconds, self.failures > failures)
            except Exception:
                self._log.failure("state write observer failed")
        return result

    def _log_bug(self, failure: Failure) -> None:
        self._log.failure("state writer bookkeeping failed", failure)

    def _done(self, _: object) -> None:
        self._in_flight = False
        self._after_batch()

    def _after_batch(self) -> None:
        if self._queued:
            self._kick()
        else:
            self._check_idle()

    def _check_idle(self) -> None:
        if self._queued or self._in_flight:
            return
        waiters, self._idle_waiters = self._idle_waiters, []
        for d in waiters:
            d.callback(None)
