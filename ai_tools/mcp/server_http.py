"""MCP's Streamable HTTP transport, server side: ``POST``/``GET``/``DELETE`` of one path.

:class:`McpHttpEndpoint` answers the requests of the MCP path (``/mcp``) once the
site has admitted them (Host/Origin rule, token, body bound: the HTTP API does
that for ``/mcp`` on the service's port; :class:`McpResource` does it for a
site of its own, as the conformance fixture and the Evennia host use).

* ``POST`` carries one JSON-RPC message.  ``initialize`` opens a session and
  its answer carries the ``Mcp-Session-Id`` header every later request must
  send (400 without it, 404 for a session that ended).  A notification or a
  client's answer gets ``202``.  A request is answered with one JSON body,
  unless the server sends messages for it before the answer (progress, log
  messages, a request to the client): then the answer becomes an SSE stream
  that carries them and ends with the answer.
* ``GET`` opens the session's stream for messages that belong to no request;
  with ``Last-Event-ID`` it resumes a stream that was cut (the events after
  that id are sent again, then the rest of that stream).
* ``DELETE`` ends the session (its calls in flight are cancelled).

Bounds: the body of a POST is bounded by the site (``max_body``); the events
kept per stream for resumption, and those held back while a client does not
read, by ``stream_buffer`` bytes; sessions by ``max_sessions`` (idle ones are
ended after ``session_idle`` seconds); every request by the server's
``request_timeout``.
"""

from __future__ import annotations

import itertools
import secrets
from collections import deque
from collections.abc import Callable, Iterator

import attrs
from twisted.internet import defer
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.web import server
from twisted.web.resource import Resource
from twisted.web.server import Request as HttpRequest

from ai_tools.clocks import or_global_clock
from ai_tools.mcp.jsonrpc import (
    PARSE_ERROR,
    SUPPORTED_PROTOCOL_VERSIONS,
    ErrorResponse,
    JSONRPCError,
    Message,
    Request,
    RequestId,
    decode_message,
    encode_message,
)
from ai_tools.mcp.server import McpServer, McpSession
from ai_tools.mcp.tracing import TRACE_FIELDS
from ai_tools.web.body import DEFAULT_MAX_BODY, check_content_type
from ai_tools.web.errors import ApiError, error_body
from ai_tools.web.origin import OriginPolicy
from ai_tools.web.sse import EventStream, Frame

__all__ = ["SESSION_HEADER", "McpHttpEndpoint", "McpResource"]

log = Logger()

SESSION_HEADER = b"mcp-session-id"
VERSION_HEADER = b"mcp-protocol-version"

HEADER_VERSIONS = frozenset({*SUPPORTED_PROTOCOL_VERSIONS, "2025-03-26"})
"""``MCP-Protocol-Version`` values accepted on requests: the revisions we speak, and
2025-03-26, whose HTTP transport is the same (clients send it before they know)."""

_NO_OWNERS: frozenset[str] = frozenset()

MAX_KEPT_STREAMS = 16
"""Streams of one session kept at once (open, or cut and waiting to be resumed)."""


def _accepts(request: HttpRequest, *types: bytes) -> bool:
    accept = (request.getHeader(b"accept") or b"").lower()
    return all(t in accept or b"*/*" in accept for t in types)


@attrs.define(eq=False)
class _Stream:
    """One SSE stream of a session, its events kept (bounded) for resumption.

    ``response`` is the HTTP response carrying it now (None: cut, waiting for the
    client to resume with ``Last-Event-ID``); ``ended``: its last event is written.
    """

    key: int
    limit: int
    forget: Callable[[], None] = lambda: None
    """Called once the stream's last event reached a response: nothing to resume."""
    response: EventStream | None = None
    ended: bool = False
    events: deque[tuple[int, bytes]] = attrs.field(factory=deque)
    kept: int = 0
    seq: Iterator[int] = attrs.field(factory=lambda: itertools.count(1))

    def event(self, message: Message) -> None:
        """Send (and keep) one message as an SSE event."""
        number = next(self.seq)
        data = (f"id: {self.key}.{number}\nevent: message\ndata: ".encode()
                + encode_message(message) + b"\n\n")
        self.events.append((number, data))
        self.kept += len(data)
        while self.kept > self.limit and len(self.events) > 1:
            self.kept -= len(self.events.popleft()[1])
        if self.response is not None:
            self.response.send(Frame("message", _NO_OWNERS, data))

    def attach(self, response: EventStream, after: int = 0) -> None:
        """Carry the stream on ``response`` from event ``after`` on (a priming event first)."""
        self.response = response
        response.start()
        response.send(Frame("message", _NO_OWNERS, f"id: {self.key}.0\ndata: \n\n".encode()))
        for number, data in self.events:
            if number > after:
                response.send(Frame("message", _NO_OWNERS, data))
        response.on_close(lambda: self._detached(response))
        if self.ended:
            response.close()
            self.forget()

    def finish(self) -> None:
        """The last event is written: end the response (kept for resumption if cut)."""
        self.ended = True
        if self.response is not None:
            self.response.close()
            self.forget()

    def cut(self) -> None:
        """Close the response now; the client resumes with ``Last-Event-ID``."""
        if self.response is not None:
            self.response.close()

    def _detached(self, response: EventStream) -> None:
        if self.response is response:
            self.response = None


@attrs.define(eq=False)
class _HttpSession:
    """A session and its streams: one per POST answered with SSE, and the GET stream."""

    id: str
    session: McpSession
    last_seen: float
    streams: dict[int, _Stream] = attrs.field(factory=dict)
    by_request: dict[RequestId, _Stream | HttpRequest] = attrs.field(factory=dict)
    """Per request in flight: its stream, or the HTTP request still waiting to answer JSON."""
    standalone: _Stream | None = None

    @property
    def busy(self) -> bool:
        """Whether a request is in flight or a stream is open."""
        return bool(self.by_request) or any(s.response is not None for s in
                                            self.streams.values())


@attrs.define(eq=False)
class McpHttpEndpoint:
    """The MCP path of one site: its sessions, keyed by ``Mcp-Session-Id``."""

    server: McpServer
    clock: IReactorTime = attrs.field(converter=or_global_clock)
    """The reactor or a ``task.Clock`` (None: the global reactor)."""
    max_sessions: int = 64
    session_idle: float = 3600.0
    stream_buffer: int = 256 * 1024
    keepalive: float = 15.0
    stall_timeout: float = 60.0
    max_message_bytes: int = DEFAULT_MAX_BODY
    _sessions: dict[str, _HttpSession] = attrs.field(factory=dict, init=False)
    _stream_keys: Iterator[int] = attrs.field(factory=lambda: itertools.count(1), init=False)
    _timer: IDelayedCall | None = attrs.field(default=None, init=False)

    # -- the three methods ------------------------------------------------------------

    def render(self, request: HttpRequest) -> None:
        """Answer an admitted request of the MCP path (raises ApiError to refuse it)."""
        method = request.method.upper()
        if method == b"POST":
            self.post(request)
        elif method == b"GET":
            self.get(request)
        elif method == b"DELETE":
            self.delete(request)
        else:
            raise ApiError(405, "the MCP endpoint takes POST, GET and DELETE",
                           headers={"Allow": "GET, POST, DELETE"})

    def post(self, request: HttpRequest) -> None:
        """One JSON-RPC message from the client."""
        if not _accepts(request, b"application/json", b"text/event-stream"):
            raise ApiError(406, "MCP clients must accept application/json and "
                           "text/event-stream")
        self._check_version(request)
        try:
            message = decode_message(self._body(request), self.max_message_bytes)
        except JSONRPCError as exc:
            self._write_json(request, 400, ErrorResponse(None, exc.code, exc.message))
            return
        if isinstance(message, Request) and message.method == "initialize":
            http_session = self._open()
        else:
            http_session = self._session(request)
        http_session.last_seen = self.clock.seconds()
        request.setHeader(SESSION_HEADER, http_session.id.encode("ascii"))
        if not isinstance(message, Request):
            http_session.session.receive(message)
            request.setResponseCode(202)
            request.setHeader(b"content-length", b"0")
            request.finish()
            return
        self._answer(http_session, message, request)
        if message.method != "initialize":
            return
        mcp_session = http_session.session
        if mcp_session.protocol_version is None:  # a refused initialize
            self._end(http_session)
            return
        log.info("MCP session {id} opened by {client} (protocol {version})",
                 id=http_session.id[:8], client=mcp_session.client_info.get("name", "?"),
                 version=mcp_session.protocol_version)

    def get(self, request: HttpRequest) -> None:
        """The session's stream of messages that belong to no request, or a resumed one."""
        if not _accepts(request, b"text/event-stream"):
            raise ApiError(406, "a GET of the MCP endpoint is an event stream: accept "
                           "text/event-stream")
        self._check_version(request)
        http_session = self._session(request)
        http_session.last_seen = self.clock.seconds()
        request.setHeader(SESSION_HEADER, http_session.id.encode("ascii"))
        last = request.getHeader(b"last-event-id")
        if last is not None:
            stream, after = self._resumed(http_session, last)
        else:
            standing = http_session.standalone
            if standing is not None and standing.response is not None:
                raise ApiError(409, "this session has its GET stream open already")
            if standing is None:
                standing = http_session.standalone = self._new_stream(http_session)
            stream, after = standing, 0
        stream.attach(self._response(request), after)
        self._start_timer()

    def delete(self, request: HttpRequest) -> None:
        """End the session."""
        http_session = self._session(request)
        self._end(http_session)
        request.setResponseCode(204)
        request.finish()

    # -- sessions -------------------------------------------------------------------

    def _open(self) -> _HttpSession:
        self._sweep_idle()
        if len(self._sessions) >= self.max_sessions:
            raise ApiError(503, f"the MCP endpoint holds {self.max_sessions} sessions "
                           "already; end one (DELETE) or try later",
                           headers={"Retry-After": "30"})
        session_id = secrets.token_urlsafe(24)
        holder: list[_HttpSession] = []
        mcp_session = self.server.open_session(
            lambda message, related: self._send(holder[0], message, related))
        mcp_session.session_id = session_id
        http_session = _HttpSession(session_id, mcp_session, self.clock.seconds())
        holder.append(http_session)
        mcp_session.on_close_stream = lambda rid: self._cut(http_session, rid)
        self._sessions[session_id] = http_session
        return http_session

    def _session(self, request: HttpRequest) -> _HttpSession:
        header = request.getHeader(SESSION_HEADER)
        if not header:
            raise ApiError(400, "send the Mcp-Session-Id header the initialize answer gave")
        http_session = self._sessions.get(header.decode("latin-1").strip())
        if http_session is None:
            raise ApiError(404, "no such MCP session (it ended): initialize a new one")
        return http_session

    def _end(self, http_session: _HttpSession) -> None:
        if self._sessions.pop(http_session.id, None) is not None and \
                http_session.session.protocol_version is not None:
            log.info("MCP session {id} ended", id=http_session.id[:8])
        http_session.session.close()
        for stream in list(http_session.streams.values()):
            stream.finish()

    def _sweep_idle(self) -> None:
        """End sessions idle past ``session_idle`` (nothing in flight, no stream open)."""
        now = self.clock.seconds()
        for http_session in list(self._sessions.values()):
            if not http_session.busy and now - http_session.last_seen >= self.session_idle:
                log.info("Ending MCP session {id}: idle for {s:.0f}s", id=http_session.id[:8],
                         s=now - http_session.last_seen)
                self._end(http_session)

    def close(self) -> None:
        """End every session (the site is stopping)."""
        for http_session in list(self._sessions.values()):
            self._end(http_session)
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None

    @property
    def sessions(self) -> int:
        """Open sessions."""
        return len(self._sessions)

    # -- answering -----------------------------------------------------------------

    def _answer(self, http_session: _HttpSession, message: Request, request: HttpRequest) -> None:
        gone: list[bool] = []
        request.notifyFinish().addErrback(lambda _: gone.append(True))
        http_session.by_request[message.id] = request
        try:
            answer = http_session.session.receive(message, _trace_headers(request))
        except Exception:
            http_session.by_request.pop(message.id, None)
            raise
        if isinstance(answer, defer.Deferred):
            answer.addCallback(self._answered, http_session, message.id, request, gone)
            answer.addErrback(lambda f: log.failure("Answering an MCP request failed", f))
        else:
            self._answered(answer, http_session, message.id, request, gone)

    def _answered(self, answer: Message | None, http_session: _HttpSession,
                  request_id: RequestId, request: HttpRequest, gone: list[bool]) -> None:
        target = http_session.by_request.pop(request_id, None)
        if isinstance(target, _Stream):
            if answer is not None:
                target.event(answer)
            target.finish()
            return
        if gone:
            return
        if answer is None:  # cancelled: nothing is answered
            request.setResponseCode(202)
            request.setHeader(b"content-length", b"0")
            request.finish()
            return
        self._write_json(request, 200, answer)

    def _send(self, http_session: _HttpSession, message: Message,
              related: RequestId | None) -> None:
        """A message the session sends: on its request's stream, else the GET stream."""
        target = http_session.by_request.get(related) if related is not None else None
        if target is None:
            stream = http_session.standalone
            if stream is None or stream.response is None:
                log.debug("MCP message {method} dropped: no GET stream open",
                          method=getattr(message, "method", None))
                return
            stream.event(message)
            return
        if not isinstance(target, _Stream):  # the first message: the answer becomes SSE
            stream = self._new_stream(http_session)
            stream.attach(self._response(target))
            http_session.by_request[related] = target = stream  # type: ignore[index]
            self._start_timer()
        target.event(message)

    def _cut(self, http_session: _HttpSession, request_id: RequestId) -> None:
        target = http_session.by_request.get(request_id)
        if isinstance(target, _Stream):
            target.cut()

    def _resumed(self, http_session: _HttpSession, header: bytes) -> tuple[_Stream, int]:
        key_text, _, number_text = header.decode("latin-1").strip().partition(".")
        stream = None
        if key_text.isdigit() and number_text.isdigit():
            stream = http_session.streams.get(int(key_text))
        if stream is None:
            raise ApiError(400, "Last-Event-ID names no stream of this session")
        if stream.response is not None:
            raise ApiError(409, "that stream is open already")
        oldest = stream.events[0][0] if stream.events else 1
        after = int(number_text)
        if after + 1 < oldest:
            raise ApiError(410, "the events after that id are no longer kept")
        return stream, after

    def _new_stream(self, http_session: _HttpSession) -> _Stream:
        """A stream of the session; the oldest cut, ended ones are let go past
        ``MAX_KEPT_STREAMS`` (each holds at most ``stream_buffer`` bytes)."""
        key = next(self._stream_keys)
        streams = http_session.streams
        def forget() -> None:
            streams.pop(key, None)

        stream = _Stream(key, self.stream_buffer, forget=forget)
        streams[key] = stream
        if len(streams) > MAX_KEPT_STREAMS:
            for old in [s for s in streams.values() if s.ended and s.response is None]:
                del streams[old.key]
                if len(streams) <= MAX_KEPT_STREAMS:
                    break
        return stream

    def _response(self, request: HttpRequest) -> EventStream:
        return EventStream(request, self.clock, buffer_limit=self.stream_buffer)

    def _write_json(self, request: HttpRequest, status: int, message: Message) -> None:
        data = encode_message(message)
        request.setResponseCode(status)
        request.setHeader(b"content-type", b"application/json")
        request.setHeader(b"content-length", str(len(data)).encode("ascii"))
        request.write(data)
        request.finish()

    # -- checks --------------------------------------------------------------------

    def _check_version(self, request: HttpRequest) -> None:
        header = request.getHeader(VERSION_HEADER)
        if header is not None and header.decode("latin-1").strip() not in HEADER_VERSIONS:
            raise ApiError(400, f"unsupported MCP-Protocol-Version {header.decode('latin-1')!r}"
                           f"; this server speaks {', '.join(SUPPORTED_PROTOCOL_VERSIONS)}")

    def _body(self, request: HttpRequest) -> bytes:
        content = request.content
        if content is None:
            return b""
        content.seek(0)
        data: bytes = content.read(self.max_message_bytes + 1)
        if not data.strip():
            raise JSONRPCError(PARSE_ERROR, "the request body is empty")
        return data

    # -- keep-alives, stalled clients, idle sessions ----------------------------------

    def _start_timer(self) -> None:
        if self._timer is None or not self._timer.active():
            self._timer = self.clock.callLater(self.keepalive, self._beat)

    def _beat(self) -> None:
        self._timer = None
        now = self.clock.seconds()
        open_streams = 0
        for http_session in list(self._sessions.values()):
            for stream in list(http_session.streams.values()):
                response = stream.response
                if response is None:
                    continue
                if response.stalled(now, self.stall_timeout):
                    response.abort()
                    continue
                response.keep_alive()
                open_streams += 1
        self._sweep_idle()
        if open_streams:
            self._start_timer()


def _trace_headers(request: HttpRequest) -> dict[str, str]:
    """The W3C trace context fields among the request's headers (a caller's trace)."""
    found: dict[str, str] = {}
    for name in TRACE_FIELDS:
        value = request.getHeader(name)
        if isinstance(value, bytes | str):
            found[name] = value.decode("latin-1") if isinstance(value, bytes) else value
    return found


def _write_error(request: HttpRequest, error: ApiError) -> None:
    import json

    for key, value in error.headers.items():
        request.setHeader(key.encode("ascii"), value.encode("latin-1"))
    data = json.dumps(error_body(error.status, error.message, error.field)).encode()
    request.setResponseCode(error.status)
    request.setHeader(b"content-type", b"application/json")
    request.setHeader(b"content-length", str(len(data)).encode("ascii"))
    request.write(data)
    request.finish()


class McpResource(Resource):
    """The MCP endpoint as a resource of a site of its own (fixture, Evennia host).

    Every request passes the Host/Origin ``policy`` (403), the bearer ``token``
    when there is one (401), and a POST's content type (415) before the
    endpoint sees it.  Serve it with a :class:`~ai_tools.web.api.ApiSite`-like
    site that bounds bodies (``LimitedRequest``).
    """

    isLeaf = True

    def __init__(self, endpoint: McpHttpEndpoint, policy: OriginPolicy | None = None,
                 token: str | None = None) -> None:
        super().__init__()
        self.endpoint = endpoint
        self.policy = policy if policy is not None else OriginPolicy()
        self._token = token.encode("utf-8") if token else None

    def render(self, request: HttpRequest) -> bytes | int:
        """Admit the request, then let the endpoint answer it."""
        try:
            self.policy.check(request)
            self._check_token(request)
            check_content_type(request)
            self.endpoint.render(request)
        except ApiError as error:
            _write_error(request, error)
        return server.NOT_DONE_YET

    def _check_token(self, request: HttpRequest) -> None:
        if self._token is None:
            return
        header = request.getHeader(b"authorization") or b""
        scheme, _, given = header.partition(b" ")
        if scheme.lower() != b"bearer" or not secrets.compare_digest(given.strip(),
                                                                     self._token):
            raise ApiError(401, "send 'Authorization: Bearer <token>'",
                           headers={"WWW-Authenticate": 'Bearer realm="ai_tools"'})
