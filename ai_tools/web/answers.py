"""How the HTTP API answers: a JSON body, or the JSON error a failure becomes.

Every answer is JSON (``application/json``, ``Content-Length``, one line); an
:class:`~ai_tools.web.errors.ApiError` becomes its status and
``{"error", "status", "field"?}``, a ``NotFound`` 404, a ``PermissionDenied``
403, anything else a logged 500 that names only the exception's class.  A
``413`` or a ``5xx`` closes the connection.
"""

from __future__ import annotations

import json

import attrs
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.server import Request

from ai_tools.errors import NotFound, PermissionDenied
from ai_tools.web.errors import ApiError, error_body

__all__ = ["api_error", "encode_json", "json_default", "send_error_headers", "write_json"]

log = Logger()


def json_default(value: object) -> object:
    """What JSON cannot encode as it is, encoded anyway: an attrs value as its fields, a
    set or tuple as an array, anything else as its ``repr`` (answers and events alike)."""
    if attrs.has(type(value)):
        return attrs.asdict(value)  # type: ignore[arg-type]
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return repr(value)


def encode_json(data: object) -> bytes:
    """``data`` as one line of JSON (attrs values as objects, sets as arrays)."""
    return json.dumps(data, default=json_default, allow_nan=False).encode("utf-8") + b"\n"


def write_json(request: Request, status: int, body: object) -> None:
    """Answer ``request`` with ``status`` and ``body`` as JSON, and finish it (a body
    that cannot be encoded is a logged 500)."""
    try:
        data = encode_json(body)
    except (TypeError, ValueError):
        log.failure("An API answer could not be encoded as JSON")
        status, data = 500, encode_json(error_body(500, "internal error: bad answer"))
    request.setResponseCode(status)
    request.setHeader(b"content-length", str(len(data)).encode("ascii"))
    request.write(data)
    request.finish()


def api_error(failure: Failure, request: Request) -> ApiError:
    """The answer a handler's failure gets (an unexpected one is logged)."""
    error = failure.value
    if isinstance(error, ApiError):
        return error
    if isinstance(error, NotFound):
        return ApiError(404, str(error))
    if isinstance(error, PermissionDenied):
        return ApiError(403, str(error))
    log.failure("The HTTP API failed on {method} {uri}", failure,
                method=request.method, uri=request.uri)
    return ApiError(500, f"internal error: {type(error).__name__}")


def send_error_headers(request: Request, error: ApiError) -> None:
    """The error's own headers; ``Connection: close`` after a 413 or a 5xx."""
    for key, value in error.headers.items():
        request.setHeader(key.encode("ascii"), value.encode("latin-1"))
    if error.status == 413 or error.status >= 500:
        request.setHeader(b"connection", b"close")
