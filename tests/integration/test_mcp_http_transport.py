"""The Streamable HTTP transport against a scripted twisted.web server on 127.0.0.1:
what it sends (headers, session id, token), and every way an answer can go wrong."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import defer, endpoints, task
from twisted.web import resource, server

from ai_tools.llm.body import BodyTooLarge
from ai_tools.mcp.client import McpSession, ServerGone
from ai_tools.mcp.http_transport import HttpTransport, McpHttpError, SessionExpired
from ai_tools.mcp.jsonrpc import Message, Request

Answer = Callable[[Any, dict[str, Any]], bytes]


def reactor() -> Any:
    from twisted.internet import reactor as global_reactor

    return global_reactor


def json_answer(result: dict[str, Any], session: str | None = None) -> Answer:
    def answer(request: Any, body: dict[str, Any]) -> bytes:
        request.setHeader(b"content-type", b"application/json")
        if session:
            request.setHeader(b"mcp-session-id", session.encode())
        return json.dumps({"jsonrpc": "2.0", "id": body["id"], "result": result}).encode()
    return answer


def status(code: int, text: bytes = b"") -> Answer:
    def answer(request: Any, body: dict[str, Any]) -> bytes:
        request.setResponseCode(code)
        return text
    return answer


class Scripted(resource.Resource):
    """Answers each POST with the next answer of its script; GETs get 405."""

    isLeaf = True

    def __init__(self, answers: list[Answer]) -> None:
        super().__init__()
        self.answers = answers
        self.seen: list[tuple[str, dict[str, str], dict[str, Any]]] = []

    def render_POST(self, request: Any) -> bytes:
        body = json.loads(request.content.read())
        headers = {k.decode().lower(): v[0].decode()
                   for k, v in request.requestHeaders.getAllRawHeaders()}
        self.seen.append(("POST", headers, body))
        if "id" not in body:
            request.setResponseCode(202)
            return b""
        return self.answers.pop(0)(request, body)

    def render_GET(self, request: Any) -> bytes:
        request.setResponseCode(405)
        return b""


async def serve(answers: list[Answer]) -> tuple[Scripted, str, Any]:
    site = Scripted(answers)
    port = await endpoints.TCP4ServerEndpoint(reactor(), 0, interface="127.0.0.1").listen(
        server.Site(site))
    return site, f"http://127.0.0.1:{port.getHost().port}/mcp", port


INIT = {"protocolVersion": "2025-06-18", "capabilities": {}, "serverInfo": {"name": "s"}}


@pytest_twisted.ensureDeferred
async def test_headers_session_and_token() -> None:
    site, url, port = await serve([json_answer(INIT, session="abc"),
                                   json_answer({"content": [], "isError": False})])
    transport = HttpTransport(url, reactor=reactor(), headers={"Authorization": "Bearer t0k"})
    session = McpSession(transport, name="s")
    try:
        await session.connect(10, reactor())
        await session.call_tool("x", {})
        (_, init, _), (_, note, initialized), (_, call, _) = site.seen
        assert init["authorization"] == "Bearer t0k"
        assert "text/event-stream" in init["accept"] and "application/json" in init["accept"]
        assert "mcp-session-id" not in init
        assert initialized["method"] == "notifications/initialized"
        assert note["mcp-session-id"] == "abc" and note["mcp-protocol-version"] == "2025-06-18"
        assert call["mcp-session-id"] == "abc"
    finally:
        await transport.close()
        await port.stopListening()


async def one_answer(answer: Answer, session_id: str | None = None,
                     max_bytes: int = 4096) -> tuple[Any, HttpTransport]:
    """Send one request to a server answering it with ``answer``: the failure (or result)."""
    _, url, port = await serve([answer])
    transport = HttpTransport(url, reactor=reactor(), max_message_bytes=max_bytes)
    got: list[Message] = []
    await transport.start(got.append, lambda f: None)
    transport.session_id = session_id
    try:
        try:
            await transport.send(Request(1, "tools/call", {"name": "x"}))
            return got, transport
        except Exception as e:
            return e, transport
    finally:
        await transport.close()
        await port.stopListening()


@pytest_twisted.ensureDeferred
async def test_a_404_to_our_session_is_an_expired_session_and_otherwise_an_error() -> None:
    error, transport = await one_answer(status(404), session_id="old")
    assert isinstance(error, SessionExpired) and transport.session_id is None
    error, _ = await one_answer(status(404))
    assert isinstance(error, McpHttpError) and error.code == 404


@pytest_twisted.ensureDeferred
async def test_an_overloaded_server_says_try_again() -> None:
    from ai_tools.retry import is_retryable_error

    error, _ = await one_answer(status(503, b"busy"))
    assert isinstance(error, McpHttpError) and "temporarily unavailable" in str(error)
    assert is_retryable_error(error)
    error, _ = await one_answer(status(400, b"bad"))
    assert not is_retryable_error(error) and "HTTP 400: bad" in str(error)


@pytest_twisted.ensureDeferred
async def test_an_answer_over_the_byte_cap_is_refused() -> None:
    error, _ = await one_answer(json_answer({"content": [{"type": "text", "text": "x" * 10_000}]}),
                                max_bytes=4096)
    assert isinstance(error, BodyTooLarge)


def stream(*events: bytes) -> Answer:
    def answer(request: Any, body: dict[str, Any]) -> bytes:
        request.setHeader(b"content-type", b"text/event-stream")
        return b"".join(events)
    return answer


@pytest_twisted.ensureDeferred
async def test_a_stream_carries_notifications_then_the_answer() -> None:
    progress = {"jsonrpc": "2.0", "method": "notifications/progress",
                "params": {"progressToken": "p1", "progress": 1}}
    answer = {"jsonrpc": "2.0", "id": 1, "result": {"content": []}}
    got, _ = await one_answer(stream(b": keep-alive\n\n", b"id: 1\ndata: \n\n",
                                     b"event: message\ndata: " + json.dumps(progress).encode()
                                     + b"\n\n",
                                     b"data: " + json.dumps(answer).encode() + b"\n\n"))
    assert [getattr(m, "method", None) for m in got] == ["notifications/progress", None]


@pytest_twisted.ensureDeferred
async def test_a_stream_that_ends_unanswered_and_cannot_resume_fails_clearly() -> None:
    error, _ = await one_answer(stream(b"data: \n\n"))
    assert isinstance(error, ServerGone)
    assert "closed the stream before answering" in str(error)


@pytest_twisted.ensureDeferred
async def test_a_stream_whose_resumption_is_refused_fails_clearly() -> None:
    error, transport = await one_answer(stream(b"id: 7\nretry: 10\ndata: \n\n"))
    assert isinstance(error, ServerGone) and "refused to resume" in str(error)
    assert transport.resumes == 1


@pytest.mark.parametrize("body", [b"not json", b"[1, 2]"])
@pytest_twisted.ensureDeferred
async def test_what_is_no_message_is_dropped_not_delivered(body: bytes) -> None:
    def answer(request: Any, _: dict[str, Any]) -> bytes:
        request.setHeader(b"content-type", b"application/json")
        return body

    got, _ = await one_answer(answer)
    assert got == []


@pytest_twisted.ensureDeferred
async def test_closing_aborts_an_exchange_still_open() -> None:
    never: defer.Deferred[None] = defer.Deferred()

    def hang(request: Any, body: dict[str, Any]) -> Any:
        request.setHeader(b"content-type", b"text/event-stream")
        request.write(b"id: 1\ndata: \n\n")
        never.addBoth(lambda _: None)
        return server.NOT_DONE_YET

    site, url, port = await serve([hang])
    transport = HttpTransport(url, reactor=reactor())
    await transport.start(lambda m: None, lambda f: None)
    sent = transport.send(Request(1, "tools/call", {"name": "x"}))
    try:
        while not site.seen:  # the request is there, its stream open
            await task.deferLater(reactor(), 0.01, lambda: None)
        await task.deferLater(reactor(), 0.1, lambda: None)
        await transport.close()
        with pytest.raises(defer.CancelledError):
            await sent
    finally:
        await port.stopListening()


@pytest_twisted.ensureDeferred
async def test_a_stream_line_over_the_byte_cap_is_refused() -> None:
    from ai_tools.mcp.jsonrpc import JSONRPCError

    error, _ = await one_answer(stream(b"data: " + b"x" * 5000 + b"\n\n"), max_bytes=4096)
    assert isinstance(error, JSONRPCError) and "longer than 4096 bytes" in error.message
