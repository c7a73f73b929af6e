"""``GET /traces`` and ``GET /traces/{id}``: the loop traces the store keeps, and those
running now (:mod:`~ai_tools.web.traces` records them)."""

from __future__ import annotations

from typing import TYPE_CHECKING, NoReturn, cast

import attrs
from twisted.internet import defer
from twisted.python.failure import Failure
from twisted.web.server import Request

from ai_tools.web.errors import ApiError
from ai_tools.web.routes.parts import ApiParts
from ai_tools.web.routing import Route
from ai_tools.web.traces import trace_search

if TYPE_CHECKING:
    from ai_tools.interfaces import ITraceStore

__all__ = ["TraceRoutes"]


def _store_unavailable(failure: Failure) -> NoReturn:
    """A store that cannot answer now (closing, gone): ``503`` saying so, not a ``500``."""
    raise ApiError(503, f"the stored traces cannot be read now: {failure.getErrorMessage()}")


@attrs.define(eq=False)
class TraceRoutes:
    """The trace endpoints over ``api``'s trace recorder and store."""

    api: ApiParts

    def routes(self) -> list[Route]:
        """The endpoints, in the order ``GET /`` lists them."""
        return [
            Route("GET", ("traces",), self.traces,
                  "loop traces, newest first: the stored (?assistant=, ?reason=, ?tool=, "
                  "?failed=, ?since=, ?until=, ?limit=) and the running ones"),
            Route("GET", ("traces", "{trace_id}"), self.trace, "one stored loop trace, whole"),
        ]

    def traces(self, request: Request) -> dict[str, object] | defer.Deferred[dict[str, object]]:
        """``GET /traces``: the stored traces' summaries, newest first, and the live ones
        whole (``docs/http-api.md``)."""
        search = trace_search(request)
        recorder = self.api.trace_recorder
        live = recorder.live(search.assistant)
        if not recorder.stores:
            return {"traces": [], "live": live, "stored": False}
        store = cast("ITraceStore", self.api.service.store)  # (recorder.stores: it keeps them)
        d: defer.Deferred[list[dict[str, object]]] = store.list_traces(search)
        return d.addCallbacks(lambda found: {"traces": found, "live": live, "stored": True},
                              _store_unavailable)

    def trace(self, request: Request, trace_id: str) -> defer.Deferred[dict[str, object]]:
        """``GET /traces/{id}``: one stored trace with its spans (404: not kept)."""
        if not trace_id.isdigit() or len(trace_id) > 18:
            raise ApiError(400, f"a trace id is a number, not {trace_id!r}", field="trace_id")
        if not self.api.trace_recorder.stores:
            raise ApiError(404, "this service keeps no traces")

        def found(trace: dict[str, object] | None) -> dict[str, object]:
            if trace is None:
                raise ApiError(404, f"no trace {trace_id} (only the newest are kept)")
            return trace

        store = cast("ITraceStore", self.api.service.store)
        d: defer.Deferred[dict[str, object] | None] = store.get_trace(int(trace_id))
        return d.addCallbacks(found, _store_unavailable)
