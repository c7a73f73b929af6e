"""Connections to the configured MCP servers, kept alive; their tools for each loop.

:class:`McpServerConnection` runs one server: connect and initialise (within
``init_timeout``), list its tools, and when it dies (a stdio process ended,
an HTTP server unreachable) reconnect with exponential backoff — 1 s, 2 s,
4 s ... up to :data:`MAX_BACKOFF` — for as long as the service runs.  Its
state is ``connecting``, ``ready``, ``failed`` (the last attempt failed; the
next is scheduled) or ``restarting`` (it died after being ready), ``stopped``.

:class:`McpClientService` holds them all (a Twisted service: started with the
assistants' service, stopped with it — stdio children get ``SIGTERM`` then
``SIGKILL``) and gives each loop its tools: :meth:`McpClientService.registry_for`
is the service's registry plus the tools of the servers an assistant may use
that are ready *when the loop starts*.  A loop keeps that registry to its
end, so a server's ``tools/list_changed`` changes what the next loop sees,
never a loop in flight, and a server that is down is not offered at all (its
calls in flight end with a clear error the model reads).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from twisted.application.service import Service
from twisted.internet import defer, error
from twisted.logger import Logger
from twisted.python.failure import Failure

from ai_tools.json_types import JSONObject
from ai_tools.mcp.client import McpSession, McpTransport, ServerGone, describe_error
from ai_tools.mcp.config import McpServerConfig
from ai_tools.mcp.content import tool_result
from ai_tools.mcp.http_transport import SessionExpired
from ai_tools.mcp.jsonrpc import JSONRPCError
from ai_tools.mcp.tools import McpTool, build_tools
from ai_tools.mcp.tracing import ClientTracing
from ai_tools.tools.base import Actor
from ai_tools.tools.registry import ToolRegistry

__all__ = ["MAX_BACKOFF", "McpClientService", "McpServerConnection", "make_transport"]

if TYPE_CHECKING:
    from twisted.internet.interfaces import IDelayedCall

    from ai_tools.telemetry.setup import Telemetry

log = Logger()

TelemetrySource = Callable[[], "Telemetry | None"]
"""Gives the telemetry the service traces with now (None: tracing off)."""

MAX_BACKOFF = 60.0
READY, CONNECTING, FAILED, RESTARTING, STOPPED = (
    "ready", "connecting", "failed", "restarting", "stopped")


def make_transport(config: McpServerConfig, reactor: Any) -> McpTransport:
    """The transport a server's config asks for."""
    if config.command is not None:
        from ai_tools.mcp.stdio import StdioTransport

        return StdioTransport(config.command, config.args, reactor=reactor, env=config.env,
                              cwd=config.cwd, name=config.name,
                              max_message_bytes=config.max_message_bytes)
    from ai_tools.mcp.http_transport import HttpTransport

    assert config.url is not None
    return HttpTransport(config.url, reactor=reactor, headers=config.request_headers(),
                         name=config.name, max_message_bytes=config.max_message_bytes,
                         request_timeout=config.timeout)


class McpServerConnection:
    """One configured server, kept connected (see the module docstring)."""

    def __init__(self, config: McpServerConfig, reactor: Any, *,
                 taken: Callable[[], Iterable[str]] = tuple,
                 transport_factory: Callable[[McpServerConfig, Any], McpTransport]
                 = make_transport, telemetry: TelemetrySource | None = None) -> None:
        self.config = config
        self.name = config.name
        self.state = STOPPED
        self.error: str | None = None
        self.tools: tuple[McpTool, ...] = ()
        self.tools_version = 0
        self.restarts = 0
        self.session: McpSession | None = None
        self._reactor = reactor
        self._taken = taken
        self._factory = transport_factory
        self._telemetry = telemetry
        self._failures = 0
        self._next_attempt: IDelayedCall | None = None
        self._connecting: defer.Deferred[list[JSONObject]] | None = None
        self._waiting_for_session: list[defer.Deferred[None]] = []
        self._running = False

    # ---- lifecycle

    def start(self) -> None:
        """Connect now, and keep connecting until :meth:`stop`."""
        self._running = True
        self._connect()

    def _connect(self) -> None:
        self._next_attempt = None
        if self.state not in (RESTARTING, FAILED):
            self.state = CONNECTING
        try:
            transport = self._factory(self.config, self._reactor)
        except Exception as e:
            self._attempt_failed(Failure(e))
            return
        session = self.session = McpSession(transport, name=self.name,
                                            on_tools_changed=self._tools_changed,
                                            tracing=self._tracing())
        d = self._connecting = self._initialised_tools(session)
        d.addCallback(self._ready, session)
        d.addErrback(self._attempt_failed, session)

    def _tracing(self) -> ClientTracing | None:
        """CLIENT spans for a new session when tracing is on (the service's telemetry)."""
        telemetry = self._telemetry() if self._telemetry is not None else None
        return None if telemetry is None else telemetry.mcp_client_tracing(self.config.url)

    def _initialised_tools(self, session: McpSession) -> defer.Deferred[list[JSONObject]]:
        """Connect, initialise and list the tools, all within ``init_timeout``."""
        connected = session.connect(self.config.init_timeout, self._reactor)
        d = connected.addCallback(lambda _: session.list_tools(self.config.max_tools))
        d.addTimeout(self.config.init_timeout, self._reactor)
        return d

    def _ready(self, listed: list[JSONObject], session: McpSession) -> None:
        self._connecting = None
        if session.closed:  # it died between the answer and now
            return
        self._set_tools(listed)
        self.state, self.error, self._failures = READY, None, 0
        session.when_lost(lambda reason: self._lost(session, reason))
        log.info("MCP server {server} ready: protocol {version}, {count} tool(s): {tools}",
                 server=self.name, version=session.protocol_version, count=len(self.tools),
                 tools=", ".join(t.name for t in self.tools))

    def _attempt_failed(self, failure: Failure, session: McpSession | None = None) -> None:
        self._connecting = None
        if not self._running:
            return
        if failure.check(defer.CancelledError, defer.TimeoutError):
            message = (f"no answer to initialize and tools/list within "
                       f"{self.config.init_timeout:g}s")
        else:
            message = describe_error(failure.value)
        self.error = message
        self.state = FAILED
        log.warn("MCP server {server}: connecting failed: {error}", server=self.name,
                 error=message)
        if session is not None and not session.closed:
            session.close()
        self._schedule_retry()

    def _lost(self, session: McpSession, reason: Failure) -> None:
        if session is not self.session or not self._running:
            return
        self.state, self.error = RESTARTING, f"went away: {reason.getErrorMessage()}"
        self.restarts += 1
        log.warn("MCP server {server} went away ({error}); restarting", server=self.name,
                 error=reason.getErrorMessage())
        self._schedule_retry()

    def _schedule_retry(self) -> None:
        delay = min(MAX_BACKOFF, 2.0 ** self._failures)
        self._failures += 1
        if self._running and self._next_attempt is None:
            self._next_attempt = self._reactor.callLater(delay, self._connect)

    def stop(self) -> defer.Deferred[None]:
        """Stop reconnecting; close the session (a stdio child: SIGTERM, then SIGKILL)."""
        self._running = False
        self.state = STOPPED
        if self._next_attempt is not None and self._next_attempt.active():
            self._next_attempt.cancel()
        self._next_attempt = None
        if self._connecting is not None:
            self._connecting.cancel()
        session, self.session = self.session, None
        if session is None:
            return defer.succeed(None)
        return session.close()

    # ---- tools

    def _set_tools(self, listed: list[JSONObject]) -> None:
        self.tools = tuple(build_tools(listed, self.config, self.call, set(self._taken())))
        self.tools_version += 1

    def _tools_changed(self) -> None:
        """``tools/list_changed``: list again; the next loops see the new list."""
        session = self.session
        if session is None or self.state != READY:
            return
        d = session.list_tools(self.config.max_tools)
        d.addTimeout(self.config.init_timeout, self._reactor)
        d.addCallback(self._set_tools)
        d.addErrback(lambda f: log.warn("MCP server {server}: listing its changed tools "
                                        "failed: {error}", server=self.name,
                                        error=f.getErrorMessage()))

    @property
    def ready(self) -> bool:
        """Whether its tools can be offered now."""
        return self.state == READY

    def call(self, remote_name: str, arguments: JSONObject,
             actor: Actor | None = None) -> defer.Deferred[JSONObject]:
        """Call a tool of this server: the result dict the model reads.

        Cancelling the Deferred sends ``notifications/cancelled``.  A server
        that is not ready, or goes away, fails it with :class:`ServerGone` (the
        engine retries that, with backoff); a forgotten HTTP session is
        initialised again and the call sent once more.
        """
        session = self.session
        if self._waiting_for_session:  # a new session is being initialised: wait for it
            return self._reinitialise().addCallback(
                lambda _: self.call(remote_name, arguments, actor))
        if session is None or self.state != READY:
            return defer.fail(ServerGone(
                f"MCP server {self.name} is not available ({self.state}"
                f"{': ' + self.error if self.error else ''})"))
        progress = _progress_publisher(actor, self.name, remote_name)
        parent = _call_context(actor) if session.tracing is not None else None
        d = session.call_tool(remote_name, arguments, on_progress=progress, trace_parent=parent)
        d.addCallback(tool_result, self.config.max_result_bytes)
        d.addErrback(self._call_failed, remote_name, arguments, actor)
        return d

    def _call_failed(self, failure: Failure, remote_name: str, arguments: JSONObject,
                     actor: Actor | None) -> JSONObject | defer.Deferred[JSONObject] | Failure:
        if failure.check(SessionExpired) and self._running:
            return self._reinitialise().addCallback(
                lambda _: self.call(remote_name, arguments, actor))
        if failure.check(JSONRPCError):
            return {"success": False, "error": describe_error(failure.value)}
        if failure.check(error.ConnectError) and self.session is not None:
            # an HTTP server we cannot reach: withhold its tools until it answers again
            self._lost(self.session, failure)
            self.session.close()
        return failure

    def _reinitialise(self) -> defer.Deferred[None]:
        """A new session after a 404: one, for all the calls that met it at once."""
        waiter: defer.Deferred[None] = defer.Deferred()
        self._waiting_for_session.append(waiter)
        if len(self._waiting_for_session) == 1:
            log.info("MCP server {server}: session expired; initialising a new one",
                     server=self.name)
            self._new_session().addBoth(self._session_renewed)
        return waiter

    def _session_renewed(self, result: object) -> None:
        waiters, self._waiting_for_session = self._waiting_for_session, []
        for waiter in waiters:
            if isinstance(result, Failure):
                waiter.errback(result)
            else:
                waiter.callback(None)

    def _new_session(self) -> defer.Deferred[None]:
        session = self.session
        assert session is not None
        self.state = CONNECTING
        d = self._initialised_tools(session)

        def done(listed: list[JSONObject]) -> None:
            self._set_tools(listed)
            self.state = READY

        def failed(failure: Failure) -> Failure:
            self._attempt_failed(failure, session)
            return failure

        return d.addCallbacks(done, failed)

    def status(self) -> JSONObject:
        """What the operator API and the console show of this server."""
        return {
            "name": self.name, "transport": self.config.transport,
            "target": self.config.describe(), "state": self.state, "error": self.error,
            "restarts": self.restarts,
            "protocol_version": self.session.protocol_version if self.session else None,
            "server_info": self.session.server_info if self.session else {},
            "tools": [{"name": t.name, "remote_name": t.remote_name,
                       "category": t.category.value, "description": t.description}
                      for t in self.tools],
        }


def _call_context(actor: Actor | None) -> object:
    """The trace context of the ``execute_tool`` span of ``actor``'s call in flight: the
    parent of its ``tools/call`` span (None outside a traced loop)."""
    # the runtime's loop tracer, set while a loop of it runs with tracing on
    if actor is None:
        return None
    tracer = getattr(actor.assistant, "tracer", None)
    if tracer is None:
        return None
    return tracer.call_context(actor.call_id) or tracer.tool_context()


def _progress_publisher(actor: Actor | None, server: str, tool: str
                        ) -> Callable[[JSONObject], None] | None:
    """Progress notifications as ``tool_progress`` events of the assistant (None: no one)."""
    assistant = actor.assistant if actor is not None else None
    host = getattr(assistant, "host", None)
    publish = getattr(host, "publish", None)
    if assistant is None or publish is None:
        return None
    name = str(assistant.name)
    call_id = actor.call_id if actor is not None else None

    def progress(params: JSONObject) -> None:
        publish(name, {"type": "tool_progress", "server": server, "tool": tool,
                       "tool_call_id": call_id, "progress": params.get("progress"),
                       "total": params.get("total"),
                       "message": str(params.get("message", ""))[:500]})

    return progress


class McpClientService(Service):
    """Every configured MCP server, kept connected; their tools for each loop."""

    def __init__(self, servers: Sequence[McpServerConfig], reactor: Any, *,
                 base: ToolRegistry | None = None,
                 transport_factory: Callable[[McpServerConfig, Any], McpTransport]
                 = make_transport, telemetry: TelemetrySource | None = None) -> None:
        """``telemetry`` says what the service traces with, asked at each connection
        (None, or giving None: untraced)."""
        self.setName("mcp-client")
        self.base = base
        self.declared = frozenset(config.name for config in servers)
        """Every server of the configuration, those not ``enabled`` included."""
        self.connections: dict[str, McpServerConnection] = {}
        for config in servers:
            if not config.enabled:
                continue
            self.connections[config.name] = McpServerConnection(
                config, reactor, taken=self._taken_before(config.name),
                transport_factory=transport_factory, telemetry=telemetry)
        self._views: dict[tuple[object, ...], ToolRegistry] = {}

    def _taken_before(self, name: str) -> Callable[[], Iterable[str]]:
        """Names a server's tools must not take: ours, and the servers' listed before it."""
        def taken() -> Iterable[str]:
            names = set(self.base.list_tools()) if self.base is not None else set()
            for other in self.connections.values():
                if other.name == name:
                    break
                names.update(t.name for t in other.tools)
            return names

        return taken

    def startService(self) -> None:
        super().startService()
        for connection in self.connections.values():
            connection.start()

    def stopService(self) -> defer.Deferred[list[tuple[bool, None]]]:
        super().stopService()
        return defer.DeferredList([c.stop() for c in self.connections.values()],
                                  consumeErrors=True)

    def registry_for(self, base: ToolRegistry, servers: Iterable[str]) -> ToolRegistry:
        """``base`` plus the tools of ``servers`` that are ready now (kept per state)."""
        ready = [c for name in servers if (c := self.connections.get(name)) and c.ready]
        if not ready:
            return base
        key = (id(base), base.version, *((c.name, c.tools_version) for c in ready))
        view = self._views.get(key)
        if view is None:
            if len(self._views) > 64:
                self._views.clear()
            tools: dict[str, McpTool] = {}
            for tool in (t for c in ready for t in c.tools):
                if tool.name not in base:  # the first server listing a name keeps it
                    tools.setdefault(tool.name, tool)
            view = self._views[key] = base.with_tools(tools.values())
        return view

    def status(self) -> list[JSONObject]:
        """Every server's status, in config order."""
        return [c.status() for c in self.connections.values()]
