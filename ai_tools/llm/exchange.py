"""One attempt of a chat-completions request, as one small state machine.

An :class:`Exchange` sends the request, waits for the response headers, reads
the body (whole, or as a stream into a
:class:`~ai_tools.llm.consumer.StreamConsumer`) and fires :attr:`Exchange.result`
with a :class:`~ai_tools.llm.events.ChatResponse` or an
:class:`~ai_tools.errors.LLMError`.  It is written with callbacks rather than
coroutines and wrapper Deferreds on purpose: with a thousand requests in
flight, every object a waiting request keeps alive is traversed by each
garbage collection, and this shape keeps a waiting request down to the
exchange, the transport's own objects and at most one timer (the
response-headers or total deadline; the body's idle timer replaces the
headers timer once the headers are in).  It reports to its owner (a
:class:`~ai_tools.llm.call.ModelCall`) by calling ``exchange_succeeded`` or
``exchange_failed``, exactly once.

:meth:`Exchange.cancel` aborts the connection and reports ``CancelledError``;
a phase that runs out of time reports :class:`~ai_tools.errors.LLMTimeout`.
"""

from __future__ import annotations

import json
from typing import Any, cast

import attrs
from twisted.internet import defer
from twisted.python.failure import Failure

from ai_tools.errors import (
    LLMConnectionError,
    LLMError,
    LLMProtocolError,
    LLMServerError,
    LLMTimeout,
    RepeatedLineLoop,
)
from ai_tools.llm.body import BodyReader, decoded_response
from ai_tools.llm.consumer import EventCallback, StreamConsumer, StreamServerError, emit_event
from ai_tools.llm.events import (
    AssistantMessageFinal,
    ChatResponse,
    StreamDone,
    TextDelta,
    UsageUpdate,
)
from ai_tools.llm.http_errors import (
    describe_failure,
    error_for_status,
    header_value,
    parse_retry_after,
    server_message,
)
from ai_tools.llm.profile import ModelProfile
from ai_tools.llm.repetition import RepeatedLineDetector
from ai_tools.llm.stream import StreamProtocolError

MAX_BODY_BYTES = 32 * 1024 * 1024
MAX_ERROR_BODY_BYTES = 64 * 1024


_NOT_JSON = object()


class _BodyTooLarge(Exception):
    pass


class Exchange:
    """One HTTP attempt, reported to ``owner`` as an answer or an ``LLMError``.

    ``client`` (an :class:`~ai_tools.llm.client.OpenAIChatClient`) supplies
    ``profile``, ``reactor``, ``wall_clock`` and its helpers
    ``_api_key_present()`` and ``_send(body, streaming)`` (a Deferred response);
    ``decode`` says whether a gzip body must be decoded here (treq does it
    itself).  ``state`` is the stream consumer of a streaming request (None
    for a plain one); ``on_event`` gets the events of a plain answer.
    """

    __slots__ = (
        "_cancelled",
        "_client",
        "_deadline",
        "_decode",
        "_done",
        "_expired",
        "_limit",
        "_on_event",
        "_owner",
        "_parts",
        "_pending",
        "_reader",
        "_response",
        "_size",
        "_state",
        "_timer",
        "_truncate",
    )

    def __init__(
        self,
        owner: Any,
        client: Any,
        state: StreamConsumer | None,
        on_event: EventCallback | None,
        decode: bool,
    ) -> None:
        self._owner = owner
        self._client = client
        self._done = False
        self._state = state
        self._on_event = on_event
        self._decode = decode
        self._cancelled = False
        self._expired: str | None = None
        self._timer: Any = None
        self._deadline: float | None = None
        self._pending: defer.Deferred[Any] | None = None
        self._reader: BodyReader | None = None
        self._response: Any = None
        self._parts: list[bytes] | None = None
        self._size = 0
        self._limit = MAX_BODY_BYTES
        self._truncate = False

    def start(self, body: bytes, streaming: bool) -> None:
        """Send the request and arm the first deadline."""
        client = self._client
        timeouts = client.profile.timeouts
        clock = client.reactor
        total, headers = timeouts.total, timeouts.headers
        if total is not None:
            self._deadline = clock.seconds() + total
        if headers is not None and (total is None or headers < total):
            self._timer = clock.callLater(headers, self._headers_expired)
        elif total is not None:
            self._timer = clock.callLater(total, self._total_expired)
        try:
            d = client._send(body, streaming)
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
        if not self._done:
            self._fail(defer.CancelledError())

    def _headers_expired(self) -> None:
        self._timer = None
        self._expired = "headers"
        if self._pending is not None:
            self._pending.cancel()

    def _total_expired(self) -> None:
        self._timer = None
        self._expired = "total"
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
        if self._expired == "total":
            total = self._client.profile.timeouts.total
            return LLMTimeout(
                f"{self._client.profile.chat_url}: no complete answer within {total:g}s",
                self._state.text if self._state is not None else "",
            )
        if self._expired == "headers":
            headers = self._client.profile.timeouts.headers
            return LLMTimeout(
                f"no response from {self._client.profile.chat_url} within {headers:g}s"
            )
        return None

    def _succeed(self, response: ChatResponse) -> None:
        self._stop_timer()
        if not self._done:
            self._end()
            self._owner.exchange_succeeded(response)

    def _fail(self, error: BaseException | Failure) -> None:
        self._stop_timer()
        if not self._done:
            self._end()
            self._owner.exchange_failed(error)

    def _end(self) -> None:
        """Done: drop the reader and the response (twisted.web's objects of this request)
        so that nothing of the exchange lives on in a reference cycle."""
        self._done = True
        self._reader = None
        self._response = None
        self._parts = None

    # -- response headers -------------------------------------------------------------

    def _no_response(self, failure: Failure) -> None:
        self._pending = None
        error = self._interrupted()
        if error is None:
            if failure.check(defer.CancelledError):
                error = defer.CancelledError()
            else:
                url = self._client.profile.chat_url
                error = LLMConnectionError(
                    f"could not reach {url}: {describe_failure(cast(BaseException, failure.value))}"
                )
        self._fail(error)

    def _got_response(self, response: Any) -> None:
        self._pending = None
        if self._done:
            return
        client = self._client
        self._stop_timer()
        if self._deadline is not None:
            clock = client.reactor
            self._timer = clock.callLater(
                max(0.0, self._deadline - clock.seconds()), self._total_expired
            )
        if self._decode:
            response = decoded_response(response)
        self._response = response
        status = response.code
        idle = client.profile.timeouts.idle
        if not 200 <= status < 300:
            self._limit = MAX_ERROR_BODY_BYTES
            self._truncate = True
        elif self._state is not None:
            content_type = (header_value(response.headers, "content-type") or "").lower()
            if "json" not in content_type:
                reader = BodyReader(
                    client.reactor, self._state.sink, idle, "answer stream", arm_on_connect=False
                )
                self._state.reader = reader
                self._read(response, reader, self._stream_ended, self._stream_failed)
                return
        reader = BodyReader(
            client.reactor, self._collect, idle, "response body", arm_on_connect=False
        )
        self._read(response, reader, self._body_read, self._body_failed)

    def _read(self, response: Any, reader: BodyReader, done: Any, failed: Any) -> None:
        self._reader = reader
        self._pending = reader.finished
        response.deliverBody(reader)
        reader.arm()  # after: a body already here needs no idle timer
        reader.finished.addCallbacks(done, failed)

    # -- a whole body -----------------------------------------------------------------

    def _collect(self, data: bytes) -> None:
        self._size += len(data)
        if self._parts is None:
            self._parts = [data]
        else:
            self._parts.append(data)
        if self._size > self._limit:
            if self._truncate:
                assert self._reader is not None
                self._reader.stop()
            else:
                raise _BodyTooLarge()

    def _body_failed(self, failure: Failure) -> None:
        self._pending = None
        error = self._interrupted()
        if error is None:
            url = self._client.profile.chat_url
            if failure.check(_BodyTooLarge):
                error = LLMProtocolError(f"response from {url} is larger than {self._limit} bytes")
            elif failure.check(defer.CancelledError, LLMError):
                self._fail(failure)
                return
            elif self._truncate:
                self._body_read(None)
                return
            else:
                error = LLMConnectionError(
                    f"connection to {url} lost while reading the answer: "
                    f"{describe_failure(cast(BaseException, failure.value))}"
                )
        self._fail(error)

    def _body_read(self, _: object) -> None:
        self._pending = None
        error = self._interrupted()
        if error is not None:
            self._fail(error)
            return
        raw = b"".join(self._parts) if self._parts else b""
        self._parts = None
        client = self._client
        response = self._response
        try:
            if self._truncate:
                retry_after = parse_retry_after(
                    header_value(response.headers, "retry-after"), client.wall_clock()
                )
                profile = client.profile
                self._fail(
                    error_for_status(
                        response.code,
                        profile.chat_url,
                        raw[: self._limit],
                        model=profile.model,
                        api_key_env=profile.api_key_env,
                        api_key_present=client._api_key_present(),
                        retry_after=retry_after,
                    )
                )
                return
            answer = parse_completion(raw, client.profile, self._state, self._on_event)
        except BaseException:
            self._fail(Failure())
            return
        self._succeed(answer)

    # -- a stream -----------------------------------------------------------------------

    def _stream_failed(self, failure: Failure) -> None:
        self._pending = None
        error = self._interrupted()
        self._fail(
            error if error is not None else self._stream_error(cast(BaseException, failure.value))
        )

    def _stream_ended(self, _: object) -> None:
        self._pending = None
        error = self._interrupted()
        if error is not None:
            self._fail(error)
            return
        state = self._state
        assert state is not None
        url = self._client.profile.chat_url
        try:
            complete = state.close()
        except BaseException as e:
            self._fail(self._stream_error(e))
            return
        if not complete:
            self._fail(
                LLMConnectionError(
                    f"the stream from {url} ended before [DONE] (truncated)", state.text
                )
            )
        elif state.looped():
            self._fail(
                RepeatedLineLoop(
                    f"the model repeated itself ({state.detector.repeated!r})", state.text
                )
            )
        else:
            try:
                result = state.response()
                if not result.model:
                    result = attrs.evolve(result, model=self._client.profile.model)
            except BaseException:
                self._fail(Failure())
                return
            self._succeed(result)

    def _stream_error(self, e: BaseException) -> BaseException:
        """What the caller sees for an error raised while reading a stream."""
        state = self._state
        assert state is not None
        url = self._client.profile.chat_url
        if isinstance(e, defer.CancelledError | RepeatedLineLoop):
            return e
        if isinstance(e, LLMTimeout):
            return LLMTimeout(f"{url}: {e}", state.text)
        if isinstance(e, StreamServerError):
            detail = e.error.get("message", e.error) if isinstance(e.error, dict) else e.error
            return LLMServerError(
                f"{url} reported an error mid-stream: {detail}", state.text, url=url
            )
        if isinstance(e, StreamProtocolError):
            return LLMProtocolError(f"{url}: {e}", state.text)
        if not isinstance(e, Exception):
            return e
        return LLMConnectionError(
            f"connection to {url} lost mid-stream: {describe_failure(e)}", state.text
        )


def parse_completion(
    raw: bytes,
    profile: ModelProfile,
    state: StreamConsumer | None,
    on_event: EventCallback | None,
) -> ChatResponse:
    """The :class:`ChatResponse` of a plain (not streamed) answer; its events go out too."""
    url = profile.chat_url
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        # Raised below, outside this handler: an error raised here would carry the
        # decoder's exception, its traceback and every frame of it as context.
        data = _NOT_JSON
    if data is _NOT_JSON:
        raise LLMProtocolError(f"200 from {url} but the body is not JSON: {server_message(raw)}")
    if not isinstance(data, dict):
        raise LLMProtocolError(f"200 from {url} but the body is not a JSON object")
    if data.get("error"):
        raise LLMServerError(f"200 from {url} carrying an error: {server_message(raw)}", url=url)
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise LLMProtocolError(f"200 from {url} but the answer has no choices: {raw[:200]!r}")
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        raise LLMProtocolError(f"200 from {url} but choices[0] has no message")
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else None
    response = ChatResponse.from_message(
        message,
        finish_reason=choice.get("finish_reason"),
        usage=usage,
        model=str(data.get("model") or profile.model),
    )
    if state is not None:
        state.produced = True
    # ``on_event`` is the stream consumer's callback too; emit_event logs its errors.
    if response.content and on_event is not None:
        emit_event(on_event, TextDelta(response.content))
    if profile.repetition.enabled and response.content:  # no text: nothing can repeat
        detector = state.detector if state is not None else RepeatedLineDetector(profile.repetition)
        detector.feed(response.content)
        if detector.finish():
            raise RepeatedLineLoop(
                f"the model repeated itself ({detector.repeated!r})", response.content
            )
    if on_event is not None:
        if usage:
            emit_event(on_event, UsageUpdate(usage))
        emit_event(on_event, AssistantMessageFinal(response.message))
        emit_event(on_event, StreamDone())
    return response
