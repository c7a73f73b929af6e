"""One :meth:`~ai_tools.llm.client.OpenAIChatClient.complete` call: slots, attempts, retries.

A :class:`ModelCall` runs :class:`~ai_tools.llm.exchange.Exchange` attempts,
each holding one of the server's slots while it runs (a call waiting to
retry holds none; the slots are handed out in turns between assistants, see
:mod:`ai_tools.llm.server`), asks the breakers (its assistant's and the
server's) before each, retries what the channel's rules allow after a
back-off (honouring ``Retry-After``), and fires :attr:`ModelCall.result`
once.  The call's deadlines run while it is out at the server, never while
it waits in the queue (bounded by ``timeouts.queue``): the total deadline
starts when its first request is sent.

A request is never sent twice while the server may still compute it: on a
server known to compute a whole answer its client left (llama-cpp-python),
a call that gives up keeps the slot, and the connection, until the server is
done (:meth:`Exchange.detach`); a stream the server interrupted for another
request (:class:`~ai_tools.errors.LLMInterrupted`) teaches that the server
serves fewer at once, and goes back to the queue.  It is written
with callbacks, not as a coroutine: a coroutine, its Deferred and the Deferred
it awaits are a dozen objects that every garbage collection walks while the
request waits for its answer, and a service has a thousand such requests in
flight.

Cancelling :attr:`ModelCall.result` stops the call wherever it is (waiting
for a slot, in an attempt, or in a back-off wait) and fails it with
``CancelledError`` (the connection closed, unless the server computes on).
"""

from __future__ import annotations

from typing import Any, Protocol

import attrs
from twisted.internet import defer
from twisted.internet.interfaces import IDelayedCall
from twisted.python.failure import Failure

from ai_tools.errors import (
    LLMEmptyStream,
    LLMError,
    LLMInterrupted,
    LLMRequestError,
    LLMTimeout,
    LLMUnavailable,
)
from ai_tools.llm.breaker import CircuitBreaker
from ai_tools.llm.channel import ModelChannel
from ai_tools.llm.consumer import EventCallback
from ai_tools.llm.events import AttemptCallback, ChatResponse, RequestAttempt
from ai_tools.llm.exchange import Exchange
from ai_tools.llm.window import reply_room_in_error


class RequestBuilder(Protocol):
    """What a call needs to build its request body again (see ``_changed_request``)."""

    offers_tools: bool

    def build(self, streaming: bool) -> bytes: ...

    def limit_reply(self, tokens: int) -> bool:
        """Ask for a reply of at most ``tokens``; True if that lowers what is asked."""


class ModelCall:
    """One request to the model, retried as the channel's rules say.

    ``party`` is whom the call is for (an assistant's name): the server's queue
    serves the parties in turns.  ``breaker`` is the caller's own breaker (the
    assistant's, else the client's); the server's breaker is asked too.
    """

    __slots__ = (
        "_attempt",
        "_body",
        "_breaker",
        "_channel",
        "_deadline",
        "_draining",
        "_ended",
        "_exchange",
        "_has_slot",
        "_last_error",
        "_on_attempt",
        "_on_event",
        "_party",
        "_queued",
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
        *, party: str | None = None, breaker: CircuitBreaker | None = None,
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
        self._party = party
        self._breaker = breaker
        self._attempt = 0
        self._queued = 0.0
        self._ended = False
        self._draining = False
        self._has_slot = False
        self._deadline: float | None = None
        self._exchange: Exchange | None = None
        self._slot: defer.Deferred[Any] | None = None
        self._timer: IDelayedCall | None = None  # the queue's deadline, or the back-off
        self.result: defer.Deferred[ChatResponse] = defer.Deferred(self._cancel)

    def _breakers(self) -> tuple[CircuitBreaker, ...]:
        server = self._channel.server.breaker
        return (server,) if self._breaker is None else (self._breaker, server)

    def start(self) -> None:
        """Check the breakers (fail fast, without waiting for a slot), then queue."""
        try:
            for breaker in self._breakers():
                breaker.check()
        except BaseException:
            self._end(Failure())
            return
        self._channel.calls.add(self)
        self._wait_for_slot()

    # -- a slot, then an attempt ------------------------------------------------------------

    def _wait_for_slot(self) -> None:
        self._timer = None
        slot = self._channel.server.slots.acquire(self._party)
        if not slot.called:
            self._slot = slot
            limit = self._channel.profile.timeouts.queue
            if limit is not None:
                self._timer = self._channel.clock.callLater(limit, self._no_slot_in_time)
        slot.addCallbacks(self._got_slot, self._no_slot)

    def _no_slot_in_time(self) -> None:
        self._timer = None
        channel = self._channel
        slots = channel.server.slots
        self._end(LLMTimeout(
            f"{channel.profile.chat_url}: waited {channel.profile.timeouts.queue:g}s in the "
            f"queue for one of the server's {slots.capacity} slot(s) ({slots.waiting} "
            "request(s) waiting); nothing was sent"))

    def _got_slot(self, waited: float) -> None:
        self._slot = None
        self._stop_timer()
        self._has_slot = True
        if self._ended:  # cancelled while the slot was being handed over
            self._release_slot()
            return
        clock, total = self._channel.clock, self._channel.profile.timeouts.total
        self._queued += waited
        if self._deadline is not None:
            self._deadline += waited  # the deadlines run while a request is out, not queued
        elif total is not None:
            self._deadline = clock.seconds() + total
        self._attempt += 1
        if not self._pass_breakers():
            return
        request = self._request
        if self._streaming and request is not None and request.offers_tools \
                and not self._channel.stream_tools:  # the server refused one meanwhile
            self._streaming = False
            self._body = request.build(False)
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

    def _pass_breakers(self) -> bool:
        """Let the attempt through every breaker, or end the call (releasing the probes
        already let through)."""
        passed: list[CircuitBreaker] = []
        for breaker in self._breakers():
            try:
                breaker.before_attempt()
            except BaseException:
                for earlier in passed:
                    earlier.release_probe()
                self._attempt -= 1  # nothing was sent
                self._end(Failure())
                return False
            passed.append(breaker)
        return True

    def _no_slot(self, failure: Failure) -> None:
        self._slot = None
        self._end(failure)

    # -- what an attempt reports ------------------------------------------------------------

    def exchange_succeeded(self, response: ChatResponse) -> None:
        """The attempt got an answer."""
        self._exchange = None
        self._release_slot()
        if self._draining:  # the answer nobody waits for any more
            return
        if self._unstreamed:  # asked whole after a stream closed unanswered: it works
            self._channel.whole_tool_answers("a streamed request offering tools was closed "
                                             "unanswered, and the same request whole was "
                                             "answered")
        for breaker in self._breakers():
            breaker.record_success()
        self._end(response)

    def exchange_abandoned(self, error: LLMError) -> None:
        """The call's time ran out while the server, which keeps computing an answer its
        client left, still works on it: end the call now, and keep the slot (and the
        connection) until the server is done (see :meth:`Exchange.detach`)."""
        self._draining = True
        self._exchange = None
        if self._breaker is not None:
            self._breaker.record_failure()
        self._channel.log.warn(
            "Model {label}: gave up on a request ({error}); the server computes it to its "
            "end, so it keeps its slot until then: nothing is sent in its place",
            label=self._channel.profile.label, error=str(error))
        self._end(error)

    def exchange_failed(self, error: BaseException | Failure) -> None:
        """The attempt failed: retry it, or end the call with ``error``."""
        exchange, self._exchange = self._exchange, None
        exc = error.value if isinstance(error, Failure) else error
        if isinstance(exc, LLMInterrupted) and not self._draining:
            self._channel.server.interrupted()  # (counting this call's slot, still held)
        self._release_slot()
        if self._draining:
            return
        if isinstance(exc, defer.CancelledError):
            for breaker in self._breakers():
                breaker.release_probe()
        elif isinstance(exc, LLMError) and not isinstance(exc, LLMUnavailable):
            if self._changed_request(exc, exchange):
                self._send_again()
                return
            if self._judge(exc, exchange):
                self._last_error = type(exc).__name__  # (the next attempt's retry_of)
                self._retry_later(exc, error)
                return
        self._end(error)

    def _judge(self, exc: LLMError, exchange: Exchange | None) -> bool:
        """Count the failure against the breakers it concerns; True to try again."""
        produced = exchange is not None and exchange.produced
        if isinstance(exc, LLMInterrupted):
            for breaker in self._breakers():
                breaker.release_probe()  # the server works: nobody's failure
            return not produced
        verdict = self._channel.verdict(exc)
        if verdict == "success":
            for breaker in self._breakers():
                breaker.record_success()
            return False
        own, server = self._breaker, self._channel.server.breaker
        if own is not None:
            own.record_failure()
        if self._channel.server_failed(exc) or own is None:
            server.record_failure()
        else:
            server.release_probe()
        return verdict == "retry" and not produced

    def _send_again(self) -> None:
        """Send the rebuilt request at once (through the queue again)."""
        for breaker in self._breakers():
            breaker.release_probe()
        if not self._streaming and self._request is not None and self._request.offers_tools:
            # the server may close the connection the refused stream used
            self._channel.drop_idle_connections().addBoth(
                lambda _: None if self._ended else self._wait_for_slot())
        else:
            self._timer = self._channel.clock.callLater(0, self._wait_for_slot)

    def _changed_request(self, exc: LLMError, exchange: Exchange | None) -> bool:
        """Whether the failure taught the client something that changes the request, which
        is then rebuilt to be sent again at once (once per call, only before any text):

        * a context-overflow 400 naming a smaller window than the one in use: the
          request's default ``max_tokens`` shrinks with it;
        * a streamed answer with tools that ended before its first chunk: the server
          refuses to stream them, so requests offering tools ask for whole answers from
          now on, for every call of the profile (logged once), and this one is asked
          again whole (a connection closed cleanly without an answer, which a stale
          pooled connection may also be, switches once the whole answer came).
        """
        request, channel = self._request, self._channel
        if request is None or self._rebuilt or (exchange is not None and exchange.produced):
            return False
        if isinstance(exc, LLMRequestError) and exc.status == 400:
            if not _learned_from_refusal(str(exc), request, channel):
                return False
        elif isinstance(exc, LLMEmptyStream) and self._streaming and request.offers_tools:
            self._streaming = False
            if exc.reached:  # an answer that ended before its first chunk: a refusal
                channel.whole_tool_answers("a streamed answer offering tools was refused "
                                           "(it ended before its first chunk)")
            else:  # a closed connection may be a stale one: switch once whole works
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
            exchange = self._exchange
            if exchange.detach():  # the server computes it anyway: keep the slot till then
                self._draining = True
                self._exchange = None
                for breaker in self._breakers():
                    breaker.release_probe()
            else:
                exchange.cancel()
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
            self._channel.server.slots.release()

    def _end(self, outcome: ChatResponse | Failure | BaseException) -> None:
        if self._ended:
            return
        self._ended = True
        self._stop_timer()
        if self._slot is not None:
            slot, self._slot = self._slot, None
            slot.cancel()
        if not self._draining:
            self._release_slot()
        self._channel.calls.discard(self)
        if isinstance(outcome, Failure | BaseException):
            error = outcome.value if isinstance(outcome, Failure) else outcome
            if isinstance(error, LLMError):
                error.attempts = self._attempt
                error.queued = self._queued
            self.result.errback(outcome)
        elif self._attempt != 1 or self._queued:
            self.result.callback(attrs.evolve(outcome, attempts=self._attempt,
                                              queued=self._queued))
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
