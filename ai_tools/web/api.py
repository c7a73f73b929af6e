"""The HTTP API of the standalone service: JSON over twisted.web, plus an SSE event stream.

Endpoints (see ``docs/http-api.md`` for each with a curl example)::

    GET    /                                  what this is, the endpoints
    GET    /assistants                        every assistant's status
    POST   /assistants                        create one (body: its configuration)
    GET    /assistants/{name}                 one assistant's status
    PATCH  /assistants/{name}                 change some of its configuration
    DELETE /assistants/{name}?forget=         remove it
    GET    /assistants/{name}/config          its configuration
    GET    /assistants/{name}/history?limit=&before=&after=  a page of its history
    GET    /assistants/{name}/results?limit=N the last N loop results
    POST   /assistants/{name}/tick            run a tick now; answers with its result
    POST   /assistants/{name}/stop            kill what it is doing
    POST   /assistants/{name}/enable          let it tick
    POST   /assistants/{name}/disable         make its ticks exit early
    GET    /approvals                         every call waiting for an operator's approval
    GET    /assistants/{name}/approvals       its calls waiting for approval
    POST   /assistants/{name}/approvals/{id}  approve or refuse one (body: {"approve": bool})
    POST   /stop                              kill what every assistant is doing
    POST   /emergency-stop?assistant=         stop all (or one) until cleared
    POST   /emergency-stop/clear?assistant=   clear it
    GET    /world/characters, /world/rooms    the world's characters and rooms
    POST   /world/apply                       apply a changed world file (merge, reseed)
    POST   /messages                          a player character speaks in the world
    GET    /characters/{id}/heard?limit=&after= what a character heard
    GET    /events?assistant=&types=          server-sent events (Last-Event-ID replays)
    GET    /metrics                           the Prometheus text format
    POST, GET, DELETE /mcp                    MCP (Streamable HTTP) when [mcp.serve] is set

Every error is a JSON object ``{"error", "status", "field"?}`` with its
status code; the service goes on serving.  Every request passes, in order:
the Host and Origin rule (:mod:`~ai_tools.web.origin`, 403), the token when
there is one (``Authorization: Bearer <token>``, 401; a token is required
when the endpoint is reachable from other machines), the route (404/405),
and a body's content type (``application/json``, 415).  ``POST /messages``
answers once what its hearers heard is durable (else 503).  Connections,
request deadlines and event streams are bounded by
:class:`~ai_tools.web.limits.HttpLimits`.

With several workers sharing a PostgreSQL store, each worker's API answers
for the whole service: a request about an assistant another worker runs is
passed on to it, or answered from the database
(:mod:`~ai_tools.web.other_workers`), and ``GET /events`` without
``?assistant=`` carries every worker's loop events
(:mod:`~ai_tools.web.service_events`).

Build it with :func:`make_web_service` and add it to the application.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import unquote

import attrs
from twisted.application.service import MultiService
from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import server
from twisted.web.resource import Resource

from ai_tools.default_reactor import global_reactor
from ai_tools.errors import ConfigError, NotFound, PermissionDenied
from ai_tools.failure_lines import RepeatedFailure
from ai_tools.web.body import (
    DEFAULT_MAX_BODY,
    LimitedRequest,
    body_size,
    check_content_type,
    parse_json_body,
)
from ai_tools.web.connections import ConnectionLimits, GuardedChannel
from ai_tools.web.console import ConsolePages, RawAnswer
from ai_tools.web.errors import ApiError, error_body
from ai_tools.web.event_hub import EventHub, assistants_by_character
from ai_tools.web.forwarding import Forwarder
from ai_tools.web.limits import HttpLimits
from ai_tools.web.listen import ListeningService, binds_locally
from ai_tools.web.messages import DIRECT_KINDS, MAX_TEXT, MESSAGE_KINDS, parse_message, speak
from ai_tools.web.metrics import CONTENT_TYPE as METRICS_TYPE
from ai_tools.web.metrics import Metrics
from ai_tools.web.operator import Operator, parse_decision
from ai_tools.web.origin import OriginPolicy
from ai_tools.web.other_workers import OtherWorkers, forwarded
from ai_tools.web.paging import history_page
from ai_tools.web.query import query_bool, query_int, query_text
from ai_tools.web.results import LoopRecorder
from ai_tools.web.service_events import ServiceEvents
from ai_tools.web.sse import EventStream
from ai_tools.web.token_guard import TokenGuard
from ai_tools.web.traces import TraceRecorder, trace_search
from ai_tools.web.worker_auth import SIGNATURE_HEADER, WorkerSigner

__all__ = ["MAX_TEXT", "MESSAGE_KINDS", "ApiResource", "ApiSite", "WebService",
           "make_web_service"]

log = Logger()

Handler = Callable[..., Any]

STREAMING = object()
"""A handler's answer already being streamed (an event stream relayed from another worker)."""


def _json_default(value: Any) -> Any:
    if attrs.has(type(value)):
        return attrs.asdict(value)
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return repr(value)


def _encode(data: Any) -> bytes:
    return json.dumps(data, default=_json_default, allow_nan=False).encode("utf-8") + b"\n"


@attrs.frozen
class Route:
    """One endpoint: method, path pattern (``{name}`` segments are parameters), handler."""

    method: str
    pattern: tuple[str, ...]
    handler: Handler
    summary: str

    def match(self, segments: list[str]) -> dict[str, str] | None:
        """The path parameters if ``segments`` fit the pattern."""
        if len(segments) != len(self.pattern):
            return None
        params: dict[str, str] = {}
        for want, got in zip(self.pattern, segments, strict=True):
            if want.startswith("{"):
                if not got:
                    return None
                params[want[1:-1]] = got
            elif want != got:
                return None
        return params

    @property
    def path(self) -> str:
        """The pattern as a path (``/assistants/{name}``)."""
        return "/" + "/".join(self.pattern)


def _store_unavailable(failure: Failure) -> None:
    """A store that cannot answer now (closing, gone): ``503`` saying so, not a ``500``."""
    raise ApiError(503, f"the stored traces cannot be read now: {failure.getErrorMessage()}")


class ApiResource(Resource):
    """The whole API as one leaf resource that routes by path and method.

    ``service`` is the :class:`~ai_tools.service.service.AssistantService`, ``world``
    its world (None: the message and hearing endpoints answer 503).  Every
    request first passes the ``policy`` (Host, Origin), then the ``token``;
    ``limits`` bound the event streams.
    """

    isLeaf = True

    def __init__(
        self,
        service: Any,
        world: Any = None,
        *,
        token: str | None = None,
        max_body: int = DEFAULT_MAX_BODY,
        clock: Any = None,
        keepalive: float = 15.0,
        recorder: LoopRecorder | None = None,
        limits: HttpLimits | None = None,
        policy: OriginPolicy | None = None,
        forwarder: Forwarder | None = None,
        worker_hosts: Sequence[str] = (),
        mcp: Any = None,
    ) -> None:
        super().__init__()
        self.mcp = mcp
        """The :class:`~ai_tools.mcp.server_http.McpHttpEndpoint` of ``/mcp`` (None: no MCP)."""
        self.service = service
        self.world = world
        self._token = token.encode("utf-8") if token is not None else None
        self.max_body = max_body
        self._clock = clock
        self.keepalive = keepalive
        self.limits = limits if limits is not None else HttpLimits()
        self.policy = policy if policy is not None else OriginPolicy()
        self.recorder = recorder if recorder is not None else LoopRecorder()
        self.trace_recorder = TraceRecorder(store=service.store, keep=self.limits.traces_kept,
                                            prices=self._prices)
        self._remove_traces: Callable[[], None] | None = None
        self.token_guard = (TokenGuard(self._token, lambda: self.clock.seconds())
                            if self._token is not None else None)
        self.worker_signer = (WorkerSigner.for_token(self._token, lambda: self.clock.seconds())
                              if self._token is not None else None)
        """Signs the requests passed on to other workers, checks theirs (with a token)."""
        self.worker_hosts = tuple(worker_hosts)
        self.console = ConsolePages(self.token_guard, lambda: self.clock.seconds(), max_body)
        self._hub: EventHub | None = None
        self.operator = Operator(service, world)
        self.metrics = Metrics(service, streams=lambda: len(self.streams))
        self._remove_recorder: Callable[[], None] | None = None
        self._forwarder = forwarder
        self._others: OtherWorkers | None = None
        self._service_events: ServiceEvents | None = None
        self._unsaved = RepeatedFailure("POST /messages answered 503: what its hearers heard "
                                        "was not saved", log)
        self.routes = self._routes()

    def _routes(self) -> list[Route]:
        return [
            Route("GET", (), self.index, "what this is, the endpoints"),
            Route("GET", ("assistants",), self.list_assistants, "every assistant's status"),
            Route("GET", ("assistants", "{name}"), self.assistant_status,
                  "one assistant's status"),
            Route("GET", ("assistants", "{name}", "history"), self.history,
                  "a page of ?limit= history messages (default 50; ?before=, ?after=)"),
            Route("GET", ("assistants", "{name}", "results"), self.results,
                  "the last ?limit= loop results (default 10)"),
            Route("POST", ("assistants", "{name}", "tick"), self.tick,
                  "run a tick now; answers with its result"),
            Route("POST", ("assistants", "{name}", "stop"), self.stop_assistant,
                  "kill the model call or tool in flight"),
            Route("POST", ("assistants", "{name}", "enable"), self.enable, "let it tick"),
            Route("POST", ("assistants", "{name}", "disable"), self.disable,
                  "make its ticks exit early"),
            Route("POST", ("assistants",), self.create_assistant,
                  "create an assistant (body: its configuration)"),
            Route("PATCH", ("assistants", "{name}"), self.reconfigure_assistant,
                  "change some of its configuration (body: the keys to change)"),
            Route("DELETE", ("assistants", "{name}"), self.remove_assistant,
                  "remove it (?forget=true: delete its saved state too)"),
            Route("GET", ("assistants", "{name}", "config"), self.assistant_config,
                  "its configuration"),
            Route("GET", ("approvals",), self.approvals,
                  "every call waiting for an operator's approval"),
            Route("GET", ("assistants", "{name}", "approvals"), self.assistant_approvals,
                  "its calls waiting for an operator's approval"),
            Route("POST", ("assistants", "{name}", "approvals", "{approval}"), self.decide,
                  "approve or refuse a waiting call (body: {\"approve\": true|false, "
                  "\"reason\"?})"),
            Route("POST", ("stop",), self.stop_all, "stop what every assistant is doing"),
            Route("POST", ("emergency-stop",), self.emergency_stop,
                  "stop every assistant (or ?assistant=) until cleared"),
            Route("POST", ("emergency-stop", "clear"), self.clear_emergency_stop,
                  "clear the emergency stop (all, or ?assistant=)"),
            Route("GET", ("world", "characters"), self.world_characters,
                  "the world's characters, where they are, whose they are"),
            Route("GET", ("world", "rooms"), self.world_rooms,
                  "the world's rooms, their exits and who is in them"),
            Route("POST", ("world", "apply"), self.apply_world_file,
                  "apply the world file again (body: {\"mode\": \"merge\" | \"reseed\"})"),
            Route("POST", ("messages",), self.post_message,
                  "a player character says, poses, whispers, pages or posts on a channel"),
            Route("GET", ("characters", "{character}", "heard"), self.heard,
                  "what a character heard (?limit=, ?after=)"),
            Route("GET", ("traces",), self.traces,
                  "loop traces, newest first: the stored (?assistant=, ?reason=, ?tool=, "
                  "?failed=, ?since=, ?until=, ?limit=) and the running ones"),
            Route("GET", ("traces", "{trace_id}"), self.trace, "one stored loop trace, whole"),
            Route("GET", ("metrics",), self.metrics_page,
                  "the service's figures in the Prometheus text format"),
            Route("GET", ("events",), self.events,
                  "server-sent events (?assistant=, ?types=; Last-Event-ID replays)"),
            Route("GET", ("mcp", "servers"), self.mcp_servers,
                  "the MCP servers assistants use: state, tools (docs/mcp.md)"),
            *self._mcp_routes(),
        ]

    def _mcp_routes(self) -> list[Route]:
        if self.mcp is None:
            return []
        return [Route(method, ("mcp",), self.mcp_endpoint, f"MCP (Streamable HTTP): {what}")
                for method, what in (("POST", "one JSON-RPC message"),
                                     ("GET", "the session's event stream"),
                                     ("DELETE", "end the session"))]

    # -- lifecycle -----------------------------------------------------------------

    @property
    def clock(self) -> Any:
        """The reactor (or clock) for timers."""
        if self._clock is None:
            self._clock = global_reactor()
        return self._clock

    @property
    def hub(self) -> EventHub:
        """The event streams' fan-out (created on first use)."""
        if self._hub is None:
            self._hub = EventHub(self.service, self.world, self.clock, self.limits,
                                 keepalive=self.keepalive)
        return self._hub

    @property
    def others(self) -> OtherWorkers:
        """What this API does about assistants other workers run (created on first use)."""
        if self._others is None:
            if self._forwarder is None:
                limits = self.limits
                self._forwarder = Forwarder(
                    self.clock, timeout=limits.forward_timeout,
                    max_bytes=limits.forward_max_bytes,
                    stream_idle=2 * self.keepalive + limits.forward_timeout,
                    signer=self.worker_signer)
            self._others = OtherWorkers(self.service, self._forwarder, self.worker_hosts,
                                        max_streams=self.limits.max_streams,
                                        tick_timeout=self.limits.forward_tick_timeout)
        return self._others

    @property
    def service_events(self) -> ServiceEvents:
        """The other workers' loop events for the whole-service streams (made on first use)."""
        if self._service_events is None:
            # one event of another worker: at most its own limit, plus the frame's lines
            self._service_events = ServiceEvents(self.others, self.hub, self.clock,
                                                 max_frame=self.limits.max_event_bytes + 1024)
        return self._service_events

    @property
    def streams(self) -> set[EventStream]:
        """The open event streams."""
        return self.hub.streams

    def start(self) -> None:
        """Start recording loop results and observing events for the streams."""
        if self._remove_recorder is None:
            self._remove_recorder = self.service.add_observer(self.recorder)
        if self._remove_traces is None:
            self._remove_traces = self.service.add_observer(self.trace_recorder)
        self.metrics.start()
        self.hub.start()

    def shutdown(self) -> defer.Deferred[None]:
        """Close every event stream and stop observing; fires once the connections to
        other workers are closed."""
        if self._service_events is not None:
            self._service_events.stop()
        self.hub.stop()
        self.metrics.stop()
        if self._remove_recorder is not None:
            self._remove_recorder()
            self._remove_recorder = None
        if self._remove_traces is not None:
            self._remove_traces()
            self._remove_traces = None
        if self.mcp is not None:
            self.mcp.close()
        if self._forwarder is None:
            return defer.succeed(None)
        return self._forwarder.close()

    # -- dispatch --------------------------------------------------------------------

    def render(self, request: Any) -> bytes | int:
        """Check the request, route, run the handler; answer JSON (or stream events)."""
        request.setHeader(b"content-type", b"application/json")
        request.setHeader(b"cache-control", b"no-store")
        request.setHeader(b"x-content-type-options", b"nosniff")
        gone: list[bool] = []
        request.notifyFinish().addErrback(lambda _: gone.append(True))
        try:
            route, params = self._admit(request)
            d = self._dispatch(route, request, params)
            if d is None:  # an event stream of this worker's
                return server.NOT_DONE_YET
        except Exception:
            d = defer.fail(Failure())
        d.addCallbacks(self._reply, self._failed, callbackArgs=(request, gone),
                       errbackArgs=(request, gone))
        d.addErrback(lambda f: log.failure("Answering {uri} failed", f, uri=request.uri))
        return server.NOT_DONE_YET

    def _dispatch(self, route: Route, request: Any,
                  params: dict[str, str]) -> defer.Deferred[Any] | None:
        """Run the route's handler; with workers, a request about an assistant another
        worker runs is answered by :class:`~ai_tools.web.other_workers.OtherWorkers`."""
        handler = route.handler
        name = params.get("name")
        if handler in (self.events, self.emergency_stop, self.clear_emergency_stop):
            name = self._query(request, "assistant")
        if name is not None and self.others.handles(name):
            if handler == self.events:
                relayed: defer.Deferred[Any] = self.others.relay_events(request, name)
                return relayed.addCallback(lambda _: STREAMING)
            answered: defer.Deferred[Any] = self.others.answer(request, handler.__name__, name)
            return answered
        if handler == self.events:
            self.events(request)
            return None
        return defer.maybeDeferred(handler, request, **params)

    def _admit(self, request: Any) -> tuple[Route, dict[str, str]]:
        """The checks every request passes, in this order: Host and Origin (403), the
        token (401), the route (404/405), a JSON body's content type (415).  The
        console's page, files and sign-in need no token (:mod:`ai_tools.web.console`)."""
        self.policy.check(request)
        console = self.console.handler_for(request)
        params: dict[str, str] = {}
        if console is not None:
            route = Route("", (), console, "the web console")
        else:
            self._check_token(request)
            route, params = self._route(request)
        check_content_type(request)
        return route, params

    def _check_token(self, request: Any) -> None:
        """The bearer token, the console's session cookie, or (from another worker) a
        worker signature (:mod:`~ai_tools.web.worker_auth`)."""
        guard = self.token_guard
        if guard is None or self.console.signed_in(request):
            return
        if self.worker_signer is not None and request.getHeader(SIGNATURE_HEADER) is not None:
            self.worker_signer.check(request)
            return
        header = request.getHeader(b"authorization")
        if not header:
            raise ApiError(401, "missing token: send 'Authorization: Bearer <token>'",
                           headers={"WWW-Authenticate": 'Bearer realm="ai_tools"'})
        scheme, _, given = header.partition(b" ")
        if scheme.lower() != b"bearer":  # a malformed header, not a guess: say what is missing
            raise ApiError(401, "the Authorization header must be 'Bearer <token>' "
                           "(the word Bearer, a space, then the token)",
                           headers={"WWW-Authenticate": 'Bearer realm="ai_tools"'})
        guard.check(request, given.strip())

    def _segments(self, request: Any) -> list[str]:
        path = request.path.split(b"?", 1)[0]
        try:
            text = path.decode("ascii")
        except UnicodeDecodeError:
            raise ApiError(400, "the path is not ASCII (percent-encode it)") from None
        segments = [unquote(s, errors="strict") for s in text.split("/")[1:]]
        while segments and segments[-1] == "":
            segments.pop()
        return segments

    def _route(self, request: Any) -> tuple[Route, dict[str, str]]:
        try:
            segments = self._segments(request)
        except UnicodeDecodeError:
            raise ApiError(400, "the path is not valid UTF-8 once decoded") from None
        method = request.method.decode("ascii", "replace").upper()
        allowed: list[str] = []
        for route in self.routes:
            params = route.match(segments)
            if params is None:
                continue
            # HEAD is GET without the body, except for the never-ending event stream.
            head = method == "HEAD" and route.method == "GET" and route.handler != self.events
            if route.method == method or head:
                return route, params
            allowed.append(route.method)
        if allowed:
            allow = ", ".join(sorted(set(allowed)))
            raise ApiError(405, f"{method} is not allowed here; use {allow}",
                           headers={"Allow": allow})
        raise ApiError(404, f"no endpoint at {'/' + '/'.join(segments)}; GET / lists them")

    def _reply(self, body: Any, request: Any, gone: list[bool]) -> None:
        if gone or body is STREAMING:
            return
        if isinstance(body, RawAnswer):
            body.write_to(request)
            return
        status = 200
        if isinstance(body, tuple):
            status, body = body
        self._write(request, status, body)

    def _failed(self, failure: Failure, request: Any, gone: list[bool]) -> None:
        error = failure.value
        if isinstance(error, ApiError):
            api_error = error
        elif isinstance(error, NotFound):
            api_error = ApiError(404, str(error))
        elif isinstance(error, PermissionDenied):
            api_error = ApiError(403, str(error))
        else:
            log.failure("The HTTP API failed on {method} {uri}", failure,
                        method=request.method, uri=request.uri)
            api_error = ApiError(500, f"internal error: {type(error).__name__}")
        if gone:
            return
        for key, value in api_error.headers.items():
            request.setHeader(key.encode("ascii"), value.encode("latin-1"))
        if api_error.status == 413 or api_error.status >= 500:
            request.setHeader(b"connection", b"close")
        self._write(request, api_error.status,
                    error_body(api_error.status, api_error.message, api_error.field))

    def _write(self, request: Any, status: int, body: Any) -> None:
        try:
            data = _encode(body)
        except (TypeError, ValueError):
            log.failure("An API answer could not be encoded as JSON")
            status, data = 500, _encode(error_body(500, "internal error: bad answer"))
        request.setResponseCode(status)
        request.setHeader(b"content-length", str(len(data)).encode("ascii"))
        request.write(data)
        request.finish()

    # -- helpers -----------------------------------------------------------------------

    def _assistant(self, name: str) -> str:
        if name not in self.service:
            raise ApiError(404, f"no assistant named {name!r}", field="assistant")
        return name

    def _world(self) -> Any:
        if self.world is None:
            raise ApiError(503, "this service has no world")
        return self.world

    _query = staticmethod(query_text)
    _int_query = staticmethod(query_int)
    _bool_query = staticmethod(query_bool)

    # -- handlers ------------------------------------------------------------------------

    def index(self, request: Any) -> dict[str, Any]:
        """``GET /``."""
        ownership = self.others.ownership
        return {
            "service": "ai_tools",
            "assistants": self.service.names() if ownership is None else sorted(
                set(ownership.roster) | set(self.service.names())),
            "world_file_changed": bool(getattr(self.world, "file_changed", False)),
            "endpoints": [{"method": r.method, "path": r.path, "summary": r.summary}
                          for r in self.routes],
        }

    @defer.inlineCallbacks
    def list_assistants(self, request: Any) -> Any:
        """``GET /assistants``: with workers, every worker's (each with its ``worker``)."""
        status = self.service.status()
        local = list(status["assistants"].values())
        worker = self.others.worker()
        if worker is None:
            return {"service": status["service"], "assistants": local}
        for entry in local:
            entry["worker"] = worker
        answer = {"service": status["service"], "worker": worker, "assistants": local}
        if self.others.fans_out(request):
            listed, silent = yield self.others.every_assistant(request, local)
            answer.update(assistants=listed, workers_unreachable=silent)
        return answer

    def assistant_status(self, request: Any, name: str) -> dict[str, Any]:
        """``GET /assistants/{name}`` (with workers, ``worker`` says which runs it)."""
        status: dict[str, Any] = self.service.status(self._assistant(name))
        worker = self.others.worker()
        if worker is not None:
            status["worker"] = worker
        return status

    def history(self, request: Any, name: str) -> dict[str, Any]:
        """``GET /assistants/{name}/history?limit=N&before=I&after=I`` (see :mod:`.paging`)."""
        self._assistant(name)
        limit = self._int_query(request, "limit", 50)
        before = self._int_query(request, "before", None, 0, 2**62)
        after = self._int_query(request, "after", None, 0, 2**62)
        assert limit is not None
        page = history_page(self.service.history(name), limit, before, after)
        return {"assistant": name, **page}

    def results(self, request: Any, name: str) -> dict[str, Any]:
        """``GET /assistants/{name}/results?limit=N``."""
        self._assistant(name)
        limit = self._int_query(request, "limit", 10)
        return {
            "assistant": name,
            "last_tick": self.service.status(name).get("last_tick"),
            "loops": self.recorder.loops(name, limit),
        }

    def _prices(self, label: Any) -> Any:
        """The prices of the model profile called ``label`` (None: none, or unknown)."""
        for client in self.service.llms.values():
            profile = getattr(client, "profile", None)
            if profile is not None and profile.label == label:
                return getattr(profile, "prices", None)
        return None

    def traces(self, request: Any) -> Any:
        """``GET /traces``: the stored traces' summaries, newest first, and the live ones
        whole (``docs/http-api.md``)."""
        search = trace_search(request)
        recorder = self.trace_recorder
        live = recorder.live(search.assistant)
        if not recorder.stores:
            return {"traces": [], "live": live, "stored": False}
        d: defer.Deferred[Any] = self.service.store.list_traces(search)
        d.addCallbacks(lambda found: {"traces": found, "live": live, "stored": True},
                       _store_unavailable)
        return d

    def trace(self, request: Any, trace_id: str) -> Any:
        """``GET /traces/{id}``: one stored trace with its spans (404: not kept)."""
        if not trace_id.isdigit() or len(trace_id) > 18:
            raise ApiError(400, f"a trace id is a number, not {trace_id!r}", field="trace_id")
        if not self.trace_recorder.stores:
            raise ApiError(404, "this service keeps no traces")

        def found(trace: dict[str, Any] | None) -> dict[str, Any]:
            if trace is None:
                raise ApiError(404, f"no trace {trace_id} (only the newest are kept)")
            return trace

        d: defer.Deferred[Any] = self.service.store.get_trace(int(trace_id))
        return d.addCallbacks(found, _store_unavailable)

    def tick(self, request: Any, name: str) -> defer.Deferred[dict[str, Any]]:
        """``POST /assistants/{name}/tick``: fires when the tick ends."""
        self._assistant(name)
        d: defer.Deferred[Any] = self.service.run_tick(name)
        d.addCallback(lambda result: result.as_dict())
        return d

    def stop_assistant(self, request: Any, name: str) -> dict[str, Any]:
        """``POST /assistants/{name}/stop``: kill the model call or tool in flight."""
        self._assistant(name)
        stopped = self.service.stop_assistant(name, "stopped through the HTTP API")
        return {"assistant": name, "stopped": stopped}

    def enable(self, request: Any, name: str) -> defer.Deferred[dict[str, Any]]:
        """``POST /assistants/{name}/enable``."""
        self._assistant(name)
        d: defer.Deferred[Any] = self.service.enable(name)
        d.addCallback(lambda _: {"assistant": name, "enabled": True})
        return d

    def disable(self, request: Any, name: str) -> defer.Deferred[dict[str, Any]]:
        """``POST /assistants/{name}/disable``."""
        self._assistant(name)
        d: defer.Deferred[Any] = self.service.disable(name)
        d.addCallback(lambda _: {"assistant": name, "enabled": False})
        return d

    def create_assistant(self, request: Any) -> Any:
        """``POST /assistants``: 201 once it is added and saved."""
        return self.operator.create(parse_json_body(request, self.max_body))

    def reconfigure_assistant(self, request: Any, name: str) -> Any:
        """``PATCH /assistants/{name}``: answers once the new configuration is saved."""
        self._assistant(name)
        return self.operator.reconfigure(name, parse_json_body(request, self.max_body))

    def remove_assistant(self, request: Any, name: str) -> Any:
        """``DELETE /assistants/{name}?forget=``."""
        self._assistant(name)
        return self.operator.remove(name, self._bool_query(request, "forget"))

    def assistant_config(self, request: Any, name: str) -> dict[str, Any]:
        """``GET /assistants/{name}/config``."""
        return self.operator.config(self._assistant(name))

    def stop_all(self, request: Any) -> Any:
        """``POST /stop`` (with workers: on every worker)."""
        return self._everywhere(request, "/stop", self.operator.stop_all(), "stopped")

    def _everywhere(self, request: Any, path: str, local: dict[str, Any], key: str) -> Any:
        """``local`` (this worker's answer), with workers merged with every other's: the
        names under ``key`` joined."""
        if not self.others.fans_out(request):
            return local

        def merge(answer: dict[str, Any], other: Mapping[str, Any]) -> None:
            answer[key] = sorted({*answer[key], *other.get(key, ())})

        return self.others.merged(request, path, local, merge)

    def approvals(self, request: Any) -> Any:
        """``GET /approvals`` (with workers: every worker's)."""
        local = {"approvals": self.service.approvals.pending()}
        if not self.others.fans_out(request):
            return local

        def merge(answer: dict[str, Any], other: Mapping[str, Any]) -> None:
            more = other.get("approvals")
            if isinstance(more, list):
                answer["approvals"] = answer["approvals"] + more

        return self.others.merged(request, "/approvals", local, merge)

    def assistant_approvals(self, request: Any, name: str) -> dict[str, Any]:
        """``GET /assistants/{name}/approvals``."""
        return {"assistant": name,
                "approvals": self.service.approvals.pending(self._assistant(name))}

    def decide(self, request: Any, name: str, approval: str) -> dict[str, Any]:
        """``POST /assistants/{name}/approvals/{id}``: the operator's yes or no."""
        self._assistant(name)
        approve, reason = parse_decision(parse_json_body(request, self.max_body))
        board = self.service.approvals
        if board.get(approval)["assistant"] != name:
            raise ApiError(404, f"no call of {name!r} waits for approval {approval!r}",
                           field="approval")
        by = "console" if self.console.signed_in(request) else "api"
        return board.decide(approval, approve, by=by, reason=reason)

    def emergency_stop(self, request: Any) -> dict[str, Any]:
        """``POST /emergency-stop?assistant=`` (optional body ``{"reason": ...}``)."""
        name = self._query(request, "assistant")
        body = parse_json_body(request, self.max_body) if body_size(request) else {}
        unknown = sorted(set(body) - {"reason"})
        if unknown:
            raise ApiError(422, f"unknown field {unknown[0]!r} (only 'reason')",
                           field=unknown[0])
        reason = body.get("reason", "")
        if not isinstance(reason, str) or len(reason) > MAX_TEXT:
            raise ApiError(422, f"reason must be a string of at most {MAX_TEXT} characters",
                           field="reason")
        if name is not None:
            return self.operator.emergency_stop(self._assistant(name), reason)
        return self._everywhere(request, "/emergency-stop",
                                self.operator.emergency_stop(None, reason), "emergency_stopped")

    def clear_emergency_stop(self, request: Any) -> Any:
        """``POST /emergency-stop/clear?assistant=`` (all: with workers, on every worker)."""
        name = self._query(request, "assistant")
        if name is not None:
            return self.operator.clear_emergency_stop(self._assistant(name))
        return self._everywhere(request, "/emergency-stop/clear",
                                self.operator.clear_emergency_stop(None), "cleared")

    def mcp_endpoint(self, request: Any) -> object:
        """``POST``/``GET``/``DELETE /mcp``: answered by the MCP endpoint itself."""
        self.mcp.render(request)
        return STREAMING

    def metrics_page(self, request: Any) -> RawAnswer:
        """``GET /metrics``: the Prometheus text format."""
        return RawAnswer(self.metrics.render(), METRICS_TYPE)

    def mcp_servers(self, request: Any) -> dict[str, Any]:
        """``GET /mcp/servers``: each configured MCP server, its state and its tools."""
        sources = getattr(self.service, "tool_sources", None)
        status = getattr(sources, "status", None)
        return {"servers": status() if status is not None else []}

    def world_characters(self, request: Any) -> dict[str, Any]:
        """``GET /world/characters``."""
        return self.operator.characters()

    def world_rooms(self, request: Any) -> dict[str, Any]:
        """``GET /world/rooms``."""
        return self.operator.rooms()

    def apply_world_file(self, request: Any) -> Any:
        """``POST /world/apply``: answers once the applied world is saved."""
        return self.operator.apply_world_file(parse_json_body(request, self.max_body))

    @defer.inlineCallbacks
    def post_message(self, request: Any) -> Any:
        """``POST /messages``: a player's message, answered once its hearers saved it."""
        world = self._world()
        message = parse_message(parse_json_body(request, self.max_body))
        yield self._check_speaker(world, message.character)
        if message.kind in DIRECT_KINDS:
            target = yield self._target_character(world, str(message.target))
            message = attrs.evolve(message, target=target)
        heard = yield speak(world, message)
        yield self._heard_saved(world, heard)
        assistants = assistants_by_character(self.service)
        return {
            "character": message.character,
            "kind": message.kind,
            "target": message.target,
            "text": message.text,
            "heard_by": heard,
            "assistants": sorted({assistants[c] for c in heard if c in assistants}),
        }

    @defer.inlineCallbacks
    def _check_speaker(self, world: Any, character: str) -> Any:
        """A player character: it exists, and no assistant here speaks through it."""
        sender = yield defer.maybeDeferred(world.get_object, character)
        if not isinstance(sender, Mapping) or sender.get("kind") != "character":
            raise ApiError(404, f"no character with id {character!r}", field="character")
        owner = assistants_by_character(self.service).get(character)
        ownership = getattr(self.service, "ownership", None)
        if owner is None and ownership is not None:
            # With workers, the assistant may run on another one: ask who shares them.
            owner = ownership.assistant_of_character(character)
        if owner is not None:
            raise ApiError(403, f"{character} is the character of assistant {owner!r}; "
                           "the API speaks only as players", field="character")

    @defer.inlineCallbacks
    def _heard_saved(self, world: Any, heard: Sequence[str]) -> Any:
        """Wait until what the hearers heard is durable (else 503): the hearing assistants'
        pending events, and the world's heard log where it keeps one (players read it).

        Both writes are waited for and both outcomes consumed (one may have failed
        before the other: its failure must not be left unhandled); a failure is
        logged once per class until messages are saved again."""
        keeping = getattr(world, "heard_kept", None)
        writes = [self.service.when_heard_saved(heard)]
        if keeping is not None:
            writes.append(keeping())  # (asked now: of this message)
        outcomes = yield defer.DeferredList(writes, consumeErrors=True)
        failed = [result.value for ok, result in outcomes if not ok]
        if not failed:
            self._unsaved.worked()
            return
        exc = failed[0]
        why = str(exc) or type(exc).__name__
        self._unsaved.failed(exc)
        raise ApiError(503, "the message was spoken, but what the assistants heard could "
                       f"not be saved ({why}); it may be lost if the service stops",
                       headers={"Retry-After": "10"})

    @defer.inlineCallbacks
    def _target_character(self, world: Any, target: str) -> Any:
        """A whisper/page target: a character id, or the name of a hosted assistant."""
        found = yield defer.maybeDeferred(world.get_object, target)
        if isinstance(found, Mapping) and found.get("kind") == "character":
            return target
        if target in self.service:
            char_id = self.service.get(target).config.character_id
            if char_id:
                return char_id
        raise ApiError(404, f"no character (or assistant) called {target!r}", field="target")

    def heard(self, request: Any, character: str) -> dict[str, Any]:
        """``GET /characters/{id}/heard?limit=&after=``."""
        world = self._world()
        reader = getattr(world, "heard", None)
        if reader is None:
            raise ApiError(501, "this world keeps no hearing log")
        limit = self._int_query(request, "limit", 50)
        after = self._int_query(request, "after", None, 0, 2**62)
        try:
            messages = reader(character, limit=limit, after=after)
        except NotFound:
            raise ApiError(404, f"no character with id {character!r}",
                           field="character") from None
        return {"character": character, "messages": messages}

    def events(self, request: Any) -> None:
        """``GET /events?assistant=&types=&last_event_id=``: open a server-sent event stream.

        The ``Last-Event-ID`` header (a browser's reconnect) or ``last_event_id``
        replays the kept events the client missed.  With workers, the stream
        without ``?assistant=`` shows every worker's loop events; one another
        worker opened here shows this worker's own only.
        """
        only = self._query(request, "assistant")
        if only is not None:
            self._assistant(only)
        types_text = self._query(request, "types")
        types = (frozenset(t.strip() for t in types_text.split(",") if t.strip())
                 if types_text else None)
        stream = self.hub.open(request, only, types, self._last_event_id(request),
                               local_only=forwarded(request))
        if only is None and self.others.fans_out(request):
            self.service_events.watch(stream)

    def _last_event_id(self, request: Any) -> int | None:
        header = request.getHeader(b"last-event-id")
        if header is None:
            return self._int_query(request, "last_event_id", None, 0, 2**62)
        try:
            value = int(header.strip())
        except ValueError:
            value = -1
        if not 0 <= value <= 2**62:
            raise ApiError(400, "Last-Event-ID must be an event id this service sent "
                           "(a non-negative integer)", field="Last-Event-ID")
        return value


class ApiSite(server.Site):
    """The API's ``Site``: body limit while reading, connection caps, request deadlines.

    Requests are :class:`~ai_tools.web.body.LimitedRequest` (``max_body``),
    connections :class:`~ai_tools.web.connections.GuardedChannel` counted by
    ``connections`` under ``limits``; no traceback is ever sent.
    """

    requestFactory = LimitedRequest
    protocol = GuardedChannel  # type: ignore[assignment]

    def __init__(self, resource: ApiResource, *, max_body: int, clock: Any,
                 limits: HttpLimits | None = None) -> None:
        # no idle timer of twisted.web's own: the channel's deadlines replace it
        super().__init__(resource, timeout=None, reactor=clock)
        self.max_body = max_body
        self.clock = clock
        self.limits = limits if limits is not None else HttpLimits()
        self.connections = ConnectionLimits(self.limits)
        self.displayTracebacks = False


class WebService(MultiService):
    """The HTTP API as a service: the listener plus the resource's observers and streams."""

    def __init__(self, resource: ApiResource, site: ApiSite, endpoint: str,
                 reactor: Any = None) -> None:
        super().__init__()
        self.resource = resource
        self.site = site
        self.endpoint = endpoint
        self.listener = ListeningService(endpoint, site, reactor=reactor)
        self.listener.setServiceParent(self)

    def startService(self) -> None:
        """Start recording loop results, then listen (the Host rule learns the port)."""
        self.resource.start()
        bound = self.listener.when_listening()
        bound.addCallbacks(lambda port: self.resource.policy.bind(port.getHost()),
                           lambda _: None)  # a failed listen is raised to the starter
        try:
            super().startService()
        except BaseException:
            self.resource.shutdown()
            raise

    def stopService(self) -> defer.Deferred[None]:
        """Close the event streams and stop listening; fires once the port and the
        connections to other workers are closed."""
        closed = self.resource.shutdown()
        d: defer.Deferred[Any] = defer.maybeDeferred(super().stopService)
        d.addCallback(lambda _: closed)
        return d

    def when_listening(self) -> defer.Deferred[Any]:
        """Fires with the ``IListeningPort`` (``.getHost().port``) once listening."""
        return self.listener.when_listening()


def make_web_service(
    service: Any,
    world: Any,
    *,
    endpoint: str = "tcp:8080:interface=127.0.0.1",
    token: str | None = None,
    max_body: int = DEFAULT_MAX_BODY,
    clock: Any = None,
    limits: HttpLimits | Mapping[str, Any] | None = None,
    allowed_hosts: Sequence[str] = (),
    worker_hosts: Sequence[str] = (),
    mcp: Any = None,
) -> WebService:
    """The HTTP API of ``service`` (and ``world``) listening on ``endpoint`` (strports).

    Returns an ``IService`` (a :class:`WebService`, i.e. a ``MultiService``):
    ``make_web_service(...).setServiceParent(application)``.

    A ``token`` is required when the endpoint is reachable from other machines
    (an interface that is not a loopback address, or no interface at all);
    with a token, every request needs ``Authorization: Bearer <token>``.
    ``max_body`` bounds request bodies in bytes; ``limits`` (an
    :class:`~ai_tools.web.limits.HttpLimits` or a mapping of its settings)
    the connections, request deadlines and event streams.  ``allowed_hosts``
    names this service has besides localhost and its address (``name`` or
    ``name:port``: a reverse proxy, a tunnel).  ``worker_hosts``: with
    several workers, the only hosts another worker's API address may name
    (empty: any; see :mod:`~ai_tools.web.worker_auth`).  ``mcp`` (an
    :class:`~ai_tools.mcp.serve_config.McpServeConfig`) serves the game's tools
    over MCP at ``/mcp``, behind the same checks.  ``clock`` is the reactor
    (default: the global one).  Raises ConfigError for a bad combination.
    """
    if token is not None and (not isinstance(token, str) or not token.strip()):
        raise ConfigError("the HTTP API token must be a non-empty string")
    if token is None and not binds_locally(endpoint):
        raise ConfigError(
            f"the HTTP API endpoint {endpoint!r} is reachable from other machines: "
            "set a token (or bind interface=127.0.0.1)"
        )
    if isinstance(max_body, bool) or not isinstance(max_body, int) or max_body < 1:
        raise ConfigError(f"the HTTP API max_body must be a positive integer, not {max_body!r}")
    if not isinstance(limits, HttpLimits):
        limits = HttpLimits.from_mapping(limits or {}, "http")
    policy = OriginPolicy(allowed_hosts=tuple(allowed_hosts))
    endpoint_mcp = (_mcp_endpoint(mcp, service, world, clock, limits, max_body)
                    if mcp is not None else None)
    resource = ApiResource(service, world, token=token, max_body=max_body, clock=clock,
                           limits=limits, policy=policy, worker_hosts=worker_hosts,
                           mcp=endpoint_mcp)
    site = ApiSite(resource, max_body=max_body, clock=resource.clock, limits=limits)
    reactor = clock if clock is not None and hasattr(clock, "listenTCP") else None
    return WebService(resource, site, endpoint, reactor=reactor)


def _mcp_endpoint(mcp: Any, service: Any, world: Any, clock: Any, limits: HttpLimits,
                  max_body: int) -> Any:
    """The game's tools as an MCP server at ``/mcp`` (:mod:`ai_tools.mcp.server_http`)."""
    from ai_tools.mcp.game_tools import game_server
    from ai_tools.mcp.server_http import McpHttpEndpoint

    the_clock = clock if clock is not None else getattr(service, "clock", None)
    return McpHttpEndpoint(
        game_server(mcp, service, world, the_clock), the_clock,
        max_sessions=mcp.max_sessions, session_idle=mcp.session_idle,
        stream_buffer=limits.stream_buffer, stall_timeout=limits.stream_stall_timeout,
        max_message_bytes=max_body)
