"""The MCP client session, content mapping and tool building, on an in-memory server."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet import defer, task

from ai_tools.mcp.client import McpProtocolError, McpSession, ServerGone
from ai_tools.mcp.config import McpServerConfig
from ai_tools.mcp.content import tool_result
from ai_tools.mcp.jsonrpc import ErrorResponse, JSONRPCError, Notification, Request, Response
from ai_tools.mcp.tools import MAX_DESCRIPTION_CHARS, build_tools, category_of, sanitise_name
from ai_tools.tools.base import ToolCategory
from tests.unit.mcp_fakes import FakeServer, listed


def connected(server: FakeServer, clock: task.Clock | None = None, **kw: Any) -> McpSession:
    session = McpSession(server, name="fake", **kw)
    d = session.connect(5, clock or task.Clock())
    assert d.called and d.result is session, getattr(d, "result", None)
    return session


def result_of(d: defer.Deferred[Any]) -> Any:
    assert d.called
    out: list[Any] = []
    d.addBoth(out.append)
    return out[0]


# -- initialize ----------------------------------------------------------------------


def test_initialize_asks_for_the_newest_version_and_says_initialized() -> None:
    server = FakeServer(version="2025-06-18")
    session = connected(server)
    (init,) = server.requests("initialize")
    assert init.params is not None
    assert init.params["protocolVersion"] == "2025-11-25"
    assert init.params["clientInfo"]["name"] == "ai_tools"
    assert init.params["capabilities"] == {}  # no sampling, elicitation, roots
    assert session.protocol_version == "2025-06-18"
    assert server.negotiated_version == "2025-06-18"
    assert server.notifications("notifications/initialized")
    assert session.server_info == {"name": "fake", "version": "1"}


def test_a_version_we_do_not_speak_is_refused_clearly() -> None:
    server = FakeServer(version="2024-11-05")
    session = McpSession(server, name="old")
    failure = result_of(session.connect(5, task.Clock()))
    assert failure.check(McpProtocolError)
    assert "2024-11-05" in str(failure.value) and "2025-11-25" in str(failure.value)
    assert not server.notifications("notifications/initialized")


def test_initialize_has_a_deadline() -> None:
    clock = task.Clock()
    server = FakeServer()
    server.handlers["initialize"] = lambda r: None  # never answers
    d = McpSession(server, name="mute").connect(3, clock)
    out: list[Any] = []
    d.addBoth(out.append)
    clock.advance(2.9)
    assert out == []
    clock.advance(0.2)
    assert out[0].check(defer.TimeoutError)
    assert not server.notifications("notifications/cancelled")  # initialize is never cancelled


# -- tools/list ----------------------------------------------------------------------


def test_tools_list_follows_the_cursor_and_stops_at_the_cap() -> None:
    server = FakeServer()
    pages = {None: (["a", "b"], "c1"), "c1": (["c"], "c2"), "c2": (["d", "e"], None)}

    def page(request: Request) -> dict[str, Any]:
        names, cursor = pages[(request.params or {}).get("cursor")]
        result: dict[str, Any] = {"tools": [listed(n) for n in names]}
        if cursor:
            result["nextCursor"] = cursor
        return result

    server.handlers["tools/list"] = page
    session = connected(server)
    assert [t["name"] for t in result_of(session.list_tools(10))] == ["a", "b", "c", "d", "e"]
    assert [t["name"] for t in result_of(session.list_tools(3))] == ["a", "b", "c"]
    assert len(server.requests("tools/list")) == 3 + 2


def test_a_tool_list_that_is_no_list_is_a_protocol_error() -> None:
    server = FakeServer()
    server.handlers["tools/list"] = lambda r: {"tools": "everything"}
    assert result_of(connected(server).list_tools(5)).check(McpProtocolError)


# -- calls, cancellation, progress ---------------------------------------------------


def test_cancelling_a_call_sends_notifications_cancelled_and_forgets_it() -> None:
    server = FakeServer()
    server.handlers["tools/call"] = lambda r: None
    session = connected(server)
    d = session.call_tool("slow", {})
    (call,) = server.requests("tools/call")
    d.cancel()
    assert result_of(d).check(defer.CancelledError)
    (note,) = server.notifications("notifications/cancelled")
    assert note.params == {"requestId": call.id, "reason": "cancelled by the client"}
    server.push(Response(call.id, {"content": []}))  # a late answer is ignored
    assert session.open_requests == 0


def test_progress_notifications_reach_the_caller_until_the_answer() -> None:
    server = FakeServer()
    answer: defer.Deferred[dict[str, Any]] = defer.Deferred()
    server.handlers["tools/call"] = lambda r: answer
    session = connected(server)
    seen: list[dict[str, Any]] = []
    d = session.call_tool("slow", {}, on_progress=seen.append)
    (call,) = server.requests("tools/call")
    assert call.params is not None
    token = call.params["_meta"]["progressToken"]
    server.push(Notification("notifications/progress", {"progressToken": token, "progress": 1,
                                                        "total": 2}))
    server.push(Notification("notifications/progress", {"progressToken": "other",
                                                        "progress": 9}))
    answer.callback({"content": []})
    server.push(Notification("notifications/progress", {"progressToken": token, "progress": 2}))
    assert [p["progress"] for p in seen] == [1]
    assert result_of(d) == {"content": []}


def test_an_error_answer_fails_the_call_with_the_servers_words() -> None:
    server = FakeServer()
    server.handlers["tools/call"] = lambda r: None
    session = connected(server)
    d = session.call_tool("x", {})
    (call,) = server.requests("tools/call")
    server.push(ErrorResponse(call.id, -32602, "Unknown tool: x"))
    failure = result_of(d)
    assert failure.check(JSONRPCError) and failure.value.message == "Unknown tool: x"


def test_a_server_that_goes_away_fails_what_is_open() -> None:
    server = FakeServer()
    server.handlers["tools/call"] = lambda r: None
    session = connected(server)
    lost: list[Any] = []
    session.when_lost(lost.append)
    d = session.call_tool("x", {})
    server.die("process ended (signal 9)")
    failure = result_of(d)
    assert failure.check(ServerGone) and "signal 9" in str(failure.value)
    assert lost and session.closed
    assert result_of(session.call_tool("x", {})).check(ServerGone)


def test_server_requests_get_pong_or_method_not_found() -> None:
    server = FakeServer()
    connected(server)
    server.push(Request(7, "ping"))
    server.push(Request(8, "sampling/createMessage", {"messages": []}))
    server.push(Request(9, "elicitation/create", {"message": "name?"}))
    server.push(Request(10, "roots/list"))
    answers = server.answers()
    assert answers[0] == Response(7, {})
    assert [(a.id, a.code) for a in answers[1:] if isinstance(a, ErrorResponse)] == [
        (8, -32601), (9, -32601), (10, -32601)]


def test_list_changed_is_passed_on() -> None:
    server = FakeServer()
    changed: list[bool] = []
    connected(server, on_tools_changed=lambda: changed.append(True))
    server.push(Notification("notifications/tools/list_changed"))
    assert changed == [True]


# -- content -------------------------------------------------------------------------


def test_content_maps_to_what_a_model_can_read() -> None:
    result = tool_result({
        "content": [
            {"type": "text", "text": "hello"},
            {"type": "image", "mimeType": "image/png", "data": "A" * 4000},
            {"type": "audio", "mimeType": "audio/wav", "data": "B" * 400},
            {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "inside"}},
            {"type": "resource", "resource": {"uri": "file:///b.bin", "blob": "C" * 40,
                                              "mimeType": "application/zip"}},
            {"type": "resource_link", "uri": "file:///c", "name": "c", "mimeType": "text/x"},
            {"type": "hologram"},
        ],
        "structuredContent": {"sum": 3},
    })
    text = result["content"]
    assert result["success"] is True and result["structured"] == {"sum": 3}
    assert "hello" in text and "inside" in text
    assert "[image: image/png, 3000 bytes, not shown]" in text and "A" * 10 not in text
    assert "[audio: audio/wav, 300 bytes, not shown]" in text
    assert "[resource file:///b.bin: application/zip, 30 bytes, not shown]" in text
    assert "[resource link: c file:///c (text/x)]" in text
    assert "'hologram'" in text


def test_is_error_is_our_usual_failure_and_bytes_are_bounded() -> None:
    assert tool_result({"content": [{"type": "text", "text": "no such dice"}],
                        "isError": True}) == {"success": False, "error": "no such dice"}
    big = tool_result({"content": [{"type": "text", "text": "é" * 50_000}],
                       "structuredContent": {"x": "y" * 5000}}, max_text_bytes=1000)
    assert len(big["content"].encode()) < 1100 and "more bytes cut" in big["content"]
    assert "structured" not in big and "left out" in big["structured_note"]
    many = tool_result({"content": [{"type": "text", "text": "x"}] * 500})
    assert "400 more content blocks left out" in many["content"]


# -- tools ---------------------------------------------------------------------------


def _call(name: str, arguments: dict[str, Any], actor: Any) -> defer.Deferred[dict[str, Any]]:
    return defer.succeed({"success": True, "name": name})


def test_names_are_sanitised_and_collisions_prefixed() -> None:
    config = McpServerConfig(name="dice", url="http://x/mcp")
    tools = build_tools([listed("roll.d20"), listed("say"), listed("say", title="twice")],
                        config, _call, taken={"say"})
    assert [t.name for t in tools] == ["dice_say", "roll_d20"]
    assert {t.remote_name for t in tools} == {"say", "roll.d20"}
    assert sanitise_name("a" * 100, "p_") == "p_" + "a" * 62


def test_allow_deny_cap_and_prefix() -> None:
    names = [listed(f"t{i}") for i in range(10)]
    config = McpServerConfig(name="s", url="http://x/mcp", allow_tools=frozenset(
        {"t1", "t2", "t3", "t4"}), deny_tools=frozenset({"t2"}), prefix="s_", max_tools=2)
    assert [t.name for t in build_tools(names, config, _call)] == ["s_t1", "s_t3"]


def test_a_hostile_servers_tools_cannot_blow_up_the_prompt() -> None:
    config = McpServerConfig(name="evil", url="http://x/mcp")
    huge = {"type": "object", "properties": {f"p{i}": {"type": "string", "description": "x" * 100}
                                             for i in range(300)}}
    tools = build_tools([
        listed("huge", inputSchema=huge),
        listed("broken", inputSchema={"type": "object", "properties": {"a": {"type": 5}}}),
        listed("noschema", inputSchema="no"),
        listed("chatty", description="y" * 50_000),
        {"name": 12},
    ], config, _call)
    assert [t.name for t in tools] == ["chatty"]
    assert len(tools[0].description) <= MAX_DESCRIPTION_CHARS + 10


def test_categories_come_from_annotations_unless_configured() -> None:
    assert category_of({"destructiveHint": True}, None) is ToolCategory.DANGEROUS
    assert category_of({"destructiveHint": True, "readOnlyHint": True}, None) \
        is ToolCategory.SAFE_CHAIN
    assert category_of({"readOnlyHint": True}, None) is ToolCategory.SAFE_CHAIN
    assert category_of(None, None) is ToolCategory.ASYNC_REQUIRED
    assert category_of({"destructiveHint": True}, ToolCategory.TERMINAL) is ToolCategory.TERMINAL


def test_a_tool_validates_with_the_servers_2020_12_schema() -> None:
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": {"die": {"type": "integer", "enum": [4, 6, 8, 20]}},
        "properties": {"dice": {"type": "array", "prefixItems": [{"$ref": "#/$defs/die"}],
                                "items": False}},
        "required": ["dice"],
    }
    (tool,) = build_tools([listed("roll", inputSchema=schema)],
                          McpServerConfig(name="d", url="http://x/mcp"), _call)
    assert tool.validate_parameters({"dice": [20]}).valid
    bad = tool.validate_parameters({"dice": [7]})
    assert not bad.valid and "dice" in bad.format_for_llm("roll")
    assert not tool.validate_parameters({"dice": [20, 6]}).valid  # items: false
    assert not tool.validate_parameters({}).valid


@pytest.mark.parametrize("table, message", [
    ({"x": {"command": "a", "url": "http://b"}}, "either command"),
    ({"x": {"url": "ftp://b"}}, "must start with http"),
    ({"x": {"url": "http://b", "token": "s3cret"}}, "never read from the file"),
    ({"x": {"url": "http://b", "category": "wild"}}, "must be one of"),
    ({"x": {"url": "http://b", "timeout": 0}}, "positive number"),
    ({"x": {"url": "http://b", "args": "a b"}}, "list of strings"),
    ({"x": {"url": "http://b", "colour": 1}}, "unknown key(s) colour"),
    ({"bad name!": {"url": "http://b"}}, "server name"),
    ({"x": {"url": "http://b", "prefix": "a b"}}, "prefix"),
])
def test_config_mistakes_are_named(table: dict[str, Any], message: str) -> None:
    from ai_tools.errors import ConfigError
    from ai_tools.mcp.config import parse_servers

    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_servers(table)


def test_the_bearer_token_is_read_from_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    from ai_tools.errors import ConfigError

    config = McpServerConfig(name="r", url="https://r/mcp", bearer_token_env="R_TOKEN",
                             headers={"X-Game": "town"})
    monkeypatch.delenv("R_TOKEN", raising=False)
    with pytest.raises(ConfigError, match="R_TOKEN is not set"):
        config.request_headers()
    monkeypatch.setenv("R_TOKEN", "abc")
    assert config.request_headers() == {"X-Game": "town", "Authorization": "Bearer abc"}
    assert "abc" not in config.describe()
