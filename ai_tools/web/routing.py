"""The HTTP API's route table: which handler answers a method and a path.

A :class:`Route` is one endpoint (its method, path pattern, handler and the
summary ``GET /`` lists); each area of the API (:mod:`ai_tools.web.routes`)
gives its own.  :func:`find_route` picks the route of a request, or refuses it
with ``404`` (no such path) or ``405`` (the path exists, not that method; the
``Allow`` header lists those it has).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from urllib.parse import unquote

import attrs
from twisted.web.server import Request

from ai_tools.web.errors import ApiError

__all__ = ["STREAMING", "Handler", "Route", "find_route", "path_segments"]

Handler = Callable[..., object]
"""A route's handler: called with the request and the path's parameters (by name); it
answers a JSON body, ``(status, body)``, a :class:`~ai_tools.web.console.RawAnswer`,
:data:`STREAMING`, or a Deferred of one of these."""

STREAMING = object()
"""A handler's answer already being streamed (an event stream relayed from another worker)."""


@attrs.frozen
class Route:
    """One endpoint: method, path pattern (``{name}`` segments are parameters), handler.

    ``assistant_query``: the assistant it is about is named by ``?assistant=`` (not
    the path), so a request about one another worker runs is passed on to it.
    ``stream``: the handler opens a never-ending event stream (no ``HEAD``; relayed,
    not forwarded, from another worker).
    """

    method: str
    pattern: tuple[str, ...]
    handler: Handler
    summary: str
    assistant_query: bool = False
    stream: bool = False

    def match(self, segments: Sequence[str]) -> dict[str, str] | None:
        """The path parameters if ``segments`` fit the pattern."""
        if len(segments) != len(self.pattern):
            return None
        params: dict[str, str] = {}
        for want, got in zip(self.pattern, segments, strict=True):
            if want.startswith("{"):
                if not got:
                    return None
                params[want[1:-1]] = got
            elif want != got:
                return None
        return params

    @property
    def path(self) -> str:
        """The pattern as a path (``/assistants/{name}``)."""
        return "/" + "/".join(self.pattern)

    @property
    def endpoint(self) -> str:
        """The handler's name (what :class:`~ai_tools.web.other_workers.OtherWorkers`
        answers for an assistant another worker runs)."""
        return str(getattr(self.handler, "__name__", ""))


def path_segments(request: Request) -> list[str]:
    """The request's path as decoded segments, without trailing empty ones (400 for a
    path that is not ASCII, or not UTF-8 once percent-decoded)."""
    path = request.path.split(b"?", 1)[0]
    try:
        text = path.decode("ascii")
    except UnicodeDecodeError:
        raise ApiError(400, "the path is not ASCII (percent-encode it)") from None
    try:
        segments = [unquote(s, errors="strict") for s in text.split("/")[1:]]
    except UnicodeDecodeError:
        raise ApiError(400, "the path is not valid UTF-8 once decoded") from None
    while segments and segments[-1] == "":
        segments.pop()
    return segments


def find_route(routes: Sequence[Route], request: Request) -> tuple[Route, dict[str, str]]:
    """The route answering ``request`` and its path parameters (else 404 or 405).

    ``HEAD`` is ``GET`` without the body, except for a never-ending event stream.
    """
    segments = path_segments(request)
    method = request.method.decode("ascii", "replace").upper()
    allowed: list[str] = []
    for route in routes:
        params = route.match(segments)
        if params is None:
            continue
        head = method == "HEAD" and route.method == "GET" and not route.stream
        if route.method == method or head:
            return route, params
        allowed.append(route.method)
    if allowed:
        allow = ", ".join(sorted(set(allowed)))
        raise ApiError(405, f"{method} is not allowed here; use {allow}",
                       headers={"Allow": allow})
    raise ApiError(404, f"no endpoint at {'/' + '/'.join(segments)}; GET / lists them")

