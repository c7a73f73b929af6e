"""Instructions per MCP ``tools/call``, client and server, for ``valgrind --tool=cachegrind``.

``python -m benchmarks.mcp_instructions [--traced] BLOCKS`` connects our client session
(:class:`~ai_tools.mcp.client.McpSession`) to our server session
(:class:`~ai_tools.mcp.server.McpSession`) in memory — each message encoded to bytes and
decoded again on the other side, as a transport would, but no socket — runs one warm-up
block, then BLOCKS blocks of :data:`BLOCK` ``tools/call`` round trips of a tool that
answers at once.  Run it under cachegrind with 0 and 10 blocks: the difference of the
``I refs`` totals over ``10 * BLOCK`` is one call, both sides.  ``--traced`` gives both
sides the span makers of :mod:`ai_tools.telemetry.mcp_spans` (the SDK's tracer provider,
a batch span processor whose exporter discards the spans, the duration metrics): the
difference is what tracing costs per MCP call (a CLIENT span, a SERVER span, the context
in ``params._meta`` sent and read, two metric records).  ``docs/observability.md`` has
the figures.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from twisted.internet import defer, task
from twisted.python.failure import Failure

from ai_tools.json_types import JSONObject
from ai_tools.mcp.client import McpSession as ClientSession
from ai_tools.mcp.jsonrpc import Message, decode_message, encode_message
from ai_tools.mcp.server import McpServer, RequestContext, ServerFeatures

if TYPE_CHECKING:
    from ai_tools.telemetry import Telemetry

BLOCK = 100
"""Calls per block."""

_LIMIT = 1024 * 1024


class Echo:
    """One tool, ``echo``, answering at once."""

    def list_tools(self) -> list[JSONObject]:
        return [{"name": "echo", "inputSchema": {"type": "object"}}]

    def call_tool(self, name: str, arguments: JSONObject, context: RequestContext
                  ) -> JSONObject:
        return {"content": [{"type": "text", "text": str(arguments.get("text"))}]}


class InMemory:
    """A client transport whose server is our server session, messages as bytes both ways."""

    session_id: str | None = "bench"

    def __init__(self, server: McpServer) -> None:
        self._server = server.open_session(lambda message, related: self._back(message))
        self._server.session_id = "bench"
        self._deliver: Callable[[Message], None] | None = None

    def start(self, deliver: Callable[[Message], None],
              lost: Callable[[Failure], None]) -> defer.Deferred[None]:
        self._deliver = deliver
        return defer.succeed(None)

    def send(self, message: Message) -> defer.Deferred[None]:
        answer = self._server.receive(decode_message(encode_message(message), _LIMIT))
        if isinstance(answer, defer.Deferred):
            answer.addCallback(self._back_if_any)
        elif answer is not None:
            self._back(answer)
        return defer.succeed(None)

    def _back_if_any(self, message: Message | None) -> None:
        if message is not None:
            self._back(message)

    def _back(self, message: Message) -> None:
        assert self._deliver is not None
        self._deliver(decode_message(encode_message(message), _LIMIT))

    def close(self) -> defer.Deferred[None]:
        return defer.succeed(None)


def _telemetry() -> Telemetry:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    from ai_tools.telemetry import Telemetry

    class Discard(SpanExporter):
        def export(self, spans: object) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Discard()))
    return Telemetry.from_providers(provider, MeterProvider(), environ={})


def connected(traced: bool) -> ClientSession:
    """A client session initialised against our server, traced or not."""
    clock = task.Clock()
    tracing = None
    server_tracing = None
    if traced:
        telemetry = _telemetry()
        tracing = telemetry.mcp_client_tracing("http://127.0.0.1:8080/mcp")
        server_tracing = telemetry.mcp_server_tracing
    server = McpServer(ServerFeatures(tools=Echo()), clock, tracing=server_tracing)
    session = ClientSession(InMemory(server), name="bench", tracing=tracing)
    d = session.connect(10.0, clock)
    assert d.called, "the in-memory session did not initialise at once"
    return session


def block(session: ClientSession) -> None:
    """:data:`BLOCK` calls, one after the other."""
    for _ in range(BLOCK):
        d = session.call_tool("echo", {"text": "The lantern is lit."})
        assert d.called


def main(argv: list[str]) -> int:
    traced = "--traced" in argv
    blocks = int(next(a for a in argv if not a.startswith("--")))
    session = connected(traced)
    block(session)  # warm-up
    for _ in range(blocks):
        block(session)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
