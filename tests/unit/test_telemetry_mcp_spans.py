"""MCP spans on the failure paths, with the real SDK: a cancelled call, an error answer, a
server gone, a cancelled request on our server; the context in ``_meta`` beside progress."""

from __future__ import annotations

from typing import Any

from opentelemetry.trace import SpanKind, StatusCode
from twisted.internet import defer, task

from ai_tools.mcp.client import McpSession, ServerGone
from ai_tools.mcp.jsonrpc import Notification, Request
from ai_tools.mcp.server import McpServer, RequestContext, ServerFeatures
from tests.telemetry_fixtures import Recorded, traceparent_of
from tests.unit.mcp_fakes import FakeServer


def traced_session(server: FakeServer, recorded: Recorded, url: str | None = None
                   ) -> McpSession:
    session = McpSession(server, name="fake",
                         tracing=recorded.telemetry.mcp_client_tracing(url))
    assert session.connect(5, task.Clock()).called
    return session


def test_the_context_goes_in_meta_beside_the_progress_token() -> None:
    recorded = Recorded()
    server = FakeServer()
    session = traced_session(server, recorded)
    session.call_tool("echo", {"text": "hi"}, on_progress=lambda params: None)
    [call] = server.requests("tools/call")
    assert call.params is not None
    meta = call.params["_meta"]
    assert isinstance(meta, dict) and meta["progressToken"] == f"p{call.id}"
    span = recorded.one("tools/call echo")
    assert meta["traceparent"] == traceparent_of(span)
    assert span.kind is SpanKind.CLIENT and span.status.status_code is StatusCode.UNSET
    assert span.attributes["network.transport"] == "pipe"
    assert "server.address" not in span.attributes


def test_a_cancelled_call_an_error_answer_and_a_server_gone() -> None:
    recorded = Recorded()
    server = FakeServer()
    server.handlers["tools/call"] = lambda request: None  # never answered
    session = traced_session(server, recorded, "https://tools.example/mcp")
    cancelled = session.call_tool("slow", {})
    cancelled.addErrback(lambda f: f.trap(defer.CancelledError))
    cancelled.cancel()
    [span] = recorded.named("tools/call slow")
    assert span.attributes["error.type"] == "cancelled"
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes["server.address"] == "tools.example"
    assert span.attributes["server.port"] == 443
    refused = session.request("prompts/get", {"name": "greeting"})  # the fake has none
    refused.addErrback(lambda f: None)
    span = recorded.one("prompts/get greeting")
    assert span.attributes["error.type"] == "-32601"
    assert span.attributes["rpc.response.status_code"] == "-32601"
    assert span.status.description == "no such method"
    gone = session.call_tool("echo", {})
    gone.addErrback(lambda f: f.trap(ServerGone))
    server.die()
    assert recorded.one("tools/call echo").attributes["error.type"] == "ServerGone"
    durations = recorded.metrics()["mcp.client.operation.duration"]
    assert {p.attributes.get("error.type") for p in durations} >= {
        "cancelled", "-32601", "ServerGone"}


class Waits:
    """A tool that never answers by itself."""

    def list_tools(self) -> list[dict[str, Any]]:
        return [{"name": "wait", "inputSchema": {"type": "object"}}]

    def call_tool(self, name: str, arguments: dict[str, Any], context: RequestContext) -> Any:
        return defer.Deferred()


def test_a_request_the_client_cancels_ends_its_server_span_cancelled() -> None:
    recorded = Recorded()
    clock = task.Clock()
    server = McpServer(ServerFeatures(tools=Waits()), clock, request_timeout=10,
                       tracing=recorded.telemetry.mcp_server_tracing)
    session = server.open_session(lambda message, related: None)
    session.receive(Request(0, "initialize", {"protocolVersion": "2025-11-25"}))
    answer = session.receive(Request(1, "tools/call", {"name": "wait"}))
    assert isinstance(answer, defer.Deferred) and not answer.called
    session.receive(Notification("notifications/cancelled", {"requestId": 1}))
    span = recorded.one("tools/call wait")
    assert span.kind is SpanKind.SERVER and span.parent is None
    assert span.attributes["error.type"] == "cancelled"
    late = session.receive(Request(2, "tools/call", {"name": "wait"}))
    assert isinstance(late, defer.Deferred)
    clock.advance(10)  # past the request's deadline: an error answer
    timed_out = [s for s in recorded.named("tools/call wait") if s is not span]
    assert [s.attributes["error.type"] for s in timed_out] == ["-32603"]
