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
* **One roster for all.** The assistants shared are the config file's plus
  what was created, changed or removed over any worker's API, kept in the
  database (``assistant_configs``) and read again at every round
  (:func:`~ai_tools.service.roster.shared_roster`): an assistant created on
  one worker runs there at once (its lease taken), one removed anywhere is
  let go by its owner and taken by nobody.
* **Doors.** Each worker advertises where its HTTP API answers
  (:meth:`advertise`), so a worker asked about an assistant another one runs
  can forward the request to its owner (:mod:`ai_tools.web.other_workers`).
* **Stopping** (SIGTERM): the service stops ticking, saves every state (still
  fenced), then :meth:`stopped` releases every lease at once: the other
  workers take the assistants at their next round, without waiting for ``ttl``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import attrs
from twisted.internet import defer, task
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from ai_tools.errors import ConfigError
from ai_tools.json_types import JSONMapping, JSONObject
from ai_tools.service.assistant import AssistantConfig
from ai_tools.service.collaborators import HeardWorld
from ai_tools.service.roster import shared_roster

if TYPE_CHECKING:
    from ai_tools.service.service import AssistantService
    from ai_tools.store.postgres import PostgreSQLStore
    from ai_tools.world.shared import SharedWorld

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
    the assistants of the config file (the API adds, changes and removes some:
    :attr:`roster` is what the workers share).
    """

    service: AssistantService
    store: PostgreSQLStore
    configs: Sequence[AssistantConfig]
    worker: str
    ttl: float = 15.0
    """Seconds a lease (and a worker's liveness) lasts without renewal."""
    interval: float = 5.0
    """Seconds between rounds (renewals, taking and giving up assistants)."""
    keep: float = 600.0
    """Seconds the write log and dead workers' rows are kept."""
    clock: IReactorTime | None = None
    """What tells the time of leases and runs the rounds' timer: the store's clock
    (lease expiries are its seconds); default the service's."""
    api_url: str | None = None
    """Where this worker's HTTP API answers (``http://host:port``), advertised to the
    other workers at each round; None: no API (nothing is forwarded here)."""

    epochs: dict[str, int] = attrs.field(init=False, factory=dict)
    """The leases held: ``{assistant: epoch}``."""
    heard: dict[str, int] = attrs.field(init=False, factory=dict)
    """The last world message each owned assistant has heard (its state holds it)."""
    moves: dict[str, int] = attrs.field(init=False, factory=lambda: dict.fromkeys(
        ("taken", "given", "lost"), 0))
    _unhear: dict[str, Callable[[], object] | None] = attrs.field(init=False, factory=dict)
    _loop: task.LoopingCall | None = attrs.field(init=False, default=None)
    _round: defer.Deferred[None] | None = attrs.field(init=False, default=None)
    _round_waiters: list[defer.Deferred[None]] = attrs.field(init=False, factory=list)
    _deadline: IDelayedCall | None = attrs.field(init=False, default=None)
    """The delayed call stopping every assistant when the leases expire unrenewed."""
    _stopping: bool = attrs.field(init=False, default=False)
    _by_name: dict[str, AssistantConfig] = attrs.field(init=False, factory=dict)
    _time: IReactorTime = attrs.field(init=False)
    """``clock`` as given, else found (see :attr:`clock`)."""

    def __attrs_post_init__(self) -> None:
        if not 0 < self.interval < self.ttl:
            raise ValueError(f"the lease interval ({self.interval}) must be positive and "
                             f"shorter than the lease ttl ({self.ttl})")
        self._by_name.update((config.name, config) for config in self.configs)
        if self.clock is None:
            self.clock = getattr(self.store, "clock", None) or self.service.clock
        self._time = self.clock

    # -- the service's hooks -----------------------------------------------------

    @property
    def roster(self) -> dict[str, AssistantConfig]:
        """Every assistant the workers share, by name (as of this worker's last round)."""
        return dict(self._by_name)

    def assistant_of_character(self, character: str) -> str | None:
        """The shared assistant speaking through ``character``, whichever worker runs
        it: the API refuses to speak as it."""
        for config in self._by_name.values():
            if config.character_id == character:
                return config.name
        return None

    @defer.inlineCallbacks
    def fresh_roster(self) -> Any:
        """:attr:`roster` read again from the database now (not at the last round)."""
        given = yield self.store.shared_configs()
        self._by_name = {c.name: c for c in shared_roster(self.configs, given)}
        return self.roster

    def advertise(self, api_url: str) -> defer.Deferred[None]:
        """This worker's API answers at ``api_url``: tell the other workers now (a round)."""
        self.api_url = api_url
        return self.run_round()

    def save_options(self, states: Mapping[str, JSONMapping]) -> dict[str, object]:
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
        d: defer.Deferred[None] = self.service.when_ready()  # the store is open
        d.addCallback(lambda _: self.run_round())
        if timer:
            d.addCallback(self._start_timer)
        return d

    def _start_timer(self, _: object) -> None:
        if self._stopping:
            return
        loop = task.LoopingCall(self._timer)
        loop.clock = self._time
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
        started = self._time.seconds()
        renewed, live, leases, given = yield self.store.lease_round(
            self.worker, list(self.epochs), self.ttl, self.keep, self.api_url)
        self._arm_deadline(started + self.ttl)
        self._drop([n for n, e in self.epochs.items() if renewed.get(n) != e], "lease lost")
        self._by_name = {c.name: c for c in shared_roster(self.configs, given)}
        if self._stopping:
            return
        for name in [n for n in self.epochs if n not in self._by_name]:
            yield self._let_go(name, "it was removed over the API")
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
        self._deadline = self._time.callLater(
            max(0.0, expires - self._time.seconds()), self._expired)

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
            yield self._adopt_or_release(name, epoch)
            if name in self.epochs:
                count -= 1

    @defer.inlineCallbacks
    def _adopt_or_release(self, name: str, epoch: int) -> Any:
        """:meth:`_adopt`; on failure (logged) the lease goes back at once."""
        try:
            yield self._adopt(name, epoch)
        except Exception as exc:
            log.error("Worker {worker} could not take {assistant}: {error}",
                      worker=self.worker, assistant=name, error=str(exc))
            self._forget(name)
            yield self.store.release_leases(self.worker, [name])

    @defer.inlineCallbacks
    def _adopt(self, name: str, epoch: int) -> Any:
        """Run ``name`` here under ``epoch``: load its state, hear what it missed."""
        config = self._by_name[name]
        self.epochs[name] = epoch
        after = yield self.store.heard_seq(name)
        world = cast("HeardWorld | None", self.service.world)  # (the shared world, heard log)
        char_id = config.character_id
        if world is not None and char_id and config.hearing:
            if after is None:  # never owned before: it hears from now on
                after = cast("SharedWorld", world).clock_value
            missed = [m["seq"] for m in world.heard(char_id, after=after)]
            self.heard[name] = max([after, *missed])
            self._unhear[name] = world.subscribe(char_id, lambda m: self._note(name, m))
        yield self.service.add_assistant(config, hear_after=after)
        self.moves["taken"] += 1
        log.info("Worker {worker} runs {assistant} (lease epoch {epoch})",
                 worker=self.worker, assistant=name, epoch=epoch)

    def _note(self, name: str, message: object) -> None:
        seq = getattr(message, "seq", None)
        if isinstance(seq, int) and seq > self.heard.get(name, -1):
            self.heard[name] = seq

    @defer.inlineCallbacks
    def _give(self, count: int) -> Any:
        """Let ``count`` idle assistants go: each saved (fenced), then its lease released."""
        scheduler = self.service.scheduler
        idle = [n for n in sorted(self.epochs) if not scheduler.is_running(n)][:count]
        for name in idle:
            yield self._let_go(name, "its share is smaller now")

    @defer.inlineCallbacks
    def _let_go(self, name: str, why: str, forget: bool = False) -> Any:
        """Stop running ``name`` here: saved (fenced; or forgotten), then its lease released."""
        if name not in self.epochs or name not in self.service:
            return
        yield self.service.remove_assistant(name, forget=forget)
        self._forget(name)
        yield self.store.release_leases(self.worker, [name])
        self.moves["given"] += 1
        log.info("Worker {worker} let {assistant} go ({why})", worker=self.worker,
                 assistant=name, why=why)

    # -- the operator's changes, for every worker ------------------------------------

    @defer.inlineCallbacks
    def create(self, config: AssistantConfig) -> Any:
        """Create ``config``'s assistant for every worker, and run it here if its lease is
        free; fires with whether it runs here.  ConfigError when the name is taken."""
        name = config.name
        taken = ConfigError(f"an assistant named {name!r} already exists")
        if name in self._by_name:
            raise taken
        if not (yield self.store.put_shared_config(name, config.to_dict(), create=True)):
            raise taken
        self._by_name[name] = config
        epoch = yield self.store.acquire_lease(name, self.worker, self.ttl)
        if epoch is None:
            return False  # a lease from before still lives: its worker takes it again
        yield self._adopt_or_release(name, epoch)
        return name in self.epochs

    @defer.inlineCallbacks
    def reconfigure(self, name: str, config: AssistantConfig) -> Any:
        """Give ``name`` (run here) a new configuration, kept for every worker first;
        fires with the keys changed."""
        yield self.store.put_shared_config(name, config.to_dict(),
                                           file_config=self._file_config(name))
        self._by_name[name] = config
        changed = yield self.service.reconfigure(name, config)
        return changed

    @defer.inlineCallbacks
    def remove(self, name: str, forget: bool = False) -> Any:
        """Remove ``name`` for every worker: kept as removed first (nobody takes it again),
        then let go here if it runs here (saved, or with ``forget`` its state deleted)."""
        config = self._by_name.get(name)
        if config is None:
            raise ConfigError(f"no assistant named {name!r}")
        yield self.store.put_shared_config(name, config.to_dict(), removed=True,
                                           file_config=self._file_config(name))
        self._by_name.pop(name, None)
        if name in self.epochs:
            yield self._let_go(name, "removed over the API", forget=forget)
        elif forget:
            yield self.store.delete_assistant(name)

    def _file_config(self, name: str) -> JSONObject | None:
        for config in self.configs:
            if config.name == name:
                return config.to_dict()
        return None

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

    def status(self) -> dict[str, object]:
        """This worker's name, the assistants it runs with their epochs, its moves."""
        return {"worker": self.worker, "epochs": dict(self.epochs), "moves": dict(self.moves),
                "ttl": self.ttl, "interval": self.interval}
