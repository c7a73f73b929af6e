"""The ReAct loop against the scripted OpenAI-compatible server over real sockets."""

from __future__ import annotations

import json
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import defer, task

from ai_tools.execution.history import ConversationHistory
from ai_tools.llm.client import OpenAIChatClient
from ai_tools.llm.repetition import RepetitionConfig
from ai_tools.loop import (
    ExitTool,
    LoopConfig,
    LoopContext,
    LoopResult,
    TerminationReason,
    execute_react_loop,
)
from ai_tools.retry import RetryPolicy
from ai_tools.testing import Fault, TestServer, Turn, start_test_server
from ai_tools.tools.base import Actor
from tests.unit.react_fakes import check_history_valid, make_registry

ONE_TRY = RetryPolicy(max_attempts=1)


def reactor() -> Any:
    from twisted.internet import reactor as global_reactor

    return global_reactor


class Rig:
    """A scripted server, a real client for it and a loop context; ``stop`` cleans up."""

    def __init__(self, server: TestServer, client: OpenAIChatClient) -> None:
        self.server = server
        self.client = client
        self.events: list[dict[str, Any]] = []
        self.history = ConversationHistory()
        self.registry = make_registry()

    def ctx(self, **kwargs: Any) -> LoopContext:
        return LoopContext(
            assistant_name="ada", actor=Actor("char:ada"), registry=self.registry,
            llm=self.client, history=self.history, clock=reactor(),
            on_event=self.events.append, **kwargs)

    async def stop(self) -> None:
        await self.client.close()
        await self.server.stop()


async def rig(script: Any, **profile: Any) -> Rig:
    server = await start_test_server(script, reactor=reactor())
    client = OpenAIChatClient(server.profile(**profile), reactor=reactor(),
                              retry_policy=ONE_TRY)
    return Rig(server, client)


async def run(ctx: LoopContext, config: LoopConfig | None = None) -> LoopResult:
    result = await execute_react_loop(ctx, config)
    check_history_valid(ctx.history.messages)
    return result


@pytest_twisted.ensureDeferred
async def test_streamed_loop_to_terminal_tool() -> None:
    """look, then say: two streamed requests, regenerated system message, tool results sent."""
    r = await rig([
        Turn(text="Let me look.", tool_calls=[{"name": "look", "arguments": {"at": "plaza"}}]),
        Turn(tool_calls=[{"name": "say", "arguments": {"text": "Hello!"}},
                         {"name": "flag", "arguments": {"why": "test"}}]),
    ])
    try:
        events = [{"type": "say", "from": "Bob", "text": "Hi Ada"}]
        ctx = r.ctx(pending_events=events)
        result = await run(ctx, LoopConfig(tool_budget=4, exit_tools=[ExitTool("flag")]))
        assert result.termination_reason == TerminationReason.TERMINAL_TOOL
        assert [x["tool"] for x in result.results] == ["look", "say"]
        assert result.text == "Let me look."
        assert result.signals[0]["tool_name"] == "flag"
        assert result.usage["requests"] == 2
        first, second = r.server.requests
        assert first.body["stream"] is True
        assert "flag" in [t["function"]["name"] for t in first.tools]
        assert "Tool calls remaining this turn: 4." in first.messages[0]["content"]
        assert "Tool calls remaining this turn: 3." in second.messages[0]["content"]
        assert "Bob (say): Hi Ada" in first.messages[1]["content"]
        tool_msg = next(m for m in second.messages if m["role"] == "tool")
        assert json.loads(tool_msg["content"])["seen"] == "plaza"
        assert any(e["type"] == "text_delta" for e in r.events)
    finally:
        await r.stop()


@pytest_twisted.ensureDeferred
async def test_fallback_mode_over_http() -> None:
    """A model without native tools: calls in text, results as [TOOL RESULT] messages."""
    r = await rig([
        Turn(text='Looking.\n{"tool": "look", "arguments": {"at": "sky"}}'),
        Turn(text="Clear sky."),
    ], tool_calling="fallback", stream=False)
    try:
        result = await run(r.ctx())
        assert result.termination_reason == TerminationReason.COMPLETED
        assert result.text == "Looking.\nClear sky."
        second = r.server.requests[1]
        assert "tools" not in second.body
        assert any(str(m.get("content", "")).startswith("[TOOL RESULT: look]")
                   for m in second.messages)
    finally:
        await r.stop()


@pytest.mark.parametrize(
    "fault",
    [Fault.malformed_json(), Fault.html_error(), Fault.server_error(503), Fault.reset(),
     Fault.http_error(400, "bad request")],
    ids=["malformed_json", "html_error", "server_error", "reset", "http_400"],
)
@pytest_twisted.ensureDeferred
async def test_garbage_from_the_server_is_llm_error(fault: Fault) -> None:
    """Whatever garbage the server sends, the loop ends with llm_error and keeps output."""
    r = await rig([Turn(text="First.", tool_calls=[{"name": "look", "arguments": {}}]),
                   Turn(fault=fault)])
    try:
        result = await run(r.ctx())
        assert result.termination_reason == TerminationReason.LLM_ERROR
        assert result.error
        assert result.text.startswith("First.")
        assert result.success_count == 1
    finally:
        await r.stop()


@pytest_twisted.ensureDeferred
async def test_truncated_stream_keeps_partial_text() -> None:
    """A stream cut mid-answer: llm_error with the text received so far."""
    r = await rig([Turn(text="A long answer that is cut " * 4, chunk_chars=8,
                        fault=Fault.truncated_stream(after_chunks=3))])
    try:
        result = await run(r.ctx())
        assert result.termination_reason == TerminationReason.LLM_ERROR
        assert result.text.startswith("A long a")
    finally:
        await r.stop()


@pytest_twisted.ensureDeferred
async def test_repeating_model_is_cut_off() -> None:
    """A model repeating one line ends the loop with repeated_line_loop."""
    r = await rig([Turn(text="I am stuck.\n" * 30, chunk_chars=12)],
                  repetition=RepetitionConfig(max_repeats=5))
    try:
        result = await run(r.ctx())
        assert result.termination_reason == TerminationReason.REPEATED_LINE_LOOP
        assert "I am stuck." in result.text
    finally:
        await r.stop()


@pytest_twisted.ensureDeferred
async def test_open_circuit_is_llm_unavailable() -> None:
    """After the breaker opens, the next loop ends at once with llm_unavailable."""
    r = await rig([Turn(fault=Fault.server_error(500))], breaker_threshold=1,
                  breaker_cooldown=600)
    try:
        first = await run(r.ctx())
        assert first.termination_reason == TerminationReason.LLM_ERROR
        second = await run(r.ctx())
        assert second.termination_reason == TerminationReason.LLM_UNAVAILABLE
        assert len(r.server.requests) == 1
    finally:
        await r.stop()


@pytest_twisted.ensureDeferred
async def test_kill_mid_stream_closes_the_connection() -> None:
    """stop() during a stalled stream cancels the request for real; partial text kept."""
    r = await rig([Turn(text="Once upon a time, far away", chunk_chars=5,
                        fault=Fault.stall(after_chunks=2))])
    try:
        ctx = r.ctx()
        d = execute_react_loop(ctx)
        await r.server.wait_for_requests(1)
        while not any(e["type"] == "text_delta" for e in r.events):
            await deferLater(0.01)
        ctx.control.stop("operator kill")
        result = await d
        assert result.termination_reason == TerminationReason.STOPPED_BY_USER
        assert result.text.startswith("Once ")
        assert ctx.history.messages == []
        await r.server.wait_for_no_connections()
    finally:
        await r.stop()


@pytest_twisted.ensureDeferred
async def test_kill_mid_tool_over_http() -> None:
    """stop() while a tool runs: the tool is cancelled and the call leaves no trace."""
    r = await rig([Turn(tool_calls=[{"name": "slow", "arguments": {}, "id": "s1"}])])
    try:
        ctx = r.ctx()
        d = execute_react_loop(ctx)
        slow = r.registry.get_tool("slow")
        while not slow.pending:  # type: ignore[union-attr]
            await deferLater(0.01)
        ctx.control.stop()
        result = await d
        assert result.termination_reason == TerminationReason.STOPPED_BY_USER
        assert slow.cancelled == 1  # type: ignore[union-attr]
        assert "s1" not in json.dumps(ctx.history.messages)
    finally:
        await r.stop()


def deferLater(seconds: float) -> defer.Deferred[None]:
    """Wait a little on the real reactor (polling for a state, never asserting on time)."""
    return task.deferLater(reactor(), seconds, lambda: None)
