"""The calls waiting for an operator's approval: listed (with workers, every worker's),
approved or refused (:class:`~ai_tools.service.approvals.ApprovalBoard`)."""

from __future__ import annotations

from collections.abc import Mapping

import attrs
from twisted.internet import defer
from twisted.web.server import Request

from ai_tools.web.body import parse_json_body
from ai_tools.web.errors import ApiError
from ai_tools.web.operator import parse_decision
from ai_tools.web.routes.parts import ApiParts, known_assistant
from ai_tools.web.routing import Route

__all__ = ["ApprovalRoutes"]


@attrs.define(eq=False)
class ApprovalRoutes:
    """The approval endpoints over ``api``'s service."""

    api: ApiParts

    def routes(self) -> list[Route]:
        """The endpoints, in the order ``GET /`` lists them."""
        return [
            Route("GET", ("approvals",), self.approvals,
                  "every call waiting for an operator's approval"),
            Route("GET", ("assistants", "{name}", "approvals"), self.assistant_approvals,
                  "its calls waiting for an operator's approval"),
            Route("POST", ("assistants", "{name}", "approvals", "{approval}"), self.decide,
                  "approve or refuse a waiting call (body: {\"approve\": true|false, "
                  "\"reason\"?})"),
        ]

    def approvals(self, request: Request) -> dict[str, object] | defer.Deferred[dict[str, object]]:
        """``GET /approvals`` (with workers: every worker's)."""
        local: dict[str, object] = {"approvals": self.api.service.approvals.pending()}
        others = self.api.others
        if not others.fans_out(request):
            return local

        def merge(answer: dict[str, object], other: Mapping[str, object]) -> None:
            more = other.get("approvals")
            current = answer["approvals"]
            if isinstance(more, list) and isinstance(current, list):
                answer["approvals"] = current + more

        return others.merged(request, "/approvals", local, merge)

    def assistant_approvals(self, request: Request, name: str) -> dict[str, object]:
        """``GET /assistants/{name}/approvals``."""
        service = self.api.service
        return {"assistant": name,
                "approvals": service.approvals.pending(known_assistant(service, name))}

    def decide(self, request: Request, name: str, approval: str) -> dict[str, object]:
        """``POST /assistants/{name}/approvals/{id}``: the operator's yes or no."""
        known_assistant(self.api.service, name)
        approve, reason = parse_decision(parse_json_body(request, self.api.max_body))
        board = self.api.service.approvals
        if board.get(approval)["assistant"] != name:
            raise ApiError(404, f"no call of {name!r} waits for approval {approval!r}",
                           field="approval")
        by = "console" if self.api.console.signed_in(request) else "api"
        return board.decide(approval, approve, by=by, reason=reason)
