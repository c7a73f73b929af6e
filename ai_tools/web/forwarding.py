"""Passing an HTTP API request on to another worker, bounded in time and bytes.

With several workers (PostgreSQL), a worker asked about an assistant another
worker runs passes the request on to that worker's API
(:mod:`ai_tools.web.other_workers` decides when).  :class:`Forwarder` is the
client side of that: treq over its own connection pool, and for every request

* a **deadline** (``timeout``) for the whole answer — headers and body; past
  it the request is cancelled or the body's connection aborted;
* a **byte bound** (``max_bytes``) on the answer's body, counted as it
  arrives; a larger one is aborted and refused (:class:`ForwardingError`,
  status ``502``);
* an event stream (``GET /events``) is **relayed** as it comes, paced by the
  client (the other worker's connection is paused while our client does not
  read, so nothing piles up here) and closed when the other worker stays
  silent for ``stream_idle`` seconds or either side goes.

The forwarded request carries the ``FORWARDED_HEADER`` so the other worker
answers for itself only (it never passes the request on again).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs
from twisted.internet import defer, protocol
from twisted.internet.interfaces import IPushProducer
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.client import HTTPConnectionPool, ResponseDone
from twisted.web.http import PotentialDataLoss
from zope.interface import implementer

from ai_tools.llm.transport import http_client, pooled_agent

__all__ = ["FORWARDED_HEADER", "PASSED_HEADERS", "Forwarder", "ForwardingError"]

log = Logger()

FORWARDED_HEADER = b"x-ai-tools-forwarded"
"""Marks a request one worker passed on to another: answer for yourself only."""

PASSED_HEADERS = (b"authorization", b"content-type", b"accept", b"last-event-id")
"""The caller's headers a forwarded request carries."""

_ANSWER_HEADERS = (b"retry-after",)
"""The other worker's headers passed back to the caller (besides the status and body)."""


class ForwardingError(Exception):
    """The other worker could not be reached, or its answer was refused.

    ``status`` is the answer to give instead: 503 (unreachable, too slow: try
    again) or 502 (an answer that is too large or not JSON).
    """

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class _Deadline:
    """One ``callLater`` that cancels whatever the forwarded request is waiting for now."""

    def __init__(self, clock: Any, seconds: float, expire: Any) -> None:
        self.seconds = seconds
        self._call = clock.callLater(seconds, self._fire)
        self._expire = expire
        self.expired = False

    def _fire(self) -> None:
        self.expired = True
        self._expire()

    def cancel(self) -> None:
        if self._call.active():
            self._call.cancel()


class _BoundedBody(protocol.Protocol):
    """Collects a response body up to ``max_bytes``; aborts the connection past it."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.parts: list[bytes] = []
        self.size = 0
        self.done: defer.Deferred[bytes] = defer.Deferred()
        self.refused: str | None = None

    def dataReceived(self, data: bytes) -> None:
        if self.done.called:
            return
        self.size += len(data)
        if self.size > self.max_bytes:
            self.refused = f"its answer is larger than {self.max_bytes} bytes"
            self.abort()
            return
        self.parts.append(data)

    def abort(self) -> None:
        """Stop reading: the connection is closed (not returned to the pool)."""
        if self.transport is not None:
            self.transport.stopProducing()

    def connectionLost(self, reason: Failure = protocol.connectionDone) -> None:
        if self.done.called:
            return
        if self.refused is None and reason.check(ResponseDone, PotentialDataLoss):
            self.done.callback(b"".join(self.parts))
        else:
            self.done.errback(reason)


@implementer(IPushProducer)
class _Relay(protocol.Protocol):
    """Writes an event stream's bytes to our client as they come, at the client's pace."""

    def __init__(self, request: Any, clock: Any, idle: float) -> None:
        self.request = request
        self.clock = clock
        self.idle = idle
        self.ended: defer.Deferred[None] = defer.Deferred()
        self._timer: Any = None
        self._gone = False

    def connectionMade(self) -> None:
        self.request.registerProducer(self, True)
        self.request.notifyFinish().addBoth(self._client_gone)
        self._arm()

    def _arm(self) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = self.clock.callLater(self.idle, self.stopProducing)

    def dataReceived(self, data: bytes) -> None:
        if not self._gone:
            self._arm()
            self.request.write(data)

    def connectionLost(self, reason: Failure = protocol.connectionDone) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        if not self._gone:
            self._gone = True
            self.request.unregisterProducer()
            self.request.finish()
        if not self.ended.called:
            self.ended.callback(None)

    def _client_gone(self, _: Any) -> None:
        if not self._gone:
            self._gone = True
            self.stopProducing()

    # IPushProducer: our client's flow control reaches the other worker's connection.
    def pauseProducing(self) -> None:
        if self.transport is not None:
            self.transport.pauseProducing()

    def resumeProducing(self) -> None:
        if self.transport is not None:
            self.transport.resumeProducing()

    def stopProducing(self) -> None:
        if self.transport is not None:
            self.transport.stopProducing()


@attrs.define(eq=False)
class Forwarder:
    """Passes requests on to other workers' APIs (see the module).

    ``client`` is a treq ``HTTPClient`` (default: one over a pool of this
    forwarder, made on first use and closed by :meth:`close`); ``clock`` (the
    reactor) runs the deadlines.
    """

    clock: Any
    timeout: float = 10.0
    max_bytes: int = 16 * 1024 * 1024
    stream_idle: float = 40.0
    client: Any = None
    _pool: HTTPConnectionPool | None = attrs.field(init=False, default=None)

    def _client(self) -> Any:
        if self.client is None:
            # the model client's transport: a bounded connect, no cookie jar
            agent, self._pool = pooled_agent(self.clock, self.timeout, connections=4)
            self.client = http_client(agent)
        return self.client

    def close(self) -> defer.Deferred[None]:
        """Close the pool's connections (when the API stops)."""
        if self._pool is None:
            return defer.succeed(None)
        d: defer.Deferred[None] = self._pool.closeCachedConnections()
        return d

    def _send(self, method: str, url: str, headers: Mapping[bytes, bytes],
              body: bytes | None) -> defer.Deferred[Any]:
        sent = {name: [value] for name, value in headers.items()}
        sent[FORWARDED_HEADER] = [b"1"]
        d: defer.Deferred[Any] = self._client().request(method, url, headers=sent,
                                                        data=body, unbuffered=True)
        return d

    @defer.inlineCallbacks
    def forward(self, method: str, url: str, headers: Mapping[bytes, bytes],
                body: bytes | None = None, timeout: float | None = None) -> Any:
        """Send the request; fires with ``(status, decoded JSON body, headers to pass back)``.

        ``timeout`` replaces the forwarder's deadline for this request (one that
        waits for a tick).
        Fails with :class:`ForwardingError`: 503 when the other worker cannot be
        reached or does not answer in time, 502 when its answer is refused.
        """
        reader = _BoundedBody(self.max_bytes)
        requested = self._send(method, url, headers, body)

        def expire() -> None:  # waiting for the headers (cancel), or reading the body
            requested.cancel()  # a no-op once the response came
            reader.abort()

        deadline = _Deadline(self.clock, timeout or self.timeout, expire)
        try:
            response = yield requested
            response.deliverBody(reader)
            data = yield reader.done
        except Exception as exc:
            raise self._failed(exc, url, deadline, reader) from None
        finally:
            deadline.cancel()
        try:
            decoded = json.loads(data)
        except ValueError:
            raise ForwardingError(502, f"the worker at {url} answered with something that "
                                  "is not JSON") from None
        passed = {name.decode("ascii"): value.decode("latin-1")
                  for name in _ANSWER_HEADERS
                  for value in response.headers.getRawHeaders(name, [])[-1:]}
        return response.code, decoded, passed

    def _failed(self, exc: BaseException, url: str, deadline: _Deadline,
                reader: _BoundedBody | None) -> ForwardingError:
        """What a failed forwarded request answers: 502 for a refused answer, else 503."""
        if reader is not None and reader.refused is not None:
            return ForwardingError(502, f"the worker at {url} was refused: {reader.refused}")
        if deadline.expired:
            return ForwardingError(503, f"the worker at {url} did not answer within "
                                   f"{deadline.seconds:g}s")
        if isinstance(exc, ForwardingError):
            return exc
        why = str(exc) or type(exc).__name__
        return ForwardingError(503, f"the worker at {url} cannot be reached ({why})")

    @defer.inlineCallbacks
    def relay(self, request: Any, url: str, headers: Mapping[bytes, bytes]) -> Any:
        """Relay the event stream at ``url`` to ``request``.

        Fires once the headers are relayed, with a Deferred that fires when the
        stream ends; or fails like :meth:`forward` (an error answer of the other
        worker is a :class:`ForwardingError` with its status and message).
        """
        requested = self._send("GET", url, headers, None)
        deadline = _Deadline(self.clock, self.timeout, requested.cancel)
        try:
            response = yield requested
        except Exception as exc:
            raise self._failed(exc, url, deadline, None) from None
        finally:
            deadline.cancel()
        if response.code != 200:
            reader = _BoundedBody(min(self.max_bytes, 64 * 1024))
            response.deliverBody(reader)
            try:
                data = yield reader.done
                message = json.loads(data).get("error", "")
            except Exception:
                message = ""
            raise ForwardingError(response.code, message or f"the worker at {url} answered "
                                  f"{response.code}")
        request.setResponseCode(200)
        for name in (b"content-type", b"cache-control", b"x-accel-buffering"):
            for value in response.headers.getRawHeaders(name, [])[-1:]:
                request.setHeader(name, value)
        relayed = _Relay(request, self.clock, self.stream_idle)
        response.deliverBody(relayed)
        return relayed.ended
