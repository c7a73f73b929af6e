"""Workers sharing assistants through leases, on a real PostgreSQL: two services in one
process, each with its own store connection pool and lease manager.  The services
tick on the reactor; lease time is a task.Clock shared by both stores (expiry is
stepped, never waited for)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import defer, task

from ai_tools.errors import LeaseLost
from ai_tools.service.leases import LeaseManager, fair_share
from ai_tools.service.service import AssistantService
from ai_tools.store.postgres import PostgreSQLStore
from tests.integration.conftest import PostgresDatabase
from tests.unit.service_fakes import make_service
from tests.unit.test_store_contract import make_clock

NAMES = ["ada", "bob", "cid", "dot", "eve"]
TTL = 10.0


def reactor() -> Any:
    from twisted.internet import reactor as global_reactor

    return global_reactor


class Worker:
    """One worker: a service on the reactor, its store, its lease manager."""

    def __init__(self, db: PostgresDatabase, clock: task.Clock, name: str) -> None:
        self.store = PostgreSQLStore(db.dsn, password=db.password, clock=clock)
        _, self.service, _ = make_service(reactor(), store=self.store)
        self.leases = LeaseManager(
            self.service, self.store,
            [self.service_config(n) for n in NAMES], worker=name, ttl=TTL, interval=2.0,
            clock=clock)

    @staticmethod
    def service_config(name: str) -> Any:
        from ai_tools.service.assistant import AssistantConfig

        return AssistantConfig.from_mapping({"name": name, "character_id": f"char:{name}"})

    def owned(self) -> list[str]:
        return self.service.names()


@pytest_twisted.async_yield_fixture
async def workers(postgres_db: PostgresDatabase) -> AsyncIterator[tuple[Any, ...]]:
    clock = make_clock()
    made: list[Worker] = []

    def start(name: str) -> Worker:
        worker = Worker(postgres_db, clock, name)
        made.append(worker)
        return worker

    yield clock, start
    for worker in made:
        if worker.service.running:
            await worker.service.stopService()


async def leases(store: PostgreSQLStore) -> dict[str, tuple[str, int]]:
    return {name: (worker, epoch) for name, worker, epoch, _ in await store.list_leases()}


def got_event(service: AssistantService, name: str, text: str) -> bool:
    """Whether ``name`` holds the event ``text``: pending, or taken by a tick (the fake
    loop writes "events: N" into the history for what it took)."""
    pending = [e.get("text") for e in service.get(name).pending_events]
    taken = [m.get("content") for m in service.history(name)]
    return text in pending or "events: 1" in taken


def test_fair_share_adds_up() -> None:
    """Every worker computes the same split; shares add up to the count."""
    live = ["w1", "w2", "w3"]
    assert [fair_share(5, live, w) for w in live] == [2, 2, 1]
    assert fair_share(5, ["w1"], "w2") == 2  # not yet seen alive: counts itself in
    with pytest.raises(ValueError, match="shorter than the lease ttl"):
        LeaseManager(None, None, [], worker="w", ttl=5, interval=5)


@pytest_twisted.ensureDeferred
async def test_assistants_spread_over_workers_and_move_between_ticks(workers: Any) -> None:
    """The first worker takes all; when a second is alive, the first lets its surplus go
    (saved under its epoch, then released) and the second takes it with a new epoch."""
    clock, start = workers
    one = start("w1")
    await one.leases.start(timer=False)
    assert one.owned() == NAMES
    assert {w for w, _ in (await leases(one.store)).values()} == {"w1"}
    two = start("w2")
    await two.leases.start(timer=False)  # alive now, but nothing is free yet
    assert two.owned() == []
    clock.advance(2)
    await one.leases.run_round()  # sees w2 alive: its share is 3
    assert len(one.owned()) == 3
    await two.leases.run_round()
    assert len(two.owned()) == 2 and not set(one.owned()) & set(two.owned())
    held = await leases(one.store)
    for name in two.owned():
        assert held[name] == ("w2", 2)  # taken from w1: epoch raised
        assert two.leases.epochs[name] == 2
    epochs = await one.store.assistant_epochs()
    assert all(epochs[n] == held[n][1] for n in NAMES)
    writes = await one.store.assistant_writes()
    assert {(name, worker) for _, name, worker, _ in writes} >= {
        (n, "w1") for n in NAMES}
    assert one.leases.moves["given"] == 2 and two.leases.moves["taken"] == 2


@pytest_twisted.ensureDeferred
async def test_a_worker_that_lost_a_lease_stops_and_cannot_overwrite(workers: Any) -> None:
    """w1 stalls past the ttl; w2 takes its assistants (epoch + 1).  w1's late write is
    fenced off (LeaseLost, nothing written), and its next round stops running them."""
    clock, start = workers
    one = start("w1")
    await one.leases.start(timer=False)
    await one.service.send("ada", "before the stall")
    # A stalled worker (a paused process): no rounds, and its own deadline does not
    # stop it first either; what it still writes must be fenced off.
    one.leases.stopping()
    clock.advance(TTL + 1)
    two = start("w2")
    await two.leases.start(timer=False)
    assert two.owned() == NAMES
    assert (await leases(two.store))["ada"] == ("w2", 2)
    assert got_event(two.service, "ada", "before the stall")  # saved by w1, came along
    with pytest.raises(LeaseLost):
        await one.service.save_state("ada")
    await two.service.send("ada", "from the new owner")
    state = await two.store.load_assistant("ada")
    assert (await two.store.assistant_epochs())["ada"] == 2
    await one.leases.run_round()
    assert one.owned() == [] and one.leases.moves["lost"] == len(NAMES)
    assert await two.store.load_assistant("ada") == state  # w1 wrote nothing after all


@pytest_twisted.ensureDeferred
async def test_stopping_saves_then_releases_at_once(workers: Any) -> None:
    """A stopping worker's final saves carry its epoch; then its leases are free at
    once: another worker takes them at its next round, with no wait for the ttl."""
    _clock, start = workers
    one = start("w1")
    await one.leases.start(timer=False)
    await one.service.send("bob", "keep this")
    await one.service.stopService()
    assert not one.store.is_open  # released before the store closed
    two = start("w2")
    await two.leases.start(timer=False)  # no clock step: the leases were released, not expired
    assert two.owned() == NAMES
    assert set((await leases(two.store)).values()) == {("w2", 2)}
    assert got_event(two.service, "bob", "keep this")


@pytest_twisted.ensureDeferred
async def test_the_write_log_shows_one_owner_per_epoch(workers: Any) -> None:
    """Per assistant, the logged writes never go back to an older epoch and each epoch
    has one worker: no assistant written by two workers at once."""
    clock, start = workers
    one = start("w1")
    await one.leases.start(timer=False)
    clock.advance(TTL + 1)
    two = start("w2")
    await two.leases.start(timer=False)
    await defer.gatherResults([two.service.send(n, "hi") for n in NAMES])
    await one.leases.run_round()
    writes = await one.store.assistant_writes()
    assert_one_owner_at_a_time(writes)


def assert_one_owner_at_a_time(writes: list[tuple[int, str, str, int]]) -> None:
    """The check of the failover tests: epochs never go back, one worker per epoch."""
    last: dict[str, int] = {}
    owner: dict[tuple[str, int], str] = {}
    for _seq, name, worker, epoch in writes:
        assert epoch >= last.get(name, 0), f"{name}: epoch {epoch} written after {last[name]}"
        last[name] = epoch
        assert owner.setdefault((name, epoch), worker) == worker, (name, epoch)



@pytest_twisted.ensureDeferred
async def test_a_worker_whose_rounds_fail_stops_its_assistants_after_the_ttl(
    workers: Any
) -> None:
    """No successful round for the ttl (a database out of reach, a hung round): the
    worker stops running its assistants when their leases expire, before another
    worker may take them."""
    clock, start = workers
    one = start("w1")
    await one.leases.start(timer=False)
    assert one.owned() == NAMES
    clock.advance(TTL - 0.1)  # no round meanwhile: as if every round hung
    assert one.owned() == NAMES
    clock.advance(0.1)  # the leases expire now: another worker may take them
    assert one.owned() == [] and one.leases.epochs == {}
    await one.leases.run_round()  # and it takes them again, as nobody else did
    assert one.owned() == NAMES
    one.leases.stopping()
