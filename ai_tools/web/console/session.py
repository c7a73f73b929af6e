"""Browser sign-in: the API token entered once, exchanged for a session cookie.

A page, its scripts and ``EventSource`` cannot send an ``Authorization``
header, so ``POST /session`` with ``{"token": ...}`` answers with a cookie
(``HttpOnly``: scripts never read it; ``SameSite=Strict``: no other site's
page sends it; ``Secure`` over TLS).  The cookie is ``<expiry>.<mac>``, the
mac an HMAC-SHA256 of the expiry keyed by the token: nothing is stored, no
session survives a changed token, and the cookie does not reveal the token.
It passes the same Host/Origin rule as every request.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable

import attrs
from twisted.web.server import Request

__all__ = ["COOKIE_NAME", "SESSION_SECONDS", "SessionCookies"]

COOKIE_NAME = b"ai_tools_session"
SESSION_SECONDS = 12 * 3600
"""How long a sign-in lasts."""


def _mac(token: bytes, expiry: int) -> str:
    message = f"ai_tools console session until {expiry}".encode("ascii")
    return hmac.new(token, message, hashlib.sha256).hexdigest()


@attrs.define(eq=False)
class SessionCookies:
    """Issues and checks session cookies for one API ``token`` (bytes); ``seconds``
    is the clock (``reactor.seconds``)."""

    token: bytes
    seconds: Callable[[], float]
    lifetime: int = SESSION_SECONDS

    def issue(self, request: Request) -> None:
        """Set a fresh session cookie on the answer to ``request``."""
        expiry = int(self.seconds()) + self.lifetime
        self._set(request, f"{expiry}.{_mac(self.token, expiry)}", self.lifetime)

    def clear(self, request: Request) -> None:
        """Tell the browser to forget its session cookie."""
        self._set(request, "", 0)

    def signed_in(self, request: Request) -> bool:
        """Whether ``request`` carries a valid, unexpired session cookie."""
        value = request.getCookie(COOKIE_NAME)
        if not value:
            return False
        expiry_text, _, mac = value.decode("latin-1").partition(".")
        # ASCII digits only: str.isdigit() also takes superscripts, which int() refuses
        if not (expiry_text.isascii() and expiry_text.isdigit()) or len(expiry_text) > 12:
            return False
        expiry = int(expiry_text)
        if expiry <= self.seconds():
            return False
        return hmac.compare_digest(mac, _mac(self.token, expiry))

    @staticmethod
    def _set(request: Request, value: str, max_age: int) -> None:
        parts = [f"{COOKIE_NAME.decode()}={value}", "Path=/", f"Max-Age={max_age}",
                 "HttpOnly", "SameSite=Strict"]
        if request.isSecure():
            parts.append("Secure")
        request.responseHeaders.addRawHeader(b"set-cookie", "; ".join(parts).encode("ascii"))
