"""Reading and writing HTTP bodies with the control treq does not give.

``treq.collect`` cannot close the connection when cancelled and has no idle
timer, so :class:`BodyReader` is our own ``IProtocol`` for
``response.deliverBody``: it hands every chunk to a sink as it arrives, keeps
a progress timestamp, aborts a body that stays silent longer than the idle
timeout, and aborts the connection for real (``transport.stopProducing()``)
when its Deferred is cancelled or the sink raises.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet import defer
from twisted.internet.interfaces import IProtocol
from twisted.python.failure import Failure
from twisted.web.client import GzipDecoder, ResponseDone
from twisted.web.http import PotentialDataLoss
from twisted.web.iweb import IBodyProducer
from zope.interface import implementer

from ai_tools.errors import LLMTimeout


def decoded_response(response: Any) -> Any:
    """``response`` with a gzip body decoded, as treq's ``ContentDecoderAgent`` does.

    A client that talks to an ``Agent`` directly advertises
    ``Accept-Encoding: gzip`` like treq; this is the other half, and costs one
    header lookup when the answer is not compressed.
    """
    headers = response.headers
    encodings = headers.getRawHeaders(b"content-encoding")
    if not encodings:
        return response
    names = b",".join(encodings).split(b",")
    while names and names[-1].strip().lower() == b"gzip":
        names.pop()
        response = GzipDecoder(response)
    if names:
        headers.setRawHeaders(b"content-encoding", [b",".join(names)])
    else:
        headers.removeHeader(b"content-encoding")
    return response


@implementer(IBodyProducer)
class BytesProducer:
    """A request body written in one go (treq's default goes through a cooperator)."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.length = len(body)

    def startProducing(self, consumer: Any) -> defer.Deferred[None]:
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
    """Deliver a response body chunk by chunk to ``sink``.

    ``finished`` fires with None when the body ends normally, fails with the
    sink's exception, with :class:`~ai_tools.errors.LLMTimeout` after
    ``idle_timeout`` seconds without a byte (counted from the connection, or
    from :meth:`arm`), or with the connection's reason
    (``ResponseFailed``) when it is cut.  Cancelling it aborts the connection.
    ``last_progress`` is the clock time of the last byte received.
    """

    __slots__ = (
        "_arm_on_connect",
        "_clock",
        "_description",
        "_idle_timeout",
        "_sink",
        "_timer",
        "done",
        "finished",
        "last_progress",
        "transport",
    )

    def __init__(
        self,
        clock: Any,
        sink: Callable[[bytes], None],
        idle_timeout: float | None,
        description: str = "response body",
        arm_on_connect: bool = True,
    ) -> None:
        self._arm_on_connect = arm_on_connect
        self._clock = clock
        self._sink = sink
        self._idle_timeout = idle_timeout
        self._description = description
        self._timer: Any = None
        self.transport: Any = None
        self.done = False
        self.last_progress: float = clock.seconds()
        self.finished: defer.Deferred[None] = defer.Deferred(self._cancel)

    def makeConnection(self, transport: Any) -> None:
        """Twisted hands over the body's transport (used to abort)."""
        self.transport = transport
        self.connectionMade()

    def connectionMade(self) -> None:
        if self._arm_on_connect:
            self.arm()

    def arm(self) -> None:
        """Start the idle timer (at connection unless ``arm_on_connect`` was False).

        A body already received in full is delivered inside ``deliverBody``;
        arming after that call spares such a body a timer set and cancelled
        for nothing.
        """
        if self._idle_timeout is not None and not self.done and self._timer is None:
            self._timer = self._clock.callLater(self._idle_timeout, self._check_idle)

    def dataReceived(self, data: bytes) -> None:
        if self.done:
            return
        self.last_progress = self._clock.seconds()
        try:
            self._sink(data)
        except BaseException:
            self.fail(Failure())

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

    def _check_idle(self) -> None:
        self._timer = None
        if self.done or self._idle_timeout is None:
            return
        silent = self._clock.seconds() - self.last_progress
        if silent >= self._idle_timeout:
            self.fail(
                LLMTimeout(
                    f"{self._description} stalled: no data for {silent:.1f}s "
                    f"(idle timeout {self._idle_timeout:g}s)"
                )
            )
        else:
            self._timer = self._clock.callLater(self._idle_timeout - silent, self._check_idle)
