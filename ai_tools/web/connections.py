"""Connections of the HTTP API: how many may be open, and how long a request may take to arrive.

:class:`ConnectionLimits` counts the open connections of a site (in total and
per address beyond loopback).  When the total is reached, a new connection
takes the place of the oldest one that sits idle waiting for its next
request (a keep-alive connection, or a socket opened and never used), so a
pile of idle sockets cannot make the API unreachable; with none idle, the
newcomer gets ``503`` and is closed.

:class:`GuardedChannel` is twisted.web's ``HTTPChannel`` with two deadlines
that only progress ends: a request's head (request line and headers) must
arrive within ``header_timeout`` seconds of the connection opening or its
previous answer ending, its body within ``body_timeout`` seconds of its
head.  Bytes that dribble in do not extend either.  An idle connection that
reaches the deadline is closed quietly; a request caught half-way gets
``408`` first.  While a request is being answered (a tick, an event stream)
no deadline runs.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from typing import Any

import attrs
from twisted.internet.protocol import connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.http import HTTPChannel
from twisted.web.server import Request

from ai_tools.web.errors import raw_error_answer
from ai_tools.web.limits import HttpLimits

__all__ = ["ConnectionLimits", "GuardedChannel", "remote_host"]

log = Logger()


def remote_host(address: object) -> str | None:
    """The IP address of a peer (an ``IAddress``), or None when it is this machine.

    Loopback addresses and UNIX sockets are local: per-address caps leave
    them out (a reverse proxy or a tunnel brings every client from there).
    """
    host = getattr(address, "host", None)
    if not isinstance(host, str):
        return None
    try:
        return None if ipaddress.ip_address(host.split("%", 1)[0]).is_loopback else host
    except ValueError:
        return host


@attrs.define(eq=False)
class ConnectionLimits:
    """The open connections of one site (``HttpLimits.max_connections*``)."""

    limits: HttpLimits = attrs.field(factory=HttpLimits)
    evicted: int = attrs.field(default=0, init=False)
    """Idle connections closed to make room for new ones."""
    refused: int = attrs.field(default=0, init=False)
    """Connections refused with 503."""
    _open: dict[GuardedChannel, str | None] = attrs.field(factory=dict, init=False)
    _idle: dict[GuardedChannel, None] = attrs.field(factory=dict, init=False)
    """The idle connections, oldest first (a dict keeps insertion order)."""
    _per_address: Counter[str] = attrs.field(factory=Counter, init=False)

    def __len__(self) -> int:
        return len(self._open)

    def admit(self, channel: GuardedChannel, address: str | None) -> str | None:
        """Count ``channel`` in (making room if needed); the refusal's reason if it cannot be."""
        limits = self.limits
        if address is not None and self._per_address[address] >= \
                limits.max_connections_per_address:
            self.refused += 1
            return (f"too many connections from {address} (the limit is "
                    f"{limits.max_connections_per_address})")
        if len(self._open) >= limits.max_connections and not self._evict_oldest_idle():
            self.refused += 1
            return f"too many connections (the limit is {limits.max_connections})"
        self._open[channel] = address
        if address is not None:
            self._per_address[address] += 1
        return None

    def idle(self, channel: GuardedChannel) -> None:
        """``channel`` waits for its next request (it may be closed to make room)."""
        if channel in self._open:
            self._idle[channel] = None

    def busy(self, channel: GuardedChannel) -> None:
        """``channel`` is receiving or being answered a request."""
        self._idle.pop(channel, None)

    def closed(self, channel: GuardedChannel) -> None:
        """Forget ``channel`` (called more than once is fine)."""
        self._idle.pop(channel, None)
        if channel not in self._open:
            return
        address = self._open.pop(channel)
        if address is not None:
            self._per_address[address] -= 1
            if self._per_address[address] <= 0:
                del self._per_address[address]

    def _evict_oldest_idle(self) -> bool:
        if not self._idle:
            return False
        oldest = next(iter(self._idle))
        self.closed(oldest)
        self.evicted += 1
        oldest.make_room()
        return True


class GuardedChannel(HTTPChannel):
    """An ``HTTPChannel`` counted by its site's :class:`ConnectionLimits`, with request deadlines.

    The site (``self.site``, set by ``Site.buildProtocol``) provides
    ``connections`` (a :class:`ConnectionLimits`) and ``limits``.
    """

    site: Any = None
    _deadline: Any = None
    _receiving = False
    _counted = False

    @property
    def _connection(self) -> Any:
        """The transport (typed loosely: twisted's stubs give ``ITransport | None``)."""
        return self.transport

    @property
    def _limits(self) -> HttpLimits:
        limits: HttpLimits = self.site.limits
        return limits

    def connectionMade(self) -> None:
        """Count the connection in, or answer 503 and close it; start the head deadline."""
        super().connectionMade()
        connections: ConnectionLimits = self.site.connections
        refusal = connections.admit(self, remote_host(self._connection.getPeer()))
        if refusal is not None:
            log.info("Refused a connection: {reason}", reason=refusal)
            self._connection.write(raw_error_answer(503, refusal, {"Retry-After": "1"}))
            self._connection.loseConnection()
            return
        self._counted = True
        self._wait_for_request()

    def dataReceived(self, data: bytes) -> None:
        """The first byte of a request ends the connection's idleness (not its deadline)."""
        if self._counted and not self._receiving:
            self._receiving = True
            self.site.connections.busy(self)
        super().dataReceived(data)

    def allHeadersReceived(self) -> None:
        """The head arrived: the body has ``body_timeout`` seconds."""
        super().allHeadersReceived()
        self._set_deadline(self._limits.body_timeout)

    def allContentReceived(self) -> None:
        """The whole request arrived: no deadline while it is answered."""
        self._set_deadline(None)
        super().allContentReceived()

    def requestDone(self, request: Request) -> None:
        """The answer ended: a persistent connection waits for its next request."""
        if self.persistent and self._counted:
            # before the parent replays a next request the client already sent
            self._wait_for_request()
        super().requestDone(request)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        """Stop the deadline and count the connection out."""
        self._set_deadline(None)
        self.site.connections.closed(self)
        super().connectionLost(reason)

    def make_room(self) -> None:
        """Close this idle connection: a new one needs its place."""
        self._set_deadline(None)
        self._close()

    def _close(self) -> None:
        # twisted.web's own timeout path: close, and abort if the peer does not take
        # what is still unsent (an answer it never read) within abortTimeout seconds.
        self.timeoutConnection()

    def _wait_for_request(self) -> None:
        self._receiving = False
        self.site.connections.idle(self)
        self._set_deadline(self._limits.header_timeout)

    def _set_deadline(self, seconds: float | None) -> None:
        if self._deadline is not None and self._deadline.active():
            self._deadline.cancel()
        self._deadline = None
        if seconds is not None:
            self._deadline = self.callLater(seconds, self._deadline_passed)

    def _deadline_passed(self) -> None:
        self._deadline = None
        if self._receiving:  # a request under way gets an answer; an idle one, none
            self._connection.write(raw_error_answer(
                408, "the request did not arrive in time; send it whole, at once"))
        self._close()
