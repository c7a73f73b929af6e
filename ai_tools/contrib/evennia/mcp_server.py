"""The game's MCP server inside Evennia: the same server, on the game's reactor.

With ``AI_TOOLS_MCP_SERVE`` in the game's settings, the
:class:`~ai_tools.contrib.evennia.service.EvenniaAssistantHost` listens for
MCP clients (Streamable HTTP at ``/mcp``) on the port the settings name,
acting as the named character::

    AI_TOOLS_MCP_SERVE = {
        "character": "#12",          # the dbref MCP sessions act as
        "port": 4010,                # on 127.0.0.1 unless "interface" says otherwise
        "token_env": "AI_TOOLS_MCP_TOKEN",  # the variable holding the bearer token
        # and any key of the standalone service's [mcp.serve] table:
        # "allow_dangerous", "tools", "categories", "max_sessions", ...
    }

The tools run through the same execution path, on the same
:class:`~ai_tools.contrib.evennia.world.EvenniaWorld` as the assistants, so
the character's locks and permissions apply.  Beyond the loopback interface
a token is required.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from twisted.application.service import MultiService
from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.web.resource import Resource

from ai_tools.errors import ConfigError
from ai_tools.mcp.game_tools import game_server
from ai_tools.mcp.serve_config import McpServeConfig, parse_serve_table
from ai_tools.mcp.server_http import McpHttpEndpoint, McpResource
from ai_tools.web.api import ApiSite
from ai_tools.web.listen import ListeningService, binds_locally
from ai_tools.web.origin import OriginPolicy, parse_allowed_hosts

if TYPE_CHECKING:
    from ai_tools.service.service import AssistantService

__all__ = ["McpListener", "McpListenerSettings", "mcp_listener", "parse_mcp_setting"]

log = Logger()

SETTING = "AI_TOOLS_MCP_SERVE"
_LISTENER_KEYS = ("port", "interface", "token_env", "allowed_hosts", "max_body")


class McpListenerSettings:
    """``AI_TOOLS_MCP_SERVE`` checked: the serve config and where to listen."""

    def __init__(self, serve: McpServeConfig, endpoint: str, token: str | None,
                 allowed_hosts: tuple[str, ...], max_body: int) -> None:
        self.serve = serve
        self.endpoint = endpoint
        self.token = token
        self.allowed_hosts = allowed_hosts
        self.max_body = max_body


def parse_mcp_setting(value: object, environ: Mapping[str, str] | None = None
                      ) -> McpListenerSettings | None:
    """The setting checked (None: not set, or ``enabled`` false); ConfigError says why."""
    if not value:
        return None
    if not isinstance(value, Mapping):
        raise ConfigError(f"{SETTING} must be a dict")
    table = dict(value)
    listener = {key: table.pop(key) for key in _LISTENER_KEYS if key in table}
    serve = parse_serve_table({"serve": table}, where=SETTING)
    if serve is None:
        return None
    port = listener.get("port", 4010)
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port < 65536:
        raise ConfigError(f"{SETTING}['port'] must be a port number, not {port!r}")
    interface = listener.get("interface", "127.0.0.1")
    endpoint = f"tcp:{port}:interface={interface}"
    token = None
    if listener.get("token_env"):
        token = (environ if environ is not None else os.environ).get(listener["token_env"])
        if not token or len(token.strip()) < 16:
            raise ConfigError(f"{SETTING}['token_env']: {listener['token_env']} must hold a "
                              "token of at least 16 characters")
        token = token.strip()
    if token is None and not binds_locally(endpoint):
        raise ConfigError(f"{SETTING}: listening beyond this machine ({interface}) needs "
                          "a token ('token_env')")
    max_body = listener.get("max_body", 65536)
    if isinstance(max_body, bool) or not isinstance(max_body, int) or max_body < 1:
        raise ConfigError(f"{SETTING}['max_body'] must be a positive integer")
    hosts = parse_allowed_hosts(listener.get("allowed_hosts", []), f"{SETTING}['allowed_hosts']")
    return McpListenerSettings(serve, endpoint, token, hosts, max_body)


class McpListener(MultiService):
    """The MCP endpoint and its listening port; stopping ends every session."""

    def __init__(self, endpoint: McpHttpEndpoint, listening: ListeningService) -> None:
        super().__init__()
        self.endpoint = endpoint
        self.listening = listening
        listening.setServiceParent(self)

    def startService(self) -> None:
        """Listen; a port that cannot be had is logged, never a Server that fails to start
        (the game matters more than its MCP door)."""
        try:
            super().startService()
        except Exception:
            self.running = False
            log.failure("ai_tools: the game's MCP server cannot listen on {endpoint}; "
                        "the game runs without it", endpoint=self.listening.description)

    def stopService(self) -> defer.Deferred[None]:
        """End the sessions (their calls are cancelled), then stop listening."""
        self.endpoint.close()
        return defer.maybeDeferred(super().stopService)


def mcp_listener(service: AssistantService, settings: McpListenerSettings,
                 clock: IReactorTime) -> McpListener:
    """The game's MCP server listening where the settings say (add it to the host)."""
    endpoint = McpHttpEndpoint(game_server(settings.serve, service, service.world, clock), clock,
                               max_sessions=settings.serve.max_sessions,
                               session_idle=settings.serve.session_idle,
                               max_message_bytes=settings.max_body)
    policy = OriginPolicy(allowed_hosts=settings.allowed_hosts)
    root = Resource()
    root.putChild(b"mcp", McpResource(endpoint, policy, token=settings.token))
    site = ApiSite(root, max_body=settings.max_body, clock=clock)  # type: ignore[arg-type]
    listening = ListeningService(settings.endpoint, site, reactor=clock)
    listening.when_listening().addCallbacks(lambda port: policy.bind(port.getHost()),
                                            lambda _: None)
    return McpListener(endpoint, listening)
