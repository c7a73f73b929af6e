"""The shared world on PostgreSQL: several workers (here: several stores and replicas in
one process, each with its own pool and LISTEN connection) on one database."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import attrs
import pytest
import pytest_twisted
from twisted.internet import defer, task
from twisted.logger import formatEvent, globalLogPublisher

from ai_tools.store.postgres import PostgreSQLStore
from ai_tools.store.postgres_listener import APPLICATION_NAME
from ai_tools.tools.communication import SayTool
from ai_tools.world.messages import WorldMessage
from ai_tools.world.shared import SharedWorld
from tests.integration.conftest import PostgresDatabase
from tests.unit.sandbox_world_fixtures import ALICE, BOB, EXAMPLE, MASON, PIP
from tests.unit.test_shared_world_store_contract import SharedWorldStoreContract
from tests.unit.test_store_contract import make_clock
from tests.unit.tool_fakes import world_actor

DEADLINE = 10.0
"""Seconds a test waits for something another worker does (it takes milliseconds)."""


def reactor() -> Any:
    from twisted.internet import reactor as global_reactor

    return global_reactor


class TestPostgreSQLSharedWorldStore(SharedWorldStoreContract):
    """The ISharedWorldStore contract on PostgreSQL."""

    @pytest_twisted.async_yield_fixture
    async def store(self, postgres_db: PostgresDatabase) -> AsyncIterator[PostgreSQLStore]:
        """An open store on a fresh database."""
        store = PostgreSQLStore(postgres_db.dsn, password=postgres_db.password,
                                clock=make_clock())
        await store.open()
        yield store
        await store.close()


@attrs.define
class Workers:
    """Replicas of one world, each on its own store (pool and LISTEN connection)."""

    db: PostgresDatabase
    stores: list[PostgreSQLStore] = attrs.field(factory=list)
    worlds: list[SharedWorld] = attrs.field(factory=list)

    async def start(self, poll_interval: float = 5.0) -> SharedWorld:
        store = PostgreSQLStore(self.db.dsn, password=self.db.password, clock=reactor(),
                                reactor=reactor())
        await store.open()
        self.stores.append(store)
        world = await SharedWorld.load(store, seed=EXAMPLE, clock=reactor(),
                                       poll_interval=poll_interval)
        self.worlds.append(world)
        return world

    async def stop(self) -> None:
        for world in self.worlds:
            world.stop()
        for store in self.stores:
            await store.close()


@pytest_twisted.async_yield_fixture
async def workers(postgres_db: PostgresDatabase) -> AsyncIterator[Workers]:
    group = Workers(postgres_db)
    yield group
    await group.stop()


def hearing(world: SharedWorld, char_id: str, count: int = 1,
            match: Callable[[WorldMessage], bool] = lambda m: True
            ) -> tuple[list[WorldMessage], defer.Deferred[list[WorldMessage]]]:
    """What ``char_id`` hears on ``world``, and a Deferred firing once ``count`` matched."""
    heard: list[WorldMessage] = []
    done: defer.Deferred[list[WorldMessage]] = defer.Deferred()

    def listener(message: WorldMessage) -> None:
        if match(message):
            heard.append(message)
            if len(heard) == count and not done.called:
                done.callback(heard)

    world.subscribe(char_id, listener)
    done.addTimeout(DEADLINE, reactor())
    return heard, done


@pytest_twisted.ensureDeferred
async def test_workers_starting_together_seed_one_world(workers: Workers) -> None:
    """Two workers starting at once: one seeds, the other loads that world."""
    one, two = await defer.gatherResults([defer.Deferred.fromCoroutine(workers.start()),
                                          defer.Deferred.fromCoroutine(workers.start())])
    assert one.snapshot() == two.snapshot()
    assert len(one.snapshot()["objects"]) > 10
    world = await workers.stores[0].load_world()
    assert len(world["objects"]) == len(one.snapshot()["objects"])


async def backends_waiting_for_a_lock(db: PostgresDatabase, count: int) -> None:
    """Wait (a deadline) until ``count`` connections of ``db`` wait for a lock."""
    for _ in range(int(DEADLINE / 0.05)):
        waiting = db.sql("SELECT count(*) FROM pg_stat_activity WHERE datname = %s"
                         " AND wait_event_type = 'Lock'", (db.name,))[0][0]
        if waiting >= count:
            return
        await task.deferLater(reactor(), 0.05, lambda: None)
    raise AssertionError(f"{count} connections never waited for a lock together")


@pytest_twisted.ensureDeferred
async def test_two_workers_seeding_an_empty_database_at_the_same_moment_seed_once(
        workers: Workers) -> None:
    """Both find no world and seed it in transactions that overlap (held so, here,
    until both have written their rows): the rows of the first are inserted once, the
    second's insert of the same rows fails (a conflict), and it loads the first's
    world.  Before, ``FOR UPDATE`` locked no rows that did not exist yet and the
    second's upsert overwrote the first's: seeded twice."""
    import psycopg2

    stores = []
    for _ in range(2):
        store = PostgreSQLStore(workers.db.dsn, password=workers.db.password,
                                clock=reactor(), reactor=reactor())
        await store.open()
        workers.stores.append(store)
        stores.append(store)
    holder = psycopg2.connect(workers.db.dsn, password=workers.db.password)
    seeded: list[Any] = []

    def observe(event: Any) -> None:
        if "seeded" in str(event.get("log_format", "")):
            seeded.append(event)

    globalLogPublisher.addObserver(observe)
    try:
        with holder.cursor() as cursor:  # the world clock, raised at every change's end
            cursor.execute("SELECT value FROM world_clock FOR UPDATE")
            clock_before = cursor.fetchone()[0]
        loading = [SharedWorld.load(store, seed=EXAMPLE, clock=reactor()) for store in stores]
        await backends_waiting_for_a_lock(workers.db, 2)
        holder.rollback()  # let them go: the first to the commit, the second to its fate
        one, two = await defer.gatherResults(loading)
    finally:
        holder.close()
        globalLogPublisher.removeObserver(observe)
    workers.worlds.extend([one, two])
    assert len(seeded) == 1, [formatEvent(e) for e in seeded]
    clock_after = workers.db.sql("SELECT value FROM world_clock")[0][0]
    assert clock_after == clock_before + 1  # one seeding change committed
    assert one.snapshot() == two.snapshot()


@pytest_twisted.ensureDeferred
async def test_a_move_and_its_news_reach_the_other_worker(workers: Workers) -> None:
    """Bob walks on worker A; on worker B, Alice (in the plaza) hears him arrive and
    B's replica has him in the plaza."""
    a = await workers.start()
    b = await workers.start()
    heard, arrived = hearing(b, ALICE)
    await a.move_character(BOB, "east")
    await arrived
    assert heard[0].kind == "system" and heard[0].text == "Bob arrives."
    assert b.get_object(BOB)["location"] == "room:plaza"
    assert BOB in [c["id"] for c in b.describe_location(ALICE)["characters"]]
    await a.catch_up()
    assert heard[0].seq == a.heard(ALICE)[-1]["seq"]


@pytest_twisted.ensureDeferred
async def test_hearers_come_from_the_database_not_a_stale_replica(workers: Workers) -> None:
    """Worker B does not follow (stale replica); Bob leaves the inn on A; when Pip speaks
    on B, the conflict makes B catch up, and Bob (gone) does not hear it."""
    a = await workers.start()
    b = await workers.start()
    b.stop()
    assert b.describe_location(PIP)["characters"][0]["id"] == BOB
    await a.move_character(BOB, "east")
    assert b.get_object(BOB)["location"] == "room:inn"  # stale, as intended
    hearers = await b.message_location(PIP, "Anyone still here?")
    assert hearers == []
    assert b.conflicts == 1
    assert b.get_object(BOB)["location"] == "room:plaza"


@pytest_twisted.ensureDeferred
async def test_concurrent_changes_of_one_object_lose_nothing(workers: Workers) -> None:
    """A and B (stale) each set an attribute of the fountain: both survive."""
    a = await workers.start()
    b = await workers.start()
    b.stop()
    await a.set_attribute(MASON, "obj:fountain", "wishes", 3)
    await b.set_attribute(MASON, "obj:fountain", "colour", "green")
    attributes = b.get_attributes("obj:fountain")
    assert attributes["wishes"] == 3 and attributes["colour"] == "green"
    stored = await workers.stores[0].load_world()
    fountain = next(o for o in stored["objects"] if o["id"] == "obj:fountain")
    assert fountain["attributes"]["wishes"] == 3
    assert fountain["attributes"]["colour"] == "green"


@pytest_twisted.ensureDeferred
async def test_one_message_sequence_on_every_worker(workers: Workers) -> None:
    """Speech from two workers at once: everyone hears the same messages in the same order,
    numbered by one sequence, and each is in the database with who heard it."""
    a = await workers.start()
    b = await workers.start()
    heard_a, done_a = hearing(a, BOB, 20)
    heard_b, done_b = hearing(b, BOB, 20)
    said = [a.message_location(PIP, f"a{n}") for n in range(10)]
    said += [b.message_location(PIP, f"b{n}") for n in range(10)]
    assert await defer.gatherResults(said) == [[BOB]] * 20
    await done_a
    await done_b
    seqs = [m.seq for m in heard_a]
    assert seqs == sorted(seqs) and len(set(seqs)) == 20
    assert [(m.seq, m.text) for m in heard_a] == [(m.seq, m.text) for m in heard_b]
    assert a.heard(BOB) == b.heard(BOB)
    rows = workers.db.sql("SELECT m.seq FROM world_messages m JOIN world_heard h"
                          " ON h.seq = m.seq WHERE h.character_id = %s ORDER BY m.seq", (BOB,))
    assert [row[0] for row in rows] == seqs


@pytest_twisted.ensureDeferred
async def test_commands_on_one_worker_change_the_world_of_the_other(workers: Workers) -> None:
    """dig and say as commands on A: B's replica has the room, Mason's words reach B."""
    a = await workers.start()
    b = await workers.start()
    await a.move_character(ALICE, "east")  # into the workshop, with Mason
    await b.catch_up()
    heard, said = hearing(b, ALICE, match=lambda m: m.kind == "say")
    dug = await a.execute_command(MASON, "dig Cellar;cellar = down;d, up;u")
    assert dug["success"], dug
    spoke = await a.execute_command(MASON, "say The cellar is ready.")
    assert spoke["success"], spoke
    await said
    assert heard[0].text == "The cellar is ready."
    assert b.find_exit(MASON, "down")["destination"] == "room:cellar"


@pytest_twisted.ensureDeferred
async def test_a_broken_listen_connection_reconnects_and_catches_up(
    workers: Workers, postgres_db: PostgresDatabase
) -> None:
    """The LISTEN connection is killed; the listener connects again and what was said
    meanwhile still arrives (the poll is far off: it is the reconnect that catches up)."""
    a = await workers.start()
    await workers.stores[0]._listeners[0].when_listening()
    first_listener = [row[0] for row in postgres_db.sql(
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (APPLICATION_NAME,))]
    b = await workers.start(poll_interval=3600)
    (listener,) = workers.stores[1]._listeners
    await listener.when_listening()
    assert listener.connects == 1
    killed = postgres_db.sql(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s"
        " AND application_name = %s AND pid <> ALL(%s::int[])",
        (postgres_db.name, APPLICATION_NAME, first_listener))
    assert killed == [(True,)]
    heard, done = hearing(b, BOB)
    await a.message_location(PIP, "Still listening?")
    await done
    assert heard[0].text == "Still listening?"
    assert listener.connects >= 2


@pytest_twisted.ensureDeferred
async def test_the_world_survives_a_restart(workers: Workers) -> None:
    """Change, stop every worker; a new one loads the same world and the heard logs."""
    a = await workers.start()
    await a.set_attribute(MASON, "obj:fountain", "wishes", {"granted": 2})
    await a.execute_command(MASON, "dig Cellar;cellar = down, up")
    await a.message_location(PIP, "Goodnight.")
    await a.catch_up()
    before, heard = a.snapshot(), a.heard(BOB)
    await workers.stop()
    workers.worlds.clear()
    workers.stores.clear()
    again = await workers.start()
    assert again.snapshot() == before
    assert again.heard(BOB) == heard


@pytest.mark.parametrize("bad", ["password=secret", "postgresql://u:secret@localhost/db"])
def test_a_dsn_with_a_password_is_refused(bad: str) -> None:
    """Passwords never travel in the DSN."""
    from ai_tools.errors import ConfigError
    from ai_tools.store.postgres import check_dsn

    with pytest.raises(ConfigError, match="must not hold the password"):
        check_dsn(f"host=localhost {bad}" if "=" in bad and "://" not in bad else bad)


@pytest_twisted.ensureDeferred
async def test_a_call_made_again_by_the_new_owner_is_stored_once(workers: Workers) -> None:
    """Pip's `say` runs on worker A, then the same call (same call id) again on worker B,
    as after a failover: one row in world_messages, Bob hears it once on both workers.
    Another call with the same words is a second row."""
    a = await workers.start()
    b = await workers.start()
    heard_a, _ = hearing(a, BOB, match=lambda m: m.sender_id == PIP)
    heard_b, twice = hearing(b, BOB, 2, match=lambda m: m.sender_id == PIP)
    said = await SayTool().execute(world_actor(a, PIP, call_id="call_9"), message="Soup!")
    again = await SayTool().execute(world_actor(b, PIP, call_id="call_9"), message="Soup!")
    assert said == again and said["delivered_to"] == [BOB]
    rows = workers.db.sql("SELECT dedupe_key FROM world_messages WHERE data::json ->> 'sender_id'"
                          " = %s", (PIP,))
    assert len(rows) == 1 and rows[0][0].startswith("pip:call_9:")
    await SayTool().execute(world_actor(b, PIP, call_id="call_10"), message="Soup!")
    await twice
    await a.catch_up()
    assert [m.text for m in heard_b] == ["Soup!", "Soup!"]
    assert [m.text for m in heard_a] == ["Soup!", "Soup!"]
    assert len({m.seq for m in heard_b}) == 2
