"""Our MCP client session: requests and their answers over any transport.

A :class:`McpSession` speaks the client side of MCP over a
:class:`McpTransport` (a child process's stdio, :mod:`ai_tools.mcp.stdio`, or
Streamable HTTP, :mod:`ai_tools.mcp.http_transport`): ``initialize`` with
version negotiation, ``tools/list`` page by page, ``tools/call`` with progress.
Every request is a Deferred; cancelling it (a timeout of the engine, a stop, a
kill) forgets the request and tells the server with ``notifications/cancelled``.

What a server may ask of us: ``ping`` is answered; sampling, elicitation and
roots are not supported (we declare no capability for them) and get the
protocol's ``Method not found`` error, so a server never waits for an answer.

With tracing on (``tracing``, :mod:`ai_tools.mcp.tracing`), every request is a CLIENT
span whose W3C context goes in the request's ``params._meta``.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Protocol, TypeVar

import attrs
from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from ai_tools.errors import AIToolsError
from ai_tools.json_types import JSONMapping, JSONObject, JSONValue
from ai_tools.mcp.jsonrpc import (
    LATEST_PROTOCOL_VERSION,
    METHOD_NOT_FOUND,
    SUPPORTED_PROTOCOL_VERSIONS,
    ErrorResponse,
    JSONRPCError,
    Message,
    Notification,
    Request,
    RequestId,
    Response,
)
from ai_tools.mcp.tracing import CallTrace, ClientTracing, outcome_of

__all__ = [
    "CLIENT_INFO",
    "McpProtocolError",
    "McpSession",
    "McpTransport",
    "ServerGone",
]

log = Logger()

T = TypeVar("T")

CLIENT_INFO: JSONObject = {"name": "ai_tools", "version": "0.1.0"}
"""How we introduce ourselves in ``initialize``."""

ACCEPTED_SERVER_VERSIONS = (*SUPPORTED_PROTOCOL_VERSIONS, "2025-03-26")
"""Versions a server may answer ``initialize`` with.  We ask for the newest; a server
of 2025-03-26 (the revision that brought Streamable HTTP) is used as it is: what
changed since does not touch ``tools/list`` and ``tools/call`` (results without
``structuredContent`` and titles)."""

ProgressCallback = Callable[[JSONObject], None]


class ServerGone(AIToolsError, ConnectionError):
    """The server went away (process ended, connection lost) or is not connected.

    A ``ConnectionError``: the engine retries a call that failed this way,
    once the server is back; an ``AIToolsError``: the model reads its message.
    """


class McpProtocolError(Exception):
    """The server broke the protocol (an answer we cannot use): never retried."""


class McpTransport(Protocol):
    """Moves messages between a session and one server.

    ``session_id`` is the server's ``Mcp-Session-Id`` (HTTP), None when there is none.
    """

    session_id: str | None

    def start(self, deliver: Callable[[Message], None],
              lost: Callable[[Failure], None]) -> defer.Deferred[None]:
        """Connect; ``deliver`` gets every message received, ``lost`` the end."""

    def send(self, message: Message) -> defer.Deferred[None]:
        """Send one message; fails when it could not be sent."""

    def close(self) -> defer.Deferred[None]:
        """Close the connection (stop the process, end the HTTP session)."""


@attrs.define(eq=False)
class _Pending:
    deferred: defer.Deferred[JSONObject]
    method: str
    progress_token: str | None = None
    sent: defer.Deferred[None] | None = None


@attrs.define(eq=False)
class McpSession:
    """The client side of one connection to one MCP server.

    ``on_tools_changed`` is called on ``notifications/tools/list_changed``;
    ``name`` names the server in logs and errors.
    """

    transport: McpTransport
    name: str = "mcp"
    on_tools_changed: Callable[[], None] | None = None
    tracing: ClientTracing | None = None
    """CLIENT spans of our requests (tracing on, :mod:`ai_tools.mcp.tracing`), else None."""
    protocol_version: str | None = attrs.field(default=None, init=False)
    server_info: JSONObject = attrs.field(factory=dict, init=False)
    capabilities: JSONObject = attrs.field(factory=dict, init=False)
    instructions: str = attrs.field(default="", init=False)
    closed: bool = attrs.field(default=False, init=False)
    _pending: dict[RequestId, _Pending] = attrs.field(factory=dict, init=False)
    _progress: dict[str, ProgressCallback] = attrs.field(factory=dict, init=False)
    _next_id: int = attrs.field(default=0, init=False)
    _lost: list[Callable[[Failure], None]] = attrs.field(factory=list, init=False)

    # ---- lifecycle

    def connect(self, deadline: float, clock: IReactorTime) -> defer.Deferred[McpSession]:
        """Start the transport and ``initialize``, within ``deadline`` seconds."""
        started = self.transport.start(self._received, self._connection_lost)
        d = started.addCallback(lambda _: self._initialize())
        d.addTimeout(deadline, clock)
        return d

    def when_lost(self, callback: Callable[[Failure], None]) -> None:
        """Call ``callback(reason)`` once, when the connection ends."""
        self._lost.append(callback)

    def close(self) -> defer.Deferred[None]:
        """Fail what is open and close the transport."""
        self._fail_all(ServerGone(f"MCP server {self.name} connection closed"))
        self.closed = True
        return self.transport.close()

    @defer.inlineCallbacks
    def _initialize(self) -> Generator[
            defer.Deferred[JSONObject] | defer.Deferred[None], object, McpSession]:
        result = yield self.request("initialize", {
            "protocolVersion": LATEST_PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": CLIENT_INFO,
        }, cancel_notice=False)
        assert isinstance(result, dict)
        version = result.get("protocolVersion")
        if version not in ACCEPTED_SERVER_VERSIONS:
            raise McpProtocolError(
                f"MCP server {self.name} speaks protocol version {version!r}; we speak "
                f"{', '.join(ACCEPTED_SERVER_VERSIONS)}")
        self.protocol_version = str(version)
        info = result.get("serverInfo")
        self.server_info = info if isinstance(info, dict) else {}
        capabilities = result.get("capabilities")
        self.capabilities = capabilities if isinstance(capabilities, dict) else {}
        instructions = result.get("instructions")
        self.instructions = instructions if isinstance(instructions, str) else ""
        negotiated = getattr(self.transport, "negotiated", None)
        if negotiated is not None:
            negotiated(self.protocol_version)
        yield self.notify("notifications/initialized")
        return self

    # ---- sending

    def request(self, method: str, params: JSONObject | None = None, *,
                on_progress: ProgressCallback | None = None, cancel_notice: bool = True,
                trace_parent: object = None) -> defer.Deferred[JSONObject]:
        """Send a request; the Deferred fires with its result.

        It fails with :class:`~ai_tools.mcp.jsonrpc.JSONRPCError` for an error
        answer and :class:`ServerGone` when the connection ends first.
        Cancelling it sends ``notifications/cancelled`` (unless
        ``cancel_notice`` is False: ``initialize`` is never cancelled so).
        With tracing on, the request has a CLIENT span (a child of ``trace_parent``)
        named in its ``params._meta``.
        """
        if self.closed:
            return defer.fail(ServerGone(f"MCP server {self.name} is not connected"))
        self._next_id += 1
        request_id = self._next_id
        params = dict(params or {})
        token = None
        if on_progress is not None:
            token = f"p{request_id}"
            params["_meta"] = {**_meta(params), "progressToken": token}
            self._progress[token] = on_progress
        trace = None
        if self.tracing is not None:
            trace = self._trace(method, request_id, params, trace_parent)
            params["_meta"] = {**_meta(params), **trace.carrier()}

        def cancel(_: defer.Deferred[JSONObject]) -> None:
            pending = self._pending.get(request_id)
            if not self._forget(request_id):
                return
            if cancel_notice and not self.closed:
                self._send_quietly(Notification("notifications/cancelled", {
                    "requestId": request_id, "reason": "cancelled by the client"}))
            if pending is not None and pending.sent is not None and not pending.sent.called:
                pending.sent.cancel()  # an HTTP exchange still open is aborted

        d: defer.Deferred[JSONObject] = defer.Deferred(cancel)
        if trace is not None:
            d.addBoth(_traced, trace)
        entry = self._pending[request_id] = _Pending(d, method, token)
        sent = self.transport.send(Request(request_id, method, params or None))
        if not sent.called:
            entry.sent = sent
        sent.addErrback(self._send_failed, request_id)
        return d

    def _trace(self, method: str, request_id: RequestId, params: JSONMapping,
               parent: object) -> CallTrace:
        assert self.tracing is not None
        target = params.get("name") if method in ("tools/call", "prompts/get") else None
        version = self.protocol_version or params.get("protocolVersion")  # (initialize)
        return self.tracing.request(
            method, request_id, target if isinstance(target, str) else None, parent=parent,
            protocol_version=version if isinstance(version, str) else None,
            session_id=self.transport.session_id)

    def notify(self, method: str, params: JSONObject | None = None) -> defer.Deferred[None]:
        """Send a notification (no answer)."""
        return self.transport.send(Notification(method, params))

    def _send_quietly(self, message: Message) -> None:
        self.transport.send(message).addErrback(
            lambda f: log.debug("MCP server {server}: could not send {method}: {error}",
                                server=self.name, method=getattr(message, "method", "answer"),
                                error=f.getErrorMessage()))

    def _send_failed(self, failure: Failure, request_id: RequestId) -> None:
        if failure.check(defer.CancelledError) and request_id not in self._pending:
            return None  # we aborted it ourselves
        pending = self._pending.pop(request_id, None)
        if pending is not None:
            self._drop_progress(pending)
            pending.deferred.errback(failure)

    def _forget(self, request_id: RequestId) -> bool:
        pending = self._pending.pop(request_id, None)
        if pending is None:
            return False
        self._drop_progress(pending)
        return True

    def _drop_progress(self, pending: _Pending) -> None:
        if pending.progress_token is not None:
            self._progress.pop(pending.progress_token, None)

    # ---- the operations we use

    @defer.inlineCallbacks
    def list_tools(self, max_tools: int, max_pages: int = 50
                   ) -> Generator[defer.Deferred[JSONObject], JSONObject, list[JSONObject]]:
        """Every tool the server lists (``tools/list`` page by page), at most ``max_tools``."""
        tools: list[JSONObject] = []
        cursor: JSONValue = None
        for _ in range(max_pages):
            result = yield self.request("tools/list", {"cursor": cursor} if cursor else None)
            page = result.get("tools")
            if not isinstance(page, list):
                raise McpProtocolError(f"MCP server {self.name}: tools/list gave no tool list")
            tools.extend(t for t in page if isinstance(t, dict))
            cursor = result.get("nextCursor")
            if len(tools) >= max_tools:
                if cursor or len(tools) > max_tools:
                    log.warn("MCP server {server} lists more than {cap} tools; the first "
                             "{cap} are used", server=self.name, cap=max_tools)
                return tools[:max_tools]
            if not isinstance(cursor, str) or not cursor:
                return tools
        log.warn("MCP server {server}: tools/list still had pages after {pages}; the rest "
                 "are left out", server=self.name, pages=max_pages)
        return tools

    def call_tool(self, name: str, arguments: JSONObject,
                  on_progress: ProgressCallback | None = None, *,
                  trace_parent: object = None) -> defer.Deferred[JSONObject]:
        """``tools/call``: the raw ``CallToolResult`` (see :mod:`ai_tools.mcp.content`);
        ``trace_parent``: the context of the ``execute_tool`` span it serves (tracing on)."""
        return self.request("tools/call", {"name": name, "arguments": arguments},
                            on_progress=on_progress, trace_parent=trace_parent)

    # ---- receiving

    def _received(self, message: Message) -> None:
        if isinstance(message, (Response, ErrorResponse)):
            self._answer(message)
        elif isinstance(message, Request):
            self._server_request(message)
        else:
            self._notification(message)

    def _answer(self, message: Response | ErrorResponse) -> None:
        pending = self._pending.pop(message.id, None) if message.id is not None else None
        if pending is None:
            if isinstance(message, ErrorResponse) and message.id is None:
                log.warn("MCP server {server} reported an error: {error}", server=self.name,
                         error=message.message)
            return  # an answer to a request we cancelled or never sent
        self._drop_progress(pending)
        if isinstance(message, Response):
            pending.deferred.callback(message.result)
        else:
            pending.deferred.errback(message.error())

    def _server_request(self, request: Request) -> None:
        if request.method == "ping":
            self._send_quietly(Response(request.id, {}))
            return
        log.info("MCP server {server} asked for {method}, which we do not support",
                 server=self.name, method=request.method)
        self._send_quietly(ErrorResponse(request.id, METHOD_NOT_FOUND,
                                         f"the client does not support {request.method}"))

    def _notification(self, note: Notification) -> None:
        params = note.params or {}
        if note.method == "notifications/progress":
            callback = self._progress.get(str(params.get("progressToken")))
            if callback is not None:
                try:
                    callback(params)
                except Exception:
                    log.failure("MCP progress observer raised")
        elif note.method == "notifications/tools/list_changed":
            if self.on_tools_changed is not None:
                self.on_tools_changed()
        elif note.method == "notifications/message":
            log.info("MCP server {server} says ({level}): {data}", server=self.name,
                     level=params.get("level", "info"), data=str(params.get("data"))[:500])

    def _connection_lost(self, reason: Failure) -> None:
        """The connection ended: its owner hears first (and starts a restart), then
        the calls in flight fail (and their retries find the restart under way)."""
        self.closed = True
        callbacks, self._lost = self._lost, []
        for callback in callbacks:
            callback(reason)
        self._fail_all(ServerGone(f"MCP server {self.name} went away: "
                                  f"{reason.getErrorMessage()}"))

    def _fail_all(self, error: Exception) -> None:
        pending, self._pending = self._pending, {}
        self._progress.clear()
        for entry in pending.values():
            entry.deferred.errback(Failure(error))

    @property
    def open_requests(self) -> int:
        """Requests sent and not answered yet."""
        return len(self._pending)


def _meta(params: JSONObject) -> JSONObject:
    """The ``_meta`` object of request params (empty when there is none)."""
    meta = params.get("_meta")
    return meta if isinstance(meta, dict) else {}


def _traced(value: T, trace: CallTrace) -> T:
    """End a request's span with how it ended; pass the value (or failure) on."""
    trace.end(outcome_of(value))
    return value


def describe_error(error: BaseException | None) -> str:
    """An MCP failure as a sentence the model can read."""
    if isinstance(error, JSONRPCError):
        return f"the MCP server answered with an error: {error.message} (code {error.code})"
    return str(error) or type(error).__name__
