"""A bounded soak: 50 assistants in a real ``twistd ai-assistant`` against a faulty model.

One process on a SQLite file hosts 50 assistants, each alone in a room with
one player; the players post numbered messages through ``POST /messages``.
The model (the scripted server in this process, :mod:`tests.integration.soak_model`)
goes through phases, each lasting a fixed number of posts, of model requests
and of loops run by the assistants (counts, not timings): healthy; server
errors and dropped connections; down (connections refused, the circuit
breaker opens); answers that hang past the client's deadlines (late headers,
a stalled stream, keep-alive comments only); malformed answers (bodies that are
not JSON, streams cut off or ending in an error); slow streams, during which
the service gets SIGKILL with model calls and posts in flight and is started
again on the same file; a last outage.  Then the model is back and the
players fall silent until the service is at rest.

The invariants, each counted:

* every acknowledged message was seen by a healthy model answer: a batch of
  events is taken only when an answer saw it, so what a failure, an open
  breaker or the kill cut off is answered once the model is back (before
  that rule, 75 of 646 acknowledged messages stayed unanswered in one run);
* every acknowledged message is in its assistant's saved history after the
  clean stop (none lost, to the kill or otherwise);
* the service comes to rest: no assistant ticking or with events pending, no
  tick in flight (no tick guard stuck);
* each process's resident memory grows by at most ``MAX_RSS_GROWTH``;
* no "Unhandled error in Deferred" in either process's log, and the last one
  stops cleanly on SIGTERM;
* ``PRAGMA integrity_check`` is ``ok`` after the kill and at the end.
"""

from __future__ import annotations

import json
import signal
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted

from ai_tools.testing import start_test_server
from tests.integration import soak_model
from tests.integration.soak_service import Players, write_config
from tests.integration.twistd_process import (  # noqa: F401 (fixtures)
    assert_stopped_by,
    get_json,
    http,
    processes,
)
from tests.integration.web_processes import (
    TWISTD,
    Twistd,
    pid_of,
    reactor,
    rss_bytes,
    sleep,
    start_and_wait,
)

pytestmark = pytest.mark.skipif(not TWISTD.exists(), reason="twistd is not installed here")

ASSISTANTS = 50
POSTS = 50
"""Messages posted per phase (one per assistant)."""
LOOPS = 25
"""Loops the assistants run in a phase, at least (a loop refused by an open breaker counts)."""
REQUESTS = {"down": 0, "outage": 5}
"""Requests the model answers in a phase's mode, at least: none when it is down, a few in
an outage (the open breaker lets a probe through now and then), else ``MIXED_REQUESTS``."""
MIXED_REQUESTS = 10
PHASES = ("healthy", "server_errors", "down", "hangs", "malformed", "slow_streams", "outage")
KILL_IN = "slow_streams"
IN_FLIGHT_AT_KILL = 5
"""Model calls in flight when the SIGKILL comes."""
FAULT_KINDS = ("status", "reset", "malformed_json", "truncate", "stall", "keep_alive",
               "stream_error", "hang")
"""Every kind of failed answer the phases play, each at least once."""
MAX_RSS_GROWTH = 64 * 1024 * 1024
UNHANDLED = "Unhandled error in Deferred"
POLLS = 240
"""Status polls (0.25 s apart) a wait gives up after: a bound, never the measure."""


class Soak:
    """The run: the model server, the service process, the players, what was measured."""

    def __init__(self, tmp_path: Path, start: Any, client: Any, server: Any) -> None:
        self.tmp_path = tmp_path
        self.start = start
        self.http = client
        self.server = server
        self.model = soak_model.install(server)
        self.model_port = server.port.getHost().port
        self.config = write_config(tmp_path, ASSISTANTS, server.url, server.model_name)
        self.db = tmp_path / "state" / "assistants.sqlite"
        self.players = Players(ASSISTANTS)
        self.processes: list[Twistd] = []
        self.base = ""
        self.rss: list[tuple[int, int]] = []
        """(after start, highest) resident memory of each process."""
        self.log: list[str] = []
        """What each phase saw, for the failure messages."""
        self.t0 = reactor().seconds()

    @property
    def proc(self) -> Twistd:
        return self.processes[-1]

    async def launch(self) -> None:
        proc, self.base = await start_and_wait(self.start, self.tmp_path, self.config)
        self.processes.append(proc)
        rss = rss_bytes(pid_of(proc))
        self.rss.append((rss, rss))

    def sample_rss(self) -> None:
        if self.proc.running:
            start, highest = self.rss[-1]
            self.rss[-1] = (start, max(highest, rss_bytes(pid_of(self.proc))))

    async def status(self) -> dict[str, Any]:
        self.sample_rss()
        body: dict[str, Any] = await get_json(self.http, f"{self.base}/assistants")
        return body

    async def run_phase(self, mode: str) -> None:
        """``POSTS`` messages while the model is in ``mode``; then wait for the phase's counts."""
        if mode == "down":
            await soak_model.refuse_connections(self.server)
        else:
            self.model.mode = mode
        start = loops(await self.status())
        if mode == KILL_IN:
            await self.kill_mid_phase()
            start = loops(await self.status())
        await self.players.post_many(self.base, POSTS)
        await self.wait_phase(mode, start + LOOPS)
        self.log.append(f"{mode} done at {reactor().seconds() - self.t0:.1f}s: "
                        f"{dict(self.model.played)}")
        if mode == "down":
            soak_model.accept_connections(self.server, reactor(), self.model_port)

    async def wait_phase(self, mode: str, target: int) -> None:
        """Until the assistants ran ``target`` loops in all and the model answered
        ``REQUESTS`` requests in this mode — or until the service is at rest
        (nothing left to answer: nothing more would come)."""
        requests = REQUESTS.get(mode, MIXED_REQUESTS)
        for _ in range(POLLS):
            status = await self.status()
            if at_rest(status) or (self.model.played.get(mode, 0) >= requests
                                   and loops(status) >= target):
                return
            await sleep(0.25)
        raise AssertionError(f"phase {mode}: fewer than {target} loops or {requests} model "
                             f"requests: {self.log} {self.model.played}")

    async def kill_mid_phase(self) -> None:
        """Players posting, model calls in flight: SIGKILL; the file is sound; start again.

        The kill comes once ``POSTS // 4`` messages of the players' flood were
        acknowledged and ``IN_FLIGHT_AT_KILL`` model calls are in flight (counts);
        the posts in flight then get no ``200`` and are not acknowledged.  Until the
        kill the model holds its answers back (``held``), so calls are surely in flight
        then: slow streams alone could all end between two looks at the count, and
        the flood would go on past what the assistants' bounded queues keep.
        """
        before = len(self.players.acknowledged)
        mode, self.model.mode = self.model.mode, "held"
        flood = self.players.flood(self.base)
        for _ in range(POLLS * 12):
            if (len(self.players.acknowledged) - before >= POSTS // 4
                    and self.server.resource.in_flight >= IN_FLIGHT_AT_KILL):
                break
            await sleep(0.02)
        else:
            self.players.stop_flood()
            await flood
            raise AssertionError(f"no moment with {POSTS // 4} posts acknowledged and "
                                 f"{IN_FLIGHT_AT_KILL} model calls in flight: {self.log}")
        self.players.stop_flood()
        self.log.append(f"SIGKILL with {self.server.resource.in_flight} model calls in flight, "
                        f"{len(self.players.acknowledged) - before} posts acknowledged")
        self.sample_rss()
        self.proc.signal("KILL")
        await self.proc.wait_ended()
        await flood
        self.model.mode = mode
        assert self.proc.exit_signal == signal.SIGKILL
        assert integrity(self.db) == "ok"
        await self.launch()

    async def come_to_rest(self) -> dict[str, Any]:
        """The model is back, the players silent: wait until nothing is pending or ticking."""
        self.model.mode = "healthy"
        for _ in range(POLLS):
            status = await self.status()
            if at_rest(status):
                return status
            await sleep(0.25)
        stuck = {a["name"]: (a["ticking"], a["pending_events"], a["last_tick"])
                 for a in status["assistants"] if a["ticking"] or a["pending_events"]}
        raise AssertionError(f"the service never came to rest: {stuck}")

    async def stop(self) -> None:
        self.proc.signal("TERM")
        await self.proc.wait_ended()
        assert_stopped_by(self.proc, signal.SIGTERM)


def loops(status: dict[str, Any]) -> int:
    """Loops the assistants ran (a loop refused by an open breaker counts too)."""
    return sum(a["counters"].get("loops", 0) for a in status["assistants"])


def at_rest(status: dict[str, Any]) -> bool:
    """No assistant ticking or with events pending, no tick in flight."""
    return not status["service"]["ticks_in_flight"] and not any(
        a["ticking"] or a["pending_events"] for a in status["assistants"])


def integrity(db: Path) -> str:
    conn = sqlite3.connect(str(db))
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()


def unsaved(db: Path, acknowledged: dict[str, int]) -> list[str]:
    """Acknowledged tokens missing from their assistant's saved history and pending events."""
    conn = sqlite3.connect(str(db))
    try:
        saved = {name: json.loads(state)
                 for name, state in conn.execute("SELECT name, state FROM assistants")}
    finally:
        conn.close()
    texts = {name: " ".join([str(m.get("content")) for m in state.get("history", ())]
                            + [str(e.get("text")) for e in state.get("pending_events", ())])
             for name, state in saved.items()}
    return sorted(token for token, room in acknowledged.items()
                  if token not in texts.get(f"a{room}", ""))


@pytest_twisted.ensureDeferred
async def test_soak(tmp_path: Path, processes: Any, http: Any) -> None:  # noqa: F811
    server = await start_test_server([], reactor(), log_requests=False)
    soak = Soak(tmp_path, processes, http, server)
    try:
        await soak.launch()
        for mode in PHASES:
            await soak.run_phase(mode)
        status = await soak.come_to_rest()
        await soak.stop()
    finally:
        await soak.players.close()
        await server.stop()

    acknowledged = soak.players.acknowledged
    unanswered = sorted(set(acknowledged) - soak_model.answered_tokens(server.requests))
    played = soak_model.counts(server.requests)
    report = (f"{len(acknowledged)} acknowledged, {len(soak.players.refused)} not, "
              f"{len(unanswered)} never answered (first: {unanswered[:5]}); "
              f"requests by answer: {played}; rss (start, highest): {soak.rss}; {soak.log}")
    print(report)  # pytest -rP shows it
    assert len(acknowledged) + len(soak.players.refused) == soak.players.posted, report
    assert len(acknowledged) >= len(PHASES) * POSTS + POSTS // 4, report
    assert len(soak.players.refused) <= soak.players.clients, report  # in flight at the kill
    assert unanswered == [], report
    assert unsaved(soak.db, acknowledged) == [], report
    assert [kind for kind in FAULT_KINDS if not played.get(kind)] == [], report
    assert at_rest(status), status
    for start, highest in soak.rss:
        assert highest - start <= MAX_RSS_GROWTH, report
    for proc in soak.processes:
        assert UNHANDLED not in proc.stdout + proc.stderr, proc.stdout[-5000:]
    assert integrity(soak.db) == "ok"
