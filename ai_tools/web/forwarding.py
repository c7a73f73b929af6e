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

* an event stream can also be **followed** (:meth:`Forwarder.follow`): its
  frames parsed, each event handed to a callback, a frame larger than
  ``max_frame`` bytes ending the stream, and the same silence deadline.

The forwarded request carries the ``FORWARDED_HEADER`` so the other worker
answers for itself only (it never passes the request on again), and, when the
API has a token, a signature (:mod:`~ai_tools.web.worker_auth`) instead of the
caller's token: no token is ever sent to another worker.  A URL the HTTP client
cannot use fails like an unreachable worker (503), never with an exception.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import attrs
from treq.client import HTTPClient
from twisted.internet import defer, protocol
from twisted.internet.interfaces import IPushProducer, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.client import HTTPConnectionPool, ResponseDone
from twisted.web.http import PotentialDataLoss
from twisted.web.server import Request
from zope.interface import implementer

from ai_tools.llm.transport import http_client, pooled_agent
from ai_tools.web.worker_auth import SIGNATURE_HEADER, WorkerSigner

__all__ = ["FORWARDED_HEADER", "PASSED_HEADERS", "EventFeed", "Forwarder", "ForwardingError"]

log = Logger()

FORWARDED_HEADER = b"x-ai-tools-forwarded"
"""Marks a request one worker passed on to another: answer for yourself only."""

PASSED_HEADERS = (b"content-type", b"accept", b"last-event-id")
"""The caller's headers a forwarded request carries (never ``Authorization``: a request
between workers is signed instead, see :mod:`~ai_tools.web.worker_auth`)."""

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

    def __init__(self, clock: IReactorTime, seconds: float, expire: Callable[[], object]) -> None:
        self.seconds = seconds
        # (Any: mypy reads IDelayedCall's methods as functions without self)
        self._call: Any = clock.callLater(seconds, self._fire)
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
            self.transport.stopProducing()  # type: ignore[attr-defined]

    def connectionLost(self, reason: Failure = protocol.connectionDone) -> None:
        if self.done.called:
            return
        if self.refused is None and reason.check(ResponseDone, PotentialDataLoss):
            self.done.callback(b"".join(self.parts))
        else:
            self.done.errback(reason)


class _IdleTimer:
    """Calls ``expire`` once nothing came for ``seconds``; :meth:`arm` on every arrival."""

    def __init__(self, clock: IReactorTime, seconds: float, expire: Callable[[], object]) -> None:
        self._clock = clock
        self._seconds = seconds
        self._expire = expire
        self._call: Any = None

    def arm(self) -> None:
        self.cancel()
        self._call = self._clock.callLater(self._seconds, self._expire)

    def cancel(self) -> None:
        if self._call is not None and self._call.active():
            self._call.cancel()


@implementer(IPushProducer)
class _Relay(protocol.Protocol):
    """Writes an event stream's bytes to our client as they come, at the client's pace."""

    def __init__(self, request: Request, clock: IReactorTime, idle: float) -> None:
        self.request = request
        self.ended: defer.Deferred[None] = defer.Deferred()
        self._idle = _IdleTimer(clock, idle, self.stopProducing)
        self._gone = False

    def connectionMade(self) -> None:
        self.request.registerProducer(self, True)
        self.request.notifyFinish().addBoth(self._client_gone)
        self._idle.arm()

    def dataReceived(self, data: bytes) -> None:
        if not self._gone:
            self._idle.arm()
            self.request.write(data)

    def connectionLost(self, reason: Failure = protocol.connectionDone) -> None:
        self._idle.cancel()
        if not self._gone:
            self._gone = True
            self.request.unregisterProducer()
            self.request.finish()
        if not self.ended.called:
            self.ended.callback(None)

    def _client_gone(self, _: object) -> None:
        if not self._gone:
            self._gone = True
            self.stopProducing()

    # IPushProducer: our client's flow control reaches the other worker's connection.
    def pauseProducing(self) -> None:
        if self.transport is not None:
            self.transport.pauseProducing()  # type: ignore[attr-defined]

    def resumeProducing(self) -> None:
        if self.transport is not None:
            self.transport.resumeProducing()  # type: ignore[attr-defined]

    def stopProducing(self) -> None:
        if self.transport is not None:
            self.transport.stopProducing()  # type: ignore[attr-defined]


def _target(url: str) -> bytes:
    """The request target (path and query) of ``url`` as the other worker receives it."""
    rest = url.split("://", 1)[-1]
    slash = rest.find("/")
    target = rest[slash:] if slash >= 0 else "/"
    return target.encode("ascii")


OnEvent = Callable[[int | None, str, object], None]
"""What :meth:`Forwarder.follow` calls for each event: ``(id or None, event type, data)``."""


class EventFeed(protocol.Protocol):
    """Another worker's event stream, read frame by frame (see :meth:`Forwarder.follow`).

    ``ended`` fires with why the stream ended (never fails); ``last_id`` is the
    id of the newest event received (for ``Last-Event-ID`` when following again).
    """

    def __init__(self, on_event: OnEvent, clock: IReactorTime, idle: float, max_frame: int) -> None:
        self.on_event = on_event
        self.max_frame = max_frame
        self.ended: defer.Deferred[str] = defer.Deferred()
        self.last_id: int | None = None
        self._buffer = b""
        self._why: str | None = None
        self._idle = _IdleTimer(clock, idle, lambda: self.stop(f"silent for {idle:g}s"))

    def connectionMade(self) -> None:
        self._idle.arm()

    def dataReceived(self, data: bytes) -> None:
        if self._why is not None:
            return
        self._idle.arm()  # keep-alives too: they say the other worker is there
        frames = (self._buffer + data).split(b"\n\n")
        self._buffer = frames.pop()
        for frame in [*frames, self._buffer]:
            if len(frame) > self.max_frame:
                self.stop(f"a frame larger than {self.max_frame} bytes")
                return
        for frame in frames:
            if self._why is None:
                self._frame(frame)

    def _frame(self, frame: bytes) -> None:
        """One frame: ``id:``, ``event:`` and ``data:`` lines (comments skipped)."""
        fields: dict[bytes, bytes] = {}
        for line in frame.split(b"\n"):
            name, _, value = line.partition(b":")
            fields[name] = value[1:] if value.startswith(b" ") else value
        if b"data" not in fields:
            return  # a comment (keep-alive) or the reconnection delay
        try:
            data = json.loads(fields[b"data"])
            event_id = int(fields[b"id"]) if b"id" in fields else None
        except ValueError:
            self.stop("a frame that is not an event of this service")
            return
        if event_id is not None:
            self.last_id = event_id
        kind = fields.get(b"event", b"message").decode("utf-8", "replace")
        try:
            self.on_event(event_id, kind, data)
        except Exception:
            log.failure("Passing on an event of another worker failed")

    def stop(self, why: str = "stopped") -> None:
        """Close the stream (``ended`` fires with ``why`` once the connection is gone)."""
        if self._why is None:
            self._why = why
        self._idle.cancel()
        if self.transport is not None:
            self.transport.stopProducing()  # type: ignore[attr-defined]
        elif not self.ended.called:
            self.ended.callback(why)

    def connectionLost(self, reason: Failure = protocol.connectionDone) -> None:
        self._idle.cancel()
        if self._why is None:
            self._why = "it ended" if reason.check(ResponseDone) else (
                reason.getErrorMessage() or type(reason.value).__name__)
        if not self.ended.called:
            self.ended.callback(self._why)


@attrs.define(eq=False)
class Forwarder:
    """Passes requests on to other workers' APIs (see the module).

    ``client`` is a treq ``HTTPClient`` (default: one over a pool of this
    forwarder, made on first use and closed by :meth:`close`); ``clock`` (the
    reactor) runs the deadlines; ``signer`` signs every request (None: the API
    has no token, nothing to sign).
    """

    clock: IReactorTime
    timeout: float = 10.0
    max_bytes: int = 16 * 1024 * 1024
    stream_idle: float = 40.0
    client: HTTPClient | None = None
    signer: WorkerSigner | None = None
    _pool: HTTPConnectionPool | None = attrs.field(init=False, default=None)

    def _client(self) -> HTTPClient:
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
        """Send the request (signed); a URL the client cannot use fails the Deferred
        with a 503 :class:`ForwardingError` (it raises synchronously in treq)."""
        sent: dict[bytes | str, list[bytes | str]] = {
            name: [value] for name, value in headers.items()
            if name != b"authorization"}  # never a token to another worker
        sent[FORWARDED_HEADER] = [b"1"]
        try:
            if self.signer is not None:
                target = _target(url)
                sent[SIGNATURE_HEADER] = [self.signer.sign(method.encode("ascii"), target,
                                                           body)]
            d: defer.Deferred[Any] = self._client().request(method, url, headers=sent,
                                                            data=body, unbuffered=True)
        except Exception as exc:
            return defer.fail(ForwardingError(503, f"the worker at {url} cannot be reached "
                                              f"(its address cannot be used: {exc})"))
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
    def _open_stream(self, url: str, headers: Mapping[bytes, bytes]) -> Any:
        """GET the event stream at ``url``: fires with the response once its headers came
        (within ``timeout``); fails with :class:`ForwardingError` (an error answer of
        the other worker: its status and message)."""
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
        return response

    @defer.inlineCallbacks
    def relay(self, request: Request, url: str, headers: Mapping[bytes, bytes]) -> Any:
        """Relay the event stream at ``url`` to ``request``.

        Fires once the headers are relayed, with a Deferred that fires when the
        stream ends; or fails like :meth:`forward` (an error answer of the other
        worker is a :class:`ForwardingError` with its status and message).
        """
        response = yield self._open_stream(url, headers)
        request.setResponseCode(200)
        for name in (b"content-type", b"cache-control", b"x-accel-buffering"):
            for value in response.headers.getRawHeaders(name, [])[-1:]:
                request.setHeader(name, value)
        relayed = _Relay(request, self.clock, self.stream_idle)
        response.deliverBody(relayed)
        return relayed.ended

    @defer.inlineCallbacks
    def follow(self, url: str, headers: Mapping[bytes, bytes], on_event: OnEvent,
               max_frame: int) -> Any:
        """Read the event stream at ``url``, calling ``on_event(id, type, data)`` for each
        event as it comes.

        Fires with the :class:`EventFeed` once the stream is open, or fails like
        :meth:`relay`.  The feed ends (its ``ended`` fires) when the other worker
        ends it, stays silent for ``stream_idle`` seconds or sends a frame larger
        than ``max_frame`` bytes, and on :meth:`EventFeed.stop`.
        """
        response = yield self._open_stream(url, headers)
        feed = EventFeed(on_event, self.clock, self.stream_idle, max_frame)
        response.deliverBody(feed)
        return feed
