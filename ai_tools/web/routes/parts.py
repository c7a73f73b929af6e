"""What the areas of the HTTP API share: the service, its world, the recorders, the
other workers — as :class:`~ai_tools.web.api.ApiResource` holds them — and the two
checks most handlers start with (an assistant the service has, a world it has)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from ai_tools.web.errors import ApiError

if TYPE_CHECKING:
    from ai_tools.mcp.server_http import McpHttpEndpoint
    from ai_tools.service.service import AssistantService
    from ai_tools.web.console import ConsolePages
    from ai_tools.web.event_hub import EventHub
    from ai_tools.web.metrics import Metrics
    from ai_tools.web.operator import Operator
    from ai_tools.web.other_workers import OtherWorkers
    from ai_tools.web.results import LoopRecorder
    from ai_tools.web.service_events import ServiceEvents
    from ai_tools.web.traces import TraceRecorder
    from ai_tools.world.sandbox import SandboxWorld

__all__ = ["ApiParts", "known_assistant", "the_world"]


class ApiParts(Protocol):
    """The parts every area of the API may use (the resource provides them).

    ``others``, ``hub`` and ``service_events`` are made on first use (they need
    the clock, and the settings of the other workers).
    """

    service: AssistantService
    world: SandboxWorld | None
    max_body: int
    operator: Operator
    recorder: LoopRecorder
    trace_recorder: TraceRecorder
    metrics: Metrics
    console: ConsolePages
    mcp: McpHttpEndpoint | None

    @property
    def others(self) -> OtherWorkers:
        """What the API does about assistants other workers run."""

    @property
    def hub(self) -> EventHub:
        """The event streams' fan-out."""

    @property
    def service_events(self) -> ServiceEvents:
        """The other workers' loop events for the whole-service streams."""


def known_assistant(service: AssistantService, name: str) -> str:
    """``name``, when the service has an assistant of that name (else 404)."""
    if name not in service:
        raise ApiError(404, f"no assistant named {name!r}", field="assistant")
    return name


def the_world(world: SandboxWorld | None) -> SandboxWorld:
    """The service's world (503 when it has none)."""
    if world is None:
        raise ApiError(503, "this service has no world")
    return world
