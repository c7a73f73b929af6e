"""Stopping: ``POST /stop`` (what every assistant is doing), ``/emergency-stop`` (all, or
``?assistant=``, until cleared) and ``/emergency-stop/clear``; without ``?assistant=``,
with workers, on every worker (:mod:`~ai_tools.web.operator` does the stopping)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import cast

import attrs
from twisted.internet import defer
from twisted.web.server import Request

from ai_tools.web.body import body_size, parse_json_body
from ai_tools.web.errors import ApiError
from ai_tools.web.messages import MAX_TEXT
from ai_tools.web.query import query_text
from ai_tools.web.routes.parts import ApiParts, known_assistant
from ai_tools.web.routing import Route

__all__ = ["StopRoutes"]


@attrs.define(eq=False)
class StopRoutes:
    """The stopping endpoints over ``api``'s operator."""

    api: ApiParts

    def routes(self) -> list[Route]:
        """The endpoints, in the order ``GET /`` lists them."""
        return [
            Route("POST", ("stop",), self.stop_all, "stop what every assistant is doing"),
            Route("POST", ("emergency-stop",), self.emergency_stop,
                  "stop every assistant (or ?assistant=) until cleared", assistant_query=True),
            Route("POST", ("emergency-stop", "clear"), self.clear_emergency_stop,
                  "clear the emergency stop (all, or ?assistant=)", assistant_query=True),
        ]

    def stop_all(self, request: Request) -> dict[str, object] | defer.Deferred[dict[str, object]]:
        """``POST /stop`` (with workers: on every worker)."""
        return self._everywhere(request, "/stop", self.api.operator.stop_all(), "stopped")

    def emergency_stop(
            self, request: Request) -> dict[str, object] | defer.Deferred[dict[str, object]]:
        """``POST /emergency-stop?assistant=`` (optional body ``{"reason": ...}``)."""
        name = query_text(request, "assistant")
        body = parse_json_body(request, self.api.max_body) if body_size(request) else {}
        unknown = sorted(set(body) - {"reason"})
        if unknown:
            raise ApiError(422, f"unknown field {unknown[0]!r} (only 'reason')",
                           field=unknown[0])
        reason = body.get("reason", "")
        if not isinstance(reason, str) or len(reason) > MAX_TEXT:
            raise ApiError(422, f"reason must be a string of at most {MAX_TEXT} characters",
                           field="reason")
        operator = self.api.operator
        if name is not None:
            return operator.emergency_stop(known_assistant(self.api.service, name), reason)
        return self._everywhere(request, "/emergency-stop",
                                operator.emergency_stop(None, reason), "emergency_stopped")

    def clear_emergency_stop(
            self, request: Request) -> dict[str, object] | defer.Deferred[dict[str, object]]:
        """``POST /emergency-stop/clear?assistant=`` (all: with workers, on every worker)."""
        name = query_text(request, "assistant")
        operator = self.api.operator
        if name is not None:
            return operator.clear_emergency_stop(known_assistant(self.api.service, name))
        return self._everywhere(request, "/emergency-stop/clear",
                                operator.clear_emergency_stop(None), "cleared")

    def _everywhere(self, request: Request, path: str, local: dict[str, object],
                    key: str) -> dict[str, object] | defer.Deferred[dict[str, object]]:
        """``local`` (this worker's answer), with workers merged with every other's: the
        names under ``key`` joined."""
        others = self.api.others
        if not others.fans_out(request):
            return local

        def merge(answer: dict[str, object], other: Mapping[str, object]) -> None:
            names = cast("Iterable[str]", answer[key])
            theirs = cast("Iterable[str]", other.get(key, ()))
            answer[key] = sorted({*names, *theirs})

        return others.merged(request, path, local, merge)
