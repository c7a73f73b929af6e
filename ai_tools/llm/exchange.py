"""One attempt of a chat-completions request, as one small state machine.

An :class:`Exchange` sends the request through its
:class:`~ai_tools.llm.channel.ModelChannel`, waits for the response headers,
reads the body (whole, or as a stream into a
:class:`~ai_tools.llm.consumer.StreamConsumer`) and reports to its owner (a
:class:`~ai_tools.llm.call.ModelCall`) by calling ``exchange_succeeded`` or
``exchange_failed``, exactly once.  Upstream text leaves it redacted (no API
key in an answer, an error or an event).

It is written with callbacks rather than coroutines and wrapper Deferreds on
purpose: with a thousand requests in flight, every object a waiting request
keeps alive is traversed by each garbage collection, and this shape keeps a
waiting request down to the exchange, the transport's own objects and at most
one timer of its own (the response-headers deadline or the call's deadline;
the body reader's idle and progress timer replaces the headers timer once
the headers are in).

:meth:`Exchange.cancel` aborts the connection and reports ``CancelledError``;
a deadline that passes reports :class:`~ai_tools.errors.LLMTimeout`.  On a
server that computes a whole answer to its end after its client has left
(llama-cpp-python), closing the connection frees nothing: there the call's
end *detaches* the exchange instead (:meth:`Exchange.detach`), which keeps
the connection and the slot until the server is done.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

import attrs
from twisted.internet import defer
from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.python.failure import Failure
from twisted.web.client import ResponseNeverReceived
from twisted.web.iweb import IResponse

from ai_tools.errors import (
    LLMConnectionError,
    LLMEmptyStream,
    LLMError,
    LLMInterrupted,
    LLMProtocolError,
    LLMServerError,
    LLMTimeout,
    RepeatedLineLoop,
)
from ai_tools.llm.answer import checked_answer
from ai_tools.llm.body import BodyError, BodyReader, DeadlinePassed
from ai_tools.llm.channel import ModelChannel
from ai_tools.llm.completion import parse_completion
from ai_tools.llm.consumer import EventCallback, StreamConsumer, StreamServerError
from ai_tools.llm.events import ChatResponse
from ai_tools.llm.http_errors import (
    describe_failure,
    error_for_status,
    header_value,
    parse_retry_after,
)
from ai_tools.llm.profile import ModelProfile
from ai_tools.llm.redaction import Redactor
from ai_tools.llm.sse import SSELineTooLong
from ai_tools.llm.stream import StreamProtocolError

if TYPE_CHECKING:
    from ai_tools.llm.call import ModelCall

DRAIN_LIMIT = 600.0
"""Seconds an answer given up on may still take, without a total deadline to go by."""


def at_deadline(clock: IReactorTime, deadline: float, expire: Callable[..., object],
                *args: object) -> IDelayedCall:
    """A timer calling ``expire(*args)`` when the clock reaches ``deadline`` (at once if past)."""
    return clock.callLater(max(0.0, deadline - clock.seconds()), expire, *args)


def deadline_passed(profile: ModelProfile, partial_text: str = "", why: str = "") -> LLMTimeout:
    """The error of a call that ran out of its total time."""
    return LLMTimeout(
        f"{profile.chat_url}: no complete answer within {profile.timeouts.total:g}s{why}",
        partial_text,
    )


class Exchange:
    """One HTTP attempt, reported to ``owner`` as an answer or an ``LLMError``.

    ``channel`` is the client's :class:`~ai_tools.llm.channel.ModelChannel`;
    ``on_event`` gets the events of the answer; ``deadline`` is the clock
    time by which the whole call must be done (None: no deadline).
    ``produced`` says whether text of this attempt reached ``on_event``.
    """

    __slots__ = (
        "_cancelled",
        "_channel",
        "_consumer",
        "_deadline",
        "_detached",
        "_done",
        "_expired",
        "_keeps",
        "_on_event",
        "_owner",
        "_parts",
        "_pending",
        "_reader",
        "_redactor",
        "_response",
        "_timer",
    )

    def __init__(
        self,
        owner: ModelCall,
        channel: ModelChannel,
        on_event: EventCallback | None,
        deadline: float | None,
    ) -> None:
        self._owner = owner
        self._channel = channel
        self._on_event = on_event
        self._deadline = deadline
        self._done = False
        self._cancelled = False
        self._detached = False
        self._keeps = False
        self._expired: str | None = None
        self._timer: IDelayedCall | None = None
        self._pending: defer.Deferred[Any] | None = None
        self._reader: BodyReader | None = None
        self._response: Any = None
        self._consumer: StreamConsumer | None = None
        self._parts: list[bytes] = []
        self._redactor: Redactor = channel.redactor()

    @property
    def produced(self) -> bool:
        """Whether text of this attempt reached the caller (it must then not be retried)."""
        return self._consumer is not None and self._consumer.produced

    def start(self, body: bytes, streaming: bool,
              extra_headers: Mapping[str, str] | None = None) -> None:
        """Send the request (with ``extra_headers``, if any) and arm the first deadline."""
        channel = self._channel
        clock = channel.clock
        if streaming:
            profile = channel.profile
            self._consumer = StreamConsumer(self._on_event, profile.repetition,
                                            channel.answer_limits(), self._redactor)
        # A server that computes a whole answer its client left gets no headers deadline:
        # giving up early would not free it, only the call's total time ends the wait.
        self._keeps = channel.server.keeps_computing(streaming)
        headers = None if self._keeps else channel.profile.timeouts.headers
        deadline = self._deadline
        if headers is not None and (deadline is None or clock.seconds() + headers < deadline):
            self._timer = clock.callLater(headers, self._expire, "headers")
        elif deadline is not None:
            self._timer = at_deadline(clock, deadline, self._expire, "total")
        try:
            d = channel.send(body, streaming, extra_headers)
        except Exception:
            d = defer.fail()
        self._pending = d
        d.addCallbacks(self._got_response, self._no_response)

    # -- time and cancellation --------------------------------------------------------

    def cancel(self) -> None:
        """Abort the attempt; the owner hears ``CancelledError`` (unless it already heard)."""
        if self._done:
            return
        self._cancelled = True
        self._stop_timer()
        if self._pending is not None:
            self._pending.cancel()
        self._fail(defer.CancelledError())

    def detach(self) -> bool:
        """Leave the answer to the server that computes it anyway: the caller hears no
        more of it, and the connection stays open (so the slot stays taken) until the
        answer ends, at most ``DRAIN_LIMIT`` seconds more (or the profile's total
        time, if longer).  False (and nothing done)
        on a server that stops when its client leaves: cancel it instead."""
        if not self._keeps or self._done or self._detached:
            return False
        self._detached = True
        self._on_event = None
        self._stop_timer()
        limit = max(self._channel.profile.timeouts.total or 0.0, DRAIN_LIMIT)
        self._timer = self._channel.clock.callLater(limit, self._expire, "drain")
        return True

    def _expire(self, phase: str) -> None:
        self._timer = None
        if phase == "total" and self.detach():
            self._owner.exchange_abandoned(deadline_passed(self._channel.profile))
            return
        self._expired = phase
        if self._pending is not None:
            self._pending.cancel()

    def _stop_timer(self) -> None:
        timer = self._timer
        if timer is not None:
            self._timer = None
            if timer.active():
                timer.cancel()

    def _interrupted(self) -> BaseException | None:
        """The error for a cancellation or an expired deadline, if one happened."""
        if self._cancelled:
            return defer.CancelledError()
        profile = self._channel.profile
        if self._expired == "total":
            return deadline_passed(profile, self._partial())
        if self._expired == "drain":
            return LLMTimeout(f"{profile.chat_url}: an answer given up on did not end within "
                              f"{max(profile.timeouts.total or 0.0, DRAIN_LIMIT):g}s more")
        if self._expired == "headers":
            return LLMTimeout(
                f"no response from {profile.chat_url} within {profile.timeouts.headers:g}s"
            )
        return None

    def _partial(self) -> str:
        return self._consumer.text if self._consumer is not None else ""

    def _succeed(self, response: ChatResponse) -> None:
        self._stop_timer()
        if not self._done:
            channel = self._channel
            try:
                checked_answer(response, channel.profile.chat_url, channel.profile.label,
                               channel.finish_warned)
            except LLMError as e:
                e.partial_text = e.partial_text or response.content
                self._fail(e)
                return
            self._end()
            self._owner.exchange_succeeded(self._redactor.response(response))

    def _fail(self, error: BaseException | Failure) -> None:
        self._stop_timer()
        if not self._done:
            self._end()
            self._redactor.error(cast(BaseException, error.value)
                                 if isinstance(error, Failure) else error)
            self._owner.exchange_failed(error)

    def _end(self) -> None:
        """Done: drop the reader, the response and the consumer (twisted.web's objects of
        this request) so that nothing of the exchange lives on in a reference cycle."""
        self._done = True
        self._reader = None
        self._response = None
        self._parts = []

    # -- response headers -------------------------------------------------------------

    def _no_response(self, failure: Failure) -> None:
        self._pending = None
        error = self._interrupted()
        if error is None:
            if failure.check(defer.CancelledError):
                error = defer.CancelledError()
            elif self._consumer is not None and _closed_without_answer(failure):
                error = LLMEmptyStream(f"{self._channel.profile.chat_url} closed the "
                                       "connection without answering a streamed request")
                error.reached = False
            else:
                reason = describe_failure(cast(BaseException, failure.value))
                error = LLMConnectionError(
                    f"could not reach {self._channel.profile.chat_url}: {reason}"
                )
                error.reached = False
        self._fail(error)

    def _got_response(self, response: IResponse) -> None:
        self._pending = None
        if self._done:
            return
        self._stop_timer()  # the body reader's timer keeps the deadlines from here
        self._response = response
        limits = self._channel.answer_limits()
        if not 200 <= response.code < 300:
            self._read(self._collect, self._error_read, self._error_failed,
                       max_bytes=limits.error_body_bytes, truncate=True)
        elif self._consumer is not None and not _is_json(response):
            self._consumer.reader = self._read(
                self._consumer.sink, self._stream_ended, self._stream_failed,
                max_bytes=limits.body_bytes, description="answer stream",
                progress_timeout=self._channel.profile.timeouts.progress)
        else:
            self._consumer = None
            self._read(self._collect, self._body_read, self._read_failed,
                       max_bytes=limits.body_bytes)

    def _read(self, sink: Callable[[bytes], None], done: Callable[[None], object],
              failed: Callable[[Failure], object], description: str = "response body",
              **bounds: Any) -> BodyReader:
        reader = BodyReader(self._channel.clock, sink, self._channel.profile.timeouts.idle,
                            description, arm_on_connect=False,
                            deadline=None if self._detached else self._deadline,
                            **bounds)
        self._reader = reader
        self._pending = reader.finished
        self._response.deliverBody(reader)
        reader.arm()  # after: a body already here needs no timer
        reader.finished.addCallbacks(done, failed)
        return reader

    def _collect(self, data: bytes) -> None:
        self._parts.append(data)

    # -- an error answer --------------------------------------------------------------

    def _error_failed(self, failure: Failure) -> None:
        """An error body that could not be read whole: the status still makes the error."""
        if failure.check(defer.CancelledError) or self._interrupted() is not None:
            self._read_failed(failure)
        else:
            self._error_read(None)

    def _error_read(self, _: object) -> None:
        self._pending = None
        channel, response = self._channel, self._response
        profile = channel.profile
        retry_after = parse_retry_after(header_value(response.headers, "retry-after"),
                                        channel.wall_clock())
        self._fail(error_for_status(
            response.code, profile.chat_url, b"".join(self._parts), model=profile.model,
            api_key_env=profile.api_key_env, api_key_present=channel.api_key() is not None,
            retry_after=retry_after,
        ))

    # -- a whole answer -----------------------------------------------------------------

    def _body_read(self, _: object) -> None:
        self._pending = None
        error = self._interrupted()
        if error is not None:
            self._fail(error)
            return
        raw = b"".join(self._parts)
        self._parts = []
        try:
            answer = parse_completion(raw, self._channel.profile, self._channel.answer_limits(),
                                      self._on_event)
        except BaseException:
            self._fail(Failure())
            return
        self._succeed(answer)

    # -- a stream -----------------------------------------------------------------------

    def _stream_ended(self, _: object) -> None:
        self._pending = None
        error = self._interrupted()
        if error is not None:
            self._fail(error)
            return
        consumer = self._consumer
        assert consumer is not None
        try:
            answer = self._stream_answer(consumer)
        except BaseException as e:
            self._fail(self._read_error(e))
            return
        self._succeed(answer)

    def _stream_answer(self, consumer: StreamConsumer) -> ChatResponse:
        """The answer of a stream that has ended; raises if it is not a complete one."""
        url = self._channel.profile.chat_url
        if not consumer.close():
            if consumer.empty:
                raise LLMEmptyStream(f"the stream from {url} ended before its first chunk")
            raise LLMConnectionError(f"the stream from {url} ended before [DONE] (truncated)",
                                     consumer.text)
        if consumer.looped():
            raise RepeatedLineLoop(
                f"the model repeated itself ({consumer.detector.repeated!r})", consumer.text
            )
        result = consumer.response()
        if not result.model:
            result = attrs.evolve(result, model=self._channel.profile.model)
        return result

    def _stream_failed(self, failure: Failure) -> None:
        self._read_failed(failure)

    # -- what went wrong while reading ----------------------------------------------------

    def _read_failed(self, failure: Failure) -> None:
        self._pending = None
        error = self._interrupted()
        self._fail(error if error is not None
                   else self._read_error(cast(BaseException, failure.value)))

    def _read_error(self, e: BaseException) -> BaseException:
        """What the caller sees for an error raised while reading or finishing a body."""
        url = self._channel.profile.chat_url
        partial = self._partial()
        if isinstance(e, defer.CancelledError | RepeatedLineLoop) or not isinstance(e, Exception):
            return e
        if isinstance(e, DeadlinePassed):
            return deadline_passed(self._channel.profile, partial)
        if isinstance(e, LLMTimeout):
            return LLMTimeout(f"{url}: {e}", partial)
        if isinstance(e, StreamServerError):
            detail = e.error.get("message", e.error) if isinstance(e.error, dict) else e.error
            return LLMServerError(f"{url} reported an error mid-stream: {detail}", partial,
                                  url=url)
        if isinstance(e, StreamProtocolError | SSELineTooLong | BodyError):
            return LLMProtocolError(f"{url}: {e}", partial)
        if isinstance(e, LLMError):
            return e
        consumer = self._consumer
        if consumer is not None and consumer.empty and not consumer.assembler.finished:
            return LLMEmptyStream(f"the stream from {url} ended before its first chunk "
                                  f"({describe_failure(e)})")
        if consumer is not None and consumer.assembler.finished \
                and consumer.assembler.finish_reason is None:
            return LLMInterrupted(f"{url} interrupted the stream ([DONE] without its final "
                                  f"chunk, then {describe_failure(e)}): it was serving "
                                  "another request", partial)
        where = "mid-stream" if consumer is not None else "while reading the answer"
        return LLMConnectionError(f"connection to {url} lost {where}: {describe_failure(e)}",
                                  partial)


def _is_json(response: IResponse) -> bool:
    """Whether a streaming request got a JSON answer instead (the server ignored stream)."""
    return "json" in (header_value(response.headers, "content-type") or "").lower()


def _closed_without_answer(failure: Failure) -> bool:
    """Whether the server closed the connection cleanly before any response (as
    llama-cpp-python does when it cannot stream an answer)."""
    if not failure.check(ResponseNeverReceived):
        return False
    reasons = list(getattr(failure.value, "reasons", None) or ())
    return bool(reasons) and all(r.check(ConnectionDone) for r in reasons)
