"""Reading and writing HTTP bodies with the control treq does not give.

``treq.collect`` cannot close the connection when cancelled, has no idle timer
and no size limit, so :class:`BodyReader` is our own ``IProtocol`` for
``response.deliverBody``: it hands every chunk to a sink as it arrives, caps
the bytes it accepts, aborts a body that stays silent (or, for a stream,
makes no progress) for too long, and aborts the connection for real
(``transport.stopProducing()``) when its Deferred is cancelled or the sink
raises.

:class:`BoundedGzipDecoder` is the gzip decoder the client gives
``ContentDecoderAgent``: it inflates in pieces of at most
:data:`INFLATE_PIECE` bytes and stops as soon as the reader aborts, so a small
compressed body cannot inflate past the reader's byte cap (Twisted's own
``GzipDecoder`` inflates each received chunk whole: 64 KiB of a gzip bomb
become 64 MiB at once).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

from twisted.internet import defer
from twisted.internet.interfaces import (
    IConsumer,
    IDelayedCall,
    IProtocol,
    IPushProducer,
    IReactorTime,
)
from twisted.python.components import proxyForInterface
from twisted.python.failure import Failure
from twisted.web.client import ResponseDone
from twisted.web.http import PotentialDataLoss
from twisted.web.iweb import UNKNOWN_LENGTH, IBodyProducer, IResponse
from zope.interface import implementer

from ai_tools.errors import LLMTimeout

INFLATE_PIECE = 64 * 1024
"""The most a gzip body is inflated by in one step."""


class BodyError(ValueError):
    """A response body broke a rule of its reader (too large, badly encoded)."""


class BodyTooLarge(BodyError):
    """A response body crossed its byte cap."""


class DeadlinePassed(Exception):
    """The reader's ``deadline`` (a clock time) came before the body's end."""


@implementer(IBodyProducer)
class BytesProducer:
    """A request body written in one go (treq's default goes through a cooperator)."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.length = len(body)

    def startProducing(self, consumer: IConsumer) -> defer.Deferred[None]:
        consumer.write(self.body)
        return defer.succeed(None)

    def pauseProducing(self) -> None:
        """Nothing to pause: the body was written at once."""

    def resumeProducing(self) -> None:
        """Nothing to resume."""

    def stopProducing(self) -> None:
        """Nothing to stop."""


def _no_sink(data: bytes) -> None:
    """The sink of a reader that is done (nothing is delivered any more)."""


@implementer(IProtocol)
class BodyReader:
    """Deliver a response body chunk by chunk to ``sink``, within bounds.

    ``finished`` fires with None when the body ends normally (or is cut at
    ``max_bytes`` with ``truncate``); it fails with the sink's exception, with
    :class:`BodyTooLarge` past ``max_bytes``, with
    :class:`~ai_tools.errors.LLMTimeout` after ``idle_timeout`` seconds
    without a byte or ``progress_timeout`` seconds without a call to
    :meth:`progressed` (both counted from the connection, or from
    :meth:`arm`), with :class:`DeadlinePassed` at the clock time ``deadline``,
    or with the connection's reason (``ResponseFailed``) when it is cut.
    Cancelling it aborts the connection.  One timer serves all its deadlines.
    """

    __slots__ = (
        "_arm_on_connect",
        "_clock",
        "_deadline",
        "_description",
        "_idle_timeout",
        "_max_bytes",
        "_progress_timeout",
        "_sink",
        "_timer",
        "_truncate",
        "done",
        "finished",
        "last_data",
        "last_progress",
        "size",
        "transport",
    )

    def __init__(
        self,
        clock: IReactorTime,
        sink: Callable[[bytes], None],
        idle_timeout: float | None,
        description: str = "response body",
        arm_on_connect: bool = True,
        *,
        max_bytes: int | None = None,
        truncate: bool = False,
        progress_timeout: float | None = None,
        deadline: float | None = None,
    ) -> None:
        self._arm_on_connect = arm_on_connect
        self._deadline = deadline
        self._clock = clock
        self._sink = sink
        self._idle_timeout = idle_timeout
        self._progress_timeout = progress_timeout
        self._description = description
        self._max_bytes = max_bytes
        self._truncate = truncate
        self._timer: IDelayedCall | None = None
        self.transport: IPushProducer | None = None
        self.done = False
        self.size = 0
        self.last_data: float = clock.seconds()
        self.last_progress = self.last_data
        self.finished: defer.Deferred[None] = defer.Deferred(self._cancel)

    def makeConnection(self, transport: Any) -> None:  # (an IPushProducer, not ITransport)
        """Twisted hands over the body's transport (used to abort)."""
        self.transport = transport
        self.connectionMade()

    def connectionMade(self) -> None:
        if self._arm_on_connect:
            self.arm()

    def arm(self) -> None:
        """Start the deadline timer (at connection unless ``arm_on_connect`` was False).

        A body already received in full is delivered inside ``deliverBody``;
        arming after that call spares such a body a timer set and cancelled
        for nothing.
        """
        if self.done or self._timer is not None:
            return
        wait = _earliest(self._idle_timeout, self._progress_timeout)
        if self._deadline is not None:
            wait = _earliest(wait, max(0.0, self._deadline - self._clock.seconds()))
        if wait is not None:
            self._timer = self._clock.callLater(wait, self._check)

    def progressed(self) -> None:
        """The data just received made progress (a stream's event, not a keep-alive)."""
        self.last_progress = self.last_data

    def dataReceived(self, data: bytes) -> None:
        if self.done:
            return
        self.last_data = self._clock.seconds()
        self.size += len(data)
        if self._max_bytes is not None and self.size > self._max_bytes:
            self._over_limit(data, self.size - self._max_bytes)
            return
        try:
            self._sink(data)
        except BaseException:
            self.fail(Failure())

    def _over_limit(self, data: bytes, excess: int) -> None:
        if not self._truncate:
            self.fail(BodyTooLarge(f"{self._description} is larger than {self._max_bytes} bytes"))
            return
        try:
            self._sink(data[: len(data) - excess])
        except BaseException:
            self.fail(Failure())
            return
        self.stop()

    def connectionLost(self, reason: Failure = Failure(ResponseDone())) -> None:
        self._stop_timer()
        if self.done:
            return
        self._end()
        if reason.check(ResponseDone, PotentialDataLoss):
            self.finished.callback(None)
        else:
            self.finished.errback(reason)

    def stop(self) -> None:
        """Stop reading and close the connection; ``finished`` fires with None."""
        if self.done:
            return
        self._end()
        self._stop_timer()
        self._abort()
        self.finished.callback(None)

    def fail(self, failure: Failure | BaseException) -> None:
        """Abort the connection and fail ``finished`` with ``failure``."""
        if self.done:
            return
        self._end()
        self._stop_timer()
        self._abort()
        self.finished.errback(failure if isinstance(failure, Failure) else Failure(failure))

    def _cancel(self, _: defer.Deferred[None]) -> None:
        if self.done:
            return
        self._end()
        self._stop_timer()
        self._abort()

    def _end(self) -> None:
        """Mark the body done and drop the sink.

        The sink is usually a bound method of the reader's owner, which holds
        the reader: dropping it breaks that cycle, so both are freed as soon
        as the request is over instead of waiting for the garbage collector.
        """
        self.done = True
        self._sink = _no_sink

    def _abort(self) -> None:
        transport = self.transport
        if transport is not None:
            transport.stopProducing()

    def _stop_timer(self) -> None:
        if self._timer is not None:
            if self._timer.active():
                self._timer.cancel()
            self._timer = None

    def _check(self) -> None:
        """Fail on a deadline that has passed, else check again when the next one falls due."""
        self._timer = None
        if self.done:
            return
        now = self._clock.seconds()
        idle, progress, deadline = self._idle_timeout, self._progress_timeout, self._deadline
        silent, still = now - self.last_data, now - self.last_progress
        if deadline is not None and now >= deadline:
            self.fail(DeadlinePassed(f"{self._description} not complete by its deadline"))
        elif idle is not None and silent >= idle:
            self.fail(LLMTimeout(f"{self._description} stalled: no data for {silent:.1f}s "
                                 f"(idle timeout {idle:g}s)"))
        elif progress is not None and still >= progress:
            self.fail(LLMTimeout(f"{self._description} made no progress for {still:.1f}s, "
                                 f"only keep-alives (progress timeout {progress:g}s)"))
        else:
            wait = _earliest(_earliest(None if idle is None else idle - silent,
                                       None if progress is None else progress - still),
                             None if deadline is None else deadline - now)
            assert wait is not None
            self._timer = self._clock.callLater(wait, self._check)


def _earliest(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else min(a, b)


class BoundedGzipDecoder(proxyForInterface(IResponse)):  # type: ignore[misc]
    """A gzip-encoded response whose body is inflated in bounded pieces.

    A decoder for ``ContentDecoderAgent`` (``[(b"gzip", BoundedGzipDecoder)]``),
    like Twisted's ``GzipDecoder`` but with a bound on each inflation step.
    """

    def __init__(self, response: IResponse) -> None:
        self.original = response
        self.length = UNKNOWN_LENGTH

    def deliverBody(self, protocol: IProtocol) -> None:
        self.original.deliverBody(_Inflater(protocol))


@implementer(IProtocol, IPushProducer)
class _Inflater:
    """Between a gzip body and its protocol: inflates, and is the protocol's transport
    (so that its ``stopProducing()`` also stops the inflating)."""

    __slots__ = ("_inflate", "_lost", "_protocol", "_stopped", "_transport")

    def __init__(self, protocol: IProtocol) -> None:
        self._protocol: Any = protocol  # made connected to this IPushProducer, no ITransport
        self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._transport: IPushProducer | None = None
        self._stopped = False
        self._lost = False

    def makeConnection(self, transport: Any) -> None:  # (an IPushProducer, not ITransport)
        self._transport = transport
        self._protocol.makeConnection(self)

    def connectionMade(self) -> None:
        """Part of IProtocol; :meth:`makeConnection` tells the protocol."""

    def dataReceived(self, data: bytes) -> None:
        inflate = self._inflate
        while not self._stopped:
            try:
                piece = inflate.decompress(data, INFLATE_PIECE)
            except zlib.error as e:
                self._corrupt(e)
                return
            data = inflate.unconsumed_tail
            if piece:
                self._protocol.dataReceived(piece)
            if not data and len(piece) < INFLATE_PIECE:
                return

    def connectionLost(self, reason: Failure = Failure(ResponseDone())) -> None:
        if self._lost:
            return
        if not self._stopped and reason.check(ResponseDone, PotentialDataLoss):
            try:
                rest = self._inflate.flush()
            except zlib.error as e:
                self._corrupt(e)
                return
            if rest:
                self._protocol.dataReceived(rest)
        self._lost = True
        self._protocol.connectionLost(reason)

    def _corrupt(self, error: zlib.error) -> None:
        self.stopProducing()
        if not self._lost:
            self._lost = True
            self._protocol.connectionLost(
                Failure(BodyError(f"the answer's gzip encoding is corrupt ({error})"))
            )

    def stopProducing(self) -> None:
        """The protocol aborts: inflate nothing more, and close the connection."""
        self._stopped = True
        if self._transport is not None:
            self._transport.stopProducing()

    def pauseProducing(self) -> None:
        if self._transport is not None:
            self._transport.pauseProducing()

    def resumeProducing(self) -> None:
        if self._transport is not None:
            self._transport.resumeProducing()
