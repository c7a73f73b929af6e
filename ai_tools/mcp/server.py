"""The MCP server side, independent of transport: sessions, their requests, their answers.

An :class:`McpServer` holds what it serves (tools, and optionally resources,
prompts and completions: :class:`ServerFeatures`) and opens one
:class:`McpSession` per client.  A transport (Streamable HTTP in
:mod:`ai_tools.mcp.server_http`, stdio in :mod:`ai_tools.mcp.server_stdio`)
frames bytes, hands each parsed message to :meth:`McpSession.receive`, writes
back the answer it returns (a value, or a Deferred of one) and the messages
the session sends meanwhile through its ``send`` callable (progress, log
messages, requests to the client), each tagged with the request it belongs to
so HTTP can put it on that request's stream.

The session implements the lifecycle (``initialize`` with version
negotiation, ``notifications/initialized``), ``ping``, ``logging/setLevel``,
``tools/list`` and ``tools/call``, the resource, prompt and completion methods
when their provider is given, cancellation (``notifications/cancelled``
cancels the request's Deferred, and no answer is sent), and requests to the
client (``sampling/createMessage``, ``elicitation/create``) with a deadline.
Every request has a deadline too (``request_timeout``): a call still running
then is cancelled and answered with an error.

With tracing on (``McpServer.tracing``, :mod:`ai_tools.mcp.tracing`), every request is a
SERVER span, parented from the context in its ``params._meta`` (else the transport's
``traceparent`` header); a tool call's work goes below it (``RequestContext.trace``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Protocol, TypeAlias, TypeVar

import attrs
from twisted.internet import defer
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from ai_tools.json_types import JSONMapping, JSONObject, JSONValue
from ai_tools.mcp.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    ErrorResponse,
    JSONRPCError,
    Message,
    Notification,
    Request,
    RequestId,
    Response,
    negotiate_version,
)
from ai_tools.mcp.tracing import ServerCallTrace, ServerTracing, carrier_of, outcome_of

if TYPE_CHECKING:
    pass

__all__ = [
    "LOG_LEVELS",
    "REQUEST_CANCELLED",
    "McpServer",
    "McpSession",
    "PromptProvider",
    "RequestContext",
    "ResourceProvider",
    "ServerFeatures",
    "ServerInfo",
    "ToolProvider",
]

log = Logger()

LOG_LEVELS: tuple[str, ...] = ("debug", "info", "notice", "warning", "error", "critical",
                               "alert", "emergency")
"""The syslog levels of ``logging/setLevel`` and ``notifications/message``, lowest first."""

REQUEST_CANCELLED = -32800
"""The code of an answer to a request the client cancelled (never sent: see the module)."""

T = TypeVar("T")

Answer = Response | ErrorResponse
Handled: TypeAlias = "JSONObject | defer.Deferred[JSONObject]"
"""What a method gives: its result, or a Deferred of it."""


Send = Callable[[Message, "RequestId | None"], None]
"""How a session sends a message: the message and the id of the request it belongs to."""


class ToolProvider(Protocol):
    """The tools a server offers (the game's: :class:`~ai_tools.mcp.game_tools.GameTools`)."""

    def list_tools(self) -> list[JSONObject]:
        """The ``Tool`` objects of ``tools/list``."""

    def call_tool(self, name: str, arguments: JSONObject,
                  context: RequestContext) -> Handled:
        """A ``CallToolResult`` dict (or a Deferred of one); JSONRPCError for an unknown tool.

        Cancelling the Deferred cancels the call."""


class ResourceProvider(Protocol):
    """Resources a server offers (optional)."""

    def list_resources(self) -> list[JSONObject]:
        """The ``Resource`` objects of ``resources/list``."""

    def list_templates(self) -> list[JSONObject]:
        """The ``ResourceTemplate`` objects of ``resources/templates/list``."""

    def read(self, uri: str) -> list[JSONObject]:
        """The contents of ``uri`` (JSONRPCError when there is none)."""


class PromptProvider(Protocol):
    """Prompts a server offers (optional)."""

    def list_prompts(self) -> list[JSONObject]:
        """The ``Prompt`` objects of ``prompts/list``."""

    def get_prompt(self, name: str, arguments: Mapping[str, str]) -> JSONObject:
        """The ``GetPromptResult`` (JSONRPCError for an unknown prompt or missing argument)."""


@attrs.frozen
class ServerInfo:
    """What ``initialize`` says about the server."""

    name: str = "ai_tools"
    version: str = "0"
    title: str | None = None
    instructions: str | None = None


@attrs.frozen
class ServerFeatures:
    """What one server serves: tools always; resources, prompts, completion if given.

    ``complete`` answers ``completion/complete`` params with a ``completion``
    object; ``subscribe`` says whether ``resources/subscribe`` is offered.
    """

    tools: ToolProvider
    resources: ResourceProvider | None = None
    prompts: PromptProvider | None = None
    complete: Callable[[JSONObject], JSONObject] | None = None
    subscribe: bool = False


def _answer_of(request_id: RequestId, value: object) -> Answer:
    if isinstance(value, Failure):
        error = value.value
        if isinstance(error, JSONRPCError):
            return ErrorResponse(request_id, error.code, error.message, error.data)
        if isinstance(error, defer.TimeoutError):
            return ErrorResponse(request_id, INTERNAL_ERROR, "the request ran out of time")
        log.failure("An MCP request failed", value)
        return ErrorResponse(request_id, INTERNAL_ERROR,
                             f"internal error: {type(error).__name__}")
    return Response(request_id, value if isinstance(value, dict) else {})


def _string(params: JSONMapping, name: str) -> str:
    """The string parameter ``name`` (INVALID_PARAMS when it is missing or no string)."""
    value = params.get(name)
    if not isinstance(value, str):
        raise JSONRPCError(INVALID_PARAMS, f"params.{name} must be a str")
    return value


@attrs.define(eq=False)
class RequestContext:
    """What a tool call may do while it runs: report progress, log, ask the client.

    Messages it sends belong to its request (on HTTP they go on that request's
    stream).  ``progress_token`` is the client's (None: it wants no progress).
    """

    session: McpSession
    request_id: RequestId
    progress_token: str | int | None = None
    trace: ServerCallTrace | None = None
    """The request's SERVER span (tracing on): the engine's span of the call goes below."""
    _progress_sent: float | None = attrs.field(default=None, init=False)

    def progress(self, progress: float, total: float | None = None,
                 message: str | None = None) -> None:
        """Send ``notifications/progress`` (if asked for; progress must increase)."""
        if self.progress_token is None:
            return
        if self._progress_sent is not None and progress <= self._progress_sent:
            return
        self._progress_sent = progress
        params: JSONObject = {"progressToken": self.progress_token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        self.session.notify("notifications/progress", params, self.request_id)

    def log(self, level: str, data: JSONValue, logger: str | None = None) -> None:
        """Send ``notifications/message`` when ``level`` reaches the session's level."""
        self.session.log(level, data, logger, self.request_id)

    def request(self, method: str, params: JSONObject) -> defer.Deferred[JSONObject]:
        """Ask the client (``sampling/createMessage``, ``elicitation/create``...)."""
        return self.session.request(method, params, self.request_id)

    def close_stream(self) -> None:
        """Ask the transport to close this request's stream now; the client resumes it
        (HTTP, with ``Last-Event-ID``) and gets what follows there."""
        self.session.close_stream(self.request_id)


_CAPABILITY_OF = {"sampling/createMessage": "sampling", "elicitation/create": "elicitation",
                  "roots/list": "roots"}


@attrs.define(eq=False)
class McpServer:
    """The server: what it serves, its identity, its deadlines; opens sessions.

    ``clock`` is the reactor (or a ``task.Clock``); ``request_timeout`` bounds
    every request a client makes and every request the server makes of a
    client, in seconds.
    """

    features: ServerFeatures
    clock: IReactorTime
    info: ServerInfo = ServerInfo()
    request_timeout: float = 300.0
    tracing: Callable[[], ServerTracing | None] | None = None
    """Gives the SERVER span maker when tracing is on (asked per request), else None."""
    _ids: Iterator[int] = attrs.field(factory=lambda: itertools.count(1), init=False)

    def capabilities(self) -> JSONObject:
        """The ``capabilities`` answered to ``initialize``."""
        features = self.features
        capabilities: JSONObject = {"tools": {"listChanged": False}, "logging": {}}
        if features.resources is not None:
            capabilities["resources"] = {"subscribe": features.subscribe, "listChanged": False}
        if features.prompts is not None:
            capabilities["prompts"] = {"listChanged": False}
        if features.complete is not None:
            capabilities["completions"] = {}
        return capabilities

    def open_session(self, send: Send) -> McpSession:
        """A new session whose outgoing messages go to ``send``."""
        return McpSession(self, send, next(self._ids))


@attrs.define(eq=False)
class McpSession:
    """One client's session: its negotiated version, its requests in flight.

    :meth:`receive` takes every message from the client; :meth:`close` ends
    the session (its requests in flight are cancelled).
    """

    server: McpServer
    send: Send
    number: int
    protocol_version: str | None = None
    client_info: JSONObject = attrs.field(factory=dict)
    client_capabilities: JSONObject = attrs.field(factory=dict)
    log_level: str | None = None
    """None until the client sets one: then every level is sent."""
    initialized: bool = False
    closed: bool = False
    subscriptions: set[str] = attrs.field(factory=set)
    session_id: str | None = None
    """The transport's name of the session (HTTP's ``Mcp-Session-Id``), for its spans."""
    on_close_stream: Callable[[RequestId], None] | None = None
    _in_flight: dict[RequestId, defer.Deferred[JSONObject]] = attrs.field(factory=dict)
    _cancelled: set[RequestId] = attrs.field(factory=set)
    _pending: dict[RequestId, tuple[defer.Deferred[JSONObject], IDelayedCall]] = attrs.field(
        factory=dict)
    _next_id: Iterator[int] = attrs.field(factory=lambda: itertools.count(1))
    _traces: dict[RequestId, ServerCallTrace] = attrs.field(factory=dict)

    # -- receiving ------------------------------------------------------------------

    def receive(self, message: Message, headers: Mapping[str, str] | None = None
                ) -> Answer | defer.Deferred[Answer | None] | None:
        """Handle one message: the answer of a request (value or Deferred), else None.

        A cancelled request's Deferred fires with None: nothing is answered.
        ``headers``: the trace context fields of the transport (HTTP headers).
        """
        if isinstance(message, Request):
            tracing = self.server.tracing() if self.server.tracing is not None else None
            if tracing is None:
                return self._request(message)
            return self._traced_request(message, tracing, headers or {})
        if isinstance(message, Notification):
            self._notification(message)
        else:
            self._client_answer(message)
        return None

    def _request(self, request: Request) -> Answer | defer.Deferred[Answer | None]:
        if self.closed:
            return ErrorResponse(request.id, INVALID_REQUEST, "the session is closed")
        if request.id in self._in_flight:
            return ErrorResponse(request.id, INVALID_REQUEST,
                                 f"request id {request.id!r} is already in flight")
        try:
            value = self._dispatch(request)
        except Exception:
            return _answer_of(request.id, Failure())
        if not isinstance(value, defer.Deferred):
            return _answer_of(request.id, value)
        if value.called:
            return value.addBoth(lambda v: _answer_of(request.id, v))
        return self._track(request.id, value)

    def _traced_request(self, request: Request, tracing: ServerTracing,
                        headers: Mapping[str, str]) -> Answer | defer.Deferred[Answer | None]:
        """:meth:`_request` within its SERVER span."""
        params = request.params or {}
        target = params.get("name") if request.method in ("tools/call", "prompts/get") else None
        version = self.protocol_version or params.get("protocolVersion")  # (initialize)
        trace = tracing.request(
            request.method, request.id, target if isinstance(target, str) else None,
            meta=carrier_of(params.get("_meta")), headers=headers, session_id=self.session_id,
            protocol_version=version if isinstance(version, str) else None)
        self._traces[request.id] = trace
        answer = self._request(request)
        if isinstance(answer, defer.Deferred):
            return answer.addCallback(self._trace_ended, request.id, trace)
        self._trace_ended(answer, request.id, trace)
        return answer

    def _trace_ended(self, answer: Answer | None, request_id: RequestId,
                     trace: ServerCallTrace) -> Answer | None:
        if self._traces.get(request_id) is trace:
            del self._traces[request_id]
        if answer is None:
            trace.end(outcome_of(defer.CancelledError()))
        else:
            trace.end(outcome_of(answer.error() if isinstance(answer, ErrorResponse)
                                 else answer.result))
        return answer

    def trace_of(self, request_id: RequestId) -> ServerCallTrace | None:
        """The SERVER span of the request in flight ``request_id`` (tracing on)."""
        return self._traces.get(request_id)

    def _track(self, request_id: RequestId, d: defer.Deferred[JSONObject]
               ) -> defer.Deferred[Answer | None]:
        """Keep ``d`` cancellable until it fires; bound it by the request deadline."""
        self._in_flight[request_id] = d
        d.addTimeout(self.server.request_timeout,
                     self.server.clock)

        def done(value: JSONObject | Failure) -> Answer | None:
            self._in_flight.pop(request_id, None)
            if request_id in self._cancelled:
                self._cancelled.discard(request_id)
                if isinstance(value, Failure):
                    value.trap(defer.CancelledError, Exception)
                return None
            return _answer_of(request_id, value)

        return d.addBoth(done)

    def _dispatch(self, request: Request) -> Handled:
        method, params = request.method, request.params or {}
        if method == "initialize":
            return self._initialize(params)
        if method == "ping":
            return {}
        if self.protocol_version is None:
            raise JSONRPCError(INVALID_REQUEST, "the session is not initialized: "
                               "send initialize first")
        handler = _HANDLERS.get(method)
        if handler is None:
            raise JSONRPCError(METHOD_NOT_FOUND, f"method not found: {method}")
        return handler(self, request, params)

    def _initialize(self, params: JSONMapping) -> JSONObject:
        if self.protocol_version is not None:
            raise JSONRPCError(INVALID_REQUEST, "the session is initialized already")
        requested = _string(params, "protocolVersion")
        info = params.get("clientInfo")
        capabilities = params.get("capabilities")
        self.client_info = dict(info) if isinstance(info, Mapping) else {}
        self.client_capabilities = dict(capabilities) if isinstance(capabilities, Mapping) else {}
        self.protocol_version = negotiate_version(requested)
        server = self.server
        info_out: JSONObject = {"name": server.info.name, "version": server.info.version}
        if server.info.title:
            info_out["title"] = server.info.title
        result: JSONObject = {"protocolVersion": self.protocol_version,
                                  "capabilities": server.capabilities(),
                                  "serverInfo": info_out}
        if server.info.instructions:
            result["instructions"] = server.info.instructions
        return result

    def _notification(self, note: Notification) -> None:
        params = note.params or {}
        if note.method == "notifications/initialized":
            self.initialized = True
        elif note.method == "notifications/cancelled":
            self.cancel(params.get("requestId"))
        # progress, roots/list_changed and unknown notifications need nothing

    def _client_answer(self, answer: Response | ErrorResponse) -> None:
        pending = self._pending.pop(answer.id, None) if answer.id is not None else None
        if pending is None:
            log.info("An MCP client answered request {id!r}, which is not pending", id=answer.id)
            return
        d, _ = pending
        if isinstance(answer, Response):
            d.callback(answer.result)
        else:
            d.errback(answer.error())

    # -- cancelling and closing ---------------------------------------------------------

    def cancel(self, request_id: object) -> bool:
        """Cancel the client's request ``request_id`` in flight (no answer goes out)."""
        if not isinstance(request_id, str | int):
            return False
        d = self._in_flight.get(request_id)
        if d is None:
            return False
        self._cancelled.add(request_id)
        d.cancel()
        return True

    def close(self) -> None:
        """End the session: cancel its requests in flight and its requests to the client."""
        if self.closed:
            return
        self.closed = True
        for request_id in list(self._in_flight):
            self.cancel(request_id)
        pending, self._pending = self._pending, {}
        for d, timer in pending.values():
            if timer.active():
                timer.cancel()
            d.errback(JSONRPCError(INTERNAL_ERROR, "the session was closed"))

    def close_stream(self, request_id: RequestId) -> None:
        """Ask the transport to close the stream of ``request_id`` (HTTP polling)."""
        if self.on_close_stream is not None:
            self.on_close_stream(request_id)

    # -- sending -----------------------------------------------------------------------

    def notify(self, method: str, params: JSONObject | None,
               related: RequestId | None = None) -> None:
        """Send a notification (tagged with the request it belongs to, if any)."""
        if not self.closed:
            self.send(Notification(method, params), related)

    def log(self, level: str, data: JSONValue, logger: str | None = None,
            related: RequestId | None = None) -> None:
        """``notifications/message`` when ``level`` reaches the level the client set."""
        if level not in LOG_LEVELS:
            raise ValueError(f"not a log level: {level!r}")
        if self.log_level is not None and LOG_LEVELS.index(level) < LOG_LEVELS.index(
                self.log_level):
            return
        params: JSONObject = {"level": level, "data": data}
        if logger is not None:
            params["logger"] = logger
        self.notify("notifications/message", params, related)

    def request(self, method: str, params: JSONObject,
                related: RequestId | None = None) -> defer.Deferred[JSONObject]:
        """Send a request to the client; fires with its result (JSONRPCError on an error,
        ``TimeoutError`` past the deadline).  Refused at once if the client did not
        declare the capability it needs."""
        needed = _CAPABILITY_OF.get(method)
        if needed is not None and needed not in self.client_capabilities:
            return defer.fail(JSONRPCError(INVALID_REQUEST,
                                           f"the client does not support {needed}"))
        if self.closed:
            return defer.fail(JSONRPCError(INTERNAL_ERROR, "the session is closed"))
        request_id = f"s{next(self._next_id)}"

        def cancelled(d: defer.Deferred[JSONObject]) -> None:
            entry = self._pending.pop(request_id, None)
            if entry is not None and entry[1].active():
                entry[1].cancel()
            self.notify("notifications/cancelled", {"requestId": request_id}, related)

        d: defer.Deferred[JSONObject] = defer.Deferred(cancelled)
        timer = self.server.clock.callLater(
            self.server.request_timeout, self._expire, request_id)
        self._pending[request_id] = (d, timer)
        d.addBoth(self._settled, request_id)
        self.send(Request(request_id, method, params), related)
        return d

    def _settled(self, value: T, request_id: RequestId) -> T:
        entry = self._pending.pop(request_id, None)
        if entry is not None and entry[1].active():
            entry[1].cancel()
        return value

    def _expire(self, request_id: RequestId) -> None:
        entry = self._pending.get(request_id)
        if entry is not None:
            entry[0].cancel()


# -- the methods ---------------------------------------------------------------------


def _set_level(session: McpSession, request: Request, params: JSONObject) -> JSONObject:
    level = _string(params, "level")
    if level not in LOG_LEVELS:
        raise JSONRPCError(INVALID_PARAMS, f"level must be one of {', '.join(LOG_LEVELS)}")
    session.log_level = level
    return {}


def _list_tools(session: McpSession, request: Request, params: JSONObject) -> Handled:
    return {"tools": [*session.server.features.tools.list_tools()]}


def _progress_token(params: JSONMapping) -> str | int | None:
    meta = params.get("_meta")
    token = meta.get("progressToken") if isinstance(meta, Mapping) else None
    if isinstance(token, bool) or not isinstance(token, str | int):
        return None
    return token


def _call_tool(session: McpSession, request: Request, params: JSONObject) -> Handled:
    name = _string(params, "name")
    arguments = params.get("arguments")
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise JSONRPCError(INVALID_PARAMS, "params.arguments must be an object")
    context = RequestContext(session, request.id, _progress_token(params),
                             trace=session.trace_of(request.id))
    try:
        value = session.server.features.tools.call_tool(name, arguments, context)
    except Exception:
        return defer.fail()
    return value if isinstance(value, defer.Deferred) else defer.succeed(value)


def _resources(session: McpSession) -> ResourceProvider:
    provider = session.server.features.resources
    if provider is None:
        raise JSONRPCError(METHOD_NOT_FOUND, "this server has no resources")
    return provider


def _list_resources(session: McpSession, request: Request, params: JSONObject) -> Handled:
    return {"resources": [*_resources(session).list_resources()]}


def _list_templates(session: McpSession, request: Request, params: JSONObject) -> Handled:
    return {"resourceTemplates": [*_resources(session).list_templates()]}


def _read_resource(session: McpSession, request: Request, params: JSONObject) -> Handled:
    return {"contents": [*_resources(session).read(_string(params, "uri"))]}


def _subscribe(session: McpSession, request: Request, params: JSONObject) -> Handled:
    _resources(session)
    if not session.server.features.subscribe:
        raise JSONRPCError(METHOD_NOT_FOUND, "this server offers no subscriptions")
    uri = _string(params, "uri")
    if request.method == "resources/subscribe":
        session.subscriptions.add(uri)
    else:
        session.subscriptions.discard(uri)
    return {}


def _prompts(session: McpSession) -> PromptProvider:
    provider = session.server.features.prompts
    if provider is None:
        raise JSONRPCError(METHOD_NOT_FOUND, "this server has no prompts")
    return provider


def _list_prompts(session: McpSession, request: Request, params: JSONObject) -> Handled:
    return {"prompts": [*_prompts(session).list_prompts()]}


def _get_prompt(session: McpSession, request: Request, params: JSONObject) -> Handled:
    given = params.get("arguments") or {}
    if not isinstance(given, dict):
        raise JSONRPCError(INVALID_PARAMS, "params.arguments must map names to strings")
    arguments = {name: value for name, value in given.items() if isinstance(value, str)}
    if len(arguments) != len(given):
        raise JSONRPCError(INVALID_PARAMS, "params.arguments must map names to strings")
    return _prompts(session).get_prompt(_string(params, "name"), arguments)


def _complete(session: McpSession, request: Request, params: JSONObject) -> Handled:
    complete = session.server.features.complete
    if complete is None:
        raise JSONRPCError(METHOD_NOT_FOUND, "this server offers no completions")
    return {"completion": complete(dict(params))}


_HANDLERS: dict[str, Callable[[McpSession, Request, JSONObject], Handled]] = {
    "logging/setLevel": _set_level,
    "tools/list": _list_tools,
    "tools/call": _call_tool,
    "resources/list": _list_resources,
    "resources/templates/list": _list_templates,
    "resources/read": _read_resource,
    "resources/subscribe": _subscribe,
    "resources/unsubscribe": _subscribe,
    "prompts/list": _list_prompts,
    "prompts/get": _get_prompt,
    "completion/complete": _complete,
}
