"""The MCP Streamable HTTP endpoint on a real socket of 127.0.0.1.

The site runs on the reactor; the MCP server's own timers run on a
``task.Clock`` the tests advance (session expiry), and the tool's Deferreds
are fired by the tests, so nothing here depends on timing.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest_twisted
import treq
from twisted.internet import defer, task
from twisted.web.client import Agent, HTTPConnectionPool
from twisted.web.resource import Resource

from ai_tools.mcp.server import McpServer, RequestContext, ServerFeatures
from ai_tools.mcp.server_http import McpHttpEndpoint, McpResource
from ai_tools.web.api import ApiSite
from ai_tools.web.origin import OriginPolicy
from tests.integration.twistd_process import reactor, until

BOTH = [b"application/json, text/event-stream"]


class Tools:
    """``wait``: progress, then waits for the test; ``cut``: logs, closes its stream, waits."""

    def __init__(self) -> None:
        self.pending: list[tuple[defer.Deferred[Any], RequestContext]] = []

    def list_tools(self) -> list[dict[str, Any]]:
        return [{"name": n, "inputSchema": {"type": "object"}} for n in ("wait", "cut")]

    def call_tool(self, name: str, arguments: dict[str, Any], context: RequestContext) -> Any:
        if name == "cut":
            context.log("info", "before the cut")
            context.close_stream()
        else:
            context.progress(1, 2, "half way")
        d: defer.Deferred[Any] = defer.Deferred()
        self.pending.append((d, context))
        return d


class Fixture:
    def __init__(self, url: str, endpoint: McpHttpEndpoint, tools: Tools, clock: task.Clock,
                 http: Any) -> None:
        self.url, self.endpoint, self.tools, self.clock, self.http = (url, endpoint, tools,
                                                                      clock, http)

    def post(self, body: Any, session: bytes | None = None) -> Any:
        headers = {b"content-type": [b"application/json"], b"accept": BOTH}
        if session is not None:
            headers[b"mcp-session-id"] = [session]
        return self.http.post(self.url, data=json.dumps(body).encode(), headers=headers,
                              unbuffered=True)

    async def open_session(self) -> bytes:
        answer = await self.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t"}}})
        assert answer.code == 200, await answer.text()
        await answer.content()
        session: bytes = answer.headers.getRawHeaders(b"mcp-session-id")[0]
        return session


@pytest_twisted.async_yield_fixture
async def mcp() -> AsyncIterator[Fixture]:
    clock = task.Clock()
    tools = Tools()
    endpoint = McpHttpEndpoint(McpServer(ServerFeatures(tools=tools), clock), clock,
                               max_sessions=2, session_idle=60.0)
    policy = OriginPolicy()
    root = Resource()
    root.putChild(b"mcp", McpResource(endpoint, policy))
    site = ApiSite(cast(Any, root), max_body=4096, clock=reactor())
    port = reactor().listenTCP(0, site, interface="127.0.0.1")
    policy.bind(port.getHost())
    pool = HTTPConnectionPool(reactor(), persistent=False)
    http = treq.client.HTTPClient(cast(Any, Agent(reactor(), pool=pool)))
    try:
        yield Fixture(f"http://127.0.0.1:{port.getHost().port}/mcp", endpoint, tools, clock,
                      http)
    finally:
        endpoint.close()
        await pool.closeCachedConnections()
        await port.stopListening()


def events(chunks: list[bytes]) -> list[tuple[str | None, Any]]:
    """``(id, message)`` of every complete SSE event (the priming one: message None)."""
    found = []
    for block in b"".join(chunks).decode().split("\n\n")[:-1]:
        event_id, data = None, None
        for line in block.splitlines():
            if line.startswith("id: "):
                event_id = line[4:]
            elif line.startswith("data: ") and line[6:].strip():
                data = json.loads(line[6:])
        if event_id is not None:
            found.append((event_id, data))
    return found


def call(request_id: int, name: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
            "params": {"name": name, "_meta": {"progressToken": "p"}}}


@pytest_twisted.ensureDeferred
async def test_an_answer_preceded_by_progress_is_an_sse_stream(mcp: Fixture) -> None:
    """Priming event, the progress notification, then the answer; the stream then ends."""
    session = await mcp.open_session()
    response = await mcp.post(call(1, "wait"), session)
    assert response.code == 200
    assert response.headers.getRawHeaders(b"content-type")[0].startswith(b"text/event-stream")
    chunks: list[bytes] = []
    ended = treq.collect(response, chunks.append)
    await until(lambda: len(events(chunks)) >= 2, "the progress event")
    (_, priming), (_, progress) = events(chunks)[:2]
    assert priming is None and progress["method"] == "notifications/progress"
    assert progress["params"]["message"] == "half way"
    mcp.tools.pending[0][0].callback({"content": [{"type": "text", "text": "done"}]})
    await ended
    assert events(chunks)[-1][1] == {"jsonrpc": "2.0", "id": 1, "result": {
        "content": [{"type": "text", "text": "done"}]}}


@pytest_twisted.ensureDeferred
async def test_a_cut_stream_resumes_with_last_event_id(mcp: Fixture) -> None:
    """The server closes the POST stream mid-call; a GET with Last-Event-ID gets the rest."""
    session = await mcp.open_session()
    response = await mcp.post(call(2, "cut"), session)
    chunks: list[bytes] = []
    await treq.collect(response, chunks.append)
    seen = events(chunks)
    assert [m["method"] for _, m in seen if m] == ["notifications/message"]
    last = seen[-1][0]
    assert last is not None
    mcp.tools.pending[0][1].log("info", "after the cut")
    resumed = await mcp.http.get(mcp.url, headers={
        b"accept": [b"text/event-stream"], b"mcp-session-id": [session],
        b"last-event-id": [last.encode()]}, unbuffered=True)
    assert resumed.code == 200
    more: list[bytes] = []
    ended = treq.collect(resumed, more.append)
    mcp.tools.pending[0][0].callback({"content": []})
    await ended
    messages = [m for _, m in events(more) if m]
    assert messages[0]["params"]["data"] == "after the cut"
    assert messages[-1] == {"jsonrpc": "2.0", "id": 2, "result": {"content": []}}


@pytest_twisted.ensureDeferred
async def test_the_get_stream_is_one_per_session_and_bad_resumptions_are_refused(
        mcp: Fixture) -> None:
    session = await mcp.open_session()
    headers = {b"accept": [b"text/event-stream"], b"mcp-session-id": [session]}
    first = await mcp.http.get(mcp.url, headers=headers, unbuffered=True)
    assert first.code == 200
    second = await mcp.http.get(mcp.url, headers=headers)
    assert second.code == 409
    bad = await mcp.http.get(mcp.url, headers={**headers, b"last-event-id": [b"99.1"]})
    assert bad.code == 400
    not_sse = await mcp.http.get(mcp.url, headers={b"accept": [b"application/json"],
                                                   b"mcp-session-id": [session]})
    assert not_sse.code == 406
    mcp.endpoint.close()  # ends the sessions: the open stream ends too
    await treq.collect(first, lambda _: None)


@pytest_twisted.ensureDeferred
async def test_sessions_are_capped_and_idle_ones_end(mcp: Fixture) -> None:
    """Two sessions at most (then 503); one idle past session_idle ends (then 404)."""
    first = await mcp.open_session()
    await mcp.open_session()
    refused = await mcp.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}}})
    assert refused.code == 503 and refused.headers.getRawHeaders(b"retry-after") == [b"30"]
    await refused.content()
    mcp.clock.advance(60.0)
    third = await mcp.open_session()  # the idle ones were ended to make room
    assert third not in (first,)
    gone = await mcp.post({"jsonrpc": "2.0", "id": 5, "method": "ping"}, first)
    assert gone.code == 404
    await gone.content()
    too_big = await mcp.post({"jsonrpc": "2.0", "id": 6, "method": "ping",
                              "params": {"pad": "x" * 5000}}, third)
    assert too_big.code == 413


@pytest_twisted.ensureDeferred
async def test_a_refused_initialize_leaves_no_session(mcp: Fixture) -> None:
    """An initialize without a protocol version is answered -32602 and opens nothing."""
    answer = await mcp.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}})
    body = json.loads(await answer.content())
    assert answer.code == 200 and body["error"]["code"] == -32602
    assert mcp.endpoint.sessions == 0
    batch = await mcp.post([{"jsonrpc": "2.0", "id": 1, "method": "ping"}])
    assert batch.code == 400  # JSON-RPC batches were removed from MCP
    assert json.loads(await batch.content())["error"]["code"] == -32600
