"""The API token and the one rule for checking it: in constant time, with wrong guesses bounded.

Every place that takes the token — the ``Authorization: Bearer`` header of an
API request, the console's sign-in (``POST /session``) — asks
:meth:`TokenGuard.check`.  The comparison is constant-time, and each client
address may give a wrong token at most ``limit`` times per ``window``
seconds: after that every further wrong token it gives is refused with
``429`` and ``Retry-After`` until its window has passed (bounding the log and
the work a guessing client causes).  The right token is always accepted:
every local process shares the loopback address, and a misconfigured local
client giving wrong tokens must not lock out the operator or the web console.
What keeps the token from being guessed is its length (the service wants at
least 16 characters; use a random one, see docs/http-api.md).  At most
``max_addresses`` addresses are remembered (the oldest forgotten first), so a
flood of addresses cannot grow the table without bound.  Behind a reverse
proxy every client has the proxy's address and shares its allowance.
"""

from __future__ import annotations

import hmac
import math
from collections.abc import Callable

import attrs
from twisted.web.server import Request

from ai_tools.web.connections import remote_host
from ai_tools.web.errors import ApiError

__all__ = ["MAX_ADDRESSES", "WRONG_TOKEN_LIMIT", "WRONG_TOKEN_WINDOW", "TokenGuard"]

WRONG_TOKEN_LIMIT = 10
"""Wrong tokens one address may give per :data:`WRONG_TOKEN_WINDOW`."""
WRONG_TOKEN_WINDOW = 60.0
"""Seconds over which wrong tokens are counted (and an address refused, once over)."""
MAX_ADDRESSES = 10_000
"""Addresses whose wrong tokens are remembered at once."""


@attrs.define(eq=False)
class TokenGuard:
    """Checks tokens against ``token`` (bytes); ``seconds`` is the clock."""

    token: bytes
    seconds: Callable[[], float]
    limit: int = WRONG_TOKEN_LIMIT
    window: float = WRONG_TOKEN_WINDOW
    max_addresses: int = MAX_ADDRESSES
    _wrong: dict[str, tuple[float, int]] = attrs.field(factory=dict, init=False)
    """address -> (start of its window, wrong tokens in it), oldest first."""

    def check(self, request: Request, given: bytes, field: str | None = None) -> None:
        """Return when ``given`` is the token; else raise ``ApiError`` 429 when the
        request's address gave too many wrong tokens in its window, 401 before that."""
        if hmac.compare_digest(given, self.token):
            return  # never locked out: the wrong tokens of others share the address
        address = remote_host(request.getClientAddress()) or "?"
        now = self.seconds()
        start, count = self._wrong.get(address, (now, 0))
        if now - start >= self.window:
            start, count = now, 0
        if count >= self.limit:
            wait = max(1, math.ceil(start + self.window - now))
            raise ApiError(429, f"too many wrong tokens from this address: try again in {wait}s",
                           headers={"Retry-After": str(wait)})
        self._remember(address, start, count + 1)
        raise ApiError(401, "wrong token", field=field,
                       headers={"WWW-Authenticate": 'Bearer realm="ai_tools"'})

    def _remember(self, address: str, start: float, count: int) -> None:
        self._wrong.pop(address, None)
        self._wrong[address] = (start, count)  # (re)inserted last: the newest
        while len(self._wrong) > self.max_addresses:
            del self._wrong[next(iter(self._wrong))]
