"""Serve the console page and its files from the installed package.

``GET /`` answers the page when the client prefers HTML (a browser's
``Accept: text/html,...``) and the API's JSON otherwise (curl's ``*/*``);
``GET /console/<file>`` the page's scripts and styles; ``/session`` the
sign-in (:mod:`~ai_tools.web.console.session`).  The files are read once,
from the package's ``static`` directory (shipped as package data), and only
those: no path from a request ever reaches the file system.  Every file goes
out with ``Content-Security-Policy: default-src 'self'`` (and no framing), so
the page can load nothing from another host and run no inline script.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources

import attrs
from twisted.web.server import Request

from ai_tools.web.body import parse_json_body
from ai_tools.web.console.session import SessionCookies
from ai_tools.web.errors import ApiError
from ai_tools.web.token_guard import TokenGuard

__all__ = ["CONTENT_SECURITY_POLICY", "ConsolePages", "RawAnswer", "prefers_html"]

CONTENT_SECURITY_POLICY = (
    b"default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
STATIC_PREFIX = "console"
_TYPES = {
    ".html": b"text/html; charset=utf-8",
    ".js": b"text/javascript; charset=utf-8",
    ".css": b"text/css; charset=utf-8",
    ".svg": b"image/svg+xml",
    ".txt": b"text/plain; charset=utf-8",
}

Handler = Callable[[Request], object]


@attrs.frozen
class RawAnswer:
    """An answer that is not JSON (the console's files, the metrics page): a status, the
    bytes and their content type, sent under the console's security headers."""

    body: bytes
    content_type: bytes
    status: int = 200

    def write_to(self, request: Request) -> None:
        """Answer ``request`` with these bytes, under the console's security headers."""
        request.setResponseCode(self.status)
        request.setHeader(b"content-type", self.content_type)
        request.setHeader(b"content-security-policy", CONTENT_SECURITY_POLICY)
        request.setHeader(b"referrer-policy", b"no-referrer")
        request.setHeader(b"cache-control", b"no-cache")
        request.setHeader(b"vary", b"Accept")
        request.setHeader(b"content-length", str(len(self.body)).encode("ascii"))
        request.write(self.body)
        request.finish()


def _quality(params: list[str]) -> float:
    for param in params:
        name, _, value = param.strip().partition("=")
        if name.strip().lower() == "q":
            try:
                return max(0.0, min(1.0, float(value)))
            except ValueError:
                return 0.0
    return 1.0


def prefers_html(accept: bytes | None) -> bool:
    """Whether an ``Accept`` header names ``text/html`` at least as high as JSON.

    Only an explicit ``text/html`` counts (``*/*`` alone is an API client);
    JSON's weight is ``application/json``'s, else ``application/*``'s, else ``*/*``'s.
    """
    if not accept:
        return False
    weights: dict[str, float] = {}
    for item in accept.decode("latin-1").split(","):
        media, *params = item.split(";")
        weights[media.strip().lower()] = _quality(params)
    html = weights.get("text/html", 0.0)
    json_weight = next((weights[m] for m in ("application/json", "application/*", "*/*")
                        if m in weights), 0.0)
    return html > 0 and html >= json_weight


def _load_static() -> dict[str, RawAnswer]:
    """The page's files by name, read once from the installed package."""
    files: dict[str, RawAnswer] = {}
    for entry in (resources.files(__package__) / "static").iterdir():
        suffix = "." + entry.name.rpartition(".")[2]
        if entry.is_file() and suffix in _TYPES:
            files[entry.name] = RawAnswer(entry.read_bytes(), _TYPES[suffix])
    if "index.html" not in files:
        raise RuntimeError("the console's index.html is missing from the package")
    return files


class ConsolePages:
    """The console's requests: which are its own (:meth:`handler_for`) and their answers.

    ``guard`` checks the API token (None: no token, no sign-in needed), ``seconds``
    is the clock for session expiry, ``max_body`` the body limit of ``POST /session``.
    """

    def __init__(self, guard: TokenGuard | None, seconds: Callable[[], float],
                 max_body: int) -> None:
        self.files = _load_static()
        self.max_body = max_body
        self.guard = guard
        self.sessions = (SessionCookies(guard.token, seconds)
                         if guard is not None else None)

    def handler_for(self, request: Request) -> Handler | None:
        """The handler of a console request (the page, a file, the sign-in); None for the API.

        These need no token: the page and its files are public parts of the
        package, and ``/session`` is where the token is given.
        """
        path = request.path.split(b"?", 1)[0].decode("latin-1")
        method = request.method.decode("ascii", "replace").upper()
        if path == "/session":
            return {"GET": self.session_state, "POST": self.sign_in,
                    "DELETE": self.sign_out}.get(method, self._session_not_allowed)
        if method not in ("GET", "HEAD"):
            return None
        if path == "/" and prefers_html(request.getHeader(b"accept")):
            return self.page
        if path.startswith(f"/{STATIC_PREFIX}/"):
            return self.static_file
        return None

    def signed_in(self, request: Request) -> bool:
        """Whether the request carries a valid session cookie."""
        return self.sessions is not None and self.sessions.signed_in(request)

    # -- handlers -------------------------------------------------------------------

    def page(self, request: Request) -> RawAnswer:
        """``GET /`` from a browser: the console page."""
        return self.files["index.html"]

    def static_file(self, request: Request) -> RawAnswer:
        """``GET /console/<file>``: one of the page's files."""
        name = request.path.split(b"?", 1)[0].decode("latin-1")[len(STATIC_PREFIX) + 2:]
        found = self.files.get(name)
        if found is None or name == "index.html":
            raise ApiError(404, f"the console has no file {name!r}")
        return found

    def session_state(self, request: Request) -> dict[str, bool]:
        """``GET /session``: whether a token is needed and whether this browser is in."""
        required = self.sessions is not None
        return {"token_required": required,
                "signed_in": not required or self.signed_in(request)}

    def sign_in(self, request: Request) -> dict[str, bool]:
        """``POST /session`` ``{"token": ...}``: a session cookie for the right token."""
        body = parse_json_body(request, self.max_body)
        token = body.get("token")
        if not isinstance(token, str) or not token:
            raise ApiError(422, "token is required (a string)", field="token")
        unknown = sorted(set(body) - {"token"})
        if unknown:
            raise ApiError(422, f"unknown field {unknown[0]!r}", field=unknown[0])
        if self.sessions is None or self.guard is None:
            return {"token_required": False, "signed_in": True}
        self.guard.check(request, token.encode("utf-8"), field="token")
        self.sessions.issue(request)
        return {"token_required": True, "signed_in": True}

    def sign_out(self, request: Request) -> dict[str, bool]:
        """``DELETE /session``: forget this browser's session cookie."""
        if self.sessions is not None:
            self.sessions.clear(request)
        return {"token_required": self.sessions is not None, "signed_in": False}

    def _session_not_allowed(self, request: Request) -> None:
        raise ApiError(405, "use GET, POST or DELETE on /session",
                       headers={"Allow": "DELETE, GET, POST"})

