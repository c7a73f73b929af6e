"""Request bodies with a size limit enforced while they arrive, and JSON body parsing.

twisted.web buffers a whole request body before the resource sees it, so a
limit checked in ``render`` comes too late: the memory is already spent.
:class:`LimitedRequest` counts bytes as they come in.  A body declared (by
``Content-Length``) or found (chunked) to be larger than the site's
``max_body`` gets a ``413`` JSON answer at once; the rest of the body is
read and thrown away for a short while (so the client sees the answer and
not a connection reset) and then the connection is closed.
"""

from __future__ import annotations

import json
from io import BytesIO
from typing import Any, NoReturn

from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import server

from ai_tools.default_reactor import or_global_reactor
from ai_tools.web.errors import ApiError, json_type, raw_error_answer

__all__ = ["DEFAULT_MAX_BODY", "LimitedRequest", "body_size", "check_content_type",
           "parse_json_body"]

log = Logger()

DEFAULT_MAX_BODY = 65536
"""Bytes a request body may hold unless the site says otherwise."""

LINGER_SECONDS = 2.0
"""How long a refused upload is drained before the connection is closed."""

LINGER_BYTES = 1 << 20
"""How much of a refused upload is drained (beyond it the connection is closed at once)."""


def _too_large_message(limit: int) -> str:
    return f"request body too large: the limit is {limit} bytes"


class LimitedRequest(server.Request):
    """A ``Request`` that refuses bodies over its site's ``max_body`` while reading them.

    The site (``channel.site``) may carry ``max_body`` (bytes) and ``clock``
    (for the drain timer); without them the defaults apply.
    """

    _body_bytes = 0
    _refused = False
    _drained = 0
    _linger: Any = None

    @property
    def max_body(self) -> int:
        """The limit that applies to this request."""
        site = getattr(self.channel, "site", None)
        limit = getattr(site, "max_body", None)
        return limit if isinstance(limit, int) else DEFAULT_MAX_BODY

    @property
    def body_refused(self) -> bool:
        """Whether this request was answered 413 while its body arrived."""
        return self._refused

    def gotLength(self, length: int | None) -> None:
        """Refuse at once a body whose declared length is over the limit."""
        if length is not None and length > self.max_body:
            self.content = BytesIO()
            self._refuse()
            return
        super().gotLength(length)

    def handleContentChunk(self, data: bytes) -> None:
        """Keep the chunk while under the limit; past it, answer 413 and drop the rest."""
        if self._refused:
            self._drained += len(data)
            if self._drained > LINGER_BYTES:
                self._close()
            return
        self._body_bytes += len(data)
        if self._body_bytes > self.max_body:
            self.content = BytesIO()
            self._refuse()
            return
        super().handleContentChunk(data)

    def requestReceived(self, command: bytes, path: bytes, version: bytes) -> None:
        """Process the request, unless it was already answered 413 (then close)."""
        if self._refused:
            self._close()
            return
        super().requestReceived(command, path, version)

    def _refuse(self) -> None:
        """Write the 413 straight to the connection and start draining."""
        self._refused = True
        # No "100 Continue" after our final answer (the channel would send it next).
        self.requestHeaders.removeHeader(b"Expect")
        limit = self.max_body
        log.info("Refused a request body over {limit} bytes", limit=limit)
        transport: Any = self.channel.transport
        if transport is None:
            return
        transport.write(raw_error_answer(413, _too_large_message(limit)))
        clock: Any = or_global_reactor(getattr(getattr(self.channel, "site", None), "clock", None))
        self._linger = clock.callLater(LINGER_SECONDS, self._close)

    def _close(self) -> None:
        if self._linger is not None and self._linger.active():
            self._linger.cancel()
        self._linger = None
        transport: Any = self.channel.transport if self.channel is not None else None
        if transport is not None:
            transport.loseConnection()

    def connectionLost(self, reason: Failure) -> None:
        """Cancel the drain timer with the connection."""
        if self._linger is not None and self._linger.active():
            self._linger.cancel()
        self._linger = None
        super().connectionLost(reason)


def _refuse_constant(name: str) -> NoReturn:
    """``NaN``, ``Infinity``, ``-Infinity``: Python's parser takes them, JSON does not."""
    raise ValueError(f"{name} is not JSON (numbers must be finite)")


def parse_json_body(request: server.Request, max_body: int) -> dict[str, object]:
    """The request body as a JSON object.

    Raises ApiError: 413 when larger than ``max_body`` (a site without
    :class:`LimitedRequest` checks here), 400 for an empty body, bytes that
    are not UTF-8 JSON (``NaN`` and ``Infinity`` are not), or JSON that is not an
    object.
    """
    content = request.content
    raw = b""
    if content is not None:
        content.seek(0)
        raw = content.read(max_body + 1)
    if len(raw) > max_body:
        raise ApiError(413, _too_large_message(max_body))
    if not raw.strip():
        raise ApiError(400, "the request body is empty; send a JSON object")
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant)
    except UnicodeDecodeError:
        raise ApiError(400, "the request body is not UTF-8 text") from None
    except ValueError as exc:
        raise ApiError(400, f"the request body is not valid JSON: {exc}") from None
    except RecursionError:
        # json's C scanner recurses once per level: '[' x 30,000 ends here, not in a 500
        raise ApiError(400, "the request body nests too deeply") from None
    if not isinstance(data, dict):
        raise ApiError(400, f"the request body must be a JSON object, not {json_type(data)}")
    return data


def body_size(request: server.Request) -> int:
    """Bytes of the request's body as received (0: no body)."""
    content = request.content
    if content is None:
        return 0
    position = content.tell()
    size: int = content.seek(0, 2)
    content.seek(position)
    return size


def check_content_type(request: server.Request) -> None:
    """Refuse (415) a request that has a body which is not declared ``application/json``.

    A browser page may send a "simple" cross-origin POST (``text/plain``, a
    form) without asking first; it can never send ``application/json``
    without a preflight this API does not answer.  A request without a body
    (``curl -X POST .../tick``) needs no content type.
    """
    if body_size(request) == 0:
        return
    declared = request.getHeader(b"content-type") or b""
    media_type = declared.split(b";", 1)[0].strip().lower()
    if media_type != b"application/json":
        shown = declared.decode("latin-1") or "none"
        raise ApiError(415, f"a request body must be sent as 'Content-Type: "
                       f"application/json' (this one was {shown!r})")
