"""One :meth:`~ai_tools.llm.client.OpenAIChatClient.complete` call: slots, attempts, retries.

A :class:`ModelCall` runs :class:`~ai_tools.llm.exchange.Exchange` attempts,
each holding one of the client's concurrency slots while it runs (a call
waiting to retry holds none), asks the circuit breaker before each, retries
what the channel's rules allow after a back-off (honouring ``Retry-After``),
and fires :attr:`ModelCall.result` once.  The whole call, waits for a slot
and back-offs included, ends by the profile's total deadline.  It is written
with callbacks, not as a coroutine: a coroutine, its Deferred and the Deferred
it awaits are a dozen objects that every garbage collection walks while the
request waits for its answer, and a service has a thousand such requests in
flight.

Cancelling :attr:`ModelCall.result` stops the call wherever it is (waiting
for a slot, in an attempt, or in a back-off wait) and fails it with
``CancelledError``.
"""

from __future__ import annotations

from typing import Any, Protocol

import attrs
from twisted.internet import defer
from twisted.python.failure import Failure

from ai_tools.errors import LLMEmptyStream, LLMError, LLMRequestError, LLMUnavailable
from ai_tools.llm.channel import ModelChannel
from ai_tools.llm.consumer import EventCallback
from ai_tools.llm.events import AttemptCallback, ChatResponse, RequestAttempt
from ai_tools.llm.exchange import Exchange, at_deadline, deadline_passed
from ai_tools.llm.window import reply_room_in_error


class RequestBuilder(Protocol):
    """What a call needs to build its request body again (see ``_changed_request``)."""

    offers_tools: bool

    def build(self, streaming: bool) -> bytes: ...

    def limit_reply(self, tokens: int) -> bool:
        """Ask for a reply of at most ``tokens``; True if that lowers what is asked."""


class ModelCall:
    """One request to the model, retried as the channel's rules say."""

    __slots__ = (
        "_attempt",
        "_body",
        "_channel",
        "_deadline",
        "_ended",
        "_exchange",
        "_has_slot",
        "_last_error",
        "_on_attempt",
        "_on_event",
        "_rebuilt",
        "_request",
        "_slot",
        "_streaming",
        "_timer",
        "_unstreamed",
        "result",
    )

    def __init__(
        self, channel: ModelChannel, body: bytes, streaming: bool, on_event: EventCallback | None,
        request: RequestBuilder | None = None, on_attempt: AttemptCallback | None = None,
    ) -> None:
        self._channel = channel
        self._body = body
        self._request = request
        self._rebuilt = False
        self._unstreamed = False
        self._streaming = streaming
        self._on_event = on_event
        self._on_attempt = on_attempt
        self._last_error: str | None = None
        self._attempt = 0
        self._ended = False
        self._has_slot = False
        self._deadline: float | None = None
        self._exchange: Exchange | None = None
        self._slot: defer.Deferred[Any] | None = None
        self._timer: Any = None  # the deadline while waiting for a slot, or the back-off
        self.result: defer.Deferred[ChatResponse] = defer.Deferred(self._cancel)

    def start(self) -> None:
        """Check the breaker (fail fast, without waiting for a slot), then ask for a slot."""
        channel = self._channel
        try:
            channel.breaker.check()
        except BaseException:
            self._end(Failure())
            return
        channel.calls.add(self)
        total = channel.profile.timeouts.total
        if total is not None:
            self._deadline = channel.clock.seconds() + total
        self._wait_for_slot()

    # -- a slot, then an attempt ------------------------------------------------------------

    def _wait_for_slot(self) -> None:
        self._timer = None
        slot = self._channel.slots.acquire()
        if not slot.called:
            self._slot = slot
            if self._deadline is not None:
                self._timer = at_deadline(self._channel.clock, self._deadline,
                                          self._no_slot_in_time)
        slot.addCallbacks(self._got_slot, self._no_slot)

    def _no_slot_in_time(self) -> None:
        self._timer = None
        profile = self._channel.profile
        self._end(deadline_passed(
            profile, why=f" (all {profile.max_concurrency} request slots stayed busy)"
        ))

    def _got_slot(self, _: object) -> None:
        self._slot = None
        self._stop_timer()
        self._has_slot = True
        if self._ended:  # cancelled while the slot was being handed over
            self._release_slot()
            return
        self._attempt += 1
        try:
            self._channel.breaker.before_attempt()
        except BaseException:
            self._end(Failure())
            return
        exchange = self._exchange = Exchange(self, self._channel, self._on_event, self._deadline)
        exchange.start(self._body, self._streaming,
                       None if self._on_attempt is None else self._attempt_headers())

    def _attempt_headers(self) -> dict[str, str] | None:
        """Tell the attempt observer this attempt starts; the headers it adds (None: none)."""
        assert self._on_attempt is not None
        event = RequestAttempt(self._attempt, self._channel.profile.chat_url,
                               retry_of=self._last_error)
        try:
            self._on_attempt(event)
        except Exception:
            self._channel.log.failure("Model request attempt observer failed")
            return None
        return event.headers or None

    def _no_slot(self, failure: Failure) -> None:
        self._slot = None
        self._end(failure)

    # -- what an attempt reports ------------------------------------------------------------

    def exchange_succeeded(self, response: ChatResponse) -> None:
        """The attempt got an answer."""
        if self._unstreamed:  # whole, after a stream that broke: ask whole from now on
            channel = self._channel
            if channel.stream_tools:
                channel.stream_tools = False
                channel.log.warn(
                    "Model {label}: a streamed answer offering tools ended before its first "
                    "chunk and the same request unstreamed was answered; asking for whole "
                    "answers whenever tools are offered", label=channel.profile.label)
        self._exchange = None
        self._release_slot()
        self._channel.breaker.record_success()
        self._end(response)

    def exchange_failed(self, error: BaseException | Failure) -> None:
        """The attempt failed: retry it, or end the call with ``error``."""
        exchange, self._exchange = self._exchange, None
        self._release_slot()
        breaker = self._channel.breaker
        exc = error.value if isinstance(error, Failure) else error
        if isinstance(exc, defer.CancelledError):
            breaker.release_probe()
        elif isinstance(exc, LLMError) and not isinstance(exc, LLMUnavailable):
            if self._changed_request(exc, exchange):
                if self._unstreamed:  # the server may close the connection the stream used
                    self._channel.drop_idle_connections().addBoth(
                        lambda _: None if self._ended else self._wait_for_slot())
                else:
                    self._timer = self._channel.clock.callLater(0, self._wait_for_slot)
                return
            verdict = self._channel.verdict(exc)
            if verdict == "success":
                breaker.record_success()
            else:
                breaker.record_failure()
                if verdict == "retry" and not (exchange is not None and exchange.produced):
                    self._last_error = type(exc).__name__
                    self._retry_later(exc, error)
                    return
        self._end(error)

    def _changed_request(self, exc: LLMError, exchange: Exchange | None) -> bool:
        """Whether the failure taught the client something that changes the request, which
        is then rebuilt to be sent again at once (once per call, only before any text):

        * a context-overflow 400 naming a smaller window than the one in use: the
          request's default ``max_tokens`` shrinks with it;
        * a streamed answer with tools that ended before its first chunk (or a
          connection closed cleanly without an answer): it is asked for whole, and if
          that is answered, requests offering tools are sent unstreamed from now on
          (logged once).
        """
        request, channel = self._request, self._channel
        if request is None or self._rebuilt or (exchange is not None and exchange.produced):
            return False
        if isinstance(exc, LLMRequestError) and exc.status == 400:
            if not _learned_from_refusal(str(exc), request, channel):
                return False
        elif isinstance(exc, LLMEmptyStream) and self._streaming and request.offers_tools:
            self._streaming = False
            self._unstreamed = True
        else:
            return False
        body = request.build(self._streaming)
        if body == self._body and isinstance(exc, LLMRequestError):
            return False
        self._body, self._rebuilt = body, True
        return True

    def _retry_later(self, exc: LLMError, error: BaseException | Failure) -> None:
        """Wait and try again, if attempts and time are left; else end with ``error``."""
        channel = self._channel
        attempt, max_attempts = self._attempt, channel.retry_policy.max_attempts
        delay = channel.retry_delay(exc, attempt)
        late = self._deadline is not None and channel.clock.seconds() + delay >= self._deadline
        if attempt >= max_attempts or late:
            self._end(error)
            return
        channel.log.warn(
            "Model {label} request failed ({error}); attempt {attempt}/{max} "
            "failed, retrying in {delay:.2f}s",
            label=channel.profile.label,
            error=str(exc),
            attempt=attempt,
            max=max_attempts,
            delay=delay,
        )
        self._timer = channel.clock.callLater(delay, self._wait_for_slot)

    # -- the end ------------------------------------------------------------------------------

    def _cancel(self, _: defer.Deferred[ChatResponse]) -> None:
        if self._slot is not None:
            slot, self._slot = self._slot, None
            slot.cancel()
        elif self._exchange is not None:
            self._exchange.cancel()
        if not self._ended:
            self._end(Failure(defer.CancelledError()))

    def _stop_timer(self) -> None:
        timer = self._timer
        if timer is not None:
            self._timer = None
            if timer.active():
                timer.cancel()

    def _release_slot(self) -> None:
        if self._has_slot:
            self._has_slot = False
            self._channel.slots.release()

    def _end(self, outcome: ChatResponse | Failure | BaseException) -> None:
        if self._ended:
            return
        self._ended = True
        self._stop_timer()
        if self._slot is not None:
            slot, self._slot = self._slot, None
            slot.cancel()
        self._release_slot()
        self._channel.calls.discard(self)
        if isinstance(outcome, Failure | BaseException):
            error = outcome.value if isinstance(outcome, Failure) else outcome
            if isinstance(error, LLMError):
                error.attempts = self._attempt
            self.result.errback(outcome)
        elif self._attempt != 1:
            self.result.callback(attrs.evolve(outcome, attempts=self._attempt))
        else:
            self.result.callback(outcome)


def _learned_from_refusal(text: str, request: RequestBuilder, channel: ModelChannel) -> bool:
    """What a 400 teaches that changes the request: the window a context-overflow error
    names, the reply cap's field (``max_completion_tokens`` where ``max_tokens`` is
    refused), and the room left for the reply when prompt + ``max_tokens`` overflowed
    the window (vLLM refuses those rather than shortening the reply).  True if any
    changed it."""
    learned = channel.window.learn_from_error(text) | _learn_reply_cap_field(text, channel)
    room = reply_room_in_error(text, channel.window.tokens)
    shrunk = room is not None and request.limit_reply(room)
    if shrunk:
        channel.log.info("Model {label}: the server refused the reply's max_tokens next to "
                         "this prompt; sent again with at most {tokens} tokens for the reply",
                         label=channel.profile.label, tokens=room)
    return shrunk or learned


_CAP_FIELD_REFUSED = "use 'max_completion_tokens'"
"""In OpenAI's refusal of ``max_tokens`` for its reasoning models ("Unsupported parameter:
'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.")."""


def _learn_reply_cap_field(text: str, channel: ModelChannel) -> bool:
    """Send the reply cap as ``max_completion_tokens`` from now on if the server refused
    ``max_tokens`` for it; True if that changed (logged once)."""
    if channel.reply_cap_field != "max_tokens" or _CAP_FIELD_REFUSED not in text.lower():
        return False
    channel.reply_cap_field = "max_completion_tokens"
    channel.log.info("Model {label}: the server refuses max_tokens; the reply cap is sent as "
                     "max_completion_tokens from now on", label=channel.profile.label)
    return True
