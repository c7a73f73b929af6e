"""One service, many doors, with real processes: two ``twistd ai-assistant`` workers on one
throwaway PostgreSQL.  Whichever worker is asked answers for every assistant: the one
that does not run an assistant forwards to its owner (status, history, stop, tick,
its event stream), shows its loop events in its own unfiltered event stream, answers
from the database once the owner is gone; an assistant created over one worker's API
runs under a lease, is listed by the other and is removed through it."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest_twisted
from twisted.internet import defer, protocol, task

from ai_tools.store.postgres import PostgreSQLStore
from tests.integration.conftest import PostgresDatabase
from tests.integration.test_postgres_failover import (
    TTL,
    api_of,
    owners,
    start_worker,
    write_worker,
)
from tests.integration.twistd_process import (
    get_json,
    http,
    post_json,
    processes,
    reactor,
    sleep,
    sse_events,
    until,
)

__all__ = ["http", "processes"]


@pytest_twisted.ensureDeferred
async def test_the_store_keeps_the_apis_configs_and_finds_live_owners(
    postgres_db: PostgresDatabase
) -> None:
    """Creating a name twice: one wins (a removed one may be created again); an
    assistant's owner counts only while its lease and its worker are alive."""
    clock = task.Clock()
    clock.advance(1000.0)
    store = PostgreSQLStore(postgres_db.dsn, password=postgres_db.password, clock=clock)
    await store.open()
    try:
        assert await store.put_shared_config("tess", {"name": "tess"}, create=True)
        assert not await store.put_shared_config("tess", {"name": "tess", "x": 1}, create=True)
        await store.put_shared_config("tess", {"name": "tess"}, removed=True)
        assert await store.put_shared_config("tess", {"name": "tess", "x": 2}, create=True)
        assert await store.shared_configs() == {"tess": ({"name": "tess", "x": 2}, None, False)}

        await store.lease_round("w1", [], 10.0, 600.0, "http://127.0.0.1:8081")
        await store.lease_round("w2", [], 10.0, 600.0)  # no API address yet
        assert await store.acquire_lease("tess", "w1", 10.0) == 1
        assert await store.acquire_lease("pip", "w2", 10.0) == 1
        assert await store.assistant_owners() == {"tess": ("w1", "http://127.0.0.1:8081"),
                                                  "pip": ("w2", None)}
        assert await store.live_workers() == {"w1": "http://127.0.0.1:8081", "w2": None}
        await store.retire_worker("w2")
        assert await store.assistant_owners() == {"tess": ("w1", "http://127.0.0.1:8081")}
        clock.advance(11.0)  # w1's lease and liveness expire unrenewed
        assert await store.assistant_owners() == {}
    finally:
        await store.close()


async def eventually(check: Callable[[], Awaitable[bool]], what: str,
                     limit: float = 30.0) -> None:
    """Await ``check()`` every 50 ms until it is true, for at most ``limit`` seconds."""
    deadline = reactor().seconds() + limit
    while not await check():
        if reactor().seconds() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        await sleep(0.05)


async def runs(http: Any, url: str, name: str, worker: str) -> bool:
    """Whether ``worker`` runs ``name`` by the status the API at ``url`` gives.

    A lease in the database is not enough: the worker that took it loads the
    assistant's state before it runs it, and meanwhile answers for it from the
    database (``"worker": null``), as the other workers' forwarded requests get
    ``503``."""
    response = await http.get(f"{url}/assistants/{name}")
    answer = await response.json()
    return response.code == 200 and answer.get("worker") == worker


async def a_round_started(db: PostgresDatabase, worker: str, after: float) -> None:
    """Wait until ``worker`` has started a lease round after ``after`` (the time.time()
    of this machine): its renewal in the database says when its round started."""

    def renewed() -> bool:
        rows = db.sql("SELECT expires_at FROM lease_workers WHERE worker = %s", (worker,))
        return bool(rows) and float(rows[0][0]) - TTL > after

    await until(renewed, f"a lease round of {worker}", limit=30)


async def two_workers(processes: Any, tmp_path: Path, http: Any,
                      db: PostgresDatabase) -> dict[str, tuple[Any, str]]:
    """w1 and w2 running, one assistant each: ``{worker: (process, api url)}``."""
    one = start_worker(processes, tmp_path, "w1", db)
    two = start_worker(processes, tmp_path, "w2", db)
    urls = {"w1": (one, await api_of(one)), "w2": (two, await api_of(two))}

    async def one_each_running() -> bool:
        lease = owners(db)
        if sorted(lease.values()) != ["w1", "w2"]:
            return False
        for name, worker in lease.items():
            if not await runs(http, urls[worker][1], name, worker):
                return False
        return True

    await eventually(one_each_running, "one assistant running on each worker")
    advertised = dict(db.sql("SELECT worker, api_url FROM lease_workers"))
    assert advertised == {name: url for name, (_, url) in urls.items()}
    return urls


class Collect(protocol.Protocol):
    """An event stream's bytes as they come."""

    def __init__(self) -> None:
        self.data = bytearray()

    def dataReceived(self, data: bytes) -> None:
        self.data += data


@pytest_twisted.ensureDeferred
async def test_any_worker_answers_for_an_assistant_the_other_runs(
    tmp_path: Path, postgres_db: PostgresDatabase, processes: Any, http: Any
) -> None:
    workers = await two_workers(processes, tmp_path, http, postgres_db)
    owner_name = owners(postgres_db)["pip"]
    other_name = "w2" if owner_name == "w1" else "w1"
    owner, owner_url = workers[owner_name]
    _, url = workers[other_name]  # the worker that does NOT run Pip

    status = await get_json(http, f"{url}/assistants/pip")
    assert status["name"] == "pip" and status["worker"] == owner_name
    listed = await get_json(http, f"{url}/assistants")
    assert {a["name"]: a["worker"] for a in listed["assistants"]} == owners(postgres_db)
    assert listed["workers_unreachable"] == []

    # Pip's event stream, through the other worker, while Bob speaks to Pip.
    stream = await http.get(f"{url}/events?assistant=pip", unbuffered=True)
    assert stream.code == 200
    assert stream.headers.getRawHeaders(b"content-type")[0].startswith(b"text/event-stream")
    collected = Collect()
    stream.deliverBody(collected)
    await post_json(http, f"{url}/messages", {"character": "char:bob", "text": "any soup?"})

    async def pip_answered() -> bool:
        history = await get_json(http, f"{url}/assistants/pip/history?limit=20")
        return "any soup?" in json.dumps(history) and any(
            m.get("role") == "tool" for m in history["messages"])

    for _ in range(200):
        if await pip_answered():
            break
        await sleep(0.05)
    else:
        raise AssertionError("Pip's history never showed Bob's question, through the other")
    await until(lambda: any(kind == "loop_finished" or data.get("assistant") == "pip"
                            for kind, data in sse_events(bytes(collected.data))),
                "Pip's events relayed by the other worker", limit=20)
    collected.transport.stopProducing()

    # The other worker's stream without ?assistant= shows the whole service: Pip's
    # loop events too.  It follows the owner's stream from the moment it is opened:
    # Bob speaks to Pip (a tick with something to do) until they come.
    # (The owner watches the whole service too: each follows the other, with no echo.)
    whole, owners_whole = Collect(), Collect()
    (await http.get(f"{owner_url}/events", unbuffered=True)).deliverBody(owners_whole)
    (await http.get(f"{url}/events", unbuffered=True)).deliverBody(whole)

    def pip_seen() -> bool:
        return any(data.get("assistant") == "pip" for _, data in sse_events(bytes(whole.data)))

    async def pip_in_the_whole_stream() -> bool:
        await post_json(http, f"{url}/messages", {"character": "char:bob", "text": "soup?"})
        for _ in range(40):
            if pip_seen():
                return True
            await sleep(0.05)
        return False

    await eventually(pip_in_the_whole_stream, "Pip's events in the other worker's /events")
    for stream in (whole, owners_whole):
        ids = [int(line[4:]) for line in bytes(stream.data).decode().splitlines()
               if line.startswith("id: ")]
        assert ids == sorted(set(ids))  # numbered by the worker asked
        events = [json.dumps(data, sort_keys=True) for _, data in sse_events(bytes(stream.data))]
        assert len(events) == len(set(events))  # none twice
        stream.transport.stopProducing()

    stopped = await post_json(http, f"{url}/assistants/pip/stop", {})
    assert stopped["assistant"] == "pip" and isinstance(stopped["stopped"], bool)
    ticked = await post_json(http, f"{url}/assistants/pip/tick", {})
    assert "reason" in json.dumps(ticked)
    everything = await post_json(http, f"{url}/stop", {})
    assert everything["workers_unreachable"] == []

    # The owner dies: its lease still runs for a moment (the lease time after its last
    # round: at least 1.6 s here), and nobody answers for Pip.  The three questions go
    # at once, as each waits a moment to find the owner's port closed (0.3 s).
    owner.signal("KILL")
    killed = time.monotonic()
    await owner.wait_ended()
    saved, history, refused = await defer.gatherResults([
        defer.ensureDeferred(get_json(http, f"{url}/assistants/pip")),
        defer.ensureDeferred(get_json(http, f"{url}/assistants/pip/history")),
        http.post(f"{url}/assistants/pip/tick", data=b"{}",
                  headers={b"content-type": [b"application/json"]})])
    asked = f"asked {time.monotonic() - killed:.2f}s after the kill"
    assert saved["worker"] is None and saved["saved"] is True, (saved, asked)
    assert saved["history_length"] > 0
    assert "any soup?" in json.dumps(history)
    assert refused.code == 503, (await refused.text(), asked)
    assert refused.headers.getRawHeaders(b"retry-after") is not None
    await refused.text()
    # Then the survivor takes Pip over and answers for it itself (once it has loaded
    # Pip's state: its lease is in the database a moment before).
    await eventually(lambda: runs(http, url, "pip", other_name), "Pip moving over")
    assert owners(postgres_db).get("pip") == other_name
    missing = await http.get(f"{url}/assistants/nobody")
    assert missing.code == 404
    await missing.text()


@pytest_twisted.ensureDeferred
async def test_an_assistant_created_on_one_worker_is_shared_and_removed_through_the_other(
    tmp_path: Path, postgres_db: PostgresDatabase, processes: Any, http: Any
) -> None:
    workers = await two_workers(processes, tmp_path, http, postgres_db)
    (one, url_one), (two, url_two) = workers["w1"], workers["w2"]

    created = await post_json(http, f"{url_one}/assistants", {
        "name": "tess", "character_id": "char:alice", "model": "default", "tick_rate": 0.2})
    assert created["assistant"] == "tess" and created["worker"] == "w1"
    assert owners(postgres_db)["tess"] == "w1"
    again = await http.post(f"{url_two}/assistants", json={"name": "tess", "model": "default"})
    assert again.code == 409, await again.text()
    await again.text()

    # It runs: a tick through the other worker, its state written under its lease.
    ticked = await post_json(http, f"{url_two}/assistants/tess/tick", {})
    assert "reason" in json.dumps(ticked)
    writes = postgres_db.sql("SELECT worker, epoch FROM assistant_writes WHERE name = 'tess'")
    assert writes and {w for w, _ in writes} == {"w1"}
    listed = await get_json(http, f"{url_two}/assistants")
    assert {a["name"]: a["worker"] for a in listed["assistants"]}["tess"] == "w1"
    changed = await http.patch(f"{url_two}/assistants/tess", json={"persona": "Tess, a bard."})
    assert changed.code == 200, await changed.text()
    assert (await changed.json())["changed"] == ["persona"]
    config = await get_json(http, f"{url_two}/assistants/tess/config")
    assert config["config"]["persona"] == "Tess, a bard."
    # Nobody speaks as Tess's character over the API, on either worker (the other
    # worker learns of Tess at its next lease round: every 0.4 s here; the round
    # after the next one starts once that one is done).
    for _ in range(2):
        await a_round_started(postgres_db, "w2", time.time())
    refused = await http.post(f"{url_two}/messages",
                              json={"character": "char:alice", "text": "hello"})
    assert refused.code == 403, await refused.text()
    await refused.text()

    removed = await http.delete(f"{url_two}/assistants/tess")
    assert removed.code == 200, await removed.text()
    assert (await removed.json())["removed"] is True
    assert "tess" not in owners(postgres_db)
    for url in (url_one, url_two):
        gone = await http.get(f"{url}/assistants/tess")
        assert gone.code == 404, await gone.text()
        await gone.text()
    await sleep(1.0)  # two lease rounds: nobody takes it again
    assert "tess" not in owners(postgres_db)
    listed = await get_json(http, f"{url_one}/assistants")
    assert "tess" not in {a["name"] for a in listed["assistants"]}
    for proc in (one, two):
        assert "LeaseLost" not in proc.stdout and "Traceback" not in proc.stdout, proc.stdout


TOKEN = "doors-token-0123456789"


@pytest_twisted.ensureDeferred
async def test_workers_with_a_token_pass_requests_on_signed_never_with_the_token(
    tmp_path: Path, postgres_db: PostgresDatabase, processes: Any, http: Any
) -> None:
    """Two real workers whose API wants a token: a caller's request about the other
    worker's assistant is passed on signed (over real HTTP, each worker's own clock) and
    answered by the owner; the owner refuses a request that only says it was passed on,
    or carries a forged signature."""
    env = {"AI_TOOLS_DB_PASSWORD": postgres_db.password, "AI_TOOLS_HTTP_TOKEN": TOKEN}
    started = {}
    for name in ("w1", "w2"):
        directory = tmp_path / name
        config = write_worker(directory, postgres_db)
        started[name] = processes(directory, config, "--worker-name", name, env=env)
    urls = {name: await api_of(proc) for name, proc in started.items()}
    auth = {b"authorization": [f"Bearer {TOKEN}".encode()]}

    async def status(url: str, name: str, headers: Any = auth) -> tuple[int, Any]:
        response = await http.get(f"{url}/assistants/{name}", headers=headers)
        return response.code, await response.json()

    async def one_each_running() -> bool:
        lease = owners(postgres_db)
        if sorted(lease.values()) != ["w1", "w2"]:
            return False
        for name, worker in lease.items():
            code, answer = await status(urls[worker], name)
            if code != 200 or answer.get("worker") != worker:
                return False
        return True

    await eventually(one_each_running, "one assistant running on each worker")
    owner_name = owners(postgres_db)["pip"]
    other_name = "w2" if owner_name == "w1" else "w1"
    code, answer = await status(urls[other_name], "pip")
    assert code == 200 and answer["worker"] == owner_name, answer  # passed on, signed
    listed = await http.get(f"{urls[other_name]}/assistants", headers=auth)
    assert listed.code == 200 and (await listed.json())["workers_unreachable"] == []
    forged = {b"x-ai-tools-forwarded": [b"1"],
              b"x-ai-tools-worker-signature": [f"t={int(time.time())};sig={'0' * 64}".encode()]}
    code, answer = await status(urls[owner_name], "pip", forged)
    assert code == 401 and "worker signature" in answer["error"], answer
    code, _ = await status(urls[owner_name], "pip", {b"x-ai-tools-forwarded": [b"1"]})
    assert code == 401
