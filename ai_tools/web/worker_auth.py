"""Worker to worker: who may be called a worker, and how one proves it is one.

With several workers (PostgreSQL), a worker passes requests on to the worker
that runs an assistant (:mod:`~ai_tools.web.other_workers`).  Where to send them
comes from the database (``lease_workers.api_url``), so the database must not
be able to learn the API token, nor to point a request at a path of its choice:

* **No token leaves the worker.**  A forwarded request carries no
  ``Authorization`` header; it carries :data:`SIGNATURE_HEADER`, an HMAC-SHA256
  over the method, the request target (path and query, as sent), the SHA-256 of
  the body and the time, under a key derived from the API token
  (:func:`worker_key`; every worker runs one configuration, so every worker
  has the key, and the key does not give the token back).  The receiving
  worker checks it (:meth:`WorkerSigner.check`) instead of a bearer token, and
  refuses a signature older (or newer) than :data:`SIGNATURE_VALIDITY` seconds.
  Without a token (a loopback API that asks none) nothing is signed: there is
  nothing to protect.
* **An API address is ``http(s)://host:port`` and nothing else**
  (:func:`worker_base`): no path, query, fragment or user, an explicit port,
  a host the HTTP client can encode; and, when the operator names them
  (``[workers] api_hosts``), only those hosts.  Any other address is treated
  as a worker that cannot be reached: a status comes from the database, an
  action answers ``503`` with ``Retry-After``.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Collection
from urllib.parse import urlsplit

import attrs
from hyperlink import URL, URLParseError
from twisted.web.server import Request

from ai_tools.web.errors import ApiError

__all__ = [
    "SIGNATURE_HEADER",
    "SIGNATURE_VALIDITY",
    "WorkerSigner",
    "bad_worker_url",
    "worker_base",
    "worker_key",
]

SIGNATURE_HEADER = b"x-ai-tools-worker-signature"
"""The header of a request one worker sends another: ``t=<unix seconds>;sig=<hex>``."""

SIGNATURE_VALIDITY = 30.0
"""Seconds a signature is accepted before or after its time (clock skew, a slow hop)."""

_KEY_LABEL = b"ai_tools worker-to-worker request signature v1"

_MAX_HEADER = 200
"""Bytes of a signature header looked at (a real one is about 80)."""


def worker_key(token: bytes) -> bytes:
    """The signing key of the workers sharing ``token`` (an HMAC of a fixed label:
    the key does not give the token back)."""
    return hmac.new(token, _KEY_LABEL, hashlib.sha256).digest()


@attrs.define(eq=False)
class WorkerSigner:
    """Signs the requests this worker sends, checks those it receives (see the module).

    ``key`` comes from :func:`worker_key`; ``seconds`` is the clock.
    """

    key: bytes = attrs.field(repr=False)
    seconds: Callable[[], float]
    validity: float = SIGNATURE_VALIDITY

    @classmethod
    def for_token(cls, token: bytes, seconds: Callable[[], float]) -> WorkerSigner:
        """The signer of the workers whose API token is ``token``."""
        return cls(worker_key(token), seconds)

    def _mac(self, method: bytes, target: bytes, body: bytes, when: int) -> str:
        message = b"\n".join([method.upper(), target, hashlib.sha256(body).hexdigest().encode(),
                              str(when).encode()])
        return hmac.new(self.key, message, hashlib.sha256).hexdigest()

    def sign(self, method: bytes, target: bytes, body: bytes | None) -> bytes:
        """The :data:`SIGNATURE_HEADER` value of a request (``target``: path and query)."""
        when = int(self.seconds())
        return f"t={when};sig={self._mac(method, target, body or b'', when)}".encode("ascii")

    def check(self, request: Request) -> None:
        """Return when ``request`` carries a valid, current signature; else ``ApiError``
        401 saying what is wrong (never which part of the signature differs)."""
        header = request.getHeader(SIGNATURE_HEADER) or b""
        fields = dict(part.partition(b"=")[::2] for part in header[:_MAX_HEADER].split(b";"))
        when_text, given = fields.get(b"t", b""), fields.get(b"sig", b"")
        if not (when_text.isascii() and when_text.isdigit()) or len(when_text) > 12:
            raise _refused("a worker signature without a valid time")
        when = int(when_text)
        if abs(self.seconds() - when) > self.validity:
            raise _refused(f"a worker signature older or newer than {self.validity:g}s "
                           "(are the workers' clocks apart?)")
        body = b""
        if request.content is not None:
            request.content.seek(0)
            body = request.content.read()
            request.content.seek(0)
        expected = self._mac(request.method, request.uri, body, when).encode("ascii")
        if not hmac.compare_digest(given, expected):
            raise _refused("a wrong worker signature")


def _refused(why: str) -> ApiError:
    return ApiError(401, f"{why}: requests between workers are signed with a key derived "
                    "from the API token (do the workers share one configuration?)",
                    headers={"WWW-Authenticate": 'Bearer realm="ai_tools"'})


def bad_worker_url(api_url: object, hosts: Collection[str] = ()) -> str | None:
    """Why ``api_url`` is not a worker's API address (None: it is one; see the module).

    ``hosts``: when given, the only host names (or addresses) allowed."""
    if not isinstance(api_url, str) or not api_url.isascii() or not api_url.isprintable():
        return "it is not a printable ASCII URL"
    try:
        parts = urlsplit(api_url)
        port = parts.port
    except ValueError as exc:
        return f"it is not a URL ({exc})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "it is not an http(s)://host:port address"
    if port is None or parts.username is not None or parts.password is not None:
        return "it is not an http(s)://host:port address"
    if parts.path not in ("", "/") or parts.query or parts.fragment or "#" in api_url \
            or "?" in api_url:
        return "it has a path, query or fragment (a worker's address is http(s)://host:port)"
    if hosts and parts.hostname.lower() not in {h.lower() for h in hosts}:
        return "its host is not one of [workers] api_hosts"
    try:
        URL.from_text(api_url).to_uri()  # what the HTTP client does with it
    except (URLParseError, UnicodeError, ValueError) as exc:
        return f"the HTTP client cannot use it ({exc})"
    return None


def worker_base(api_url: object, hosts: Collection[str] = ()) -> str:
    """``api_url`` as a base to append a request target to (``http(s)://host:port``);
    ValueError saying why it is not a worker's API address."""
    why = bad_worker_url(api_url, hosts)
    if why is not None:
        raise ValueError(f"the API address {api_url!r} is refused: {why}")
    return str(api_url).rstrip("/")
