"""Hostile clients against a real ``twistd ai-assistant``: memory and reachability stay bounded.

* 300 event-stream clients from 127.0.0.1 that never read (each with a small
  receive buffer, so the back-pressure reaches the server at once) while 800
  messages of 3.9 KB are posted: the service's resident memory grows by at
  most 150 MB, with the default caps (which admit all 300).  Before the
  fix every stream kept up to 1,000 frames, each encoded anew: gigabytes.
* 1,100 sockets opened and left idle, against a process allowed 1,024 file
  descriptors: a normal request is still answered.  Before the fix the
  process ran out of descriptors and the API was unreachable.

Each wait is bounded by a count or by a generous give-up limit, never by a
timing the test depends on.
"""

from __future__ import annotations

import json
import signal
import socket
from pathlib import Path
from typing import Any, cast

import pytest
import pytest_twisted
import treq
from twisted.internet import defer
from twisted.web.client import Agent, HTTPConnectionPool

from tests.integration.web_processes import (
    TWISTD,
    assert_stopped_by,
    disabled_pip,
    pid_of,
    reactor,
    rss_bytes,
    sleep,
    start_and_wait,
    twistd_processes,  # noqa: F401 (a fixture)
    until,
)

pytestmark = pytest.mark.skipif(not TWISTD.exists(), reason="twistd is not installed here")

STREAMS = 300
POSTS = 800
TEXT = "x" * 3900
MAX_GROWTH = 150 * 1024 * 1024
JSON: dict[bytes | str, bytes | str] = {"Content-Type": "application/json"}


def address(base: str) -> tuple[str, int]:
    host, port = base.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def non_reading_stream(host: str, port: int) -> socket.socket:
    """A client of ``GET /events`` that reads the opening, then nothing more."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(30)
    sock.connect((host, port))
    sock.sendall(f"GET /events HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
    opening = b""
    while b"connected" not in opening:
        chunk = sock.recv(4096)
        assert chunk, "the server closed a new event stream"
        opening += chunk
    assert opening.startswith(b"HTTP/1.1 200 "), opening[:200]
    return sock


async def post_all(base: str, count: int, body: dict[str, Any], clients: int = 8) -> list[int]:
    """Post ``body`` ``count`` times over ``clients`` connections; the status codes."""
    pool = HTTPConnectionPool(reactor(), persistent=True)
    pool.maxPersistentPerHost = clients
    http = treq.client.HTTPClient(cast(Any, Agent(reactor(), pool=pool)))
    codes: list[int] = []
    remaining = iter(range(count))

    async def client() -> None:
        for _ in remaining:
            response = await http.post(f"{base}/messages", data=json.dumps(body).encode(),
                                       headers=JSON)
            codes.append(response.code)
            await response.content()

    try:
        await defer.DeferredList([defer.ensureDeferred(client()) for _ in range(clients)],
                                 fireOnOneErrback=True, consumeErrors=True)
    finally:
        await pool.closeCachedConnections()
    return codes


@pytest_twisted.ensureDeferred
async def test_streams_that_never_read_keep_memory_bounded(
        tmp_path: Path, twistd_processes: Any) -> None:  # noqa: F811
    config = disabled_pip(tmp_path)
    proc, base = await start_and_wait(twistd_processes, tmp_path, config)
    host, port = address(base)
    # Alice speaks alone in the plaza: only the event streams carry her words
    said = {"character": "char:alice", "text": TEXT}
    assert set(await post_all(base, 20, said)) == {200}  # warm up
    before = rss_bytes(pid_of(proc))
    sockets: list[socket.socket] = []
    try:
        for _ in range(STREAMS):
            sockets.append(non_reading_stream(host, port))
        codes = await post_all(base, POSTS, said)
        assert codes.count(200) == POSTS
        await sleep(0.5)  # let the last writes reach the (paused) transports
        growth = rss_bytes(pid_of(proc)) - before
        print(f"RSS growth with {STREAMS} stalled streams: {growth / 2**20:.1f} MB")
        assert growth <= MAX_GROWTH, f"RSS grew by {growth / 2**20:.0f} MB"
        response = await treq.get(f"{base}/assistants")
        assert response.code == 200
        await response.content()
    finally:
        for sock in sockets:
            sock.close()
    proc.signal("TERM")
    await proc.wait_ended()
    assert_stopped_by(proc, signal.SIGTERM)


def closed_by_server(sockets: list[socket.socket]) -> int:
    """How many of these non-blocking sockets the server has closed (EOF waiting)."""
    closed = 0
    for sock in sockets:
        try:
            closed += sock.recv(1, socket.MSG_PEEK) == b""
        except (BlockingIOError, InterruptedError):
            pass  # open, nothing to read (or the connect is still under way)
        except ConnectionError:
            closed += 1
    return closed


@pytest_twisted.ensureDeferred
async def test_idle_sockets_do_not_make_the_api_unreachable(
        tmp_path: Path, twistd_processes: Any) -> None:  # noqa: F811
    # a listen queue long enough that all 1,100 reach the server at once; a head
    # deadline longer than the test, so that only the connection cap can save it
    config = disabled_pip(tmp_path, http='listen = "tcp:0:interface=127.0.0.1:backlog=2048"\n'
                                         'header_timeout = 300')
    proc = twistd_processes(tmp_path, config, nofile=1024)
    match = await proc.wait_for(r"HTTP API listening on http://(127\.0\.0\.1:\d+)/")
    await proc.wait_for(r"ai_tools service ready")
    base = f"http://{match.group(1)}"
    host, port = address(base)
    idle: list[socket.socket] = []
    try:
        for _ in range(1100):
            sock = socket.socket()
            sock.setblocking(False)
            sock.connect_ex((host, port))  # under way; never sends a byte
            idle.append(sock)
        # the server accepts them all and keeps at most max_connections (500) open;
        # (the give-up limit is below twisted.web's own 60 s idle timeout)
        await until(lambda: closed_by_server(idle) >= 1100 - 500,
                    "the server to shed the idle connections over its cap", limit=30)
        pool = HTTPConnectionPool(reactor(), persistent=False)
        agent = Agent(reactor(), pool=pool, connectTimeout=30)
        http = treq.client.HTTPClient(cast(Any, agent))
        response = await http.get(f"{base}/assistants", timeout=60)
        assert response.code == 200
        body = await response.json()
        assert body["service"]["assistants"] == 1
        assert "Could not accept" not in proc.stdout  # never out of descriptors
    finally:
        for sock in idle:
            sock.close()
    proc.signal("TERM")
    await proc.wait_ended()
    assert_stopped_by(proc, signal.SIGTERM)
