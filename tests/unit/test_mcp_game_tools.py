"""The game's tools as MCP tools: annotations, the gate, the one execution path, the audit."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from twisted.internet import defer, task

from ai_tools.errors import ConfigError
from ai_tools.mcp.game_tools import annotations_for, game_tools, mcp_tool
from ai_tools.mcp.jsonrpc import INVALID_PARAMS, ErrorResponse, Notification, Request, Response
from ai_tools.mcp.serve_config import McpServeConfig, parse_serve_table
from ai_tools.mcp.server import McpServer, ServerFeatures
from ai_tools.tools.base import Tool, ToolCategory
from ai_tools.tools.registry import ToolRegistry


class Look(Tool):
    name = "look"
    description = "Look around."
    category = ToolCategory.SAFE_CHAIN
    cacheable = True
    requires_character = False

    def execute(self, actor: Any, **params: Any) -> dict[str, Any]:
        return {"success": True, "seen": "a room", "as": actor.character_id}


class Count(Tool):
    name = "count"
    description = "Count to n."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object", "properties": {"n": {"type": "integer", "minimum": 1}},
        "required": ["n"]}
    output_schema: ClassVar[dict[str, Any]] = {
        "type": "object", "properties": {"numbers": {"type": "array"}}}
    requires_character = False

    def execute(self, actor: Any, **params: Any) -> dict[str, Any]:
        return {"success": True, "numbers": list(range(1, params["n"] + 1))}


class Demolish(Tool):
    name = "demolish"
    description = "Tear a building down."
    category = ToolCategory.DANGEROUS
    requires_character = False

    def execute(self, actor: Any, **params: Any) -> dict[str, Any]:
        return {"success": True}


class Wait(Tool):
    name = "wait_long"
    description = "Wait for the test."
    category = ToolCategory.ASYNC_REQUIRED
    requires_character = False
    pending: ClassVar[list[defer.Deferred[Any]]] = []

    def execute(self, actor: Any, **params: Any) -> defer.Deferred[Any]:
        d: defer.Deferred[Any] = defer.Deferred()
        self.pending.append(d)
        return d


class Sleep(Tool):
    name = "sleep_now"
    description = "An assistant's own loop."
    requires_character = False
    needs_assistant = True

    def execute(self, actor: Any, **params: Any) -> dict[str, Any]:
        return {"success": True}


def setup(config: McpServeConfig | None = None, halted: Any = None
          ) -> tuple[Any, Any, list[Any], list[Any]]:
    clock = task.Clock()
    registry = ToolRegistry([Look, Count, Demolish, Wait, Sleep])
    events: list[Any] = []
    tools = game_tools(config or McpServeConfig(character="char:mason"), registry, world=None,
                       store=None, clock=clock, publish=lambda name, e: events.append((name, e)),
                       halted=halted)
    sent: list[Any] = []
    server = McpServer(ServerFeatures(tools=tools), clock)
    session = server.open_session(lambda m, related: sent.append(m))
    session.receive(Request(0, "initialize", {"protocolVersion": "2025-11-25",
                                              "clientInfo": {"name": "inspector"}}))
    return session, tools, events, sent


def call(session: Any, request_id: int, name: str, arguments: Any = None,
         meta: dict[str, Any] | None = None) -> Any:
    params: dict[str, Any] = {"name": name, "arguments": arguments or {}}
    if meta:
        params["_meta"] = meta
    answer = session.receive(Request(request_id, "tools/call", params))
    return answer.result if isinstance(answer, defer.Deferred) and answer.called else answer


def test_annotations_come_from_the_category() -> None:
    """DANGEROUS is destructive; a cacheable SAFE_CHAIN tool is read-only and idempotent."""
    assert annotations_for(Demolish()) == {"title": "demolish", "readOnlyHint": False,
                                           "destructiveHint": True, "idempotentHint": False,
                                           "openWorldHint": False}
    assert annotations_for(Look())["readOnlyHint"] is True
    assert annotations_for(Look())["idempotentHint"] is True
    assert annotations_for(Wait())["readOnlyHint"] is False
    assert mcp_tool(Count())["outputSchema"] == Count.output_schema
    assert "outputSchema" not in mcp_tool(Look())
    assert mcp_tool(Count())["inputSchema"]["properties"]["n"]["minimum"] == 1  # full schema


def test_the_list_leaves_out_dangerous_tools_unless_allowed_and_assistant_only_tools() -> None:
    """By default a session is offered no DANGEROUS tool; never one that needs an assistant."""
    _, tools, _, _ = setup()
    assert [t["name"] for t in tools.list_tools()] == ["count", "look", "wait_long"]
    _, tools, _, _ = setup(McpServeConfig(character="c", allow_dangerous=True,
                                          tools=frozenset({"demolish", "look"})))
    assert [t["name"] for t in tools.list_tools()] == ["demolish", "look"]


def test_a_call_runs_through_the_engine_as_the_character_and_is_recorded() -> None:
    """The result as text, the history's exchange, and the two audit events."""
    session, tools, events, sent = setup()
    answer = call(session, 1, "look", meta={"progressToken": 7})
    assert isinstance(answer, Response) and answer.result["isError"] is False
    assert '"as": "char:mason"' in answer.result["content"][0]["text"]
    assert "structuredContent" not in answer.result
    assert [m["role"] for m in tools.history.messages] == ["assistant", "tool"]
    assert [(name, e["type"]) for name, e in events] == [("mcp", "tool_call"),
                                                         ("mcp", "tool_result")]
    assert events[0][1]["client"] == "inspector" and events[1][1]["success"] is True
    assert isinstance(sent[0], Notification) and sent[0].method == "notifications/progress"


def test_structured_content_for_a_tool_with_an_output_schema() -> None:
    session, _, _, _ = setup()
    answer = call(session, 2, "count", {"n": 3})
    assert answer.result["structuredContent"]["numbers"] == [1, 2, 3]


def test_refusals_reach_the_client_as_errors_the_model_would_read() -> None:
    """Invalid parameters and a gated tool: isError results; an unknown tool: -32602."""
    session, _, _, _ = setup()
    invalid = call(session, 3, "count", {"n": 0})
    assert invalid.result["isError"] is True and "n" in invalid.result["content"][0]["text"]
    blocked = call(session, 4, "demolish")
    assert blocked.result["isError"] is True
    assert "blocked_by_tool_mode" in blocked.result["content"][0]["text"]
    for name in ("nothing", "sleep_now"):
        unknown = call(session, 5, name)
        assert isinstance(unknown, ErrorResponse) and unknown.code == INVALID_PARAMS


def test_cancelling_kills_the_call_and_records_nothing() -> None:
    """notifications/cancelled cancels the engine's Deferred: the tool's is cancelled."""
    Wait.pending.clear()
    session, tools, events, _ = setup()
    answer = session.receive(Request(6, "tools/call", {"name": "wait_long"}))
    assert not answer.called and len(Wait.pending) == 1
    session.receive(Notification("notifications/cancelled", {"requestId": 6}))
    assert answer.result is None
    assert Wait.pending[0].called  # cancelled: the tool saw CancelledError
    assert tools.history.messages == []
    assert events[-1][1]["status"] == "stopped_by_user"


def test_the_history_keeps_the_newest_exchanges() -> None:
    session, tools, _, _ = setup(McpServeConfig(character="c", history_limit=5))
    for number in range(5):
        call(session, 10 + number, "look")
    assert len(tools.history) == 4  # two whole exchanges


@pytest.mark.parametrize(("table", "message"), [
    ({"serve": {"name": "x"}}, "character"),
    ({"serve": {"character": "c", "colour": 1}}, "unknown key 'colour'"),
    ({"serve": {"character": "c", "categories": ["odd"]}}, "the categories are"),
    ({"serve": {"character": "c", "max_sessions": 0}}, "positive integer"),
    ({"serve": {"character": "c", "allow_dangerous": "yes"}}, "true or false"),
    ({"serve": "c"}, "must be a table"),
])
def test_bad_serve_tables_are_clear_errors(table: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_serve_table(table)


def test_serve_table_values() -> None:
    config = parse_serve_table({"serve": {"character": "char:mason", "categories": [
        "safe_chain", "dangerous"], "tools": ["look"]}, "servers": {}})
    assert config is not None
    assert config.allowed_categories() == {ToolCategory.SAFE_CHAIN}
    assert parse_serve_table({"serve": {"character": "c", "enabled": False}}) is None
    assert parse_serve_table({"servers": {}}) is None


def test_the_audit_event_clips_large_arguments() -> None:
    """An MCP client's huge arguments reach observers clipped, as a model's do."""
    session, _, events, _ = setup()
    call(session, 30, "look", {"pad": "x" * 20000})
    arguments = events[0][1]["arguments"]
    assert len(str(arguments)) < 4096 and "_clipped" in arguments


def test_an_emergency_stop_of_everything_stops_mcp_calls_too() -> None:
    """While the operator has stopped every assistant, an MCP call runs no tool (as no
    assistant's would) and says why; once cleared, calls run again."""
    stopped = [True]
    session, tools, events, _ = setup(halted=lambda: stopped[0])
    refused = call(session, 1, "look")
    assert refused.result["isError"] is True
    assert "emergency_stopped" in refused.result["content"][0]["text"]
    assert tools.history.messages == [] and events == []
    stopped[0] = False
    assert call(session, 2, "look").result["isError"] is False


def test_the_service_says_when_everything_is_stopped() -> None:
    """Only an emergency stop of all assistants (not of one) sets the service's flag."""
    from ai_tools.service import AssistantService

    service = AssistantService()
    service.emergency_stop(None, "test")
    assert service.everything_stopped
    service.clear_emergency_stop(None)
    assert not service.everything_stopped
