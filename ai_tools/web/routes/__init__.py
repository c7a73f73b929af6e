"""The HTTP API's endpoints, one module per area; :class:`~ai_tools.web.api.ApiResource`
admits each request (:mod:`~ai_tools.web.guards`) and runs its handler.

- :mod:`~ai_tools.web.routes.assistants`: ``/assistants`` and one assistant's endpoints
- :mod:`~ai_tools.web.routes.approvals`: the calls waiting for an operator's approval
- :mod:`~ai_tools.web.routes.stopping`: ``/stop``, ``/emergency-stop`` (and its clearing)
- :mod:`~ai_tools.web.routes.world`: ``/world/...``, ``/messages``, what a character heard
- :mod:`~ai_tools.web.routes.traces`: the loop traces
- :mod:`~ai_tools.web.routes.metrics`: ``/metrics``
- :mod:`~ai_tools.web.routes.events`: ``/events``, the server-sent event stream
- :mod:`~ai_tools.web.routes.mcp`: ``/mcp/servers`` and the MCP endpoint ``/mcp``

Each area is built with the :class:`~ai_tools.web.routes.parts.ApiParts` it shares
with the others and lists its :class:`~ai_tools.web.routing.Route` s.
"""
