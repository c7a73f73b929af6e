"""Connections of the API's site: caps with eviction of idle ones, head and body deadlines.

Each connection is the site's real protocol on a ``StringTransport``; time is
the harness's ``task.Clock``.  Bounds are counted in bytes and clock seconds.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport

from ai_tools.web.api import ApiSite
from ai_tools.web.limits import HttpLimits
from tests.unit.web_fakes import ApiHarness

GET = b"GET /assistants HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


class Transport(StringTransport):
    """A StringTransport that records an abort (a peer that never takes our bytes)."""

    aborted = False

    def abortConnection(self) -> None:
        self.aborted = True
        super().abortConnection()


class Site:
    """An ApiSite over the harness, and connections to it."""

    def __init__(self, **limits: Any) -> None:
        self.api = ApiHarness()
        self.site = ApiSite(self.api.resource, max_body=65536, clock=self.api.clock,
                            limits=HttpLimits(**limits))

    def connect(self, host: str = "127.0.0.1") -> tuple[Any, StringTransport]:
        address = IPv4Address("TCP", host, 50000)
        protocol = self.site.buildProtocol(address)
        transport = Transport(peerAddress=address)
        protocol.makeConnection(transport)
        return protocol, transport

    def advance(self, seconds: float) -> None:
        self.api.clock.advance(seconds)


def closed(transport: StringTransport) -> bool:
    return bool(transport.disconnecting)


def test_dribbled_head_meets_its_deadline() -> None:
    """One byte a second does not extend the head deadline: 408 and closed at 10 s."""
    s = Site(header_timeout=10)
    protocol, transport = s.connect()
    protocol.dataReceived(b"GET / HTTP/1.1\r\n")
    sent = 0
    while not closed(transport) and sent < 100:
        protocol.dataReceived(b"X")
        sent += 1
        s.advance(1)
    assert closed(transport)
    assert sent == 10
    assert transport.value().startswith(b"HTTP/1.1 408 ")
    assert b'"status": 408' in transport.value()
    protocol.connectionLost(None)
    assert len(s.site.connections) == 0


def test_an_idle_connection_is_closed_quietly() -> None:
    """A socket opened and never used is closed at the head deadline, with no answer."""
    s = Site(header_timeout=10)
    _, transport = s.connect()
    s.advance(9.9)
    assert not closed(transport)
    s.advance(0.1)
    assert closed(transport) and transport.value() == b""


def test_a_close_the_peer_does_not_take_becomes_an_abort() -> None:
    """A client that never reads its last answer cannot hold the socket: the polite
    close at the deadline turns into an abort 15 s later (twisted.web's abortTimeout)."""
    s = Site(header_timeout=10)
    protocol, transport = s.connect()
    protocol.dataReceived(GET)
    s.api.pump()
    s.advance(10)
    assert closed(transport) and not transport.aborted  # the answer still waits unread
    s.advance(15)
    assert transport.aborted


def test_a_slow_body_meets_its_deadline() -> None:
    """The body has body_timeout seconds once the head arrived, however it trickles."""
    s = Site(header_timeout=10, body_timeout=5)
    protocol, transport = s.connect()
    protocol.dataReceived(b"POST /messages HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                          b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n")
    for _ in range(4):
        protocol.dataReceived(b"{")
        s.advance(1)
    assert not closed(transport)
    s.advance(1)
    assert closed(transport) and transport.value().startswith(b"HTTP/1.1 408 ")


def test_keep_alive_gets_a_fresh_deadline_after_each_answer() -> None:
    """Answered requests do not count against the next one's deadline."""
    s = Site(header_timeout=10)
    protocol, transport = s.connect()
    for _ in range(3):
        s.advance(8)
        protocol.dataReceived(GET)
        s.api.pump()
        assert b"200 OK" in transport.value()
        transport.clear()
    assert not closed(transport)
    s.advance(10)
    assert closed(transport)


def test_no_deadline_while_a_request_is_answered() -> None:
    """An event stream (a request being answered) lives past every deadline."""
    s = Site(header_timeout=10, body_timeout=5)
    protocol, transport = s.connect()
    protocol.dataReceived(b"GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    s.api.pump()
    s.advance(100)
    assert not closed(transport)
    assert b"keep-alive" in transport.value()


def test_a_full_site_makes_room_by_closing_the_oldest_idle_connection() -> None:
    """At max_connections, a newcomer takes the place of the oldest idle connection."""
    s = Site(max_connections=3)
    connections = [s.connect() for _ in range(3)]
    s.advance(1)
    newcomer, newcomer_transport = s.connect()
    assert closed(connections[0][1]) and connections[0][1].value() == b""
    assert not closed(connections[1][1]) and not closed(newcomer_transport)
    assert len(s.site.connections) == 3 and s.site.connections.evicted == 1
    newcomer.dataReceived(GET)
    s.api.pump()
    assert b"200 OK" in newcomer_transport.value()


def test_a_full_site_of_busy_connections_refuses_with_503() -> None:
    """With every connection in the middle of a request, a newcomer gets 503 and is closed."""
    s = Site(max_connections=2)
    for _ in range(2):
        protocol, _ = s.connect()
        protocol.dataReceived(b"GET /assistants HTTP/1.1\r\n")  # a request under way
    _, refused = s.connect()
    assert closed(refused)
    assert refused.value().startswith(b"HTTP/1.1 503 ")
    assert b"too many connections" in refused.value()
    assert s.site.connections.refused == 1 and len(s.site.connections) == 2


def test_connections_per_address_beyond_loopback() -> None:
    """One remote address gets max_connections_per_address; loopback is not capped so."""
    s = Site(max_connections=100, max_connections_per_address=2)
    first = [s.connect("10.0.0.7") for _ in range(2)]
    _, refused = s.connect("10.0.0.7")
    assert refused.value().startswith(b"HTTP/1.1 503 ") and b"10.0.0.7" in refused.value()
    assert not closed(s.connect("10.0.0.8")[1])
    assert all(not closed(s.connect()[1]) for _ in range(5))
    protocol, _ = first[0]
    protocol.connectionLost(None)
    assert not closed(s.connect("10.0.0.7")[1])
