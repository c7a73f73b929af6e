"""delegate_task end to end: a budgeted sub-agent loop runs in the background with only the
tools it was given, its report comes back as a pending event, get_delegation_status shows it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest_twisted
from twisted.internet import task

from ai_tools.testing import Turn
from tests.integration.test_tools_scenario_building import (  # noqa: F401 (fixture)
    Stack,
    backend_fixture,
    call,
    reactor,
    start_stack,
    stop_stack,
    tool_results,
)

TASK = "List the rooms tagged 'town' in category 'zone' and report their names."
REPORT = "Four rooms are tagged town: Town Plaza, Old Library, Builders' Workshop, the inn."

TURNS = [
    # the assistant delegates, then waits (TERMINAL): its loop asks nothing more
    Turn(tool_calls=[
        {"name": "delegate_task",
         "arguments": {"task": TASK, "tools": ["search_by_tag", "set_attribute"],
                       "budget": 8}},
        {"name": "wait", "arguments": {"reason": "waiting for the helper"}},
    ]),
    # the helper
    call("search_by_tag", tag="town", category="zone"),
    Turn(text=REPORT),
    # the assistant, woken by the helper's report
    call("get_delegation_status", task_id="sub-1"),
    call("say", message="Four town rooms, as my helper found."),
]


@pytest_twisted.async_yield_fixture
async def mason(backend: Any) -> AsyncIterator[Stack]:
    stack = await start_stack(backend, TURNS, {
        "name": "mason", "character_id": "char:mason", "autonomous": False,
        "execution_config": {"sub_agents_enabled": True, "sub_agent_budget": 3},
    })
    yield stack
    await stop_stack(stack)


async def until(predicate: object, limit: float = 30.0) -> None:
    """Let the reactor run until ``predicate()`` holds (bounded, generous)."""
    waited = 0.0
    while not predicate():  # type: ignore[operator]
        assert waited < limit, "condition not reached"
        await task.deferLater(reactor(), 0.01, lambda: None)
        waited += 0.01


@pytest_twisted.ensureDeferred
async def test_delegated_task_reports_back(mason: Stack) -> None:
    assistant = mason.service.get("mason")
    await mason.service.send("mason", {"type": "say", "from": "Alice",
                                       "text": "Mason, which rooms belong to the town?"})
    first = await mason.service.run_tick("mason")
    assert first.loop.termination_reason == "terminal_tool"
    started = tool_results(mason.service.history("mason"))[0]
    assert started["status"] == "started" and started["budget"] == 3  # capped by config

    await until(lambda: (assistant.subagent_status("sub-1") or {}).get("status") != "running")
    status = assistant.subagent_status("sub-1")
    assert status["status"] == "done" and status["result"] == REPORT
    assert status["tool_calls"] == 1

    # the helper was offered only what it was given (plus the loop's own noop)
    helper_request = mason.server.requests[1]
    assert {t["function"]["name"] for t in helper_request.tools} - {"noop"} == {
        "search_by_tag", "set_attribute"}
    assert TASK in json.dumps(helper_request.messages)

    # its report came back as a pending event; the next tick reads it
    second = await mason.service.run_tick("mason")
    assert second.loop.termination_reason == "terminal_tool"
    assert REPORT in json.dumps(mason.server.requests[3].messages)
    checked = tool_results(mason.service.history("mason"))[-2]
    assert checked["success"] is True and checked["status"] == "done"
    assert checked["result"] == REPORT
    assert len(mason.server.requests) == len(TURNS)
