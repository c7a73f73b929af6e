"""The spans of a loop, made with the real OpenTelemetry SDK (its in-memory exporter), the
real model client and the scripted model server over real sockets on 127.0.0.1."""

from __future__ import annotations

from typing import Any

import pytest_twisted
from opentelemetry.trace import StatusCode
from twisted.internet import defer

from ai_tools.execution.cache import ToolCache
from ai_tools.execution.history import ConversationHistory
from ai_tools.llm.client import OpenAIChatClient
from ai_tools.loop import GatePolicy, LoopConfig, LoopContext, LoopResult, execute_react_loop
from ai_tools.retry import RetryPolicy
from ai_tools.store.memory import MemoryStore
from ai_tools.telemetry import trace_loop
from ai_tools.testing import Fault, TestServer, Turn, start_test_server
from ai_tools.tools.base import Actor, ToolCategory
from ai_tools.tools.registry import ToolRegistry
from tests.telemetry_fixtures import Recorded, children, traceparent_of
from tests.unit.react_fakes import LookTool, SayTool, make_registry

QUICK_RETRY = RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.01, jitter=False)


def reactor() -> Any:
    from twisted.internet import reactor as global_reactor

    return global_reactor


class CachedLook(LookTool):
    """A read-only tool whose results the cache keeps for the tick."""

    name = "peek"
    description = "Peek (cached)."
    cacheable = True


class Snooze(LookTool):
    """A tool that answers after longer than its timeout allows."""

    name = "snooze"
    description = "Sleeps too long."
    timeout = 0.05

    def execute(self, actor: Actor, **params: Any) -> Any:
        from twisted.internet import task

        return task.deferLater(reactor(), 5.0, lambda: {"success": True})


async def served(script: Any) -> tuple[TestServer, OpenAIChatClient]:
    server = await start_test_server(script, reactor=reactor())
    client = OpenAIChatClient(server.profile(), reactor=reactor(), retry_policy=QUICK_RETRY)
    return server, client


def context(name: str, client: Any, recorded: Recorded, registry: ToolRegistry | None = None,
            **kwargs: Any) -> tuple[LoopContext, list[dict[str, Any]]]:
    events: list[dict[str, Any]] = []
    ctx = LoopContext(assistant_name=name, actor=Actor(f"char:{name}"),
                      registry=registry or make_registry(), llm=client,
                      history=ConversationHistory(), clock=reactor(),
                      on_event=events.append, **kwargs)
    tracer = trace_loop(ctx, recorded.telemetry)
    assert tracer is not None
    return ctx, events


async def run(ctx: LoopContext, config: LoopConfig | None = None) -> LoopResult:
    result: LoopResult = await execute_react_loop(ctx, config)
    return result


@pytest_twisted.ensureDeferred
async def test_a_normal_loop_is_one_trace_of_agent_chat_and_tool_spans() -> None:
    """look, then say: invoke_agent over two chat spans and two execute_tool spans, each
    with the conventions' attributes; each request went out with its chat span's traceparent;
    the events still reach the service's observer; the two client metrics are recorded."""
    server, client = await served([
        Turn(text="Let me look.", tool_calls=[{"name": "look", "arguments": {"at": "plaza"}}],
             usage={"prompt_tokens": 30, "completion_tokens": 7, "total_tokens": 37}),
        Turn(tool_calls=[{"name": "say", "arguments": {"text": "Hello!"}}],
             usage={"prompt_tokens": 50, "completion_tokens": 5, "total_tokens": 55}),
    ])
    recorded = Recorded()
    host, port = server.url.split("//")[1].split("/")[0].split(":")
    try:
        ctx, events = context("ada", client, recorded, pending_events=[
            {"type": "say", "from": "Bob", "text": "Hi Ada"}])
        result = await run(ctx)
    finally:
        await client.close()
        await server.stop()
    assert result.termination_reason == "terminal_tool"
    assert [e["type"] for e in events if e["type"] != "text_delta"] == [
        "iteration", "model_request", "tool_call", "tool_result", "iteration",
        "model_request", "tool_call", "tool_result", "termination"]
    root = recorded.one("invoke_agent ada")
    assert root.parent is None and root.status.status_code is StatusCode.UNSET
    assert root.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert root.attributes["gen_ai.agent.name"] == "ada"
    assert root.attributes["gen_ai.request.model"] == server.model_name
    assert root.attributes["ai_tools.loop.termination_reason"] == "terminal_tool"
    assert root.attributes["ai_tools.loop.iterations"] == 2
    assert root.attributes["gen_ai.usage.input_tokens"] == 80
    assert root.attributes["gen_ai.usage.output_tokens"] == 12
    kids = children(root, recorded.spans)
    assert [s.name for s in kids] == [f"chat {server.model_name}", "execute_tool look",
                                      f"chat {server.model_name}", "execute_tool say"]
    assert len(recorded.spans) == 5
    assert {s.context.trace_id for s in recorded.spans} == {root.context.trace_id}
    chat = kids[0]
    assert chat.kind.name == "CLIENT"
    assert chat.attributes["server.address"] == host
    assert chat.attributes["server.port"] == int(port)
    assert chat.attributes["gen_ai.provider.name"] == "openai"
    assert chat.attributes["gen_ai.usage.input_tokens"] == 30
    assert chat.attributes["gen_ai.usage.output_tokens"] == 7
    assert chat.attributes["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert chat.attributes["gen_ai.response.model"] == server.model_name
    assert chat.attributes["ai_tools.model.attempts"] == 1
    assert "gen_ai.output.messages" not in chat.attributes  # no opt-in: no contents
    look = kids[1]
    assert look.attributes["gen_ai.tool.name"] == "look"
    first_call = next(e for e in events if e["type"] == "tool_call")
    assert look.attributes["gen_ai.tool.call.id"] == first_call["tool_call_id"]
    assert look.attributes["ai_tools.tool.status"] == "success"
    assert look.attributes["ai_tools.tool.from_cache"] is False
    assert look.attributes["ai_tools.tool.attempts"] == 1
    assert "gen_ai.tool.call.arguments" not in look.attributes
    assert [r.headers["traceparent"] for r in server.requests] == [
        traceparent_of(kids[0]), traceparent_of(kids[2])]
    metrics = recorded.metrics()
    [duration] = metrics["gen_ai.client.operation.duration"]
    assert duration.count == 2 and duration.attributes["gen_ai.operation.name"] == "chat"
    tokens = {p.attributes["gen_ai.token.type"]: p.sum
              for p in metrics["gen_ai.client.token.usage"]}
    assert tokens == {"input": 80, "output": 12}


@pytest_twisted.ensureDeferred
async def test_a_retried_request_is_one_chat_span_with_an_event_per_attempt() -> None:
    """A 500 then an answer: one chat span, two attempt events, resend count 1; both
    attempts carried the same traceparent (the chat span's)."""
    server, client = await served([Fault.server_error(), Turn(text="Hello.")])
    recorded = Recorded()
    try:
        ctx, _ = context("ada", client, recorded)
        result = await run(ctx)
    finally:
        await client.close()
        await server.stop()
    assert result.termination_reason == "completed"
    [chat] = recorded.named("chat")
    assert chat.attributes["ai_tools.model.attempts"] == 2
    assert chat.attributes["http.request.resend_count"] == 1
    assert [(e.name, e.attributes["attempt"], e.attributes["retry_of"]) for e in chat.events] \
        == [("ai_tools.model.attempt", 1, ""), ("ai_tools.model.attempt", 2, "LLMServerError")]
    assert [r.headers["traceparent"] for r in server.requests] == [traceparent_of(chat)] * 2
    assert chat.status.status_code is StatusCode.UNSET


@pytest_twisted.ensureDeferred
async def test_a_failed_request_sets_error_type_on_chat_and_loop() -> None:
    """Three 500s: the chat span and the loop's span fail with ``error.type``."""
    server, client = await served([Fault.server_error()] * 3)
    recorded = Recorded()
    try:
        ctx, _ = context("ada", client, recorded)
        result = await run(ctx)
    finally:
        await client.close()
        await server.stop()
    assert result.termination_reason == "llm_error"
    [chat] = recorded.named("chat")
    assert chat.attributes["error.type"] == "llm_error"
    assert chat.status.status_code is StatusCode.ERROR
    root = recorded.one("invoke_agent ada")
    assert root.attributes["error.type"] == "llm_error"
    assert recorded.metrics()["gen_ai.client.operation.duration"][0].attributes[
        "error.type"] == "llm_error"


@pytest_twisted.ensureDeferred
async def test_timed_out_and_cached_tool_calls() -> None:
    """snooze times out (error.type timed_out, timed_out true); peek twice: the second is
    answered by the cache (from_cache true, no attempt)."""
    registry = ToolRegistry([CachedLook, Snooze, LookTool, SayTool])
    server, client = await served([
        Turn(tool_calls=[{"name": "snooze", "arguments": {}},
                         {"name": "peek", "arguments": {"at": "well"}}]),
        Turn(tool_calls=[{"name": "peek", "arguments": {"at": "well"}}]),
        Turn(text="Done."),
    ])
    recorded = Recorded(capture_content=True)
    cache = ToolCache(reactor(), store=MemoryStore(clock=reactor()))
    try:
        ctx, _ = context("ada", client, recorded, registry=registry, cache=cache,
                         execution_options={"retry_policy": RetryPolicy(max_attempts=1)})
        result = await run(ctx, LoopConfig(consecutive_error_cap=5))
    finally:
        await client.close()
        await server.stop()
    assert result.termination_reason == "completed"
    [snooze] = recorded.named("execute_tool snooze")
    assert snooze.attributes["ai_tools.tool.timed_out"] is True
    assert snooze.attributes["error.type"] == "timed_out"
    assert snooze.status.status_code is StatusCode.ERROR
    first, second = recorded.named("execute_tool peek")
    assert first.attributes["ai_tools.tool.from_cache"] is False
    assert second.attributes["ai_tools.tool.from_cache"] is True
    assert second.attributes["ai_tools.tool.attempts"] == 0
    assert second.attributes["gen_ai.tool.call.arguments"] == '{"at": "well"}'
    assert '"seen": "well"' in second.attributes["gen_ai.tool.call.result"]
    chat = recorded.named("chat")[-1]
    assert "Done." in chat.attributes["gen_ai.output.messages"]


@pytest_twisted.ensureDeferred
async def test_a_refused_dangerous_call() -> None:
    """dig (DANGEROUS) in a context that allows only safe tools: refused before it ran."""
    server, client = await served([
        Turn(tool_calls=[{"name": "dig", "arguments": {"at": "north"}}]),
        Turn(text="I may not dig."),
    ])
    recorded = Recorded()
    gate = GatePolicy(allowed_categories=frozenset({ToolCategory.SAFE_CHAIN,
                                                    ToolCategory.TERMINAL}))
    try:
        ctx, _ = context("ada", client, recorded, gate=gate)
        result = await run(ctx)
    finally:
        await client.close()
        await server.stop()
    assert result.termination_reason == "completed"
    [dig] = recorded.named("execute_tool dig")
    assert dig.attributes["ai_tools.tool.refused"] == "blocked_by_tool_mode"
    assert dig.attributes["error.type"] == "blocked_by_tool_mode"
    assert dig.attributes["ai_tools.tool.attempts"] == 0


@pytest_twisted.ensureDeferred
async def test_a_killed_loop_closes_the_call_in_flight() -> None:
    """A kill while slow runs: its span ends cancelled, the loop's says stopped_by_user."""
    server, client = await served([Turn(tool_calls=[{"name": "slow", "arguments": {}}])])
    recorded = Recorded()
    try:
        ctx, events = context("ada", client, recorded)
        running = execute_react_loop(ctx)
        while not any(e["type"] == "tool_call" for e in events):
            await deferLater(0.01)
        ctx.control.stop()
        result = await running
    finally:
        await client.close()
        await server.stop()
    assert result.termination_reason == "stopped_by_user"
    [slow] = recorded.named("execute_tool slow")
    assert slow.attributes["error.type"] == "cancelled"
    root = recorded.one("invoke_agent ada")
    assert root.attributes["ai_tools.loop.termination_reason"] == "stopped_by_user"
    assert "error.type" not in root.attributes  # a stop is not a failure
    assert slow.parent is not None and slow.parent.span_id == root.context.span_id


@pytest_twisted.ensureDeferred
async def test_a_hundred_interleaved_assistants_each_have_their_own_tree() -> None:
    """100 loops at once on one reactor, answers arriving in mixed order (latencies): every
    span is in its own assistant's trace, under its own loop span, and each request carried
    the traceparent of its own chat span."""
    count = 100
    server = await start_test_server(
        [Turn(tool_calls=[{"name": "look", "arguments": {"at": "here"}}], latency=0.02),
         Turn(text="ok", latency=0.01)],
        reactor=reactor(), conversation_key=_assistant_of)
    client = OpenAIChatClient(server.profile(max_concurrency=count), reactor=reactor(),
                              retry_policy=QUICK_RETRY)
    recorded = Recorded()
    try:
        loops = []
        for i in range(count):
            ctx, _ = context(f"a{i}", client, recorded, pending_events=[
                {"type": "say", "from": "Bob", "text": f"a{i}"}])
            loops.append(execute_react_loop(ctx))
        results = await defer.gatherResults(loops)
    finally:
        await client.close()
        await server.stop()
    assert {str(r.termination_reason) for r in results} == {"completed"}
    spans = recorded.spans
    assert len(spans) == count * 4
    by_id = {s.context.span_id: s for s in spans}
    for root in recorded.named("invoke_agent"):
        name = root.attributes["gen_ai.agent.name"]
        kids = children(root, spans)
        assert [k.name.split(" ")[0] for k in kids] == ["chat", "execute_tool", "chat"], name
        assert {k.context.trace_id for k in kids} == {root.context.trace_id}
    traceparents = {r.headers["traceparent"] for r in server.requests}
    assert len(traceparents) == count * 2
    for request in server.requests:
        span_id = int(request.headers["traceparent"].split("-")[2], 16)
        chat = by_id[span_id]
        root = by_id[chat.parent.span_id]
        said = request.body["messages"][1]["content"]
        assert root.attributes["gen_ai.agent.name"] in said  # the request was its own


def _assistant_of(headers: Any, body: Any) -> str:
    """Each assistant its own conversation (named by the event it heard)."""
    return str(body["messages"][1]["content"]).rsplit(" ", 1)[-1]


def deferLater(seconds: float) -> defer.Deferred[None]:
    from twisted.internet import task

    return task.deferLater(reactor(), seconds, lambda: None)
