"""An OpenAI-compatible chat-completions client over twisted.web.

One :class:`OpenAIChatClient` per model profile.  It owns its
``HTTPConnectionPool`` (closed by :meth:`OpenAIChatClient.close`) and sends
its requests straight to an ``Agent`` on it (prepared URL bytes, cached
headers, a bytes body): treq's per-request wrapping (URL re-parsing, a cookie
agent, a content-decoder agent, a response wrapper) cost more CPU than the
rest of a request, and a model API needs none of it.  A treq ``HTTPClient``
or ``treq.testing.StubTreq`` given as ``http_client`` is used instead (the
unit tests drive the client that way).

Each :meth:`OpenAIChatClient.complete` is a :class:`~ai_tools.llm.call.ModelCall`
running :class:`~ai_tools.llm.exchange.Exchange` attempts.  The client caps
concurrent requests with a ``DeferredSemaphore``, streams answers through a
byte-level SSE parser into the semantic events of spec 003, retries 429, 5xx
and connection failures with the shared :class:`~ai_tools.retry.RetryPolicy`
(honouring ``Retry-After``), fails at once with a clear message on 400, 401,
403 and 404, and stops calling a failing server through a circuit breaker.

Cancelling the Deferred returned by :meth:`OpenAIChatClient.complete` aborts
the HTTP connection, wherever the request is (waiting for a slot, for
headers, mid-stream, or in a back-off wait).
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable, Mapping, Sequence
from http.cookiejar import CookieJar
from typing import Any, cast

import attrs
from hyperlink import URL
from twisted.internet import defer
from twisted.logger import Logger
from twisted.web.client import URI, Agent, HTTPConnectionPool, _HTTP11ClientFactory
from twisted.web.error import SchemeNotSupported
from twisted.web.http_headers import Headers
from twisted.web.iweb import IBodyProducer
from zope.interface import implementer

from ai_tools.errors import (
    LLMConnectionError,
    LLMError,
    LLMProtocolError,
    LLMRequestError,
    LLMServerError,
    LLMTimeout,
    RepeatedLineLoop,
)
from ai_tools.interfaces import ILLMClient
from ai_tools.llm.body import BytesProducer
from ai_tools.llm.breaker import CircuitBreaker
from ai_tools.llm.call import ModelCall
from ai_tools.llm.consumer import EventCallback
from ai_tools.llm.events import ChatResponse
from ai_tools.llm.exchange import MAX_BODY_BYTES, MAX_ERROR_BODY_BYTES
from ai_tools.llm.http_errors import redact_headers
from ai_tools.llm.profile import ModelProfile
from ai_tools.llm.tokens import context_window_for
from ai_tools.retry import DEFAULT_RETRY_POLICY, RetryPolicy, is_retryable_error

_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
__all__ = ["MAX_BODY_BYTES", "MAX_ERROR_BODY_BYTES", "OpenAIChatClient"]
USER_AGENT = b"ai_tools (twisted; +openai-compatible)"


try:  # treq >= 24 types its jar as IndexableCookieJar
    from treq.cookies import IndexableCookieJar as _CookieJarBase
except ImportError:  # pragma: no cover - older treq
    _CookieJarBase = CookieJar  # type: ignore[misc,assignment]


class _QuietClientFactory(_HTTP11ClientFactory):
    """The pool's connection factory without a log line per connection."""

    noisy = False


class _OneURLAgent(Agent):
    """An ``Agent`` that POSTs to one URL (the model API's chat endpoint).

    ``Agent.request`` parses the URL, builds a new endpoint (IDNA-encoding the
    host name) and copies the headers to add ``Host`` on every request, although
    only a new connection uses the endpoint: a sixth of a request's client CPU,
    and a URI and a Headers copy left in twisted.web's reference cycles.  This
    one does that once; the headers given to :meth:`post` carry :attr:`host`.
    """

    def __init__(self, reactor: Any, url: bytes, pool: HTTPConnectionPool,
                 connect_timeout: float | None) -> None:
        super().__init__(reactor, connectTimeout=connect_timeout, pool=pool)
        parsed = URI.fromBytes(url)
        self._parsed = parsed
        self._key = (parsed.scheme, parsed.host, parsed.port)
        self.host: bytes = self._computeHostValue(parsed.scheme, parsed.host, parsed.port)
        try:
            self._endpoint: Any = self._getEndpoint(parsed)
        except SchemeNotSupported:
            self._endpoint = None  # every request fails as Agent.request would fail it

    def post(self, headers: Headers, body: IBodyProducer) -> defer.Deferred[Any]:
        """POST ``body`` to the URL; ``headers`` must include ``Host``."""
        if self._endpoint is None:
            return cast("defer.Deferred[Any]", self.request(b"POST", self._parsed.toBytes(),
                                                            headers, body))
        parsed = self._parsed
        return cast("defer.Deferred[Any]", self._requestWithEndpoint(
            self._key, self._endpoint, b"POST", parsed, headers, body, parsed.originForm))


class _NoCookieJar(_CookieJarBase):
    """A jar that never stores or sends cookies: model APIs are stateless, and the
    standard jar parses every request and response URL for nothing."""

    def add_cookie_header(self, request: Any) -> None:
        """Send no cookies."""

    def extract_cookies(self, response: Any, request: Any) -> None:
        """Keep no cookies."""


class _RedactedHeaders:
    """Request headers for a log event, redacted when (and only if) rendered."""

    __slots__ = ("_headers",)

    def __init__(self, headers: Headers) -> None:
        self._headers = headers

    def __repr__(self) -> str:
        raw = dict(self._headers.getAllRawHeaders())
        return repr(redact_headers({k.decode("latin-1"): v for k, v in raw.items()}))

    __str__ = __repr__


class _PreparedURL(URL):
    """A URL already in URI form: treq re-parses and IDNA-encodes a plain URL on
    every request (a third of a millisecond); this one converts once."""

    def to_uri(self) -> URL:
        return self

    def to_text(self, with_password: bool = False) -> str:
        cached: str | None = getattr(self, "_cached_text", None)
        if cached is None:
            cached = super().to_text(with_password)
            self._cached_text = cached
        return cached


def prepared_url(url: str) -> URL:
    """``url`` as a URL object treq can use without converting it again."""
    uri = URL.from_text(url).to_uri()
    return _PreparedURL.from_text(uri.to_text())


@implementer(ILLMClient)
@attrs.define(eq=False, repr=False)
class OpenAIChatClient:
    """Chat completions against one OpenAI-compatible server.

    Everything but ``profile`` is optional: ``reactor`` (the global one by
    default), ``http_client`` (a treq ``HTTPClient`` or ``StubTreq``; by
    default the client sends through its own ``Agent`` and pool),
    ``retry_policy``, ``breaker``, ``environ`` (where the API key is read) and
    ``rand`` (the jitter source).
    """

    profile: ModelProfile
    reactor: Any = None
    http_client: Any = None
    retry_policy: RetryPolicy = DEFAULT_RETRY_POLICY
    breaker: CircuitBreaker | None = None
    environ: Mapping[str, str] | None = None
    rand: Callable[[], float] = random.random
    wall_clock: Callable[[], float] = time.time
    _pool: HTTPConnectionPool | None = attrs.field(default=None, init=False)
    # Set when the client owns its transport: requests go to it directly.
    _agent: _OneURLAgent | None = attrs.field(default=None, init=False)
    _url: Any = attrs.field(default=None, init=False)
    _url_bytes: bytes = attrs.field(default=b"", init=False)
    # A model API sets no cookies; one jar per client spares treq a new jar per request.
    _cookies: CookieJar = attrs.field(factory=lambda: _NoCookieJar(), init=False)
    _header_cache: dict[tuple[bool, str | None], Headers] = attrs.field(factory=dict, init=False)
    _semaphore: defer.DeferredSemaphore = attrs.field(init=False)
    _inflight: set[ModelCall] = attrs.field(factory=set, init=False)
    _closed: bool = attrs.field(default=False, init=False)
    _log = Logger()

    def __attrs_post_init__(self) -> None:
        if self.reactor is None:
            from twisted.internet import reactor

            self.reactor = reactor
        self._semaphore = defer.DeferredSemaphore(self.profile.max_concurrency)
        self._url = prepared_url(self.profile.chat_url)
        self._url_bytes = self._url.to_text().encode("ascii")
        if self.breaker is None:
            self.breaker = CircuitBreaker(
                self.reactor,
                failure_threshold=self.profile.breaker_threshold,
                cooldown=self.profile.breaker_cooldown,
                name=self.profile.label,
            )
        if self.http_client is None:
            self._pool = HTTPConnectionPool(self.reactor, persistent=True)
            self._pool._factory = _QuietClientFactory
            self._pool.maxPersistentPerHost = self.profile.max_concurrency
            self._agent = _OneURLAgent(
                self.reactor, self._url_bytes, self._pool, self.profile.timeouts.connect
            )

    def __repr__(self) -> str:
        # Never show environ: it may hold the API key.
        return f"<OpenAIChatClient {self.profile.label}>"

    # -- ILLMClient -----------------------------------------------------------------

    @property
    def model(self) -> str:
        """Model name sent to the server."""
        return self.profile.model

    @property
    def context_window(self) -> int:
        """Context window in tokens (configured, else known for the model)."""
        return context_window_for(self.profile.model, self.profile.context_window)

    def complete(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Any] | None = None,
        tool_choice: Any = None,
        stream: bool | None = None,
        on_event: EventCallback | None = None,
        *,
        extra_body: Mapping[str, Any] | None = None,
    ) -> defer.Deferred[ChatResponse]:
        """Ask the model; fires with a :class:`ChatResponse`.

        ``tools`` are OpenAI tool dicts or objects with a ``schema()`` method;
        ``tool_choice`` is ``"auto"``, ``"none"``, ``"required"``, a tool name
        or a dict.  ``stream`` None follows the profile.  ``on_event`` gets each
        semantic event as it arrives.  Fails with an
        :class:`~ai_tools.errors.LLMError` subclass carrying ``partial_text``.
        """
        if self._closed:
            return defer.fail(LLMError(f"model client for {self.profile.label} is closed"))
        streaming = self.profile.stream if stream is None else bool(stream)
        try:
            body = self._request_body(messages, tools, tool_choice, streaming, extra_body)
        except (TypeError, ValueError) as e:
            return defer.fail(LLMRequestError(f"cannot encode the request: {e}"))
        call = ModelCall(self, body, streaming, on_event)
        call.start()
        if not call.result.called:
            self._inflight.add(call)
        return call.result

    def close(self) -> defer.Deferred[None]:
        """Cancel requests in flight and close the pool's connections."""
        self._closed = True
        for call in list(self._inflight):
            call.result.cancel()
        if self._pool is not None:
            return self._pool.closeCachedConnections()
        return defer.succeed(None)

    # -- the request ----------------------------------------------------------------

    def _request_body(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Any] | None,
        tool_choice: Any,
        streaming: bool,
        extra_body: Mapping[str, Any] | None,
    ) -> bytes:
        body: dict[str, Any] = {"model": self.profile.model, "messages": list(messages)}
        native = self.profile.tool_calling == "native"
        if tools and native:
            body["tools"] = [
                t.schema() if callable(getattr(t, "schema", None)) else dict(t) for t in tools
            ]
            if tool_choice is not None:
                if isinstance(tool_choice, str) and tool_choice not in (
                    "auto",
                    "none",
                    "required",
                ):
                    tool_choice = {"type": "function", "function": {"name": tool_choice}}
                body["tool_choice"] = tool_choice
        body["stream"] = streaming
        if streaming and self.profile.stream_usage:
            body["stream_options"] = {"include_usage": True}
        body.update(self.profile.extra_body)
        if extra_body:
            body.update(extra_body)
        return _ENCODER.encode(body).encode("utf-8")

    def _api_key(self) -> str | None:
        name = self.profile.api_key_env
        if not name:
            return None
        env = os.environ if self.environ is None else self.environ
        return env.get(name) or None

    def _headers(self, streaming: bool) -> Headers:
        """Request headers, built once per (mode, key) and reused (the Agent copies them)."""
        key = self._api_key()
        cached = self._header_cache.get((streaming, key))
        if cached is None:
            if len(self._header_cache) > 8:
                self._header_cache.clear()  # the key keeps changing: do not grow
            cached = self._header_cache[(streaming, key)] = Headers(
                self._header_dict(streaming, key)
            )
        return cached

    def _header_dict(self, streaming: bool, key: str | None) -> dict[bytes, list[bytes]]:
        headers = {
            b"Content-Type": [b"application/json"],
            b"Accept": [b"text/event-stream" if streaming else b"application/json"],
            b"User-Agent": [USER_AGENT],
        }
        if self._agent is not None:  # what treq's content-decoder agent would add
            headers[b"Accept-Encoding"] = [b"gzip"]
            headers[b"Host"] = [self._agent.host]  # what the Agent would add to a copy
        if key:
            headers[b"Authorization"] = [b"Bearer " + key.encode("latin-1", "replace")]
        for name, value in self.profile.headers.items():
            headers[name.encode("latin-1")] = [str(value).encode("latin-1", "replace")]
        return headers

    def _judge(self, error: LLMError) -> str:
        """'retry', 'fail' (counts against the breaker) or 'success' (server is fine)."""
        if isinstance(error, LLMRequestError | RepeatedLineLoop):
            return "success"
        if isinstance(error, LLMServerError | LLMConnectionError | LLMTimeout):
            return "retry"
        if isinstance(error, LLMProtocolError):
            return "fail"
        return "retry" if is_retryable_error(error) else "fail"

    def _retry_delay(self, error: LLMError, attempt: int) -> float:
        retry_after = getattr(error, "retry_after", None)
        if retry_after is not None:
            return float(min(retry_after, self.profile.retry_after_cap))
        return self.retry_policy.delay(attempt, self.rand)

    def _api_key_present(self) -> bool:
        return self._api_key() is not None

    def _send(self, body: bytes, streaming: bool) -> defer.Deferred[Any]:
        """POST ``body``; a Deferred response (for :class:`~ai_tools.llm.exchange.Exchange`)."""
        headers = self._headers(streaming)
        if self.profile.log_requests:
            self._log.debug(
                "Model request POST {url} headers={headers} ({size} bytes)",
                url=self.profile.chat_url,
                headers=_RedactedHeaders(headers),
                size=len(body),
            )
        agent = self._agent
        if agent is not None:
            return agent.post(headers, cast(IBodyProducer, BytesProducer(body)))
        return cast(
            "defer.Deferred[Any]",
            self.http_client.request(
                "POST",
                self._url,
                data=body,
                headers=headers,
                unbuffered=True,
                allow_redirects=False,
                cookies=self._cookies,
                reactor=self.reactor,
            ),
        )
