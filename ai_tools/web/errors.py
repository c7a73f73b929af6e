"""The HTTP API's errors: one exception carrying the status, and the JSON body it becomes."""

from __future__ import annotations

import json
from collections.abc import Mapping
from http import HTTPStatus

__all__ = ["ApiError", "error_body", "json_type", "raw_error_answer"]


class ApiError(Exception):
    """A request the API refuses: ``status``, a message, and the offending ``field`` if any.

    Answered as ``{"error": message, "status": status, "field": field}``.
    """

    def __init__(
        self,
        status: int,
        message: str,
        field: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field
        self.headers = dict(headers or {})


def error_body(status: int, message: str, field: str | None = None) -> dict[str, object]:
    """The JSON object of an error answer."""
    body: dict[str, object] = {"error": message, "status": status}
    if field is not None:
        body["field"] = field
    return body


def raw_error_answer(status: int, message: str,
                     headers: Mapping[str, str] | None = None) -> bytes:
    """A whole ``Connection: close`` error answer, for writing straight to a connection.

    For answers given outside a request's normal path: a connection refused
    at once, a body refused while it arrives, a request too slow to arrive.
    """
    body = json.dumps(error_body(status, message)).encode("utf-8")
    lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}",
             "Content-Type: application/json",
             f"Content-Length: {len(body)}",
             "Connection: close"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def json_type(value: object) -> str:
    """The JSON name of a decoded value's type (for messages: 'a string', not 'str')."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__
