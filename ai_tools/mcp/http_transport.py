"""The Streamable HTTP transport of our MCP client, over treq.

Every message we send is one ``POST`` to the server's URL.  The answer comes
back as a JSON body, or as an event stream (``text/event-stream``) that may
carry progress notifications and server requests before the answer.  The
session id the server gives with the ``initialize`` answer
(``Mcp-Session-Id``) goes with every later request, as does the negotiated
``MCP-Protocol-Version``.  A ``404`` to a request that carried a session id
means the server forgot the session: :class:`SessionExpired`, and the
connection (:mod:`ai_tools.mcp.servers`) initialises a new one and sends the
call again.

After ``initialize`` we also open the stream a server may use for messages of
its own (a ``GET``; ``tools/list_changed`` sent outside any call arrives
there), reopened with ``Last-Event-ID`` after its ``retry`` when it ends; a
server that offers none (``405``) is not asked again.

Resumption: when a stream ends before the answer it was opened for, we wait
the stream's last ``retry:`` (milliseconds; 1 s when it gave none) and open a
``GET`` with ``Last-Event-ID``, as often as :attr:`HttpTransport.max_resumes`.
Every body is bounded by bytes (a JSON answer by the message cap, a stream's
lines by it too); headers are waited for at most ``request_timeout`` seconds.
The transport owns its ``HTTPConnectionPool`` and closes it in :meth:`close`.

Tracing (on when the session has a span maker, :mod:`ai_tools.mcp.tracing`): a request
whose ``params._meta`` carries a W3C ``traceparent`` (and ``tracestate``) goes with the
same fields as HTTP headers; with tracing off there is none, and no header.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

from twisted.internet import defer, task
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.client import Agent, HTTPConnectionPool
from twisted.web.http_headers import Headers

from ai_tools.llm.body import BodyReader
from ai_tools.llm.sse import SSELineTooLong, SSEParser
from ai_tools.mcp.client import ServerGone
from ai_tools.mcp.jsonrpc import (
    ErrorResponse,
    JSONRPCError,
    Message,
    Request,
    RequestId,
    Response,
    decode_message,
    encode_message,
)
from ai_tools.mcp.tracing import carrier_of

__all__ = ["HttpTransport", "McpHttpError", "SessionExpired"]

log = Logger()

_ACCEPT = "application/json, text/event-stream"
_DEFAULT_RETRY_MS = 1000
_ERROR_BODY_BYTES = 2000


class SessionExpired(ConnectionError):
    """The server answered 404 to our session id: it must be initialised again."""


class McpHttpError(Exception):
    """The server answered with an HTTP error status."""

    def __init__(self, code: int, text: str) -> None:
        transient = " (temporarily unavailable; try again)" if code in (429, 502, 503, 504) else ""
        super().__init__(f"HTTP {code}{transient}: {text}".rstrip(": "))
        self.code = code


def _header(response: Any, name: bytes) -> str | None:
    values = response.headers.getRawHeaders(name)
    return values[0].decode("latin-1") if values else None


class HttpTransport:
    """One Streamable HTTP MCP server (see the module docstring)."""

    def __init__(self, url: str, *, reactor: Any, headers: Mapping[str, str] | None = None,
                 name: str = "mcp", max_message_bytes: int = 4 * 1024 * 1024,
                 request_timeout: float = 60.0, max_resumes: int = 5) -> None:
        import treq.client

        self.url = url
        self.name = name
        self.headers = dict(headers or {})
        self.request_timeout = request_timeout
        self.max_resumes = max_resumes
        self.session_id: str | None = None
        self.protocol_version: str | None = None
        self._reactor = reactor
        self._max = max_message_bytes
        self._pool = HTTPConnectionPool(reactor, persistent=True)
        self._pool.maxPersistentPerHost = 4
        self._http = treq.client.HTTPClient(cast(Any, Agent(reactor, pool=self._pool)))
        self._deliver: Callable[[Message], None] | None = None
        self._open: set[defer.Deferred[None]] = set()
        self._listener: defer.Deferred[None] | None = None
        self.resumes = 0
        """Streams resumed with ``Last-Event-ID`` (for tests and the status)."""

    def start(self, deliver: Callable[[Message], None],
              lost: Callable[[Failure], None]) -> defer.Deferred[None]:
        """Nothing to open: HTTP connects per request.  A new session starts blank."""
        self._deliver = deliver
        self._stop_listening()
        self.session_id = None
        self.protocol_version = None
        return defer.succeed(None)

    def negotiated(self, version: str) -> None:
        """The session is initialised: its version goes in a header from now on, and we
        listen for the server's own messages."""
        self.protocol_version = version
        self._stop_listening()
        listener = self._listener = defer.ensureDeferred(self._listen())
        listener.addErrback(lambda f: None if f.check(defer.CancelledError) else log.info(
            "MCP server {server}: its event stream ended: {error}", server=self.name,
            error=f.getErrorMessage()))

    def _stop_listening(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None and not listener.called:
            listener.cancel()

    async def _listen(self) -> None:
        """Read the server's own stream (``GET``) for as long as the session lasts."""
        parser = SSEParser(max_line_bytes=self._max)
        while True:
            headers = self._headers("text/event-stream")
            if parser.last_event_id is not None:
                headers.setRawHeaders("Last-Event-ID", [parser.last_event_id])
            response = await self._http.request("GET", self.url, headers=headers,
                                                 timeout=self.request_timeout, unbuffered=True)
            content_type = (_header(response, b"content-type") or "").lower()
            if response.code != 200 or not content_type.startswith("text/event-stream"):
                await self._discard(response)
                return  # the server offers no stream of its own (405) or refuses it
            await self._read_events(response, parser, None)
            wait = (parser.retry_ms if parser.retry_ms is not None else _DEFAULT_RETRY_MS) / 1000
            await task.deferLater(self._reactor, wait, lambda: None)

    def _headers(self, accept: str) -> Headers:
        headers = Headers()
        for name, value in self.headers.items():
            headers.setRawHeaders(name, [value])
        headers.setRawHeaders("Accept", [accept])
        if self.session_id is not None:
            headers.setRawHeaders("Mcp-Session-Id", [self.session_id])
        if self.protocol_version is not None:
            headers.setRawHeaders("MCP-Protocol-Version", [self.protocol_version])
        return headers

    def send(self, message: Message) -> defer.Deferred[None]:
        """POST one message; fires when its exchange is over (a request's answer delivered).

        Cancelling it aborts the exchange (a killed call frees its connection);
        :meth:`close` aborts every exchange still open.
        """
        d = defer.ensureDeferred(self._post(message))
        if not d.called:
            self._open.add(d)
            d.addBoth(self._exchange_over, d)
        return d

    def _exchange_over(self, result: Any, d: defer.Deferred[None]) -> Any:
        self._open.discard(d)
        return result

    async def _post(self, message: Message) -> None:
        headers = self._headers(_ACCEPT)
        headers.setRawHeaders("Content-Type", ["application/json"])
        if isinstance(message, Request) and message.params is not None:
            for name, value in carrier_of(message.params.get("_meta")).items():
                headers.setRawHeaders(name, [value])  # the trace context, as in ``_meta``
        had_session = self.session_id is not None
        response = await self._http.request(
            "POST", self.url, data=encode_message(message), headers=headers,
            timeout=self.request_timeout, unbuffered=True)
        if isinstance(message, Request) and message.method == "initialize":
            self.session_id = _header(response, b"mcp-session-id")
        if response.code == 404 and had_session:
            await self._discard(response)
            self.session_id = None
            raise SessionExpired(f"MCP server {self.name} forgot our session (HTTP 404)")
        if response.code >= 400:
            text = await self._read(response, _ERROR_BODY_BYTES, truncate=True)
            raise McpHttpError(response.code, text.decode("utf-8", "replace")[:500])
        content_type = (_header(response, b"content-type") or "").lower()
        wanted = message.id if isinstance(message, Request) else None
        if content_type.startswith("text/event-stream"):
            await self._stream(response, wanted)
        elif content_type.startswith("application/json"):
            self._deliver_bytes(await self._read(response, self._max))
        else:
            await self._discard(response)
            if wanted is not None:
                raise ServerGone(f"MCP server {self.name} answered a request with "
                                 f"HTTP {response.code} and no message")

    async def _read(self, response: Any, limit: int, truncate: bool = False) -> bytes:
        parts: list[bytes] = []
        reader = BodyReader(self._reactor, parts.append, self.request_timeout,
                            f"MCP server {self.name}'s answer", max_bytes=limit,
                            truncate=truncate)
        response.deliverBody(reader)
        await reader.finished
        return b"".join(parts)

    async def _discard(self, response: Any) -> None:
        await self._read(response, self._max, truncate=True)

    def _deliver_bytes(self, data: bytes) -> RequestId | None:
        """Hand one message over; return its id when it is an answer."""
        try:
            message = decode_message(data, self._max)
        except JSONRPCError as e:
            log.warn("MCP server {server} sent what is no message: {error}", server=self.name,
                     error=e.message)
            return None
        if self._deliver is not None:
            self._deliver(message)
        return message.id if isinstance(message, (Response, ErrorResponse)) else None

    async def _stream(self, response: Any, wanted: RequestId | None) -> None:
        """Read an event stream; resume it by GET while the answer to ``wanted`` is missing."""
        parser = SSEParser(max_line_bytes=self._max)
        answered = await self._read_events(response, parser, wanted)
        attempts = 0
        while wanted is not None and not answered:
            last_id = parser.last_event_id
            if last_id is None or attempts >= self.max_resumes:
                raise ServerGone(f"MCP server {self.name} closed the stream before answering"
                                 + ("" if last_id is None else
                                    f" ({attempts} resumptions tried)"))
            attempts += 1
            wait = (parser.retry_ms if parser.retry_ms is not None else _DEFAULT_RETRY_MS) / 1000
            await task.deferLater(self._reactor, wait, lambda: None)
            headers = self._headers("text/event-stream")
            headers.setRawHeaders("Last-Event-ID", [last_id])
            resumed = await self._http.request("GET", self.url, headers=headers,
                                               timeout=self.request_timeout, unbuffered=True)
            self.resumes += 1
            if resumed.code != 200:
                await self._discard(resumed)
                raise ServerGone(f"MCP server {self.name} refused to resume the stream "
                                 f"(HTTP {resumed.code})")
            answered = await self._read_events(resumed, parser, wanted)

    async def _read_events(self, response: Any, parser: SSEParser,
                           wanted: RequestId | None) -> bool:
        """Deliver a stream's messages until it ends; whether ``wanted`` was answered."""
        answered = False

        def dispatch(data: str, event: str, last_id: str | None) -> None:
            nonlocal answered
            if not data.strip() or event != "message":
                return  # a priming event (an id, a retry) carries no message
            if self._deliver_bytes(data.encode("utf-8")) == wanted and wanted is not None:
                answered = True

        def sink(chunk: bytes) -> None:
            parser.feed(chunk, dispatch)

        reader = BodyReader(self._reactor, sink, None, f"MCP server {self.name}'s stream")
        response.deliverBody(reader)
        try:
            await reader.finished
        except SSELineTooLong as e:
            raise JSONRPCError(-32700, f"MCP server {self.name}: {e}") from None
        except defer.CancelledError:
            raise  # we stopped reading: no resumption
        except Exception as e:  # the stream was cut: resumable like a clean end
            log.info("MCP server {server}: stream cut ({error})", server=self.name,
                     error=str(e))
        parser.close(dispatch)
        return answered

    def close(self) -> defer.Deferred[None]:
        """End the session (``DELETE``, best effort) and close the connection pool."""
        return defer.ensureDeferred(self._close())

    async def _close(self) -> None:
        self._stop_listening()
        for exchange in list(self._open):
            exchange.cancel()
        if self.session_id is not None:
            try:
                response = await self._http.request(
                    "DELETE", self.url, headers=self._headers(_ACCEPT), timeout=5,
                    unbuffered=True)
                await self._discard(response)
            except Exception as e:
                log.debug("MCP server {server}: DELETE of the session failed: {error}",
                          server=self.name, error=str(e))
            self.session_id = None
        await self._pool.closeCachedConnections()
