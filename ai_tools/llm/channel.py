"""What every call of one model client shares: the client's internal API for its calls.

An :class:`~ai_tools.llm.client.OpenAIChatClient` builds one
:class:`ModelChannel`; each :class:`~ai_tools.llm.call.ModelCall` and its
:class:`~ai_tools.llm.exchange.Exchange` attempts use only its public names:
the profile and clock, the model server (its slots and fair queue, its
breaker), the circuit breaker of the client's own calls, the retry rules,
:meth:`ModelChannel.send`, the answer limits and the redactor.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, NoReturn, cast

import attrs
import treq
from treq.client import HTTPClient
from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger, LogLevel
from twisted.python.failure import Failure
from twisted.web.client import HTTPConnectionPool
from twisted.web.http_headers import Headers
from twisted.web.iweb import IResponse

from ai_tools.errors import (
    LLMConnectionError,
    LLMEmptyAnswer,
    LLMError,
    LLMProtocolError,
    LLMRequestError,
    LLMServerError,
    LLMTimeout,
    RepeatedLineLoop,
)
from ai_tools.llm.breaker import CircuitBreaker
from ai_tools.llm.http_errors import describe_failure, redact_headers
from ai_tools.llm.profile import AnswerLimits, ModelProfile
from ai_tools.llm.redaction import Redactor
from ai_tools.llm.server import ModelServer
from ai_tools.llm.transport import prepared_url
from ai_tools.llm.window import PROBE_BODY_BYTES, PROBE_TIMEOUT, ContextWindow, Probe
from ai_tools.retry import RetryPolicy, is_retryable_error

if TYPE_CHECKING:
    from ai_tools.llm.call import ModelCall

USER_AGENT = b"ai_tools (twisted; +openai-compatible)"
ANSWER_CHARS_PER_TOKEN = 128
"""Characters per token of the window an answer may have: ~4 on average, and no token of
the usual vocabularies decodes to more than this (long runs of spaces are the longest), so
an answer over it cannot have fit the window."""
MIN_ANSWER_CHARS = 64 * 1024

Verdict = Literal["retry", "fail", "success"]
"""What a failed attempt says: try again, count it against the server, or the server is fine."""


class ModelChannel:
    """One model server as its client's calls see it.

    ``http`` is the treq ``HTTPClient`` requests go through; ``environ`` is
    where the API key is read at each request (``os.environ`` when None), so
    a rotated key is used at once.
    """

    __slots__ = (
        "_environ",
        "_headers",
        "_http",
        "_limits",
        "_pool",
        "_rand",
        "_redactors",
        "breaker",
        "calls",
        "clock",
        "finish_warned",
        "log",
        "profile",
        "reply_cap_field",
        "retry_policy",
        "server",
        "stream_tools",
        "url",
        "wall_clock",
        "window",
    )

    def __init__(
        self,
        profile: ModelProfile,
        clock: IReactorTime,
        http: HTTPClient,
        *,
        breaker: CircuitBreaker,
        retry_policy: RetryPolicy,
        environ: Mapping[str, str] | None,
        rand: Callable[[], float],
        wall_clock: Callable[[], float],
        pool: HTTPConnectionPool | None = None,
        server: ModelServer | None = None,
    ) -> None:
        self.profile = profile
        self.clock = clock
        self.breaker = breaker
        self.retry_policy = retry_policy
        self.wall_clock = wall_clock
        self.server = ModelServer(profile, clock) if server is None else server
        """The server's slots, fair queue, kind and breaker (shared by its clients)."""
        if profile.server_kind is not None:
            self.server.learn(profile.server_kind, None)
        self.calls: set[ModelCall] = set()
        self.url = prepared_url(profile.chat_url)
        self._pool = pool
        self.window = ContextWindow.for_profile(profile)
        self.stream_tools = self.server.kind != "llama-cpp-python"
        """False once a streamed answer with tools was refused (ended before its first
        chunk: llama-cpp-python cannot stream a call the model chose), or from the start
        on a server known to refuse them: requests offering tools then ask for whole
        answers."""
        self.reply_cap_field = "max_tokens"
        """The body field of the reply cap: ``max_completion_tokens`` once the server
        refused ``max_tokens`` for it (OpenAI's reasoning models: o-series, gpt-5)."""
        self.log = Logger(namespace="ai_tools.llm.client")
        # (treq types its reactor as one of every interface; ours is the IReactorTime clock)
        self._http: Any = http
        self._environ = environ
        self._rand = rand
        self._headers: dict[tuple[bool, str | None], Headers] = {}
        self._redactors: dict[str | None, Redactor] = {}
        self._limits: AnswerLimits | None = None
        self.finish_warned: set[str] = set()
        """Unknown finish reasons already logged (once each)."""

    # -- the key and what it must not leak into --------------------------------------------

    def api_key(self) -> str | None:
        """The API key, read now from the variable the profile names (None without one)."""
        name = self.profile.api_key_env
        if not name:
            return None
        env = os.environ if self._environ is None else self._environ
        return env.get(name) or None

    def redactor(self) -> Redactor:
        """The redactor for the current key."""
        key = self.api_key()
        redactor = self._redactors.get(key)
        if redactor is None:
            if len(self._redactors) > 8:
                self._redactors.clear()  # the key keeps changing: do not grow
            redactor = self._redactors[key] = Redactor(key)
        return redactor

    def answer_limits(self) -> AnswerLimits:
        """The caps on one answer: the profile's, with the answer's characters also
        capped by the context window (``ANSWER_CHARS_PER_TOKEN`` per token of it, at
        least ``MIN_ANSWER_CHARS``): no answer can be longer than the window it
        must fit in, so a stream past that is an error, never an answer."""
        limits = self.profile.limits
        cap = max(self.window.tokens * ANSWER_CHARS_PER_TOKEN, MIN_ANSWER_CHARS)
        if cap >= limits.answer_chars:
            return limits
        cached = self._limits
        if cached is None or cached.answer_chars != cap:
            cached = self._limits = attrs.evolve(limits, answer_chars=cap)
        return cached

    # -- sending ---------------------------------------------------------------------------

    def send(self, body: bytes, streaming: bool,
             extra_headers: Mapping[str, str] | None = None) -> defer.Deferred[IResponse]:
        """POST ``body`` to the chat endpoint; a Deferred response (unbuffered).

        ``extra_headers`` (this request's own, e.g. a trace context) go on a copy of
        the shared headers."""
        headers = self._request_headers(streaming)
        if extra_headers:
            headers = headers.copy()
            for name, value in extra_headers.items():
                headers.setRawHeaders(name.encode("latin-1"),
                                      [value.encode("latin-1", "replace")])
        if self.profile.log_requests:
            self.log.debug(
                "Model request POST {url} headers={headers} ({size} bytes)",
                url=self.profile.chat_url,
                headers=_ShownHeaders(headers, self.redactor()),
                size=len(body),
            )
        return self._http.request(
            "POST",
            self.url,
            data=body,
            headers=headers,
            unbuffered=True,
            allow_redirects=False,
            reactor=self.clock,
        )

    def drop_idle_connections(self) -> defer.Deferred[None]:
        """Close the pool's idle connections (a server that broke a stream may close the
        connection it used just as it would be used again); nothing without a pool."""
        if self._pool is None:
            return defer.succeed(None)
        return self._pool.closeCachedConnections()

    def fetch(self, probe: Probe) -> defer.Deferred[tuple[int, bytes]]:
        """Send a metadata request (window discovery); fires with (status, body).

        The body is read up to ``PROBE_BODY_BYTES`` (a longer one counts as
        no answer: status 0), the whole request within ``PROBE_TIMEOUT``
        seconds (or the profile's total deadline, if less); fails when the
        server cannot be reached or does not answer in time.
        """
        headers = Headers({b"Accept": [b"application/json"], b"User-Agent": [USER_AGENT],
                           b"Connection": [b"close"]})  # once per client: not for the pool
        key = self.api_key()
        if key:
            headers.setRawHeaders(b"Authorization",
                                  [b"Bearer " + key.encode("latin-1", "replace")])
        data = None
        if probe.body is not None:
            headers.setRawHeaders(b"Content-Type", [b"application/json"])
            data = json.dumps(probe.body).encode("utf-8")
        parts: list[bytes] = []
        size = [0]

        def keep(chunk: bytes) -> None:
            size[0] += len(chunk)
            if size[0] > PROBE_BODY_BYTES:
                raise ValueError(f"more than {PROBE_BODY_BYTES} bytes")
            parts.append(chunk)

        def read(response: IResponse) -> defer.Deferred[tuple[int, bytes]]:
            return treq.collect(response, keep).addCallbacks(
                lambda _: (response.code, b"".join(parts)), lambda _: (0, b""))

        total = self.profile.timeouts.total
        limit = min(PROBE_TIMEOUT, total or PROBE_TIMEOUT)

        def late(result: object, timeout: float) -> NoReturn:
            raise LLMTimeout(f"{probe.method} {probe.url}: no answer within {timeout:g}s")

        def unreachable(failure: Failure) -> Failure:
            if failure.check(LLMTimeout):
                return failure
            raise LLMConnectionError(f"{probe.method} {probe.url}: "
                                     f"{describe_failure(cast(BaseException, failure.value))}")

        asked = self._http.request(probe.method, probe.url, data=data, headers=headers,
                                   unbuffered=True, allow_redirects=False, reactor=self.clock)
        asked.addCallback(read)
        asked.addTimeout(limit, self.clock, onTimeoutCancel=late)
        asked.addErrback(unreachable)
        return asked

    def _request_headers(self, streaming: bool) -> Headers:
        """Request headers, built once per (mode, key) and reused (the agents copy them)."""
        key = self.api_key()
        cached = self._headers.get((streaming, key))
        if cached is None:
            if len(self._headers) > 8:
                self._headers.clear()  # the key keeps changing: do not grow
            cached = self._headers[(streaming, key)] = Headers(self._header_dict(streaming, key))
        return cached

    def _header_dict(self, streaming: bool, key: str | None) -> dict[bytes, list[bytes]]:
        headers = {
            b"Content-Type": [b"application/json"],
            b"Accept": [b"text/event-stream" if streaming else b"application/json"],
            b"User-Agent": [USER_AGENT],
        }
        if key:
            headers[b"Authorization"] = [b"Bearer " + key.encode("latin-1", "replace")]
        for name, value in self.profile.headers.items():
            headers[name.encode("latin-1")] = [str(value).encode("latin-1", "replace")]
        return headers

    def whole_tool_answers(self, why: str, level: LogLevel = LogLevel.warn) -> None:
        """Ask for whole answers whenever tools are offered, from now on, for every call
        of this profile (logged once, at ``level``)."""
        if self.stream_tools:
            self.stream_tools = False
            self.log.emit(level, "Model {label}: {why}; asking for whole answers whenever "
                          "tools are offered", label=self.profile.label, why=why)

    # -- the retry rules -------------------------------------------------------------------

    def verdict(self, error: LLMError) -> Verdict:
        """What a failed attempt's ``error`` says about the server."""
        if isinstance(error, LLMRequestError | RepeatedLineLoop | LLMEmptyAnswer):
            return "success"
        if isinstance(error, LLMServerError | LLMConnectionError | LLMTimeout):
            return "retry"
        if isinstance(error, LLMProtocolError):
            return "fail"
        return "retry" if is_retryable_error(error) else "fail"

    def server_failed(self, error: LLMError) -> bool:
        """Whether ``error`` says the server itself is down (its breaker counts it), not
        that one request of one assistant failed: no connection, 5xx, 429."""
        if isinstance(error, LLMConnectionError):
            return not error.reached
        return isinstance(error, LLMServerError) and error.status is not None

    def retry_delay(self, error: LLMError, attempt: int) -> float:
        """Seconds to wait after failed attempt ``attempt``: ``Retry-After`` (capped), else
        the retry policy's back-off."""
        retry_after = getattr(error, "retry_after", None)
        if retry_after is not None:
            return float(min(retry_after, self.profile.retry_after_cap))
        return self.retry_policy.delay(attempt, self._rand)


class _ShownHeaders:
    """Request headers for a log event, redacted when (and only if) rendered."""

    __slots__ = ("_headers", "_redactor")

    def __init__(self, headers: Headers, redactor: Redactor) -> None:
        self._headers = headers
        self._redactor = redactor

    def __repr__(self) -> str:
        shown = {
            name.decode("latin-1"): [v.decode("latin-1") for v in values]
            for name, values in self._headers.getAllRawHeaders()
        }
        return repr(self._redactor.headers(redact_headers(shown)))

    __str__ = __repr__
