"""MCP spans with the real OpenTelemetry SDK (its in-memory exporter): our client and our
server over Streamable HTTP on 127.0.0.1, our client and the official SDK's server as a
child process over stdio and over HTTP, and our server joining a caller's trace."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest_twisted
import treq
from opentelemetry.trace import SpanKind, StatusCode
from twisted.web.client import Agent, HTTPConnectionPool
from twisted.web.resource import Resource

from ai_tools.execution.history import ConversationHistory
from ai_tools.llm.client import OpenAIChatClient
from ai_tools.loop import LoopContext, execute_react_loop
from ai_tools.mcp.config import McpServerConfig
from ai_tools.mcp.game_tools import game_tools
from ai_tools.mcp.serve_config import McpServeConfig
from ai_tools.mcp.server import McpServer, ServerFeatures
from ai_tools.mcp.server_http import McpHttpEndpoint, McpResource
from ai_tools.mcp.servers import McpServerConnection
from ai_tools.telemetry import trace_loop
from ai_tools.testing import Turn, start_test_server
from ai_tools.tools.base import Actor, Tool, ToolCategory
from ai_tools.tools.registry import ToolRegistry
from ai_tools.web.api import ApiSite
from ai_tools.web.origin import OriginPolicy
from tests.integration.test_mcp_client_servers import FIXTURE, free_port, http_server, wait_for
from tests.telemetry_fixtures import Recorded, children, traceparent_of
from tests.unit.react_fakes import make_registry

CALLER = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
"""A caller's W3C traceparent (trace 0af7..., span b7ad...)."""


def reactor() -> Any:
    from twisted.internet import reactor as global_reactor

    return global_reactor


class Peer(Tool):
    """A game tool that reads (its MCP annotations say readOnlyHint)."""

    name = "peer"
    description = "Peer around."
    category = ToolCategory.SAFE_CHAIN
    cacheable = True
    requires_character = False

    def execute(self, actor: Any, **params: Any) -> dict[str, Any]:
        return {"success": True, "seen": "a well", "as": actor.character_id}


class Runtime:
    """The assistant runtime a loop's actor names: its name, its loop tracer in flight."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.tracer: Any = None


class Game:
    """Our game's MCP server at ``/mcp`` of a site on 127.0.0.1, traced by ``recorded``."""

    def __init__(self, recorded: Recorded | None) -> None:
        tools = game_tools(McpServeConfig(character="char:mason"), ToolRegistry([Peer]),
                           world=None, store=None, clock=reactor())
        tracing = recorded.telemetry.mcp_server_tracing if recorded is not None else None
        self.endpoint = McpHttpEndpoint(
            McpServer(ServerFeatures(tools=tools), reactor(), tracing=tracing), reactor())
        policy = OriginPolicy()
        root = Resource()
        root.putChild(b"mcp", McpResource(self.endpoint, policy))
        self.port = reactor().listenTCP(0, ApiSite(cast(Any, root), max_body=65536,
                                                   clock=reactor()), interface="127.0.0.1")
        policy.bind(self.port.getHost())
        self.url = f"http://127.0.0.1:{self.port.getHost().port}/mcp"

    async def stop(self) -> None:
        self.endpoint.close()
        await self.port.stopListening()


@pytest_twisted.async_yield_fixture
async def game() -> AsyncIterator[tuple[Game, Recorded]]:
    recorded = Recorded()
    served = Game(recorded)
    try:
        yield served, recorded
    finally:
        await served.stop()


async def connected(config: McpServerConfig, recorded: Recorded | None) -> McpServerConnection:
    connection = McpServerConnection(
        config, reactor(), telemetry=(lambda: recorded.telemetry) if recorded else None)
    connection.start()
    await wait_for(lambda: connection.ready or connection.state == "failed",
                   f"MCP server {config.name} ready")
    assert connection.ready, connection.error
    return connection


def server_of(recorded: Recorded, client_span: Any) -> Any:
    [server] = [s for s in children(client_span, recorded.spans) if s.kind is SpanKind.SERVER]
    return server


@pytest_twisted.ensureDeferred
async def test_a_loop_calling_our_server_is_one_trace_down_to_the_game_tool(
        game: tuple[Game, Recorded]) -> None:
    """execute_tool peer → tools/call peer (CLIENT) → tools/call peer (SERVER) → the game's
    execute_tool peer; initialize and tools/list have their CLIENT/SERVER pairs; the two
    MCP duration metrics are recorded."""
    served, recorded = game
    connection = await connected(McpServerConfig(name="game", url=served.url, timeout=20),
                                 recorded)
    model = await start_test_server([
        Turn(tool_calls=[{"name": "peer", "arguments": {}}]),
        Turn(tool_calls=[{"name": "say", "arguments": {"text": "A well."}}])],
        reactor=reactor())
    client = OpenAIChatClient(model.profile(), reactor=reactor())
    runtime = Runtime("ada")
    ctx = LoopContext(assistant_name="ada", actor=Actor("char:ada", assistant=cast(Any, runtime)),
                      registry=make_registry().with_tools(connection.tools), llm=client,
                      history=ConversationHistory(), clock=reactor(),
                      pending_events=[{"type": "say", "from": "Bob", "text": "Look"}])
    runtime.tracer = trace_loop(ctx, recorded.telemetry)
    session_id = cast(Any, connection.session).transport.session_id
    try:
        result = await execute_react_loop(ctx)
    finally:
        await client.close()
        await model.stop()
        await connection.stop()
    assert result.termination_reason == "terminal_tool"
    assert session_id
    root = recorded.one("invoke_agent ada")
    [call] = [s for s in children(root, recorded.spans) if s.name == "execute_tool peer"]
    [mcp_client] = children(call, recorded.spans)
    assert mcp_client.name == "tools/call peer" and mcp_client.kind is SpanKind.CLIENT
    attributes = dict(mcp_client.attributes or {})
    assert attributes["mcp.method.name"] == "tools/call"
    assert attributes["gen_ai.tool.name"] == "peer"
    assert attributes["gen_ai.operation.name"] == "execute_tool"
    assert attributes["mcp.protocol.version"] == "2025-11-25"
    assert attributes["mcp.session.id"] == session_id
    assert attributes["network.transport"] == "tcp"
    assert attributes["network.protocol.name"] == "http"
    assert attributes["server.address"] == "127.0.0.1"
    assert attributes["server.port"] == served.port.getHost().port
    assert attributes["jsonrpc.request.id"].isdigit()
    mcp_server = server_of(recorded, mcp_client)
    assert mcp_server.name == "tools/call peer" and not mcp_server.links
    assert mcp_server.attributes["mcp.session.id"] == session_id
    assert mcp_server.attributes["jsonrpc.request.id"] == attributes["jsonrpc.request.id"]
    [engine] = children(mcp_server, recorded.spans)
    assert engine.name == "execute_tool peer"
    assert engine.attributes["ai_tools.tool.status"] == "success"
    assert engine.attributes["gen_ai.tool.call.id"].startswith("mcp_")
    assert {s.context.trace_id for s in (root, call, mcp_client, mcp_server, engine)} == {
        root.context.trace_id}
    for method in ("initialize", "tools/list"):
        [first] = [s for s in recorded.named(method) if s.kind is SpanKind.CLIENT][:1]
        assert first.parent is None  # a connection's own requests start their trace
        assert server_of(recorded, first).name == method
    metrics = recorded.metrics()
    assert {p.attributes["mcp.method.name"] for p in metrics["mcp.client.operation.duration"]
            } >= {"initialize", "tools/list", "tools/call"}
    assert {p.attributes["mcp.method.name"] for p in metrics["mcp.server.operation.duration"]
            } >= {"initialize", "tools/list", "tools/call"}


async def post(http: Any, url: str, body: dict[str, Any], headers: dict[bytes, list[bytes]]
               ) -> Any:
    both = {b"content-type": [b"application/json"],
            b"accept": [b"application/json, text/event-stream"], **headers}
    answer = await http.post(url, data=json.dumps(body).encode(), headers=both)
    assert answer.code == 200, await answer.text()
    return answer


@pytest_twisted.ensureDeferred
async def test_our_server_joins_the_callers_trace(game: tuple[Game, Recorded]) -> None:
    """A caller's traceparent header parents the SERVER span; a ``_meta`` context wins over
    the header, which is then linked; a tool error sets ``error.type``."""
    served, recorded = game
    pool = HTTPConnectionPool(reactor(), persistent=False)
    http = treq.client.HTTPClient(cast(Any, Agent(reactor(), pool=pool)))
    try:
        answer = await post(http, served.url, {
            "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "caller"}}}, {b"traceparent": [CALLER.encode()]})
        session = answer.headers.getRawHeaders(b"mcp-session-id")[0]
        await answer.content()
        own = {b"mcp-session-id": [session], b"mcp-protocol-version": [b"2025-11-25"]}
        await (await post(http, served.url, {
            "jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "peer", "arguments": {}}},
            {**own, b"traceparent": [CALLER.encode()]})).content()
        meta_parent = "00-11111111111111111111111111111111-2222222222222222-01"
        await (await post(http, served.url, {
            "jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
                "name": "nothing", "_meta": {"traceparent": meta_parent}}},
            {**own, b"traceparent": [CALLER.encode()]})).content()
    finally:
        await pool.closeCachedConnections()
    initialize = recorded.one("initialize")
    assert initialize.kind is SpanKind.SERVER
    assert f"{initialize.context.trace_id:032x}" == CALLER.split("-")[1]
    assert initialize.parent is not None and initialize.parent.is_remote
    assert f"{initialize.parent.span_id:016x}" == CALLER.split("-")[2]
    assert initialize.attributes["mcp.protocol.version"] == "2025-11-25"
    peer = recorded.one("tools/call peer")
    assert f"{peer.context.trace_id:032x}" == CALLER.split("-")[1]
    assert [s.name for s in children(peer, recorded.spans)] == ["execute_tool peer"]
    refused = recorded.one("tools/call nothing")
    assert f"{refused.context.trace_id:032x}" == "1" * 32
    assert [f"{link.context.span_id:016x}" for link in refused.links] == [
        CALLER.split("-")[2]]
    assert refused.status.status_code is StatusCode.ERROR
    assert refused.attributes["error.type"] == "-32602"  # Unknown tool: invalid params
    assert refused.attributes["rpc.response.status_code"] == "-32602"


@pytest_twisted.ensureDeferred
async def test_the_official_sdk_server_receives_our_context_over_stdio_and_http() -> None:
    """A child process over stdio gets the traceparent in ``_meta``; over HTTP it gets it in
    ``_meta`` and as a header; both name our CLIENT span (``network.transport`` pipe, tcp);
    a ``CallToolResult`` with ``isError`` is ``error.type`` ``tool_error``."""
    recorded = Recorded()
    port = free_port()
    process = await http_server(port)
    configs = [McpServerConfig(name="fx", command=sys.executable, args=(FIXTURE, "stdio"),
                               timeout=20),
               McpServerConfig(name="web", url=f"http://127.0.0.1:{port}/mcp", timeout=20)]
    seen: dict[str, Any] = {}
    try:
        for config in configs:
            connection = await connected(config, recorded)
            try:
                result = await connection.call("traced", {})
                assert (await connection.call("fail", {"reason": "boom"}))["success"] is False
            finally:
                await connection.stop()
            [span] = [s for s in recorded.named("tools/call traced")
                      if s.attributes["network.transport"] == (
                          "pipe" if config.command else "tcp")]
            seen[config.name] = (json.loads(result["content"]), traceparent_of(span), span)
    finally:
        process.terminate()
        process.wait(10)
    stdio, sent, span = seen["fx"]
    assert stdio == {"meta": sent, "header": None}
    assert "mcp.session.id" not in span.attributes and span.parent is None
    failed = recorded.named("tools/call fail")
    assert [s.attributes["error.type"] for s in failed] == ["tool_error", "tool_error"]
    assert {s.status.status_code for s in failed} == {StatusCode.ERROR}
    http, sent, span = seen["web"]
    assert http == {"meta": sent, "header": sent}
    assert span.attributes["mcp.session.id"]


@pytest_twisted.ensureDeferred
async def test_tracing_off_sends_no_context_and_loads_no_sdk() -> None:
    """Without telemetry a call carries no trace context (neither in ``_meta`` nor as a
    header), and the MCP modules load no OpenTelemetry module."""
    port = free_port()
    process = await http_server(port)
    try:
        connection = await connected(McpServerConfig(
            name="web", url=f"http://127.0.0.1:{port}/mcp", timeout=20), None)
        try:
            result = await connection.call("traced", {})
        finally:
            await connection.stop()
    finally:
        process.terminate()
        process.wait(10)
    assert json.loads(result["content"]) == {"meta": None, "header": None}
    import subprocess

    code = ("import sys, ai_tools.mcp.servers, ai_tools.mcp.game_tools, "
            "ai_tools.mcp.server_http, ai_tools.mcp.stdio, ai_tools.mcp.http_transport; "
            "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True).stdout.strip()
    assert loaded == "[]"
