"""JSON-RPC 2.0 as MCP uses it: the messages, their parsing, the error codes.

Both directions of MCP (our client of MCP servers, our server for MCP clients)
speak these messages over stdio (one JSON text per line) and over Streamable
HTTP (a JSON body or SSE events).  Parsing checks the envelope once here, with a
byte bound, so a transport only frames bytes and a peer only dispatches values.
MCP 2025-06-18 removed JSON-RPC batches: an array is an invalid request.
"""

from __future__ import annotations

import json
from typing import NoReturn

import attrs

from ai_tools.json_types import JSONObject, JSONValue

__all__ = [
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "LATEST_PROTOCOL_VERSION",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "SUPPORTED_PROTOCOL_VERSIONS",
    "ErrorResponse",
    "JSONRPCError",
    "LineSplitter",
    "Message",
    "Notification",
    "Request",
    "RequestId",
    "Response",
    "decode_message",
    "encode_message",
    "negotiate_version",
    "parse_message",
]

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

SUPPORTED_PROTOCOL_VERSIONS: tuple[str, ...] = ("2025-11-25", "2025-06-18")
"""The MCP revisions this project speaks, newest first."""

LATEST_PROTOCOL_VERSION = SUPPORTED_PROTOCOL_VERSIONS[0]

RequestId = str | int


class JSONRPCError(Exception):
    """A JSON-RPC error: raised by a handler, or received from the peer.

    ``code`` is one of the constants above (or a server-defined code);
    ``data`` is any JSON value or ``None``.
    """

    def __init__(self, code: int, message: str, data: JSONValue = None) -> None:
        super().__init__(f"{message} (JSON-RPC error {code})")
        self.code = code
        self.message = message
        self.data = data


@attrs.frozen
class Request:
    """A call that expects an answer with the same ``id``."""

    id: RequestId
    method: str
    params: JSONObject | None = None


@attrs.frozen
class Notification:
    """A one-way message (no ``id``, no answer)."""

    method: str
    params: JSONObject | None = None


@attrs.frozen
class Response:
    """The successful answer to the request with this ``id``."""

    id: RequestId
    result: JSONObject


@attrs.frozen
class ErrorResponse:
    """The failed answer to a request (``id`` is ``None`` when it could not be read)."""

    id: RequestId | None
    code: int
    message: str
    data: JSONValue = None

    def error(self) -> JSONRPCError:
        """The exception this answer stands for, for the caller's errback."""
        return JSONRPCError(self.code, self.message, self.data)


Message = Request | Notification | Response | ErrorResponse

_encode = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode


def encode_message(message: Message) -> bytes:
    """One message as compact UTF-8 JSON (no newline inside, so it frames as a line)."""
    body: JSONObject = {"jsonrpc": "2.0"}
    if isinstance(message, (Request, Notification)):
        if isinstance(message, Request):
            body["id"] = message.id
        body["method"] = message.method
        if message.params is not None:
            body["params"] = message.params
    elif isinstance(message, Response):
        body["id"] = message.id
        body["result"] = message.result
    else:
        body["id"] = message.id
        error: JSONObject = {"code": message.code, "message": message.message}
        if message.data is not None:
            error["data"] = message.data
        body["error"] = error
    return _encode(body).encode("utf-8")


def _refuse_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


def decode_message(data: bytes, max_bytes: int) -> Message:
    """Parse one framed message of at most ``max_bytes`` bytes.

    Raises :class:`JSONRPCError` with ``PARSE_ERROR`` (too long, not UTF-8 JSON)
    or ``INVALID_REQUEST`` (a valid JSON text that is no JSON-RPC 2.0 message).
    """
    if len(data) > max_bytes:
        raise JSONRPCError(PARSE_ERROR, f"message of {len(data)} bytes exceeds {max_bytes}")
    try:
        value = json.loads(data.decode("utf-8"), parse_constant=_refuse_constant)
    except (UnicodeDecodeError, ValueError) as e:
        raise JSONRPCError(PARSE_ERROR, f"not a JSON text: {e}") from None
    return parse_message(value)


def _checked_id(value: object) -> RequestId:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise JSONRPCError(INVALID_REQUEST, "id must be a string or an integer")
    return value


def _checked_params(value: object) -> JSONObject | None:
    if value is not None and not isinstance(value, dict):
        raise JSONRPCError(INVALID_REQUEST, "params must be an object")
    return value


def _parse_error(value: JSONObject) -> ErrorResponse:
    error = value["error"]
    code = error.get("code") if isinstance(error, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    if not isinstance(code, int) or isinstance(code, bool) or not isinstance(message, str):
        raise JSONRPCError(INVALID_REQUEST, "error must have an integer code and a message")
    assert isinstance(error, dict)
    raw_id = value.get("id")
    return ErrorResponse(None if raw_id is None else _checked_id(raw_id), code, message,
                         error.get("data"))


def parse_message(value: object) -> Message:
    """The message a decoded JSON value stands for, or :class:`JSONRPCError`."""
    if not isinstance(value, dict) or value.get("jsonrpc") != "2.0":
        raise JSONRPCError(INVALID_REQUEST, "not a JSON-RPC 2.0 message object")
    if "method" in value:
        method = value["method"]
        if not isinstance(method, str) or not method:
            raise JSONRPCError(INVALID_REQUEST, "method must be a non-empty string")
        params = _checked_params(value.get("params"))
        if "id" in value:
            return Request(_checked_id(value["id"]), method, params)
        return Notification(method, params)
    if "error" in value:
        return _parse_error(value)
    if "result" in value and "id" in value:
        result = value["result"]
        if not isinstance(result, dict):
            raise JSONRPCError(INVALID_REQUEST, "result must be an object")
        return Response(_checked_id(value["id"]), result)
    raise JSONRPCError(INVALID_REQUEST, "neither a request, a notification nor a response")


def negotiate_version(requested: object) -> str:
    """The version a server answers ``initialize`` with: the client's when we speak
    it, else our newest (the client then decides whether to go on)."""
    if requested in SUPPORTED_PROTOCOL_VERSIONS:
        return str(requested)
    return LATEST_PROTOCOL_VERSION


@attrs.define(eq=False)
class LineSplitter:
    """Newline-delimited framing of the stdio transport, bounded by bytes.

    ``feed`` returns the complete lines received so far (without their line end,
    blank lines dropped); a line longer than ``max_line_bytes`` raises
    :class:`JSONRPCError` (``PARSE_ERROR``) and the buffer is discarded up to the
    next newline, so one oversized message does not poison the ones after it.
    """

    max_line_bytes: int
    _buffer: bytearray = attrs.field(factory=bytearray, init=False)
    _discarding: bool = attrs.field(default=False, init=False)

    def feed(self, data: bytes) -> list[bytes]:
        """Add received bytes; return the lines they complete."""
        lines: list[bytes] = []
        self._buffer += data
        while True:
            end = self._buffer.find(b"\n")
            if end < 0:
                break
            line = bytes(self._buffer[:end]).rstrip(b"\r")
            del self._buffer[:end + 1]
            if self._discarding:
                self._discarding = False
                continue
            if line.strip():
                lines.append(line)
        if len(self._buffer) > self.max_line_bytes and not self._discarding:
            self._discarding = True
            self._buffer.clear()
            raise JSONRPCError(PARSE_ERROR, f"a line exceeds {self.max_line_bytes} bytes")
        if self._discarding:
            self._buffer.clear()
        return lines
