"""MCP servers kept connected (backoff, restarts), their tools per loop, and a call
through the engine's one path (validation, timeout, retry, kill) on ``task.Clock``."""

from __future__ import annotations

import json
from typing import Any

import attrs
from twisted.internet import defer, task

from ai_tools.execution.engine import ExecutionContext, run_tool_call
from ai_tools.execution.history import ConversationHistory
from ai_tools.execution.outcome import CallStatus, ToolCallOutcome
from ai_tools.mcp.config import McpServerConfig
from ai_tools.mcp.jsonrpc import ErrorResponse, Notification, Request
from ai_tools.mcp.servers import McpClientService, McpServerConnection
from ai_tools.retry import RetryPolicy
from ai_tools.tools.base import Actor
from ai_tools.tools.registry import ToolRegistry
from tests.unit.execution_fakes import EchoTool
from tests.unit.mcp_fakes import FakeServer, listed

CONFIG = McpServerConfig(name="fx", command="fake", timeout=5, init_timeout=2)


class Servers:
    """A transport factory: a new FakeServer per connection; the first ``failing`` refuse."""

    def __init__(self, failing: int = 0, tools: list[dict[str, Any]] | None = None) -> None:
        self.made: list[FakeServer] = []
        self.failing = failing
        self.tools = tools

    def __call__(self, config: McpServerConfig, reactor: Any) -> FakeServer:
        server = FakeServer(self.tools)
        if len(self.made) < self.failing:
            server.handlers["initialize"] = lambda r: None
        self.made.append(server)
        return server

    @property
    def last(self) -> FakeServer:
        return self.made[-1]


def connection(servers: Servers, clock: task.Clock,
               config: McpServerConfig = CONFIG) -> McpServerConnection:
    conn = McpServerConnection(config, clock, transport_factory=servers)
    conn.start()
    return conn


def test_ready_with_its_tools_and_status() -> None:
    clock, servers = task.Clock(), Servers(tools=[listed("roll"), listed("wipe", annotations={
        "destructiveHint": True})])
    conn = connection(servers, clock)
    assert conn.state == "ready"
    status = conn.status()
    assert status["state"] == "ready" and status["protocol_version"] == "2025-11-25"
    assert [(t["name"], t["category"]) for t in status["tools"]] == [
        ("roll", "async_required"), ("wipe", "dangerous")]
    assert status["target"] == "fake"


def test_connecting_retries_with_exponential_backoff() -> None:
    clock, servers = task.Clock(), Servers(failing=3)
    conn = connection(servers, clock)
    times = []
    for _ in range(40):
        if conn.ready:
            break
        before = len(servers.made)
        clock.advance(0.5)
        if len(servers.made) > before:
            times.append(clock.seconds())
    # initialize times out after 2 s; then waits of 1, 2, 4 s
    assert times == [3.0, 7.0, 13.0]
    assert conn.ready and conn.error is None


def test_a_server_that_dies_is_restarted_and_its_calls_fail_clearly() -> None:
    clock, servers = task.Clock(), Servers()
    conn = connection(servers, clock)
    first = servers.last
    first.handlers["tools/call"] = lambda r: None
    d = conn.call("echo", {"text": "hi"})
    first.die("the process ended (signal 9)")
    failure: list[Any] = []
    d.addErrback(failure.append)
    assert "signal 9" in str(failure[0].value)
    assert conn.state == "restarting" and conn.restarts == 1
    refused: list[Any] = []
    conn.call("echo", {}).addErrback(refused.append)
    assert "not available (restarting" in str(refused[0].value)
    clock.advance(1.0)
    assert conn.ready and servers.last is not first


def test_each_loop_keeps_the_tools_it_started_with() -> None:
    clock, servers = task.Clock(), Servers(tools=[listed("roll")])
    base = ToolRegistry([EchoTool])
    service = McpClientService([CONFIG, attrs.evolve(CONFIG, name="off", enabled=False)], clock,
                               base=base, transport_factory=servers)
    service.startService()
    first_loop = service.registry_for(base, ["fx"])
    assert first_loop.list_tools() == ["echo", "roll"]
    assert service.registry_for(base, ["fx"]) is first_loop  # kept while nothing changed
    assert service.registry_for(base, []) is base  # an assistant naming no server
    server = servers.last
    server.tools = [listed("roll"), listed("grow")]
    server.push(Notification("notifications/tools/list_changed"))
    assert "grow" not in first_loop  # a loop in flight never sees a change
    assert "grow" in service.registry_for(base, ["fx"])  # the next loop does
    server.die()
    assert service.registry_for(base, ["fx"]) is base  # withheld while it is down
    assert [s["name"] for s in service.status()] == ["fx"]
    stopped = service.stopService()
    assert stopped.called


def test_a_forgotten_session_is_initialised_again_once_for_all_calls() -> None:
    from ai_tools.mcp.http_transport import SessionExpired

    clock, servers = task.Clock(), Servers()
    conn = connection(servers, clock)
    server = servers.last
    server.refuse_calls = SessionExpired("HTTP 404")
    answer_init = server.handlers["initialize"]
    init: defer.Deferred[dict[str, Any]] = defer.Deferred()
    server.handlers["initialize"] = lambda r: init
    results: list[Any] = []
    for text in ("a", "b"):
        conn.call("echo", {"text": text}).addBoth(results.append)
    assert results == [] and conn.state == "connecting"
    init.callback(answer_init(server.requests("initialize")[-1]))  # type: ignore[arg-type]
    assert results == [{"success": True, "content": "ok"}] * 2
    assert len(server.requests("initialize")) == 2  # the first session, then one more
    assert len(server.requests("tools/call")) == 3 and conn.ready  # a (404), then a and b


def test_an_unreachable_http_server_has_its_tools_withheld_until_it_answers() -> None:
    from twisted.internet.error import ConnectionRefusedError

    clock, servers = task.Clock(), Servers()
    base = ToolRegistry()
    service = McpClientService([CONFIG], clock, base=base, transport_factory=servers)
    service.startService()
    conn = service.connections["fx"]
    servers.last.refuse_calls = ConnectionRefusedError("nobody listens")
    failed: list[Any] = []
    conn.call("echo", {"text": "x"}).addErrback(failed.append)
    assert failed[0].check(ConnectionRefusedError)
    assert conn.state == "restarting"
    assert service.registry_for(base, ["fx"]) is base
    clock.advance(1.0)
    assert conn.ready and "echo" in service.registry_for(base, ["fx"])


# -- through the engine --------------------------------------------------------------


def context(registry: ToolRegistry, clock: task.Clock, attempts: int = 4) -> ExecutionContext:
    return ExecutionContext(registry=registry, actor=Actor("char:pip"),
                            history=ConversationHistory(), clock=clock,
                            retry_policy=RetryPolicy(max_attempts=attempts), rand=lambda: 1.0)


def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"id": "call_1", "type": "function",
            "function": {"name": name, "arguments": arguments}}


def outcome_of(value: Any) -> ToolCallOutcome:
    if isinstance(value, ToolCallOutcome):
        return value
    out: list[Any] = []
    value.addBoth(out.append)
    assert out, "the call has not ended"
    return out[0]  # type: ignore[no-any-return]


def setup(tools: list[dict[str, Any]] | None = None) -> tuple[task.Clock, Servers,
                                                                McpClientService, ToolRegistry]:
    clock, servers = task.Clock(), Servers(tools=tools)
    base = ToolRegistry()
    service = McpClientService([CONFIG], clock, base=base, transport_factory=servers)
    service.startService()
    return clock, servers, service, service.registry_for(base, ["fx"])


def test_parameters_are_validated_against_the_input_schema_before_any_call() -> None:
    clock, servers, _, registry = setup([listed("roll", inputSchema={
        "type": "object", "properties": {"sides": {"type": "integer", "minimum": 2}},
        "required": ["sides"]})])
    outcome = outcome_of(run_tool_call(context(registry, clock), call("roll", {"sides": 1})))
    assert outcome.status == CallStatus.INVALID_PARAMETERS
    assert "sides" in outcome.result["error"]
    assert servers.last.requests("tools/call") == []


def test_a_timeout_cancels_the_call_on_the_server() -> None:
    clock, servers, _, registry = setup()
    servers.last.handlers["tools/call"] = lambda r: None
    pending = run_tool_call(context(registry, clock, attempts=1), call("echo", {"text": "x"}))
    clock.advance(5.0)
    outcome = outcome_of(pending)
    assert outcome.status == CallStatus.TIMED_OUT
    assert outcome.result["error"] == "timed out after 5s"
    (sent,) = servers.last.requests("tools/call")
    (note,) = servers.last.notifications("notifications/cancelled")
    assert note.params is not None and note.params["requestId"] == sent.id


def test_a_kill_cancels_the_call_on_the_server() -> None:
    clock, servers, _, registry = setup()
    servers.last.handlers["tools/call"] = lambda r: None
    pending = run_tool_call(context(registry, clock), call("echo", {"text": "x"}))
    assert isinstance(pending, defer.Deferred)
    pending.cancel()
    assert outcome_of(pending).status == "stopped_by_user"
    assert len(servers.last.notifications("notifications/cancelled")) == 1


def test_a_server_that_went_away_is_retried_once_it_is_back() -> None:
    clock, servers, _, registry = setup()
    first = servers.last
    first.handlers["tools/call"] = lambda r: None
    pending = run_tool_call(context(registry, clock), call("echo", {"text": "x"}))
    first.die()
    clock.advance(1.0)  # the restart (1 s), then the engine's retry (1 s)
    outcome = outcome_of(pending)
    assert outcome.result == {"success": True, "content": "ok"}
    assert outcome.attempts == 2 and servers.last is not first


def test_an_error_answer_reaches_the_model_and_is_not_retried() -> None:
    clock, servers, _, registry = setup()

    def refuse(request: Request) -> None:
        servers.last.push(ErrorResponse(request.id, -32602, "Unknown tool: echo"))

    servers.last.handlers["tools/call"] = refuse
    outcome = outcome_of(run_tool_call(context(registry, clock), call("echo", {"text": "x"})))
    assert outcome.attempts == 1
    assert outcome.result["success"] is False
    assert "Unknown tool: echo" in outcome.result["error"]


def test_is_error_reaches_the_model_as_a_failure() -> None:
    clock, servers, _, registry = setup()
    servers.last.handlers["tools/call"] = lambda r: {
        "content": [{"type": "text", "text": "the die fell off the table"}], "isError": True}
    outcome = outcome_of(run_tool_call(context(registry, clock), call("echo", {"text": "x"})))
    assert outcome.result == {"success": False, "error": "the die fell off the table"}


def test_progress_becomes_an_event_of_the_assistant() -> None:
    clock, servers, _, registry = setup()
    answer: defer.Deferred[dict[str, Any]] = defer.Deferred()
    servers.last.handlers["tools/call"] = lambda r: answer
    events: list[tuple[str, dict[str, Any]]] = []

    class Host:
        def publish(self, name: str, event: dict[str, Any]) -> None:
            events.append((name, event))

    class Assistant:
        name = "pip"
        host = Host()

    ctx = attrs.evolve(context(registry, clock), actor=Actor("char:pip",
                                                             assistant=Assistant()))  # type: ignore[arg-type]
    pending = run_tool_call(ctx, call("echo", {"text": "x"}))
    (sent,) = servers.last.requests("tools/call")
    assert sent.params is not None
    token = sent.params["_meta"]["progressToken"]
    servers.last.push(Notification("notifications/progress", {
        "progressToken": token, "progress": 1, "total": 4, "message": "rolling"}))
    answer.callback({"content": []})
    assert outcome_of(pending).result["success"] is True
    assert events == [("pip", {"type": "tool_progress", "server": "fx", "tool": "echo",
                               "tool_call_id": "call_1", "progress": 1, "total": 4,
                               "message": "rolling"})]


def test_a_hostile_servers_tools_still_fit_the_window() -> None:
    """Forty tools of nearly the largest schema and description a server may send: the
    loop's request keeps within the prompt's share of an 8,192-token window (the
    trimmed-list rule), and the model is still called."""
    from ai_tools.llm.tokens import TokenCounter
    from ai_tools.loop import ContextMeter, TerminationReason, execute_react_loop
    from ai_tools.loop.request import PROMPT_SHARE
    from tests.unit.react_fakes import SayTool, ScriptedLLM, make_ctx, text

    schema = {"type": "object", "properties": {
        f"p{i}": {"type": "string", "description": "words " * 40} for i in range(50)}}
    hostile = [listed(f"t{i}", inputSchema=schema, description="z " * 600) for i in range(40)]
    clock, servers = task.Clock(), Servers(tools=hostile)
    base = ToolRegistry([SayTool])
    service = McpClientService([CONFIG], clock, base=base, transport_factory=servers)
    service.startService()
    registry = service.registry_for(base, ["fx"])
    assert len(registry) == 41

    def no_tiktoken(name: str) -> Any:
        raise RuntimeError("no tiktoken here")

    counter = TokenCounter(loader=no_tiktoken)
    llm = ScriptedLLM([text("hello")], context_window=8192)
    ctx = make_ctx(llm, registry=registry, meter=ContextMeter(counter),
                   pending_events=[{"type": "say", "from": "bob", "text": "hi"}])
    assert execute_react_loop(ctx).result.termination_reason == TerminationReason.COMPLETED
    (request,) = llm.requests
    sent = counter.count_text(request["messages"][0]["content"] + "\n"
                              + json.dumps(request["tools"], ensure_ascii=False))
    assert sent <= 8192 * 0.8 * PROMPT_SHARE * 1.05
    names = [t["function"]["name"] for t in request["tools"]]
    assert names[0] == "say" and len(names) < 41


class MuteLists(Servers):
    """Servers that answer initialize and never tools/list."""

    def __call__(self, config: McpServerConfig, reactor: Any) -> FakeServer:
        server = super().__call__(config, reactor)
        server.handlers["tools/list"] = lambda r: None
        return server


def test_listing_the_tools_has_the_same_deadline_as_initialize() -> None:
    clock, servers = task.Clock(), MuteLists()
    conn = connection(servers, clock)
    assert conn.state == "connecting" and servers.last.requests("tools/list")
    clock.advance(2.0)
    assert conn.state == "failed" and "tools/list within 2s" in str(conn.error)
    assert servers.last.closed


def test_an_assistant_gets_the_servers_it_names_and_no_undeclared_one() -> None:
    from ai_tools.errors import ConfigError
    from tests.unit.service_fakes import add, make_service

    clock, service, _ = make_service(registry=ToolRegistry([EchoTool]))
    servers = Servers(tools=[listed("roll")])
    mcp = McpClientService([CONFIG], clock, base=service.registry, transport_factory=servers)
    mcp.startService()
    service.tool_sources = mcp
    pip = add(service, clock, name="pip", mcp_servers=["fx"])
    ada = add(service, clock, name="ada")
    assert "roll" in service.registry_for(pip)
    assert service.registry_for(ada) is service.registry
    refused: list[Any] = []
    service.add_assistant({"name": "bo", "character_id": "char:bo", "mcp_servers": ["dice"]}
                          ).addErrback(refused.append)
    assert refused[0].check(ConfigError)
    assert "unknown MCP server(s) 'dice' (known: fx)" in str(refused[0].value)
