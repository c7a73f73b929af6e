"""Scaling out: 1,000 assistants on one worker process, then on two, sharing one PostgreSQL.

``make bench BENCH=scale``.  Everything runs as it is deployed, each part in its
own process: a throwaway PostgreSQL cluster on 127.0.0.1 (as in the tests), the
scripted model server (50 ms per answer, always one ``get_system_status``
call), and real ``twistd -n ai-assistant`` workers with the PostgreSQL store,
the shared world and the ``[workers]`` leases.  Each configuration (1 worker,
then 2) gets a fresh database; once the workers have spread the assistants, a
round is: Bob pages every assistant's character through the workers' HTTP APIs
(alternating between them), and each assistant runs a 5-iteration ReAct loop
(a model request, a tool call and a checkpoint per iteration) until every loop
has ended (the first worker's event stream, which carries the whole service's,
says so).  Measured per round:

* wall time from the first page to the last loop's end, against the ideal
  (5 x 50 ms);
* client CPU per model request: the workers' process CPU (every thread, from
  ``/proc``) over the requests they made; the model server's and PostgreSQL's
  (its server and every backend) likewise;
* database work per iteration: transactions committed (reads included: the
  world catch-ups) and rows written (``pg_stat_database``, read after the
  backends flushed their statistics, minus the idle workers' background —
  lease rounds, world polls — measured just before the round), and fenced
  state writes (``assistant_writes``).

Smaller runs for a quick look: ``BENCH_SCALE_ASSISTANTS=100 make bench BENCH=scale``
(also ``BENCH_SCALE_ITERATIONS``, ``BENCH_SCALE_ROUNDS``).  The workers log at
``warn`` (as the in-process service benchmark logs nothing).
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
from twisted.internet import defer, protocol, task
from twisted.web.client import Agent, HTTPConnectionPool, readBody

from ai_tools.llm.sse import SSEParser
from benchmarks.processes import ScriptedServerProcess, cluster_cpu, process_cpu, run_in_child
from tests.integration.conftest import run_sql
from tests.integration.twistd_process import TWISTD, Twistd, clean_environment
from tests.postgres_cluster import ThrowawayCluster, free_port

ASSISTANTS = 1000
ITERATIONS = 5
LATENCY = 0.05
ROUNDS = 2
WORKER_COUNTS = (1, 2)
STATS_FLUSH = 11.0
"""Seconds for every PostgreSQL backend to flush its statistics (an idle one does
after 10 s), so ``pg_stat_database`` counts every transaction of the round."""
POST_CONCURRENCY = 32
"""Pages in flight at once through the workers' APIs."""
WAIT = 600.0
"""Upper bound of any wait (seconds); each ends as soon as its condition holds."""
TOOL = "get_system_status"
LEASE_TTL = 10.0
LEASE_INTERVAL = 2.0
"""The workers' lease settings: a round every 2 s is part of the idle background."""


@attrs.frozen
class Size:
    """How big a run is: assistants, iterations per loop, rounds per configuration."""

    assistants: int = ASSISTANTS
    iterations: int = ITERATIONS
    rounds: int = ROUNDS
    stats_flush: float = STATS_FLUSH

    @classmethod
    def from_environment(cls) -> Size:
        """The default size, or what ``BENCH_SCALE_ASSISTANTS``/``_ITERATIONS``/``_ROUNDS`` say."""
        def number(name: str, default: int) -> int:
            value = int(os.environ.get(f"BENCH_SCALE_{name}", default))
            if value < 1:
                raise ValueError(f"BENCH_SCALE_{name} must be a positive integer")
            return value

        return cls(number("ASSISTANTS", ASSISTANTS), number("ITERATIONS", ITERATIONS),
                   number("ROUNDS", ROUNDS))


# -- the deployment: world, config, workers ---------------------------------------------------


def write_world(directory: Path, assistants: int) -> Path:
    """A world of one hall: Bob, the player, and one character per assistant."""
    lines = ['[world]\nname = "Bench"\nstart_room = "room:hall"\n',
             '[[rooms]]\nid = "room:hall"\nkey = "Hall"\n',
             '[[characters]]\nid = "char:bob"\nkey = "Bob"\nlocation = "room:hall"\n'
             'permissions = ["Player"]\n']
    lines += [f'[[characters]]\nid = "char:a{i}"\nkey = "A{i}"\nlocation = "room:hall"\n'
              'permissions = ["Player"]\n' for i in range(assistants)]
    path = directory / "world.toml"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def write_config(directory: Path, dsn: str, model_url: str, size: Size, port: int) -> Path:
    """One worker's config: the shared database and world, the scripted model, the assistants."""
    assistants = "".join(
        f'\n[[assistants]]\nname = "a{i}"\ncharacter_id = "char:a{i}"\n'
        f'persona = "You are a benchmark assistant."\ntick_rate = 3600.0\n'
        f'execution_config = {{ max_iterations = {size.iterations}, '
        f'allowed_tools = ["{TOOL}"] }}\n' for i in range(size.assistants))
    path = directory / "assistant.toml"
    path.write_text(f"""
[service]
tick_interval = 0.05
stop_grace = 30.0
max_concurrent = {size.assistants}
log_level = "warn"

[store]
backend = "postgres"
dsn = {json.dumps(dsn)}

[workers]
lease_ttl = {LEASE_TTL:g}
lease_interval = {LEASE_INTERVAL:g}

[world]
file = {json.dumps(str(directory.parent / "world.toml"))}

[models.default]
base_url = {json.dumps(model_url)}
model = "bench"
stream = false
max_concurrency = {size.assistants}
context_window = 128000

[http]
listen = "127.0.0.1:{port}"
{assistants}""", encoding="utf-8")
    return path


@attrs.define(eq=False)
class Worker:
    """One ``twistd -n ai-assistant`` worker: its process and its API."""

    name: str
    process: Twistd
    url: str

    @property
    def pid(self) -> int:
        return int(self.process.transport.pid)

    def cpu(self) -> float:
        """The worker's CPU seconds so far (every thread)."""
        return process_cpu(self.pid)


def start_worker(reactor: Any, directory: Path, name: str, dsn: str, password: str,
                 model_url: str, size: Size) -> Worker:
    """Spawn one worker (its own directory, config and API port)."""
    home = directory / name
    home.mkdir()
    port = free_port()
    config = write_config(home, dsn, model_url, size, port)
    args = [str(TWISTD), "-n", "--pidfile", str(home / "twistd.pid"), "ai-assistant",
            "--config", str(config), "--worker-name", name]
    proc = Twistd(home, args)
    reactor.spawnProcess(proc, str(TWISTD), args, path=str(home),
                         env={**clean_environment(), "AI_TOOLS_DB_PASSWORD": password})
    return Worker(name, proc, f"http://127.0.0.1:{port}")


async def stop_worker(reactor: Any, worker: Worker) -> None:
    """SIGTERM (saves and releases its leases), SIGKILL if it has not ended within WAIT."""
    worker.process.signal("TERM")
    for _ in range(int(WAIT / 0.1)):
        if not worker.process.running:
            return
        await task.deferLater(reactor, 0.1, lambda: None)
    worker.process.signal("KILL")
    await worker.process.ended


async def until(reactor: Any, condition: Any, what: str, workers: Sequence[Worker]) -> None:
    """Poll ``condition()`` every 0.25 s (at most WAIT); a dead worker fails at once."""
    for _ in range(int(WAIT / 0.25)):
        if condition():
            return
        for worker in workers:
            if not worker.process.running:
                raise RuntimeError(f"worker {worker.name} ended:\n{worker.process.stdout}\n"
                                   f"{worker.process.stderr}")
        await task.deferLater(reactor, 0.25, lambda: None)
    raise RuntimeError(f"gave up waiting for {what}")


def lease_split(dsn: str, password: str) -> dict[str, int]:
    """How many live leases each worker holds (read in the database; none before the
    workers created the tables)."""
    from psycopg2.errors import UndefinedTable

    try:
        rows = run_sql(dsn, password, "SELECT worker, count(*) FROM assistant_leases"
                       " WHERE expires_at > extract(epoch FROM now()) GROUP BY worker")
    except UndefinedTable:
        return {}
    return {str(worker): int(count) for worker, count in rows}


def even_split(assistants: int, workers: Sequence[Worker]) -> dict[str, int]:
    """The share of each worker: the first ``assistants mod workers`` take one more."""
    base, extra = divmod(assistants, len(workers))
    return {w.name: base + (1 if n < extra else 0)
            for n, w in enumerate(sorted(workers, key=lambda w: w.name))}


# -- a round: page everyone, wait for every loop's end ---------------------------------------


class _Terminations(protocol.Protocol):
    """A worker's event stream of loop ends (``GET /events?types=termination``), counted."""

    def __init__(self, ends: dict[str, list[dict[str, Any]]]) -> None:
        self.ends = ends
        self.parser = SSEParser()
        self.closed: defer.Deferred[None] = defer.Deferred()

    def dataReceived(self, data: bytes) -> None:
        self.parser.feed(data, self._event)

    def _event(self, data: str, event: str, last_id: str | None) -> None:
        if event == "termination":
            end = json.loads(data)
            self.ends.setdefault(end["assistant"], []).append(end)

    def connectionLost(self, reason: Any = None) -> None:
        if not self.closed.called:
            self.closed.callback(None)

    def stop(self) -> None:
        transport: Any = self.transport  # the response body's producer
        transport.stopProducing()


async def follow_terminations(agent: Agent, worker: Worker,
                              ends: dict[str, list[dict[str, Any]]]) -> _Terminations:
    """Subscribe to ``worker``'s loop ends; they are added to ``ends`` as they come."""
    response: Any = await agent.request(b"GET",
                                        f"{worker.url}/events?types=termination".encode())
    if response.code != 200:
        raise RuntimeError(f"{worker.name}: GET /events answered {response.code}")
    stream = _Terminations(ends)
    response.deliverBody(stream)
    return stream


async def page_everyone(agent: Agent, workers: Sequence[Worker], assistants: int) -> None:
    """Bob pages each assistant's character, through the workers' APIs in turn."""
    from ai_tools.llm.body import BytesProducer

    limit = defer.DeferredSemaphore(POST_CONCURRENCY)

    async def page(i: int) -> None:
        body = json.dumps({"character": "char:bob", "kind": "page", "target": f"char:a{i}",
                           "text": "go"}).encode()
        url = f"{workers[i % len(workers)].url}/messages".encode()
        producer: Any = BytesProducer(body)
        response = await agent.request(b"POST", url, _JSON_HEADERS, producer)
        answer = await readBody(response)
        if response.code != 200:
            raise RuntimeError(f"POST /messages answered {response.code}: {answer[:200]!r}")

    def one(i: int) -> defer.Deferred[None]:
        return defer.Deferred.fromCoroutine(page(i))

    await defer.gatherResults([limit.run(one, i) for i in range(assistants)],
                              consumeErrors=True)


def _json_headers() -> Any:
    from twisted.web.http_headers import Headers

    return Headers({b"Content-Type": [b"application/json"]})


_JSON_HEADERS = _json_headers()


@attrs.frozen
class DatabaseCounts:
    """What the database has done so far: transactions, rows written, state writes."""

    commits: int
    rows: int
    state_writes: int
    at: float

    @classmethod
    def read(cls, dsn: str, password: str, name: str) -> DatabaseCounts:
        ((commits, rows),) = run_sql(
            dsn, password, "SELECT xact_commit, tup_inserted + tup_updated + tup_deleted"
            " FROM pg_stat_database WHERE datname = %s", (name,))
        ((writes,),) = run_sql(dsn, password, "SELECT coalesce(max(seq), 0) FROM assistant_writes")
        return cls(int(commits), int(rows), int(writes), time.monotonic())

    def minus(self, before: DatabaseCounts) -> DatabaseCounts:
        return DatabaseCounts(self.commits - before.commits, self.rows - before.rows,
                              self.state_writes - before.state_writes, self.at - before.at)


@attrs.frozen
class RoundFigures:
    """One round's measurements (seconds; counts)."""

    wall: float
    worker_cpu: float
    server_cpu: float
    database_cpu: float
    database: DatabaseCounts
    requests: int
    background: float = 0.0
    """Transactions per second the idle workers commit (subtracted from ``database``)."""

    def per_request(self, seconds: float) -> float:
        """Milliseconds of ``seconds`` per model request."""
        return seconds * 1000 / self.requests


@attrs.define(eq=False)
class Deployment:
    """One configuration running: its database, its workers, the shared model server."""

    reactor: Any
    cluster: ThrowawayCluster
    server: ScriptedServerProcess
    size: Size
    database: str
    workers: list[Worker] = attrs.field(factory=list)

    @property
    def dsn(self) -> str:
        return self.cluster.dsn(self.database)

    def counts(self) -> DatabaseCounts:
        return DatabaseCounts.read(self.dsn, self.cluster.password, self.database)

    async def sleep(self, seconds: float) -> None:
        await task.deferLater(self.reactor, seconds, lambda: None)


async def run_round(deployment: Deployment, agent: Agent,
                    ends: dict[str, list[dict[str, Any]]]) -> RoundFigures:
    """Page every assistant, wait for every loop's end; the round's figures."""
    size, workers = deployment.size, deployment.workers
    await deployment.sleep(size.stats_flush)  # what came before is counted by now
    idle = deployment.counts()
    await deployment.sleep(size.stats_flush)  # the idle workers' background alone
    before = deployment.counts()
    background = before.minus(idle)
    cpu0 = sum(w.cpu() for w in workers)
    server0, db0 = deployment.server.cpu(), cluster_cpu(deployment.cluster.data)
    ends.clear()
    wall0 = time.perf_counter()
    await page_everyone(agent, workers, size.assistants)
    await until(deployment.reactor, lambda: len(ends) >= size.assistants,
                "every loop's end", workers)
    wall = time.perf_counter() - wall0
    cpu = sum(w.cpu() for w in workers) - cpu0
    server, db = deployment.server.cpu() - server0, cluster_cpu(deployment.cluster.data) - db0
    _check_ends(ends, size)
    await deployment.sleep(size.stats_flush)
    done = deployment.counts().minus(before)
    scale = done.at / background.at if background.at > 0 else 0.0
    net = DatabaseCounts(round(done.commits - background.commits * scale),
                         round(done.rows - background.rows * scale), done.state_writes, done.at)
    rate = background.commits / background.at if background.at > 0 else 0.0
    return RoundFigures(wall, cpu, server, db, net, size.assistants * size.iterations, rate)


def _check_ends(ends: dict[str, list[dict[str, Any]]], size: Size) -> None:
    """Every loop ran its iterations and ended by the iteration cap, once."""
    bad = [e for runs in ends.values() for e in runs
           if e.get("reason") != "max_iterations" or e.get("iterations") != size.iterations]
    twice = [name for name, runs in ends.items() if len(runs) > 1]
    if bad or twice:
        raise RuntimeError(f"loops that did not run {size.iterations} iterations: {bad[:3]};"
                           f" assistants that ran twice: {twice[:3]}")


async def api_ready(reactor: Any, agent: Agent, worker: Worker) -> None:
    """Wait until the worker's API answers ``GET /`` (at most WAIT seconds)."""
    for _ in range(int(WAIT / 0.25)):
        if not worker.process.running:
            raise RuntimeError(f"worker {worker.name} ended:\n{worker.process.stdout}\n"
                               f"{worker.process.stderr}")
        try:
            response = await agent.request(b"GET", f"{worker.url}/".encode())
            await readBody(response)
            if response.code == 200:
                return
        except Exception:  # not listening yet
            pass
        await task.deferLater(reactor, 0.25, lambda: None)
    raise RuntimeError(f"worker {worker.name}'s API never answered")


async def start_deployment(deployment: Deployment, count: int, directory: Path) -> None:
    """Start ``count`` workers on a fresh database; return once they spread the assistants."""
    cluster, size = deployment.cluster, deployment.size
    run_sql(cluster.dsn(), cluster.password, f"CREATE DATABASE {deployment.database}")
    directory.mkdir()
    write_world(directory, size.assistants)
    deployment.workers = [
        start_worker(deployment.reactor, directory, f"w{k + 1}", deployment.dsn,
                     cluster.password, deployment.server.url, size) for k in range(count)]
    expected = even_split(size.assistants, deployment.workers)

    def spread() -> bool:
        return lease_split(deployment.dsn, cluster.password) == expected

    for settle in (LEASE_INTERVAL * 1.5, 0.0):  # spread, and still so a lease round later
        await until(deployment.reactor, spread, "the workers to spread the assistants",
                    deployment.workers)
        await deployment.sleep(settle)


async def run_configuration(deployment: Deployment, count: int, directory: Path
                            ) -> list[RoundFigures]:
    """``count`` workers: start them, run the rounds, stop them (SIGTERM)."""
    reactor = deployment.reactor
    pool = HTTPConnectionPool(reactor, persistent=True)
    pool.maxPersistentPerHost = POST_CONCURRENCY
    agent = Agent(reactor, pool=pool)
    streams: list[_Terminations] = []
    try:
        await start_deployment(deployment, count, directory)
        for worker in deployment.workers:
            await api_ready(reactor, agent, worker)
        ends: dict[str, list[dict[str, Any]]] = {}
        # Any worker's unfiltered stream carries the whole service's events (it follows the
        # other workers'): one stream sees every loop end once.
        streams.append(await follow_terminations(agent, deployment.workers[0], ends))
        return [await run_round(deployment, agent, ends) for _ in range(deployment.size.rounds)]
    finally:
        for stream in streams:
            stream.stop()
        await defer.gatherResults([defer.Deferred.fromCoroutine(stop_worker(reactor, w))
                                   for w in deployment.workers], consumeErrors=True)
        await pool.closeCachedConnections()


# -- the run and its report ---------------------------------------------------------------------


async def measure(reactor: Any, size: Size, counts: Sequence[int] = WORKER_COUNTS
                  ) -> dict[int, list[RoundFigures]]:
    """Every configuration in turn, on one cluster and one model server."""
    cluster = ThrowawayCluster().start()
    results: dict[int, list[RoundFigures]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="bench_scale_") as tmp:
            server = ScriptedServerProcess(reactor, Path(tmp), {
                "tool_calls": [{"name": TOOL, "arguments": {}}], "latency": LATENCY,
                "stream": False})
            try:
                await server.start()
                for count in counts:
                    deployment = Deployment(reactor, cluster, server, size,
                                            f"bench_scale_{count}")
                    results[count] = await run_configuration(deployment, count,
                                                             Path(tmp) / f"workers{count}")
            finally:
                await server.stop()
    finally:
        cluster.stop()
    return results


def _median(rounds: Sequence[RoundFigures], figure: Any) -> float:
    return statistics.median(figure(r) for r in rounds)


def report(size: Size, results: dict[int, list[RoundFigures]]) -> None:
    """Print the figures of each configuration, then the N-machine model from them."""
    ideal = size.iterations * LATENCY
    requests = size.assistants * size.iterations
    print(f"{size.assistants} assistants x {size.iterations} iterations, "
          f"{LATENCY * 1000:.0f} ms per model answer; {requests} model requests a round; "
          f"twistd workers on PostgreSQL; the model server and PostgreSQL in their own "
          f"processes; median of {size.rounds} round(s); {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f} at the end")
    print(f"{'workers':>7s} {'wall s':>7s} {'x ideal':>7s} {'worker CPU':>10s} "
          f"{'server CPU':>10s} {'PG CPU':>7s} {'commits':>8s} {'rows':>6s} {'states':>7s}")
    print(f"{'':>7s} {'':>7s} {'':>7s} {'ms/request':>10s} {'ms/request':>10s} "
          f"{'ms/req':>7s} {'/iter':>8s} {'/iter':>6s} {'/iter':>7s}")
    for count, rounds in results.items():
        wall = _median(rounds, lambda r: r.wall)
        print(f"{count:7d} {wall:7.2f} {wall / ideal:7.1f}"
              f" {_median(rounds, lambda r: r.per_request(r.worker_cpu)):10.3f}"
              f" {_median(rounds, lambda r: r.per_request(r.server_cpu)):10.3f}"
              f" {_median(rounds, lambda r: r.per_request(r.database_cpu)):7.3f}"
              f" {_median(rounds, lambda r: r.database.commits / r.requests):8.2f}"
              f" {_median(rounds, lambda r: r.database.rows / r.requests):6.2f}"
              f" {_median(rounds, lambda r: r.database.state_writes / r.requests):7.2f}")
        cpu = _median(rounds, lambda r: r.worker_cpu + r.server_cpu + r.database_cpu)
        print(f"{'':7s} CPU floor: workers + model server + PostgreSQL = {cpu:.2f} CPU s a "
              f"round, {cpu / (os.cpu_count() or 1):.2f} s of wall on {os.cpu_count()} CPUs")
        print(f"{'':7s} rounds: " + "; ".join(
            f"{r.wall:.2f} s, {r.database.commits} transactions, {r.database.rows} rows, "
            f"{r.database.state_writes} state writes (idle background "
            f"{r.background:.1f} transactions/s subtracted)" for r in rounds))
    _model(results)


def _model(results: dict[int, list[RoundFigures]]) -> None:
    """The N-machine case on paper, from the per-request costs of the widest configuration."""
    widest = results[max(results)]
    worker = _median(widest, lambda r: r.per_request(r.worker_cpu))
    database = _median(widest, lambda r: r.per_request(r.database_cpu))
    commits = _median(widest, lambda r: r.database.commits / r.requests)
    if len(results) > 1:
        walls = {n: _median(r, lambda f: f.wall) for n, r in results.items()}
        print(f"wall, {min(walls)} worker(s) / {max(walls)} workers: "
              f"{walls[min(walls)] / walls[max(walls)]:.2f}x")
    if worker <= 0 or database <= 0:
        print("model: the run is too small to measure the CPU per request (clock ticks)")
        return
    per_core = 1000 / worker
    print(f"model: one worker core serves {per_core:.0f} model requests/s "
          f"({worker:.3f} ms client CPU each) and asks PostgreSQL for {commits * per_core:.0f}"
          f" commits/s; one PostgreSQL core serves {1000 / database:.0f} requests/s "
          f"({database:.3f} ms each): one PostgreSQL core carries {worker / database:.1f} "
          f"worker cores (a 16-core PostgreSQL: {16 * worker / database:.0f} worker cores)")


def run(size: Size | None = None, counts: Sequence[int] = WORKER_COUNTS) -> None:
    """Measure and report on this process's global reactor (which it runs and stops)."""
    size = size or Size.from_environment()
    task.react(lambda reactor: defer.ensureDeferred(_run(reactor, size, counts)))


async def _run(reactor: Any, size: Size, counts: Sequence[int]) -> None:
    report(size, await measure(reactor, size, counts))


def main() -> None:
    """Run in a child process (see :func:`benchmarks.processes.run_in_child`)."""
    run_in_child("benchmarks.bench_scale")

if __name__ == "__main__":
    run()
