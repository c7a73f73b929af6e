"""The PostgreSQL store's cost per operation, and the driver choice behind it.

``make bench BENCH=postgres``.  A throwaway cluster on 127.0.0.1 (as in the
tests).  Two parts, each run in turns, medians of 5 rounds, wall time and
process CPU time (every thread: the reactor's and the pool's) per operation:

1. **The store** (:class:`PostgreSQLStore`, psycopg2): ``checkpoint`` — 100
   assistants save a 20 KB state at the same moment (grouped), 10 times;
   ``records`` — 500 records added at once (grouped, a savepoint each);
   ``one by one`` — 200 states saved one after the other (a transaction
   each); ``reads`` — 300 states loaded one after the other; ``world`` — 200
   world messages committed at once (grouped, one world-clock step per
   transaction).
2. **The drivers**, psycopg2 and psycopg 3, each through an adbapi pool doing
   the store's transaction shapes with its own best statements: a write
   (``BEGIN``, upsert of a 20 KB state, ``COMMIT``), a group of 100 such
   upserts (psycopg2 ``execute_values``, psycopg 3 pipelined
   ``executemany``), a snapshot read (``BEGIN … READ ONLY``, ``SELECT``,
   ``COMMIT``).  psycopg 3 is not a dependency: without it, part 2 is skipped.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from twisted.internet import defer, task

from ai_tools.store.postgres import PostgreSQLStore
from tests.postgres_cluster import ThrowawayCluster

ROUNDS = 5
STATE = {"mode": "awake", "history": [{"role": "user", "content": "x" * 200}] * 80}


def _message(n: int) -> dict[str, Any]:
    return {"data": {"kind": "say", "text": f"line {n}", "sender_id": "char:pip",
                     "sender_key": "Pip", "location_id": "room:inn", "target_id": None,
                     "channel": None, "timestamp": 0.0}, "receivers": ["char:bob"]}


async def checkpoint(store: PostgreSQLStore) -> int:
    for _ in range(10):
        await defer.gatherResults([store.save_assistant(f"a{i}", STATE) for i in range(100)])
    return 1000


async def records(store: PostgreSQLStore) -> int:
    await defer.gatherResults([store.add_record("ada", "memory", f"the harbour at dawn {n}")
                               for n in range(500)])
    return 500


async def one_by_one(store: PostgreSQLStore) -> int:
    for i in range(200):
        await store.save_assistant(f"s{i}", STATE)
    return 200


async def reads(store: PostgreSQLStore) -> int:
    for i in range(300):
        await store.load_assistant(f"a{i % 100}")
    return 300


async def world(store: PostgreSQLStore) -> int:
    await defer.gatherResults([store.change_world(messages=[_message(n)]) for n in range(200)])
    return 200


WORKLOADS: dict[str, Callable[[PostgreSQLStore], Awaitable[int]]] = {
    "checkpoint": checkpoint, "records": records, "one by one": one_by_one, "reads": reads,
    "world": world,
}


async def _measure(store: PostgreSQLStore, work: Callable[[PostgreSQLStore], Awaitable[int]]
                   ) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    count = await work(store)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return wall / count * 1e6, cpu / count * 1e6


async def _store_part(cluster: ThrowawayCluster) -> None:
    from tests.integration.conftest import run_sql

    run_sql(cluster.dsn(), cluster.password, "CREATE DATABASE bench_store")
    store = PostgreSQLStore(cluster.dsn("bench_store"), password=cluster.password)
    await store.open()
    try:
        figures: dict[str, list[tuple[float, float, float]]] = {}
        for _ in range(ROUNDS):
            for name, work in WORKLOADS.items():
                before = store.transactions
                wall, cpu = await _measure(store, work)
                figures.setdefault(name, []).append((wall, cpu, store.transactions - before))
        print(f"PostgreSQLStore (psycopg2), per operation, median of {ROUNDS} (µs)")
        print(f"{'workload':12s} {'wall':>8s} {'CPU':>8s} {'transactions/round':>20s}")
        for name, rows in figures.items():
            print(f"{name:12s} {statistics.median(r[0] for r in rows):8.0f}"
                  f" {statistics.median(r[1] for r in rows):8.0f}"
                  f" {statistics.median(r[2] for r in rows):20.0f}")
    finally:
        await store.close()


def _write(conn: Any, state: str) -> None:
    cursor = conn.cursor()
    cursor.execute("BEGIN")
    cursor.execute("INSERT INTO a (name, state) VALUES (%s, %s) ON CONFLICT (name)"
                   " DO UPDATE SET state = excluded.state", ("x", state))
    cursor.execute("COMMIT")
    cursor.close()


def _group(conn: Any, state: str, driver: str) -> None:
    cursor = conn.cursor()
    cursor.execute("BEGIN")
    rows = [(f"g{i}", state) for i in range(100)]
    upsert = ("INSERT INTO a (name, state) VALUES {} ON CONFLICT (name)"
              " DO UPDATE SET state = excluded.state")
    if driver == "psycopg2":
        from psycopg2.extras import execute_values

        execute_values(cursor, upsert.format("%s"), rows, page_size=len(rows))
    else:
        cursor.executemany(upsert.format("(%s, %s)"), rows)
    cursor.execute("COMMIT")
    cursor.close()


def _read(conn: Any) -> None:
    cursor = conn.cursor()
    cursor.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
    cursor.execute("SELECT state FROM a WHERE name = %s", ("x",))
    cursor.fetchone()
    cursor.execute("COMMIT")
    cursor.close()


async def _driver_part(cluster: ThrowawayCluster) -> None:
    from twisted.enterprise import adbapi

    from tests.integration.conftest import run_sql

    try:
        import psycopg  # noqa: F401
    except ImportError:
        print("psycopg 3 is not installed: driver comparison skipped "
              "(pip install 'psycopg[binary]')")
        return
    drivers = ("psycopg2", "psycopg")
    state = json.dumps(STATE)
    run_sql(cluster.dsn(), cluster.password, "CREATE DATABASE bench_drivers")
    run_sql(cluster.dsn("bench_drivers"), cluster.password,
            "CREATE TABLE a (name text PRIMARY KEY, state text)")
    pools = {d: adbapi.ConnectionPool(d, cluster.dsn("bench_drivers"), password=cluster.password,
                                      cp_min=1, cp_max=1, cp_openfun=_autocommit)
             for d in drivers}
    shapes: dict[str, tuple[Callable[..., Any], int]] = {
        "write": (lambda conn, d: _write(conn, state), 200),
        "group of 100": (lambda conn, d: _group(conn, state, d), 10),
        "read": (lambda conn, d: _read(conn), 300),
    }
    figures: dict[tuple[str, str], list[tuple[float, float]]] = {}
    try:
        for round_ in range(ROUNDS):
            for name, (shape, count) in shapes.items():
                for driver in (drivers if round_ % 2 == 0 else drivers[::-1]):
                    wall, cpu = time.perf_counter(), time.process_time()
                    for _ in range(count):
                        await pools[driver].runWithConnection(shape, driver)
                    figures.setdefault((name, driver), []).append(
                        ((time.perf_counter() - wall) / count * 1e6,
                         (time.process_time() - cpu) / count * 1e6))
    finally:
        for pool in pools.values():
            pool.close()
    print(f"\nDrivers through adbapi, per transaction, median of {ROUNDS} (µs): wall / CPU")
    for name in shapes:
        cells = []
        for driver in drivers:
            rows = figures[name, driver]
            cells.append(f"{driver} {statistics.median(r[0] for r in rows):6.0f} /"
                         f" {statistics.median(r[1] for r in rows):5.0f}")
        cpu = [statistics.median(r[1] for r in figures[name, d]) for d in drivers]
        ratio = cpu[1] / cpu[0]
        print(f"{name:13s} " + "   ".join(cells) + f"   CPU psycopg 3/psycopg2 {ratio:.2f}")


def _autocommit(conn: Any) -> None:
    conn.autocommit = True


async def _run(reactor: Any) -> None:
    cluster = ThrowawayCluster().start()
    try:
        await _store_part(cluster)
        await _driver_part(cluster)
    finally:
        cluster.stop()


def main() -> None:
    task.react(lambda reactor: defer.ensureDeferred(_run(reactor)))
