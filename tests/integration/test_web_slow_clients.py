"""Slow clients over real sockets on 127.0.0.1: a request that dribbles in meets its deadline.

The API runs in this process on the real reactor (port 0).  A client sends a
request head one byte every 50 ms; with a 1 s head deadline the server
answers 408 and closes the connection after about 20 bytes.  The bound is a
count of bytes (at most 60 get through); before the fix every byte reset
twisted.web's idle timer and the connection lived on.
"""

from __future__ import annotations

from typing import Any

import pytest_twisted
from twisted.internet import defer, task
from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol
from twisted.internet.protocol import Protocol

from ai_tools.web.api import make_web_service
from tests.unit.web_fakes import ApiHarness

MAX_BYTES = 60


def reactor() -> Any:
    from twisted.internet import reactor as global_reactor

    return global_reactor


class Dribbler(Protocol):
    """Collects what the server says; ``lost`` fires when it closes."""

    def __init__(self) -> None:
        self.received = b""
        self.lost: defer.Deferred[None] = defer.Deferred()

    def dataReceived(self, data: bytes) -> None:
        self.received += data

    def connectionLost(self, reason: Any = None) -> None:
        self.lost.callback(None)


@pytest_twisted.ensureDeferred
async def test_a_dribbled_request_head_is_cut_off() -> None:
    api = ApiHarness()  # the service, on its own clock; the web service on the reactor
    web = make_web_service(api.service, api.world, endpoint="tcp:0:interface=127.0.0.1",
                           limits={"header_timeout": 1.0}, clock=reactor())
    web.startService()
    try:
        port = (await web.when_listening()).getHost().port
        client = Dribbler()
        endpoint = TCP4ClientEndpoint(reactor(), "127.0.0.1", port)
        await connectProtocol(endpoint, client)
        transport: Any = client.transport
        transport.write(b"GET /assistants HTTP/1.1\r\n")
        sent = 0
        while not client.lost.called and sent < MAX_BYTES:
            transport.write(b"X")
            sent += 1
            await task.deferLater(reactor(), 0.05, lambda: None)
        assert client.lost.called, f"still open after {sent} dribbled bytes"
        assert client.received.startswith(b"HTTP/1.1 408 ")
        assert len(web.site.connections) == 0
    finally:
        await web.stopService()
