"""One :meth:`~ai_tools.llm.client.OpenAIChatClient.complete` call: slot, attempts, retries.

A :class:`ModelCall` waits for a slot under the client's concurrency cap,
runs :class:`~ai_tools.llm.exchange.Exchange` attempts, asks the circuit
breaker before each, retries what the retry policy allows after a back-off
(honouring ``Retry-After``), and fires :attr:`ModelCall.result` once.  It is
written with callbacks, not as a coroutine: a coroutine, its Deferred and
the Deferred it awaits are a dozen objects that every garbage collection
walks while the request waits for its answer, and a service has a thousand
such requests in flight.

Cancelling :attr:`ModelCall.result` stops the call wherever it is (waiting
for a slot, in an attempt, or in a back-off wait) and fails it with
``CancelledError``.
"""

from __future__ import annotations

from typing import Any

from twisted.internet import defer
from twisted.python.failure import Failure

from ai_tools.errors import LLMError, LLMUnavailable
from ai_tools.llm.consumer import EventCallback, StreamConsumer
from ai_tools.llm.events import ChatResponse
from ai_tools.llm.exchange import Exchange


class ModelCall:
    """One request to the model, retried as the client's policy says.

    ``client`` is the :class:`~ai_tools.llm.client.OpenAIChatClient`; the
    call uses its profile, reactor, breaker, semaphore, retry policy and its
    ``_judge``/``_retry_delay`` rules, and leaves its ``_inflight`` set when done.
    """

    __slots__ = (
        "_attempt",
        "_body",
        "_client",
        "_ended",
        "_exchange",
        "_has_slot",
        "_on_event",
        "_sleep",
        "_slot",
        "_state",
        "_streaming",
        "result",
    )

    def __init__(
        self, client: Any, body: bytes, streaming: bool, on_event: EventCallback | None
    ) -> None:
        self._client = client
        self._body = body
        self._streaming = streaming
        self._on_event = on_event
        self._attempt = 0
        self._ended = False
        self._has_slot = False
        self._exchange: Exchange | None = None
        self._slot: defer.Deferred[Any] | None = None
        self._sleep: Any = None
        self._state: StreamConsumer | None = None
        self.result: defer.Deferred[ChatResponse] = defer.Deferred(self._cancel)

    def start(self) -> None:
        """Check the breaker (fail fast, without waiting for a slot), then take a slot."""
        try:
            self._client.breaker.check()
        except BaseException:
            self._end(Failure())
            return
        semaphore = self._client._semaphore
        if semaphore.tokens:  # what acquire() does, without a Deferred that fires at once
            semaphore.tokens -= 1
            self._got_slot(None)
        else:
            slot = semaphore.acquire()
            self._slot = slot
            slot.addCallbacks(self._got_slot, self._no_slot)

    def _got_slot(self, _: object) -> None:
        self._slot = None
        self._has_slot = True
        self._next_attempt()

    def _no_slot(self, failure: Failure) -> None:
        self._slot = None
        self._end(failure)

    def _next_attempt(self) -> None:
        self._sleep = None
        client = self._client
        self._attempt += 1
        try:
            client.breaker.before_attempt()
        except BaseException:
            self._end(Failure())
            return
        streaming = self._streaming
        state = StreamConsumer(self._on_event, client.profile.repetition) if streaming else None
        self._state = state
        exchange = self._exchange = Exchange(
            self, client, state, self._on_event, client._agent is not None
        )
        exchange.start(self._body, streaming)

    # -- what an attempt reports ------------------------------------------------------------

    def exchange_succeeded(self, response: ChatResponse) -> None:
        """The attempt got an answer."""
        self._exchange = None
        self._client.breaker.record_success()
        self._end(response)

    def exchange_failed(self, error: BaseException | Failure) -> None:
        """The attempt failed: retry it, or end the call with ``error``."""
        self._exchange = None
        client = self._client
        breaker = client.breaker
        exc = error.value if isinstance(error, Failure) else error
        if isinstance(exc, defer.CancelledError):
            breaker.release_probe()
            self._end(error)
            return
        if isinstance(exc, LLMUnavailable) or not isinstance(exc, LLMError):
            self._end(error)
            return
        verdict = client._judge(exc)
        if verdict == "success":
            breaker.record_success()
            self._end(error)
            return
        breaker.record_failure()
        state = self._state
        attempt = self._attempt
        max_attempts = client.retry_policy.max_attempts
        if verdict != "retry" or (state is not None and state.produced) or attempt >= max_attempts:
            self._end(error)
            return
        delay = client._retry_delay(exc, attempt)
        client._log.warn(
            "Model {label} request failed ({error}); attempt {attempt}/{max} "
            "failed, retrying in {delay:.2f}s",
            label=client.profile.label,
            error=str(exc),
            attempt=attempt,
            max=max_attempts,
            delay=delay,
        )
        self._sleep = client.reactor.callLater(delay, self._next_attempt)

    # -- the end ------------------------------------------------------------------------------

    def _cancel(self, _: defer.Deferred[ChatResponse]) -> None:
        if self._slot is not None:
            slot, self._slot = self._slot, None
            slot.cancel()
        elif self._exchange is not None:
            self._exchange.cancel()
        elif self._sleep is not None:
            sleep, self._sleep = self._sleep, None
            if sleep.active():
                sleep.cancel()
        if not self._ended:
            self._end(Failure(defer.CancelledError()))

    def _end(self, outcome: ChatResponse | Failure | BaseException) -> None:
        if self._ended:
            return
        self._ended = True
        self._state = None
        client = self._client
        if self._has_slot:
            self._has_slot = False
            client._semaphore.release()
        client._inflight.discard(self)
        if isinstance(outcome, Failure | BaseException):
            self.result.errback(outcome)
        else:
            self.result.callback(outcome)
