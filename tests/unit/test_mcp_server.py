"""The MCP server's sessions, without a transport: lifecycle, methods, cancellation, deadlines."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet import defer, task

from ai_tools.mcp.jsonrpc import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    ErrorResponse,
    JSONRPCError,
    Notification,
    Request,
    Response,
)
from ai_tools.mcp.server import McpServer, RequestContext, ServerFeatures, ServerInfo


class SlowTools:
    """One tool that waits for the test (``pending``), one that reports and asks."""

    def __init__(self) -> None:
        self.pending: list[defer.Deferred[Any]] = []
        self.cancelled = 0

    def list_tools(self) -> list[dict[str, Any]]:
        return [{"name": "slow", "inputSchema": {"type": "object"}}]

    def call_tool(self, name: str, arguments: dict[str, Any], context: RequestContext) -> Any:
        if name == "ask":
            context.progress(1, 2, "half")
            context.progress(1, 2, "not again: progress must grow")
            context.log("debug", "detail")
            context.log("error", "bad")
            return context.request("sampling/createMessage", {"messages": []})
        if name != "slow":
            raise JSONRPCError(INVALID_PARAMS, f"Unknown tool: {name}")

        def cancel(d: defer.Deferred[Any]) -> None:
            self.cancelled += 1

        d: defer.Deferred[Any] = defer.Deferred(cancel)
        self.pending.append(d)
        return d


def make(timeout: float = 30.0) -> tuple[Any, SlowTools, task.Clock, list[tuple[Any, Any]]]:
    clock = task.Clock()
    tools = SlowTools()
    sent: list[tuple[Any, Any]] = []
    server = McpServer(ServerFeatures(tools=tools), clock, ServerInfo(name="t", version="1"),
                       request_timeout=timeout)
    session = server.open_session(lambda message, related: sent.append((message, related)))
    return session, tools, clock, sent


def initialize(session: Any, version: str = "2025-06-18",
               capabilities: dict[str, Any] | None = None) -> Any:
    return session.receive(Request(0, "initialize", {
        "protocolVersion": version, "capabilities": capabilities or {},
        "clientInfo": {"name": "test", "version": "1"}}))


@pytest.mark.parametrize(("asked", "answered"), [
    ("2025-06-18", "2025-06-18"), ("2025-11-25", "2025-11-25"), ("2024-11-05", "2025-11-25")])
def test_initialize_negotiates_the_version(asked: str, answered: str) -> None:
    """The client's version when we speak it, else our newest."""
    session, *_ = make()
    answer = initialize(session, asked)
    assert isinstance(answer, Response)
    assert answer.result["protocolVersion"] == answered
    assert answer.result["serverInfo"] == {"name": "t", "version": "1"}
    assert answer.result["capabilities"] == {"tools": {"listChanged": False}, "logging": {}}


def test_requests_before_initialize_and_unknown_methods_are_refused() -> None:
    """Only initialize and ping before the handshake; an unknown method is -32601."""
    session, *_ = make()
    early = session.receive(Request(1, "tools/list"))
    assert isinstance(early, ErrorResponse) and early.code == INVALID_REQUEST
    assert session.receive(Request(2, "ping")) == Response(2, {})
    initialize(session)
    again = initialize(session)
    assert isinstance(again, ErrorResponse) and again.code == INVALID_REQUEST
    unknown = session.receive(Request(3, "nope/nothing"))
    assert isinstance(unknown, ErrorResponse) and unknown.code == METHOD_NOT_FOUND
    no_resources = session.receive(Request(4, "resources/list"))
    assert isinstance(no_resources, ErrorResponse) and no_resources.code == METHOD_NOT_FOUND


def test_bad_params_are_invalid_params() -> None:
    """A missing tool name, arguments that are no object, an unknown tool, a bad level."""
    session, *_ = make()
    initialize(session)
    for number, params in enumerate(({}, {"name": "slow", "arguments": [1]},
                                     {"name": "other"})):
        answer = session.receive(Request(10 + number, "tools/call", params))
        if isinstance(answer, defer.Deferred):
            answer = answer.result
        assert isinstance(answer, ErrorResponse) and answer.code == INVALID_PARAMS, params
    level = session.receive(Request(20, "logging/setLevel", {"level": "loud"}))
    assert isinstance(level, ErrorResponse) and level.code == INVALID_PARAMS


def test_cancelled_notification_cancels_the_call_and_nothing_is_answered() -> None:
    """notifications/cancelled cancels the tool's Deferred; the answer is None (not sent)."""
    session, tools, _, _ = make()
    initialize(session)
    answer = session.receive(Request(5, "tools/call", {"name": "slow"}))
    assert isinstance(answer, defer.Deferred) and not answer.called
    session.receive(Notification("notifications/cancelled", {"requestId": 5, "reason": "x"}))
    assert tools.cancelled == 1
    assert answer.called and answer.result is None
    assert not session.cancel(5)  # nothing in flight any more


def test_a_call_past_the_deadline_is_cancelled_and_answered_with_an_error() -> None:
    """Every request has a deadline: the tool's Deferred is cancelled, the client told."""
    session, tools, clock, _ = make(timeout=10.0)
    initialize(session)
    answer = session.receive(Request(6, "tools/call", {"name": "slow"}))
    clock.advance(10.0)
    assert tools.cancelled == 1
    assert isinstance(answer.result, ErrorResponse)
    assert "out of time" in answer.result.message


def test_closing_the_session_cancels_its_calls() -> None:
    """DELETE (or a transport going away) ends the session and what it runs."""
    session, tools, _, _ = make()
    initialize(session)
    answer = session.receive(Request(7, "tools/call", {"name": "slow"}))
    session.close()
    assert tools.cancelled == 1 and answer.result is None
    late = session.receive(Request(8, "ping"))
    assert isinstance(late, ErrorResponse)


def test_progress_logging_and_a_request_to_the_client_belong_to_the_call() -> None:
    """Progress only grows, log messages obey the level, and the client's answer resumes
    the tool; all are tagged with the request they belong to."""
    session, _, _, sent = make()
    initialize(session, capabilities={"sampling": {}})
    assert session.receive(Request(1, "logging/setLevel", {"level": "warning"})) == \
        Response(1, {})
    answer = session.receive(Request(9, "tools/call", {
        "name": "ask", "_meta": {"progressToken": "tok"}}))
    methods = [(m.method, related) for m, related in sent]
    assert methods == [("notifications/progress", 9), ("notifications/message", 9),
                       ("sampling/createMessage", 9)]
    assert sent[0][0].params == {"progressToken": "tok", "progress": 1, "total": 2,
                                 "message": "half"}
    assert sent[1][0].params == {"level": "error", "data": "bad"}
    asked = sent[2][0]
    session.receive(Response(asked.id, {"role": "assistant", "content": {"type": "text",
                                                                          "text": "hi"}}))
    assert answer.result == Response(9, {"role": "assistant",
                                         "content": {"type": "text", "text": "hi"}})


def test_a_request_to_a_client_without_the_capability_fails_at_once() -> None:
    """No sampling capability declared: the tool's request fails, nothing is sent."""
    session, _, _, sent = make()
    initialize(session)
    answer = session.receive(Request(3, "tools/call", {"name": "ask"}))
    assert isinstance(answer.result, ErrorResponse)
    assert "does not support sampling" in answer.result.message
    assert [m.method for m, _ in sent if isinstance(m, Request)] == []


def test_a_request_to_the_client_has_a_deadline() -> None:
    """A client that never answers: the server's request is cancelled and the client told."""
    session, _, clock, sent = make(timeout=5.0)
    initialize(session, capabilities={"sampling": {}})
    answer = session.receive(Request(4, "tools/call", {"name": "ask"}))
    clock.advance(5.0)
    assert answer.called
    assert any(isinstance(m, Notification) and m.method == "notifications/cancelled"
               for m, _ in sent)


def test_a_reused_request_id_in_flight_is_refused() -> None:
    """Two requests with one id at once would mix their answers."""
    session, *_ = make()
    initialize(session)
    session.receive(Request(1, "tools/call", {"name": "slow"}))
    second = session.receive(Request(1, "tools/call", {"name": "slow"}))
    assert isinstance(second, ErrorResponse) and second.code == INVALID_REQUEST
