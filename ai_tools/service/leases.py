"""Several worker processes share the assistants: one lease per assistant, with an epoch.

With the PostgreSQL store, every worker runs the same configuration; the
:class:`LeaseManager` of each decides which assistants *this* process runs:

* **A lease per assistant** (``assistant_leases``): a worker runs an
  assistant only while it holds its lease; taking a lease from another worker
  (free, expired or released) raises its **epoch**.  Each round (every
  ``interval`` seconds) the manager renews its leases and marks the worker
  alive (``lease_workers``), both for ``ttl`` seconds, in one transaction.
* **Fencing.** Every state write of an owned assistant carries the epoch
  (``save_many(fence=(worker, {name: epoch}))``, through the service's
  :class:`~ai_tools.service.state_writer.StateWriter`): a worker that lost a
  lease — paused past ``ttl``, cut off from the database — cannot overwrite
  the new owner; its write fails with :class:`~ai_tools.errors.LeaseLost`.  A
  lease found lost at a round, or all of them when no round succeeded before
  they expire, stops the assistant here at once, without a write.
* **Spreading.** The live workers, sorted by name, each aim at an even share
  (the first ``n % workers`` one more).  A worker below its share takes free
  and expired leases; above it, it lets go of assistants whose tick is not
  running: an assistant moves only between ticks (saved, then released).
* **Hearing across a move.** Each fenced write also records the last world
  message the state holds (``heard``); the next owner hears again what the
  character heard after it (:meth:`AssistantService.hear`), so an event heard
  by a worker that died before saving it, or while nobody owned the assistant,
  is not lost.
* **Stopping** (SIGTERM): the service stops ticking, saves every state (still
  fenced), then :meth:`stopped` releases every lease at once: the other
  workers take the assistants at their next round, without waiting for ``ttl``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
from twisted.internet import defer, task
from twisted.logger import Logger
from twisted.python.failure import Failure

from ai_tools.service.assistant import AssistantConfig

__all__ = ["LeaseManager", "fair_share"]

log = Logger()


def fair_share(count: int, workers: Sequence[str], worker: str) -> int:
    """How many of ``count`` assistants ``worker`` should run among the live ``workers``.

    ``workers`` is sorted; the first ``count % len(workers)`` get one more, so
    the shares add up to ``count`` and every worker computes the same split.
    """
    if worker not in workers:
        workers = sorted([*workers, worker])
    base, extra = divmod(count, len(workers))
    return base + (1 if workers.index(worker) < extra else 0)


@attrs.define(eq=False)
class LeaseManager:
    """Takes, renews and gives up this worker's leases; see the module docstring.

    ``service`` is the :class:`~ai_tools.service.service.AssistantService` that
    ticks the owned assistants, ``store`` the PostgreSQL store, ``configs``
    every assistant the workers share.
    """

    service: Any
    store: Any
    configs: Sequence[AssistantConfig]
    worker: str
    ttl: float = 15.0
    """Seconds a lease (and a worker's liveness) lasts without renewal."""
    interval: float = 5.0
    """Seconds between rounds (renewals, taking and giving up assistants)."""
    keep: float = 600.0
    """Seconds the write log and dead workers' rows are kept."""
    clock: Any = None
    """What tells the time of leases and runs the rounds' timer: the store's clock
    (lease expiries are its seconds); default the service's."""

    epochs: dict[str, int] = attrs.field(init=False, factory=dict)
    """The leases held: ``{assistant: epoch}``."""
    heard: dict[str, int] = attrs.field(init=False, factory=dict)
    """The last world message each owned assistant has heard (its state holds it)."""
    moves: dict[str, int] = attrs.field(init=False, factory=lambda: dict.fromkeys(
        ("taken", "given", "lost"), 0))
    _unhear: dict[str, Any] = attrs.field(init=False, factory=dict)
    _loop: task.LoopingCall | None = attrs.field(init=False, default=None)
    _round: defer.Deferred[None] | None = attrs.field(init=False, default=None)
    _round_waiters: list[defer.Deferred[None]] = attrs.field(init=False, factory=list)
    _deadline: Any = attrs.field(init=False, default=None)
    """The delayed call stopping every assistant when the leases expire unrenewed."""
    _stopping: bool = attrs.field(init=False, default=False)
    _by_name: dict[str, AssistantConfig] = attrs.field(init=False, factory=dict)

    def __attrs_post_init__(self) -> None:
        if not 0 < self.interval < self.ttl:
            raise ValueError(f"the lease interval ({self.interval}) must be positive and "
                             f"shorter than the lease ttl ({self.ttl})")
        self._by_name.update((config.name, config) for config in self.configs)
        if self.clock is None:
            self.clock = getattr(self.store, "clock", None) or self.service.clock

    # -- the service's hooks -----------------------------------------------------

    def assistant_of_character(self, character: str) -> str | None:
        """The configured assistant speaking through ``character``, whichever worker runs
        it (every worker runs the same configuration): the API refuses to speak as it."""
        for config in self.configs:
            if config.character_id == character:
                return config.name
        return None

    def save_options(self, states: Mapping[str, Any]) -> dict[str, Any]:
        """The fence (and what was heard) of a state write: ``save_many``'s keywords."""
        epochs, heard = self.epochs, self.heard
        return {"fence": (self.worker, {n: epochs[n] for n in states if n in epochs}),
                "heard": {n: heard[n] for n in states if n in heard}}

    def start(self, timer: bool = True) -> defer.Deferred[None]:
        """Fence the service's writes, run the first round, then one every ``interval``
        (without ``timer``, a round runs only when :meth:`run_round` is called)."""
        self.service.ownership = self
        self.service.writer.save_options = self.save_options
        self._stopping = False
        d: defer.Deferred[Any] = self.service.when_ready()  # the store is open
        d.addCallback(lambda _: self.run_round())
        if timer:
            d.addCallback(self._start_timer)
        return d

    def _start_timer(self, _: Any) -> None:
        if self._stopping:
            return
        loop = task.LoopingCall(self._timer)
        loop.clock = self.clock
        self._loop = loop
        loop.start(self.interval, now=False).addErrback(
            lambda f: log.failure("lease timer stopped", f))

    def stopping(self) -> None:
        """The service stops ticking: no more rounds (no assistant taken meanwhile)."""
        self._stopping = True
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        self._loop = None
        if self._deadline is not None and self._deadline.active():
            self._deadline.cancel()
        self._deadline = None

    @defer.inlineCallbacks
    def stopped(self) -> Any:
        """Every state is saved: let every lease go at once (epochs kept)."""
        self.stopping()
        yield self._after_round()
        released = yield self.store.retire_worker(self.worker)
        log.info("Worker {worker} released {count} lease(s)", worker=self.worker,
                 count=released)
        for name in list(self._unhear):
            self._forget(name)

    # -- rounds ---------------------------------------------------------------------

    def _timer(self) -> None:
        if self._round is not None:
            return  # the last round is still running (a slow database)
        self.run_round().addErrback(
            lambda f: log.error("Lease round of {worker} failed: {error}",
                                worker=self.worker, error=f.getErrorMessage()))

    def run_round(self) -> defer.Deferred[None]:
        """Renew, then take or give up assistants to reach this worker's share.

        One round runs at a time: asked for during one, a new round starts
        once it ended.
        """
        if self._round is not None:
            return self._after_round().addCallback(lambda _: self.run_round())
        d = self._run_round()
        self._round = d
        d.addBoth(self._round_done)
        return d

    def _round_done(self, result: Any) -> Any:
        self._round = None
        waiters, self._round_waiters = self._round_waiters, []
        for waiter in waiters:
            waiter.callback(None)
        return result

    def _after_round(self) -> defer.Deferred[None]:
        """Fires (with None, whatever its outcome) once the round in flight ended."""
        if self._round is None:
            return defer.succeed(None)
        waiter: defer.Deferred[None] = defer.Deferred()
        self._round_waiters.append(waiter)
        return waiter

    @defer.inlineCallbacks
    def _run_round(self) -> Any:
        started = self.clock.seconds()
        renewed, live, leases = yield self.store.lease_round(
            self.worker, list(self.epochs), self.ttl, self.keep)
        self._arm_deadline(started + self.ttl)
        self._drop([n for n, e in self.epochs.items() if renewed.get(n) != e], "lease lost")
        if self._stopping:
            return
        target = fair_share(len(self._by_name), live, self.worker)
        if len(self.epochs) < target:
            yield self._take(target - len(self.epochs), leases, started)
        elif len(self.epochs) > target:
            yield self._give(len(self.epochs) - target)

    def _arm_deadline(self, expires: float) -> None:
        """Stop every assistant when the leases just renewed expire, unless renewed again:
        a worker whose rounds stall (a database out of reach) stops before another
        worker may take its assistants."""
        if self._deadline is not None and self._deadline.active():
            self._deadline.cancel()
        self._deadline = self.clock.callLater(
            max(0.0, expires - self.clock.seconds()), self._expired)

    def _expired(self) -> None:
        self._deadline = None
        self._drop(list(self.epochs), f"leases not renewed within {self.ttl:g}s")

    @defer.inlineCallbacks
    def _take(self, count: int, leases: Mapping[str, tuple[str, float]], now: float) -> Any:
        free = [n for n in self._by_name if n not in self.epochs
                and (n not in leases or leases[n][1] <= now)]
        for name in free:
            if count <= 0 or self._stopping:
                break
            epoch = yield self.store.acquire_lease(name, self.worker, self.ttl)
            if epoch is None:
                continue  # another worker was quicker
            try:
                yield self._adopt(name, epoch)
            except Exception as exc:
                log.error("Worker {worker} could not take {assistant}: {error}",
                          worker=self.worker, assistant=name, error=str(exc))
                self._forget(name)
                yield self.store.release_leases(self.worker, [name])
                continue
            count -= 1

    @defer.inlineCallbacks
    def _adopt(self, name: str, epoch: int) -> Any:
        """Run ``name`` here under ``epoch``: load its state, hear what it missed."""
        config = self._by_name[name]
        self.epochs[name] = epoch
        after = yield self.store.heard_seq(name)
        world, char_id = self.service.world, config.character_id
        if world is not None and char_id and config.hearing:
            if after is None:  # never owned before: it hears from now on
                after = world.clock_value
            missed = [m["seq"] for m in world.heard(char_id, after=after)]
            self.heard[name] = max([after, *missed])
            self._unhear[name] = world.subscribe(char_id, lambda m: self._note(name, m))
        yield self.service.add_assistant(config, hear_after=after)
        self.moves["taken"] += 1
        log.info("Worker {worker} runs {assistant} (lease epoch {epoch})",
                 worker=self.worker, assistant=name, epoch=epoch)

    def _note(self, name: str, message: Any) -> None:
        seq = getattr(message, "seq", None)
        if isinstance(seq, int) and seq > self.heard.get(name, -1):
            self.heard[name] = seq

    @defer.inlineCallbacks
    def _give(self, count: int) -> Any:
        """Let ``count`` idle assistants go: each saved (fenced), then its lease released."""
        scheduler = self.service.scheduler
        idle = [n for n in sorted(self.epochs) if not scheduler.is_running(n)][:count]
        for name in idle:
            if name not in self.service:
                continue
            yield self.service.remove_assistant(name)
            self._forget(name)
            yield self.store.release_leases(self.worker, [name])
            self.moves["given"] += 1
            log.info("Worker {worker} let {assistant} go (its share is smaller now)",
                     worker=self.worker, assistant=name)

    def _drop(self, names: Sequence[str], why: str) -> None:
        """Stop running ``names`` here at once, writing nothing: another worker owns them."""
        for name in names:
            self._forget(name)
            self.moves["lost"] += 1
            log.warn("Worker {worker} stops running {assistant}: {why}",
                     worker=self.worker, assistant=name, why=why)
            if name in self.service:
                self.service.remove_assistant(name, save=False).addErrback(
                    self._drop_failed, name)

    def _drop_failed(self, failure: Failure, name: str) -> None:
        log.error("Stopping {assistant} failed: {error}", assistant=name,
                  error=failure.getErrorMessage())

    def _forget(self, name: str) -> None:
        self.epochs.pop(name, None)
        self.heard.pop(name, None)
        unhear = self._unhear.pop(name, None)
        if unhear is not None:
            unhear()

    def status(self) -> dict[str, Any]:
        """This worker's name, the assistants it runs with their epochs, its moves."""
        return {"worker": self.worker, "epochs": dict(self.epochs), "moves": dict(self.moves),
                "ttl": self.ttl, "interval": self.interval}
