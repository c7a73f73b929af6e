"""What our MCP client and server ask of a tracer: the interfaces, and outcomes named once.

Tracing is off unless the service has telemetry (``docs/observability.md``):
then a session holds a :class:`ClientTracing` or its server a
:class:`ServerTracing` (made by :mod:`ai_tools.telemetry.mcp_spans`, the only
place that imports OpenTelemetry).  With tracing off nothing here is called:
no span, no ``_meta`` field, no header.

The W3C trace context travels in the request's ``params._meta`` (``traceparent``,
``tracestate``), as the OpenTelemetry MCP conventions say, on both transports;
over HTTP the same ``traceparent`` also goes as a header.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from twisted.internet import defer
from twisted.python.failure import Failure

from ai_tools.json_types import JSONMapping
from ai_tools.mcp.jsonrpc import JSONRPCError, RequestId

__all__ = ["TRACE_FIELDS", "CallTrace", "ClientTracing", "Outcome", "ServerCallTrace",
           "ServerTracing", "carrier_of", "outcome_of"]

TRACE_FIELDS = ("traceparent", "tracestate", "baggage")
"""The W3C fields a ``_meta`` (or a header set) carries the trace context in."""


class Outcome(Protocol):
    """How an MCP operation ended, for its span: ``error_type`` None when it went well."""

    @property
    def error_type(self) -> str | None: ...

    @property
    def code(self) -> int | None: ...

    @property
    def message(self) -> str: ...


class _Outcome:
    __slots__ = ("code", "error_type", "message")

    def __init__(self, error_type: str | None, code: int | None = None,
                 message: str = "") -> None:
        self.error_type = error_type
        self.code = code
        self.message = message


def outcome_of(value: object) -> Outcome:
    """The outcome of a result dict, an error answer or a failure (the MCP page's rules:
    ``error.type`` is the JSON-RPC error code, ``tool_error`` for a ``CallToolResult``
    with ``isError``, else a low-cardinality name)."""
    error = value.value if isinstance(value, Failure) else value
    if isinstance(error, JSONRPCError):
        return _Outcome(str(error.code), error.code, error.message)
    if isinstance(error, defer.CancelledError):
        return _Outcome("cancelled", None, "cancelled")
    if isinstance(error, defer.TimeoutError):
        return _Outcome("timeout", None, "no answer in time")
    if isinstance(error, BaseException):
        return _Outcome(type(error).__name__, None, str(error)[:500])
    if isinstance(value, Mapping) and value.get("isError") is True:
        return _Outcome("tool_error", None, "the tool reported an error")
    return _Outcome(None)


def carrier_of(meta: object) -> dict[str, str]:
    """The W3C fields of a ``_meta`` object (or of headers), those that are strings."""
    if not isinstance(meta, Mapping):
        return {}
    return {name: value for name in TRACE_FIELDS
            if isinstance(value := meta.get(name), str)}


class CallTrace(Protocol):
    """The span of one MCP request (or notification), open until :meth:`end`."""

    def carrier(self) -> dict[str, str]:
        """The W3C fields naming this span (for ``_meta`` and headers)."""

    def end(self, outcome: Outcome) -> None:
        """Close the span (its status and ``error.type`` from ``outcome``), record its
        duration."""


class ClientTracing(Protocol):
    """CLIENT spans of the requests a client session sends to one server."""

    def request(self, method: str, request_id: RequestId, target: str | None, *,
                parent: object = None, protocol_version: str | None = None,
                session_id: str | None = None) -> CallTrace:
        """Open the span of a request; ``parent`` is the context it belongs to (the
        ``execute_tool`` span of a tool call) or None (a root)."""


class ServerCallTrace(CallTrace, Protocol):
    """The SERVER span of one request our server handles."""

    def execute_tool(self, name: str, call_id: str) -> Callable[[JSONMapping], None]:
        """Open the engine's ``execute_tool`` span below this one; the callable closes it
        with the call's ``tool_result`` event."""


class ServerTracing(Protocol):
    """SERVER spans of the requests our MCP server handles."""

    def request(self, method: str, request_id: RequestId, target: str | None, *,
                meta: Mapping[str, str], headers: Mapping[str, str],
                session_id: str | None = None,
                protocol_version: str | None = None) -> ServerCallTrace:
        """Open the span of a request (over Streamable HTTP), parented from ``meta``
        (its ``params._meta`` fields), else from the HTTP request's ``headers``."""
