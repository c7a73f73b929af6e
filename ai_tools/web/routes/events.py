"""``GET /events``: the server-sent event stream (:mod:`~ai_tools.web.event_hub`).

``?assistant=`` keeps one assistant's events, ``?types=`` some kinds; the
``Last-Event-ID`` header (a browser's reconnect) or ``?last_event_id=`` replays
the kept events the client missed.  With workers, the stream without
``?assistant=`` shows every worker's loop events
(:mod:`~ai_tools.web.service_events`); one another worker opened here shows
this worker's own only; one about an assistant another worker runs is relayed
from it by the resource.
"""

from __future__ import annotations

import attrs
from twisted.web.server import Request

from ai_tools.web.errors import ApiError
from ai_tools.web.other_workers import forwarded
from ai_tools.web.query import query_int, query_text
from ai_tools.web.routes.parts import ApiParts, known_assistant
from ai_tools.web.routing import Route

__all__ = ["EventRoutes"]


def last_event_id(request: Request) -> int | None:
    """The id of the last event the client saw (None: it saw none)."""
    header = request.getHeader(b"last-event-id")
    if header is None:
        return query_int(request, "last_event_id", None, 0, 2**62)
    try:
        value = int(header.strip())
    except ValueError:
        value = -1
    if not 0 <= value <= 2**62:
        raise ApiError(400, "Last-Event-ID must be an event id this service sent "
                       "(a non-negative integer)", field="Last-Event-ID")
    return value


@attrs.define(eq=False)
class EventRoutes:
    """The event stream endpoint over ``api``'s event hub."""

    api: ApiParts

    def routes(self) -> list[Route]:
        """The endpoint."""
        return [Route("GET", ("events",), self.events,
                      "server-sent events (?assistant=, ?types=; Last-Event-ID replays)",
                      assistant_query=True, stream=True)]

    def events(self, request: Request) -> None:
        """``GET /events?assistant=&types=&last_event_id=``: open a server-sent event stream
        (see the module)."""
        only = query_text(request, "assistant")
        if only is not None:
            known_assistant(self.api.service, only)
        types_text = query_text(request, "types")
        types = (frozenset(t.strip() for t in types_text.split(",") if t.strip())
                 if types_text else None)
        stream = self.api.hub.open(request, only, types, last_event_id(request),
                                   local_only=forwarded(request))
        if only is None and self.api.others.fans_out(request):
            self.api.service_events.watch(stream)
