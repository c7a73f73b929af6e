"""MCP spans and metrics after the OpenTelemetry MCP conventions (``gen-ai/mcp``, v1.39.0).

:class:`McpClientTracing` makes a CLIENT span per request our client sends to
one server (``initialize``, ``tools/list``, ``tools/call {tool}``), a child of
the ``execute_tool`` span of the call it serves; :class:`McpServerTracing`
a SERVER span per request our server handles, parented from the context the
request carries in ``params._meta`` (else its ``traceparent`` header, which
is then no link: one context), with the engine's ``execute_tool`` span of a
game tool below it.  Both record ``mcp.client.operation.duration`` /
``mcp.server.operation.duration``.  The interfaces they implement are
:mod:`ai_tools.mcp.tracing`'s; they are made only when tracing is on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanKind

import ai_tools.telemetry.conventions as sc
from ai_tools.json_types import JSONMapping
from ai_tools.telemetry.loop_tracer import fail, tool_result_attributes

if TYPE_CHECKING:
    from opentelemetry.metrics import Histogram
    from opentelemetry.util.types import AttributeValue

    from ai_tools.mcp.tracing import Outcome
    from ai_tools.telemetry.setup import Telemetry

__all__ = ["McpClientTracing", "McpServerTracing", "client_facts"]

Attributes = dict[str, "AttributeValue"]


def client_facts(url: str | None) -> Attributes:
    """The transport attributes of a client session: ``pipe`` for a child process's
    stdio; ``tcp``, ``http`` and the server's address for Streamable HTTP."""
    if url is None:
        return {sc.NETWORK_TRANSPORT: "pipe"}
    facts: Attributes = {sc.NETWORK_TRANSPORT: "tcp", sc.NETWORK_PROTOCOL_NAME: "http"}
    try:
        parts = urlsplit(url)
        facts[sc.SERVER_ADDRESS] = parts.hostname or ""
        facts[sc.SERVER_PORT] = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        pass
    return facts


def _attributes(method: str, request_id: str | int, target: str | None,
                protocol_version: str | None) -> Attributes:
    attributes: Attributes = {sc.MCP_METHOD_NAME: method,
                              sc.JSONRPC_REQUEST_ID: str(request_id)}
    if method == "tools/call" and target:
        attributes[sc.TOOL_NAME] = target
        attributes[sc.OPERATION_NAME] = sc.EXECUTE_TOOL
    if protocol_version:
        attributes[sc.MCP_PROTOCOL_VERSION] = protocol_version
    return attributes


class _Call:
    """One open MCP span: its context for children and carriers, its end."""

    __slots__ = ("_duration", "_metric", "_span", "_started", "_telemetry")

    def __init__(self, telemetry: Telemetry, span: Span, duration: Histogram | None,
                 attributes: Attributes) -> None:
        self._telemetry = telemetry
        self._span = span
        self._duration = duration
        self._metric = {key: value for key, value in attributes.items() if key in _METRIC_KEYS}
        self._started = time.monotonic()

    def carrier(self) -> dict[str, str]:
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=trace.set_span_in_context(self._span))
        return carrier

    def end(self, outcome: Outcome) -> None:
        span = self._span
        if not span.is_recording():
            return  # ended already (a cancel, then the errback)
        metric = self._metric
        if outcome.error_type is not None:
            fail(span, outcome.error_type, outcome.message or outcome.error_type)
            metric[sc.ERROR_TYPE] = outcome.error_type
            if outcome.code is not None:
                span.set_attribute(sc.RPC_RESPONSE_STATUS_CODE, str(outcome.code))
        span.end()
        if self._duration is not None:
            self._duration.record(time.monotonic() - self._started, metric)

    def context(self) -> Context:
        return trace.set_span_in_context(self._span)


class _ServerCall(_Call):
    __slots__ = ()

    def execute_tool(self, name: str, call_id: str) -> Callable[[JSONMapping], None]:
        span = self._telemetry.tracer.start_span(
            f"{sc.EXECUTE_TOOL} {name}", context=self.context(), kind=SpanKind.INTERNAL,
            attributes={sc.OPERATION_NAME: sc.EXECUTE_TOOL, sc.TOOL_NAME: name,
                        sc.TOOL_CALL_ID: call_id, sc.TOOL_TYPE: "function"})

        def done(event: JSONMapping) -> None:
            status = str(event.get("status") or "")
            span.set_attributes(tool_result_attributes(event, status))
            if not event.get("success"):
                fail(span, status or "tool_error", event.get("error"))
            span.end()

        return done


_METRIC_KEYS = frozenset({sc.MCP_METHOD_NAME, sc.TOOL_NAME, sc.OPERATION_NAME,
                          sc.MCP_PROTOCOL_VERSION, sc.NETWORK_TRANSPORT,
                          sc.NETWORK_PROTOCOL_NAME, sc.SERVER_ADDRESS, sc.SERVER_PORT})


class McpClientTracing:
    """CLIENT spans of one server's requests (see the module docstring)."""

    def __init__(self, telemetry: Telemetry, facts: Attributes) -> None:
        self._telemetry = telemetry
        self._facts = facts

    def request(self, method: str, request_id: str | int, target: str | None, *,
                parent: object = None, protocol_version: str | None = None,
                session_id: str | None = None) -> _Call:
        attributes = {**self._facts, **_attributes(method, request_id, target,
                                                   protocol_version)}
        if session_id:
            attributes[sc.MCP_SESSION_ID] = session_id
        span = self._telemetry.tracer.start_span(
            f"{method} {target}" if target else method,
            context=parent if isinstance(parent, Context) else Context(),
            kind=SpanKind.CLIENT, attributes=attributes)
        return _Call(self._telemetry, span, self._telemetry.mcp_client_duration, attributes)


class McpServerTracing:
    """SERVER spans of the requests our server handles (see the module docstring)."""

    def __init__(self, telemetry: Telemetry) -> None:
        self._telemetry = telemetry

    def request(self, method: str, request_id: str | int, target: str | None, *,
                meta: Mapping[str, str], headers: Mapping[str, str],
                session_id: str | None = None,
                protocol_version: str | None = None) -> _ServerCall:
        attributes: Attributes = {sc.NETWORK_TRANSPORT: "tcp", sc.NETWORK_PROTOCOL_NAME: "http",
                                  **_attributes(method, request_id, target, protocol_version)}
        if session_id:
            attributes[sc.MCP_SESSION_ID] = session_id
        links: list[Link] = []
        if meta.get("traceparent"):
            parent = propagate.extract(meta, context=Context())
            if headers.get("traceparent") and headers["traceparent"] != meta["traceparent"]:
                transport = trace.get_current_span(propagate.extract(headers, context=Context()))
                links.append(Link(transport.get_span_context()))  # the HTTP request's context
        else:
            parent = propagate.extract(headers, context=Context())
        span = self._telemetry.tracer.start_span(
            f"{method} {target}" if target else method, context=parent,
            kind=SpanKind.SERVER, attributes=attributes, links=links)
        return _ServerCall(self._telemetry, span, self._telemetry.mcp_server_duration,
                           attributes)
