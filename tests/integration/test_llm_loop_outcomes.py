"""What a loop makes of a model server's odd answers, over real sockets: every HTTP
attempt counted, an empty answer, an error in a 200, an unknown finish reason, and the
assistant tool-call message sent back with ``"content": ""``."""

from __future__ import annotations

from typing import Any

import pytest_twisted

from ai_tools.llm.client import OpenAIChatClient
from ai_tools.loop import LoopConfig, TerminationReason
from ai_tools.retry import RetryPolicy
from ai_tools.testing import Fault, Turn, start_test_server
from tests.integration.test_react_server import Rig, reactor, run

EVENTS = [{"type": "say", "from": "Bob", "text": "Hi Ada"}]


async def rig(script: Any, attempts: int = 1, **profile: Any) -> Rig:
    server = await start_test_server(script, reactor=reactor())
    client = OpenAIChatClient(server.profile(**profile), reactor=reactor(),
                              retry_policy=RetryPolicy(max_attempts=attempts, base_delay=0.01,
                                                       jitter=False))
    return Rig(server, client)


@pytest_twisted.ensureDeferred
async def test_failed_attempts_count_as_model_requests() -> None:
    """Four HTTP attempts that all failed are four model requests (they were 0), and two
    for an answer that came at the second try."""
    r = await rig([Fault.server_error(503)] * 4 + [Fault.server_error(500), "Hello Bob."],
                  attempts=4, breaker_threshold=100)
    try:
        failed = await run(r.ctx(pending_events=EVENTS), LoopConfig(max_iterations=1))
        assert failed.termination_reason == TerminationReason.LLM_ERROR
        assert failed.usage["requests"] == 4
        answered = await run(r.ctx(pending_events=EVENTS), LoopConfig(max_iterations=1))
        assert answered.error is None and answered.usage["requests"] == 2
        assert len(r.server.requests) == 6
    finally:
        await r.stop()


@pytest_twisted.ensureDeferred
async def test_an_empty_answer_ends_the_loop_with_a_clear_error() -> None:
    r = await rig([Turn(text="")])
    try:
        result = await run(r.ctx(pending_events=EVENTS))
        assert result.termination_reason == TerminationReason.LLM_ERROR
        assert "the model sent an empty answer" in (result.error or "")
        assert result.usage["requests"] == 1
    finally:
        await r.stop()


@pytest_twisted.ensureDeferred
async def test_an_error_body_in_a_200_ends_the_loop_with_a_clear_error() -> None:
    body = '{"error": {"message": "the model crashed", "type": "server_error"}}'
    r = await rig([Fault(kind="status", status=200, body=body)], stream=False)
    try:
        result = await run(r.ctx(pending_events=EVENTS))
        assert result.termination_reason == TerminationReason.LLM_ERROR
        assert "carrying an error: the model crashed" in (result.error or "")
    finally:
        await r.stop()


@pytest_twisted.ensureDeferred
async def test_an_unknown_finish_reason_is_in_the_result() -> None:
    r = await rig([Turn(text="Hello Bob.", finish_reason="eos_token")])
    try:
        result = await run(r.ctx(pending_events=EVENTS))
        assert result.termination_reason == TerminationReason.COMPLETED
        assert result.finish_reason == "eos_token"
    finally:
        await r.stop()


@pytest_twisted.ensureDeferred
async def test_the_tool_call_message_goes_back_with_empty_content() -> None:
    r = await rig([Turn(tool_calls=[{"name": "look", "arguments": {}}]), "I see a plaza."])
    try:
        result = await run(r.ctx(pending_events=EVENTS))
        assert result.error is None
        (assistant,) = [m for m in r.server.requests[1].messages if m.get("tool_calls")]
        assert assistant["content"] == ""
        assert r.server.requests[0].body["tool_choice"] == "auto"
    finally:
        await r.stop()
