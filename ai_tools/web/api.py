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

:class:`ApiResource` composes the areas of :mod:`ai_tools.web.routes` (one module
each: assistants, approvals, stopping, world and messages, traces, metrics,
events, MCP); it admits every request once (:mod:`~ai_tools.web.guards`),
passes on a request about an assistant another worker runs, and answers
(:mod:`~ai_tools.web.answers`).

With several workers sharing a PostgreSQL store, each worker's API answers
for the whole service: a request about an assistant another worker runs is
passed on to it, or answered from the database
(:mod:`~ai_tools.web.other_workers`), and ``GET /events`` without
``?assistant=`` carries every worker's loop events
(:mod:`~ai_tools.web.service_events`).

Build it with :func:`make_web_service` and add it to the application.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, cast

from twisted.application.service import MultiService
from twisted.internet import defer
from twisted.internet.interfaces import IListeningPort, IReactorTCP, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import server
from twisted.web.resource import Resource

from ai_tools.default_reactor import global_reactor
from ai_tools.errors import ConfigError
from ai_tools.web.answers import api_error, send_error_headers, write_json
from ai_tools.web.body import DEFAULT_MAX_BODY, LimitedRequest
from ai_tools.web.connections import ConnectionLimits, GuardedChannel
from ai_tools.web.console import ConsolePages, RawAnswer
from ai_tools.web.errors import error_body
from ai_tools.web.event_hub import EventHub
from ai_tools.web.forwarding import Forwarder
from ai_tools.web.guards import RequestGuards
from ai_tools.web.limits import HttpLimits
from ai_tools.web.listen import ListeningService, binds_locally
from ai_tools.web.messages import MAX_TEXT, MESSAGE_KINDS
from ai_tools.web.metrics import Metrics
from ai_tools.web.operator import Operator
from ai_tools.web.origin import OriginPolicy
from ai_tools.web.other_workers import OtherWorkers
from ai_tools.web.query import query_text
from ai_tools.web.results import LoopRecorder
from ai_tools.web.routes.approvals import ApprovalRoutes
from ai_tools.web.routes.assistants import AssistantRoutes
from ai_tools.web.routes.events import EventRoutes
from ai_tools.web.routes.mcp import McpRoutes
from ai_tools.web.routes.metrics import MetricsRoutes
from ai_tools.web.routes.stopping import StopRoutes
from ai_tools.web.routes.traces import TraceRoutes
from ai_tools.web.routes.world import WorldRoutes
from ai_tools.web.routing import STREAMING, Route
from ai_tools.web.service_events import ServiceEvents
from ai_tools.web.sse import EventStream
from ai_tools.web.token_guard import TokenGuard
from ai_tools.web.traces import TraceRecorder
from ai_tools.web.worker_auth import WorkerSigner

if TYPE_CHECKING:
    from ai_tools.llm.profile import Prices
    from ai_tools.mcp.serve_config import McpServeConfig
    from ai_tools.mcp.server_http import McpHttpEndpoint
    from ai_tools.service.service import AssistantService
    from ai_tools.world.sandbox import SandboxWorld

__all__ = ["MAX_TEXT", "MESSAGE_KINDS", "ApiResource", "ApiSite", "WebService",
           "make_web_service"]

log = Logger()


class ApiResource(Resource):
    """The whole API as one leaf resource that routes by path and method.

    ``service`` is the :class:`~ai_tools.service.service.AssistantService`, ``world``
    its world (None: the message and hearing endpoints answer 503).  Every
    request first passes the ``policy`` (Host, Origin), then the ``token``;
    ``limits`` bound the event streams.  The endpoints are those of the areas
    in :mod:`ai_tools.web.routes`, each given this resource as its
    :class:`~ai_tools.web.routes.parts.ApiParts`.
    """

    isLeaf = True

    def __init__(
        self,
        service: AssistantService,
        world: SandboxWorld | None = None,
        *,
        token: str | None = None,
        max_body: int = DEFAULT_MAX_BODY,
        clock: IReactorTime | None = None,
        keepalive: float = 15.0,
        recorder: LoopRecorder | None = None,
        limits: HttpLimits | None = None,
        policy: OriginPolicy | None = None,
        forwarder: Forwarder | None = None,
        worker_hosts: Sequence[str] = (),
        mcp: McpHttpEndpoint | None = None,
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
        self.guards = RequestGuards(self.policy, self.console, self.token_guard,
                                    self.worker_signer)
        self._hub: EventHub | None = None
        self.operator = Operator(service, world)
        self.metrics = Metrics(service, streams=lambda: len(self.streams))
        self._remove_recorder: Callable[[], None] | None = None
        self._forwarder = forwarder
        self._others: OtherWorkers | None = None
        self._service_events: ServiceEvents | None = None
        self.routes = self._routes()

    def _routes(self) -> list[Route]:
        """``GET /`` first, then every area's endpoints."""
        areas = (AssistantRoutes(self), ApprovalRoutes(self), StopRoutes(self),
                 WorldRoutes(self), TraceRoutes(self), MetricsRoutes(self), EventRoutes(self),
                 McpRoutes(self))
        return [Route("GET", (), self.index, "what this is, the endpoints"),
                *(route for area in areas for route in area.routes())]

    def index(self, request: server.Request) -> dict[str, object]:
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

    def _prices(self, label: object) -> Prices | None:
        """The prices of the model profile called ``label`` (None: none, or unknown)."""
        for client in self.service.llms.values():
            profile = getattr(client, "profile", None)
            if profile is not None and profile.label == label:
                prices: Prices | None = getattr(profile, "prices", None)
                return prices
        return None

    # -- lifecycle -----------------------------------------------------------------

    @property
    def clock(self) -> IReactorTime:
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

    def render(self, request: server.Request) -> bytes | int:
        """Check the request, route, run the handler; answer JSON (or stream events)."""
        request.setHeader(b"content-type", b"application/json")
        request.setHeader(b"cache-control", b"no-store")
        request.setHeader(b"x-content-type-options", b"nosniff")
        gone: list[bool] = []
        request.notifyFinish().addErrback(lambda _: gone.append(True))
        try:
            route, params = self.guards.admit(request, self.routes)
            d = self._dispatch(route, request, params)
            if d is None:  # an event stream of this worker's
                return server.NOT_DONE_YET
        except Exception:
            d = defer.fail(Failure())
        d.addCallbacks(self._reply, self._failed, callbackArgs=(request, gone),
                       errbackArgs=(request, gone))
        d.addErrback(lambda f: log.failure("Answering {uri} failed", f, uri=request.uri))
        return server.NOT_DONE_YET

    def _dispatch(self, route: Route, request: server.Request,
                  params: dict[str, str]) -> defer.Deferred[object] | None:
        """Run the route's handler; with workers, a request about an assistant another
        worker runs is answered by :class:`~ai_tools.web.other_workers.OtherWorkers`."""
        name = query_text(request, "assistant") if route.assistant_query else params.get("name")
        if name is not None and self.others.handles(name):
            if route.stream:
                relayed: defer.Deferred[object] = self.others.relay_events(request, name)
                return relayed.addCallback(lambda _: STREAMING)
            answered: defer.Deferred[object] = self.others.answer(request, route.endpoint,
                                                                  name)
            return answered
        if route.stream:
            route.handler(request)
            return None
        return defer.maybeDeferred(route.handler, request, **params)

    def _reply(self, body: object, request: server.Request, gone: list[bool]) -> None:
        if gone or body is STREAMING:
            return
        if isinstance(body, RawAnswer):
            body.write_to(request)
            return
        status = 200
        if isinstance(body, tuple):
            status, body = body
        self._write(request, status, body)

    def _failed(self, failure: Failure, request: server.Request, gone: list[bool]) -> None:
        error = api_error(failure, request)
        if gone:
            return
        send_error_headers(request, error)
        self._write(request, error.status, error_body(error.status, error.message, error.field))

    def _write(self, request: server.Request, status: int, body: object) -> None:
        write_json(request, status, body)


class ApiSite(server.Site):
    """The API's ``Site``: body limit while reading, connection caps, request deadlines.

    Requests are :class:`~ai_tools.web.body.LimitedRequest` (``max_body``),
    connections :class:`~ai_tools.web.connections.GuardedChannel` counted by
    ``connections`` under ``limits``; no traceback is ever sent.
    """

    requestFactory = LimitedRequest
    protocol = GuardedChannel  # type: ignore[assignment]

    def __init__(self, resource: ApiResource, *, max_body: int, clock: IReactorTime,
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
                 reactor: IReactorTCP | None = None) -> None:
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
        d = defer.maybeDeferred(super().stopService)
        return d.addCallback(lambda _: closed)

    def when_listening(self) -> defer.Deferred[IListeningPort]:
        """Fires with the ``IListeningPort`` (``.getHost().port``) once listening."""
        return self.listener.when_listening()


def make_web_service(
    service: AssistantService,
    world: SandboxWorld | None,
    *,
    endpoint: str = "tcp:8080:interface=127.0.0.1",
    token: str | None = None,
    max_body: int = DEFAULT_MAX_BODY,
    clock: IReactorTime | None = None,
    limits: HttpLimits | Mapping[str, object] | None = None,
    allowed_hosts: Sequence[str] = (),
    worker_hosts: Sequence[str] = (),
    mcp: McpServeConfig | None = None,
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
    reactor = cast(IReactorTCP, clock) if IReactorTCP.providedBy(clock) else None
    return WebService(resource, site, endpoint, reactor=reactor)


def _mcp_endpoint(mcp: McpServeConfig, service: AssistantService, world: SandboxWorld | None,
                  clock: IReactorTime | None, limits: HttpLimits,
                  max_body: int) -> McpHttpEndpoint:
    """The game's tools as an MCP server at ``/mcp`` (:mod:`ai_tools.mcp.server_http`)."""
    from ai_tools.mcp.game_tools import game_server
    from ai_tools.mcp.server_http import McpHttpEndpoint

    the_clock = clock if clock is not None else service.clock
    return McpHttpEndpoint(
        game_server(mcp, service, world, the_clock), the_clock,
        max_sessions=mcp.max_sessions, session_idle=mcp.session_idle,
        stream_buffer=limits.stream_buffer, stall_timeout=limits.stream_stall_timeout,
        max_message_bytes=max_body)
