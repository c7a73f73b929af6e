"""Compaction through a real model client against the scripted server."""

from __future__ import annotations

from typing import Any

import pytest_twisted

from ai_tools.execution.history import ConversationHistory
from ai_tools.llm.client import OpenAIChatClient
from ai_tools.loop.compaction import (
    SUMMARY_PREFIX,
    TRUNCATION_PREFIX,
    CompactionConfig,
    compact_history,
)
from ai_tools.retry import RetryPolicy
from ai_tools.testing import Fault, Turn, start_test_server
from tests.unit.react_fakes import check_history_valid


def reactor() -> Any:
    from twisted.internet import reactor as global_reactor

    return global_reactor


def long_history() -> ConversationHistory:
    """30 exchanges: user line, assistant tool call, tool answer."""
    history = ConversationHistory()
    for i in range(30):
        history.add_user(f"Bob says: tell me about the fountain, part {i}")
        call = {"id": f"c{i}", "type": "function",
                "function": {"name": "look", "arguments": "{}"}}
        from ai_tools.execution.calls import parse_tool_call

        history.add_tool_exchange(parse_tool_call(call), '{"success": true}', native=True)
    return history


@pytest_twisted.ensureDeferred
async def test_summary_by_the_model() -> None:
    """The model's summary replaces the old messages; the request carried the transcript."""
    server = await start_test_server([Turn(text="Bob asked about the fountain 30 times.")],
                                     reactor=reactor())
    client = OpenAIChatClient(server.profile(), reactor=reactor(),
                              retry_policy=RetryPolicy(max_attempts=1))
    try:
        history = long_history()
        result = await compact_history(history, client, CompactionConfig(preserve_window=9))
        assert result.method == "summary"
        assert history.messages[0]["content"] == (
            f"{SUMMARY_PREFIX}\nBob asked about the fountain 30 times.")
        assert len(history) == 10
        check_history_valid(history.messages)
        sent = server.requests[0].messages
        assert "part 0" in sent[1]["content"]
        assert "tools" not in server.requests[0].body
    finally:
        await client.close()
        await server.stop()


@pytest_twisted.ensureDeferred
async def test_model_failure_truncates() -> None:
    """A failing summary request falls back to truncation; the history stays valid."""
    server = await start_test_server([Turn(fault=Fault.malformed_json())], reactor=reactor())
    client = OpenAIChatClient(server.profile(), reactor=reactor(),
                              retry_policy=RetryPolicy(max_attempts=1))
    try:
        history = long_history()
        result = await compact_history(history, client, CompactionConfig(preserve_window=10))
        assert result.method == "truncation" and result.error
        assert history.messages[0]["content"].startswith(TRUNCATION_PREFIX)
        assert history.messages[1]["role"] == "assistant"  # moved back to the call
        check_history_valid(history.messages)
    finally:
        await client.close()
        await server.stop()
