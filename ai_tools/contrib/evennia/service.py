"""The AssistantService inside the Evennia Server process.

Add this module to the game's server-services plugins::

    SERVER_SERVICES_PLUGIN_MODULES += ["ai_tools.contrib.evennia.service"]

Evennia then calls :func:`start_plugin_services` while the Server starts, and
an :class:`EvenniaAssistantHost` joins the Server's services.  When the
reactor runs, the host adds every assistant found on an ``AssistantScript`` to
one :class:`~ai_tools.service.service.AssistantService` (one timer for all of them),
hands it the events heard while it was down, and keeps the scripts and the
service in step as builders use the ``aiassistant`` command.  On ``evennia
reload`` or ``stop`` the Server stops its services; the host then waits for
nothing: loops in flight end at once and every assistant's state is written
to its script before the Server's link to the Portal goes (see
:meth:`EvenniaAssistantHost.stopService`), so the new Server can start at once
and picks up where the old one stopped.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import TYPE_CHECKING

from django.conf import settings
from twisted.application.service import IServiceCollection, MultiService
from twisted.internet import defer
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from ai_tools.contrib.evennia.conf import ai_setting
from ai_tools.contrib.evennia.lookup import all_assistant_scripts, get_assistant_script
from ai_tools.contrib.evennia.store import ScriptStore
from ai_tools.contrib.evennia.world import EvenniaWorld
from ai_tools.default_reactor import global_reactor
from ai_tools.service.service import AssistantService

if TYPE_CHECKING:
    from ai_tools.contrib.evennia.mcp_server import McpListener
    from ai_tools.contrib.evennia.scripts import AssistantScript
    from ai_tools.llm.client import OpenAIChatClient
    from ai_tools.mcp.servers import McpClientService
    from ai_tools.service.assistant import Assistant
    from ai_tools.store.memory import MemoryStore
    from ai_tools.store.sqlite import SQLiteStore
    from ai_tools.tools.registry import ToolRegistry

log = Logger()

_HOST: EvenniaAssistantHost | None = None

STOP_DEADLINE = 0.5
"""Longest time (seconds) a stopping host keeps the Server process alive.

Well under the second after which a lingering Server's AMP client reconnects
to the Portal (see :meth:`EvenniaAssistantHost.stopService`)."""


def get_host() -> EvenniaAssistantHost | None:
    """The running host (None when the service is not running in this process)."""
    return _HOST


def build_llms(reactor: IReactorTime | None = None) -> dict[str, OpenAIChatClient]:
    """Model clients from ``AI_TOOLS_LLM`` (called ``default``) and ``AI_TOOLS_LLMS``."""
    from ai_tools.llm.client import OpenAIChatClient
    from ai_tools.llm.profile import ModelProfile
    from ai_tools.llm.server import ModelServers

    tables = {"default": ai_setting("AI_TOOLS_LLM")}
    tables.update(ai_setting("AI_TOOLS_LLMS") or {})
    clients = {}
    servers = ModelServers(reactor)  # profiles of one server share its slots and queue
    for name, table in tables.items():
        profile = ModelProfile.from_mapping({"name": name, **dict(table)}, f"AI_TOOLS_LLMS[{name}]")
        clients[name] = OpenAIChatClient(profile, reactor=reactor,
                                         server=servers.for_profile(profile))
    return clients


def build_records_store(reactor: IReactorTime | None = None) -> MemoryStore | SQLiteStore:
    """The store of records and cache entries (``AI_TOOLS_RECORDS_DB``)."""
    path = ai_setting("AI_TOOLS_RECORDS_DB")
    if not path:
        from ai_tools.store.memory import MemoryStore

        return MemoryStore(clock=reactor)
    from ai_tools.store.sqlite import SQLiteStore

    if not os.path.isabs(path):
        path = os.path.join(settings.GAME_DIR, path)
    return SQLiteStore(path=path, clock=reactor, reactor=reactor, synchronous="NORMAL")


def build_registry() -> ToolRegistry:
    """The default tool library plus ``AI_TOOLS_EXTRA_TOOLS``."""
    from evennia.utils.utils import class_from_module

    from ai_tools.tools import register_default_tools
    from ai_tools.tools.registry import ToolRegistry

    registry = register_default_tools(ToolRegistry())
    for path in ai_setting("AI_TOOLS_EXTRA_TOOLS") or ():
        registry.register(class_from_module(path))
    return registry


def build_service(reactor: IReactorTime | None = None, **overrides: object) -> AssistantService:
    """An AssistantService configured from the game's settings.

    ``overrides`` replace constructor arguments (tests give a fake ``llm``, a
    ``task.Clock`` or a memory store).
    """
    arguments: dict[str, object] = {
        "store": None,
        "registry": None,
        "world": EvenniaWorld(),
        "clock": reactor,
        "tick_interval": float(ai_setting("AI_TOOLS_SERVICE_TICK")),
        "max_concurrent": int(ai_setting("AI_TOOLS_MAX_CONCURRENT")),
        # Never wait for loops in flight: see EvenniaAssistantHost.stopService.
        "stop_grace": 0.0,
    }
    arguments.update(overrides)
    if arguments["store"] is None:
        arguments["store"] = ScriptStore(build_records_store(reactor))
    if arguments["registry"] is None:
        arguments["registry"] = build_registry()
    if "llm" not in arguments and "llms" not in arguments:
        arguments["llms"] = build_llms(reactor)
    return AssistantService(**arguments)


def build_mcp_client(service: AssistantService,
                     reactor: IReactorTime) -> McpClientService | None:
    """The MCP servers of ``AI_TOOLS_MCP_SERVERS`` for ``service``'s assistants (None: none)."""
    from ai_tools.mcp.config import parse_servers

    servers = parse_servers(ai_setting("AI_TOOLS_MCP_SERVERS"), "AI_TOOLS_MCP_SERVERS")
    if not servers:
        return None
    from ai_tools.mcp.servers import McpClientService

    client = McpClientService(servers, reactor, base=service.registry,
                              telemetry=lambda: service.telemetry)
    service.tool_sources = client
    return client


class EvenniaAssistantHost(MultiService):
    """Keeps an AssistantService in step with the game's AssistantScripts.

    The scripts are the truth (they persist); the service is the engine that
    runs them.  Every method that changes an assistant returns a Deferred that
    fires once the service has applied it.
    """

    name = "ai_tools"

    def __init__(self, service: AssistantService | None = None,
                 clock: IReactorTime | None = None) -> None:
        super().__init__()
        self._clock = clock
        self.service = service if service is not None else build_service(clock)
        self.mcp_client = build_mcp_client(self.service, self.clock)
        """The MCP servers' connections (:mod:`ai_tools.mcp.servers`), or None."""
        if self.mcp_client is not None:
            self.mcp_client.setServiceParent(self)
        self.service.setServiceParent(self)
        self._synced: defer.Deferred[list[str]] | None = None
        self._sync_call: IDelayedCall | None = None

    @property
    def clock(self) -> IReactorTime:
        """The reactor (or the clock given to the constructor)."""
        if self._clock is None:
            self._clock = global_reactor()
        return self._clock

    def startService(self) -> None:
        """Start the engine; load the assistants once the reactor runs."""
        global _HOST
        super().startService()
        _HOST = self
        self._sync_call = self.clock.callLater(0, self._start_sync)

    def _start_sync(self) -> None:
        self._sync_call = None
        self._synced = self.sync()

    def when_synced(self) -> defer.Deferred[None]:
        """Fires once the first sync has run (at once if it has)."""
        if self._synced is None:
            return defer.succeed(None)
        d: defer.Deferred[None] = defer.Deferred()
        self._synced.addBoth(lambda r: (d.callback(None), r)[1])
        return d

    def stopService(self) -> defer.Deferred[None]:
        """Stop the engine without keeping the Server alive for work in flight.

        Evennia stops all of the Server's services in one pass, its AMP link to
        the Portal among them, and the Portal starts the new Server as soon as
        that link closes.  The new Server's twistd refuses to start while this
        process still holds ``server.pid``, and this process's AMP client keeps
        retrying: a second later it reconnects and passes for the new Server
        until this process exits.  A host that waits here for a model call
        leaves the game with no Server.

        So the engine stops with no grace (``stop_grace`` 0): its loops end
        now, with the reason ``shutdown`` — events whose model call had not
        answered go back to pending — and every assistant's state is written to
        its script (synchronous writes) before the link is gone; the new Server
        answers those events.  Closing the model clients and the records store
        gets at most :data:`STOP_DEADLINE` seconds.
        """
        global _HOST
        if _HOST is self:
            _HOST = None
        if self._sync_call is not None and self._sync_call.active():
            self._sync_call.cancel()
        self.service.stop_grace = 0.0
        stopped = defer.maybeDeferred(super().stopService)
        return _at_most(stopped, STOP_DEADLINE, self.clock)

    # -- keeping the service in step -------------------------------------------------

    @defer.inlineCallbacks
    def sync(self) -> Generator[defer.Deferred[object], object, list[str]]:
        """Add every assistant script the service does not run yet; returns their names."""
        added = []
        for script in all_assistant_scripts():
            name = script.assistant_key
            if not name or name in self.service:
                continue
            try:
                yield self.attach(script)
            except Exception:
                log.failure("Assistant {assistant} could not be started", assistant=name)
                continue
            added.append(name)
        log.info("ai_tools: {count} assistant(s) running", count=len(self.service.names()))
        return added

    @defer.inlineCallbacks
    def attach(self, script: AssistantScript
               ) -> Generator[defer.Deferred[object], object, Assistant]:
        """Run ``script``'s assistant in the service (restoring its saved state)."""
        name = script.assistant_key
        if name in self.service:
            return self.service.get(name)
        config = script.assistant_config()
        assistant = yield self.service.add_assistant(config)
        if assistant.enabled != config["enabled"]:
            if config["enabled"]:
                yield self.service.enable(name)
            else:
                yield self.service.disable(name)
        for event in script.drain_inbox():
            yield self.service.send(name, event)
        return assistant

    @defer.inlineCallbacks
    def reload_assistant(self, name: str
                         ) -> Generator[defer.Deferred[object], object, Assistant | None]:
        """Apply a changed config in place (``AssistantService.reconfigure``): history,
        pending events and counters stay, and its character keeps hearing throughout
        (re-adding it would leave a moment when nothing is heard).  An assistant not
        running yet is attached; one whose script is gone is detached."""
        script = get_assistant_script(name)
        if script is None:
            yield self.detach(name)
            return None
        if name not in self.service:
            assistant = yield self.attach(script)
            return assistant
        config = script.assistant_config()
        yield self.service.reconfigure(name, config)
        yield self.set_enabled(name, config["enabled"])
        return self.service.get(name)

    def detach(self, name: str) -> defer.Deferred[None]:
        """Stop running ``name`` (its state stays on its script)."""
        if name not in self.service:
            return defer.succeed(None)
        return self.service.remove_assistant(name)

    def set_enabled(self, name: str, enabled: bool) -> defer.Deferred[object]:
        """Enable or disable ``name`` in the service (adding it first if needed)."""
        if name not in self.service:
            script = get_assistant_script(name)
            if script is None:
                return defer.succeed(None)
            return self.attach(script)
        if enabled:
            return self.service.enable(name)
        return self.service.disable(name)


def _at_most(d: defer.Deferred[object], seconds: float,
             clock: IReactorTime) -> defer.Deferred[None]:
    """Fires with None when ``d`` fires or after ``seconds``, whichever is first.

    ``d`` is not cancelled (what it still does finishes if the process lives
    on); its failure is logged.
    """
    result: defer.Deferred[None] = defer.Deferred()

    def late() -> None:
        if not result.called:
            log.warn("ai_tools: still closing after {seconds}s; the Server stops regardless",
                     seconds=seconds)
            result.callback(None)

    def done(outcome: object) -> None:
        if isinstance(outcome, Failure):
            log.failure("ai_tools: stopping the assistant service failed", outcome)
        if timer.active():
            timer.cancel()
        if not result.called:
            result.callback(None)

    timer = clock.callLater(seconds, late)
    d.addBoth(done)
    return result


def start_plugin_services(server: IServiceCollection) -> None:
    """Evennia hook (``SERVER_SERVICES_PLUGIN_MODULES``): add the host to the Server."""
    if not ai_setting("AI_TOOLS_ENABLED"):
        log.info("ai_tools: AI_TOOLS_ENABLED is off; no assistants will run")
        return
    if getattr(settings, "AI_TOOLS_STOP_GRACE", None) is not None:
        log.warn("ai_tools: AI_TOOLS_STOP_GRACE is no longer used: a stopping Server never "
                 "waits for loops in flight (they are saved and answered after the restart)")
    host = EvenniaAssistantHost()
    serve_mcp(host)
    host.setServiceParent(server)


def serve_mcp(host: EvenniaAssistantHost) -> McpListener | None:
    """With ``AI_TOOLS_MCP_SERVE`` set, the host also serves the game's tools over MCP
    (:mod:`ai_tools.contrib.evennia.mcp_server`); returns that listener, or None."""
    from ai_tools.contrib.evennia.mcp_server import mcp_listener, parse_mcp_setting

    settings_mcp = parse_mcp_setting(ai_setting("AI_TOOLS_MCP_SERVE"))
    if settings_mcp is None:
        return None
    listener = mcp_listener(host.service, settings_mcp, host.clock)
    listener.setServiceParent(host)
    log.info("ai_tools: the game's MCP server will listen on {endpoint} as {character}",
             endpoint=settings_mcp.endpoint, character=settings_mcp.serve.character)
    return listener
