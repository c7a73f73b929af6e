"""``GET /metrics``: the service's figures in the Prometheus text format
(:mod:`~ai_tools.web.metrics` counts them)."""

from __future__ import annotations

import attrs
from twisted.web.server import Request

from ai_tools.web.console import RawAnswer
from ai_tools.web.metrics import CONTENT_TYPE
from ai_tools.web.routes.parts import ApiParts
from ai_tools.web.routing import Route

__all__ = ["MetricsRoutes"]


@attrs.define(eq=False)
class MetricsRoutes:
    """The metrics endpoint over ``api``'s metrics."""

    api: ApiParts

    def routes(self) -> list[Route]:
        """The endpoint."""
        return [Route("GET", ("metrics",), self.metrics_page,
                      "the service's figures in the Prometheus text format")]

    def metrics_page(self, request: Request) -> RawAnswer:
        """``GET /metrics``: the Prometheus text format."""
        return RawAnswer(self.api.metrics.render(), CONTENT_TYPE)
