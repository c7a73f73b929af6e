"""The checks every HTTP API request passes before its handler runs, in one place.

In this order: the Host and Origin rule (:mod:`~ai_tools.web.origin`, 403), the
token (401; 429 after too many wrong ones, :mod:`~ai_tools.web.token_guard`),
the route (404/405, :mod:`~ai_tools.web.routing`) and a body's content type
(``application/json``, 415, :mod:`~ai_tools.web.body`).  The token is the
``Authorization: Bearer`` header, the console's session cookie, or — from
another worker — a worker signature (:mod:`~ai_tools.web.worker_auth`).  The
console's page, files and sign-in need no token (:mod:`ai_tools.web.console`).
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
from twisted.web.server import Request

from ai_tools.web.body import check_content_type
from ai_tools.web.console import ConsolePages
from ai_tools.web.errors import ApiError
from ai_tools.web.origin import OriginPolicy
from ai_tools.web.routing import Route, find_route
from ai_tools.web.token_guard import TokenGuard
from ai_tools.web.worker_auth import SIGNATURE_HEADER, WorkerSigner

__all__ = ["RequestGuards"]

_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="ai_tools"'}


@attrs.define(eq=False)
class RequestGuards:
    """Admits a request to its route (see the module).

    ``token_guard`` is None without a token (no token needed); ``worker_signer``
    checks the signatures of other workers' requests (with a token).
    """

    policy: OriginPolicy
    console: ConsolePages
    token_guard: TokenGuard | None = None
    worker_signer: WorkerSigner | None = None

    def admit(self, request: Request, routes: Sequence[Route]) -> tuple[Route, dict[str, str]]:
        """The route answering ``request`` and its path parameters, once every check
        passed (else the first check's ``ApiError``)."""
        self.policy.check(request)
        console = self.console.handler_for(request)
        params: dict[str, str] = {}
        if console is not None:
            route = Route("", (), console, "the web console")
        else:
            self.check_token(request)
            route, params = find_route(routes, request)
        check_content_type(request)
        return route, params

    def check_token(self, request: Request) -> None:
        """The bearer token, the console's session cookie, or a worker signature."""
        guard = self.token_guard
        if guard is None or self.console.signed_in(request):
            return
        if self.worker_signer is not None and request.getHeader(SIGNATURE_HEADER) is not None:
            self.worker_signer.check(request)
            return
        header = request.getHeader(b"authorization")
        if not header:
            raise ApiError(401, "missing token: send 'Authorization: Bearer <token>'",
                           headers=_CHALLENGE)
        scheme, _, given = header.partition(b" ")
        if scheme.lower() != b"bearer":  # a malformed header, not a guess: say what is missing
            raise ApiError(401, "the Authorization header must be 'Bearer <token>' "
                           "(the word Bearer, a space, then the token)", headers=_CHALLENGE)
        guard.check(request, given.strip())
