"""MCP through the API: ``GET /mcp/servers`` (the MCP servers assistants use) and, with
``[mcp.serve]``, the game's tools served at ``/mcp`` (Streamable HTTP,
:mod:`~ai_tools.mcp.server_http`; docs/mcp.md)."""

from __future__ import annotations

import attrs
from twisted.web.server import Request

from ai_tools.web.routes.parts import ApiParts
from ai_tools.web.routing import STREAMING, Route

__all__ = ["McpRoutes"]


@attrs.define(eq=False)
class McpRoutes:
    """The MCP endpoints over ``api``'s service and MCP endpoint (None: no ``/mcp``)."""

    api: ApiParts

    def routes(self) -> list[Route]:
        """The endpoints, in the order ``GET /`` lists them (``/mcp`` when it is served)."""
        routes = [Route("GET", ("mcp", "servers"), self.mcp_servers,
                        "the MCP servers assistants use: state, tools (docs/mcp.md)")]
        if self.api.mcp is not None:
            routes += [Route(method, ("mcp",), self.mcp_endpoint,
                             f"MCP (Streamable HTTP): {what}")
                       for method, what in (("POST", "one JSON-RPC message"),
                                            ("GET", "the session's event stream"),
                                            ("DELETE", "end the session"))]
        return routes

    def mcp_servers(self, request: Request) -> dict[str, object]:
        """``GET /mcp/servers``: each configured MCP server, its state and its tools."""
        sources = self.api.service.tool_sources
        status = getattr(sources, "status", None)
        return {"servers": status() if status is not None else []}

    def mcp_endpoint(self, request: Request) -> object:
        """``POST``/``GET``/``DELETE /mcp``: answered by the MCP endpoint itself."""
        assert self.api.mcp is not None  # routed only when served
        self.api.mcp.render(request)
        return STREAMING
