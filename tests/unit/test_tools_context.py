"""Context, delegation, sleep and control tools that need no world."""

from __future__ import annotations

import pytest
from twisted.internet import task

from ai_tools.store.memory import MemoryStore
from ai_tools.tools.base import Actor
from ai_tools.tools.context import GetSystemStatusTool, SessionMemoryTool
from ai_tools.tools.control import noop as NoopTool
from ai_tools.tools.delegation import (
    DelegateTaskTool,
    GetDelegationStatusTool,
    delegation_settings,
)
from ai_tools.tools.sleep import GoToSleepTool
from ai_tools.tools.sleep import wait as WaitTool
from tests.unit.tool_fakes import FakeAssistant, fired, refusals, run_tool


@pytest.fixture
def assistant() -> FakeAssistant:
    return FakeAssistant(name="ada")


@pytest.fixture
def actor(assistant: FakeAssistant) -> Actor:
    return Actor(character_id="char:ada", store=MemoryStore(clock=task.Clock()),
                 assistant=assistant)


# -- session_memory -------------------------------------------------------


def test_session_memory_set_get_list_delete(actor: Actor) -> None:
    notes = SessionMemoryTool()
    first = run_tool(notes, actor, action="set", key="lantern_id", value="obj:1")
    assert first["created"] is True
    again = run_tool(notes, actor, action="set", key="lantern_id", value="obj:2")
    assert again["created"] is False
    run_tool(notes, actor, action="set", key="plan", value="spawn, tag, say")
    assert run_tool(notes, actor, action="get", key="lantern_id")["value"] == "obj:2"
    listed = run_tool(notes, actor, action="list")
    assert listed["notes"] == {"lantern_id": "obj:2", "plan": "spawn, tag, say"}
    assert run_tool(notes, actor, action="delete", key="plan")["success"] is True
    assert run_tool(notes, actor, action="list")["notes"] == {"lantern_id": "obj:2"}


def test_session_memory_missing_note(actor: Actor) -> None:
    notes = SessionMemoryTool()
    run_tool(notes, actor, action="set", key="a", value="1")
    missing = run_tool(notes, actor, action="get", key="b")
    assert missing["status"] == "not_found" and missing["keys"] == ["a"]
    assert run_tool(notes, actor, action="delete", key="b")["status"] == "not_found"
    assert run_tool(SessionMemoryTool(), Actor(character_id="x", store=actor.store),
                    action="list")["notes"] == {}


@pytest.mark.parametrize(
    ("params", "bad"),
    [
        ({}, "action"),
        ({"action": "drop"}, "action"),
        ({"action": "set", "key": "a"}, "value"),
        ({"action": "set", "value": "v"}, "key"),
        ({"action": "get"}, "key"),
        ({"action": "delete"}, "key"),
        ({"action": "get", "key": "has space"}, "key"),
        ({"action": "set", "key": "a", "value": ""}, "value"),
    ],
)
def test_session_memory_schema_refusals(params: dict, bad: str) -> None:
    assert any(p.startswith(bad) for p in refusals(SessionMemoryTool(), **params))


# -- get_system_status ---------------------------------------------------------


def test_system_status_reports_the_assistant(actor: Actor) -> None:
    result = run_tool(GetSystemStatusTool(), actor)
    assert result["success"] is True and result["assistant"] == "ada"
    assert result["status"]["mode"] == "awake" and result["world"] is None


def test_system_status_needs_an_assistant() -> None:
    result = run_tool(GetSystemStatusTool(), Actor(character_id="c"))
    assert result["success"] is False and result["status"] == "unavailable"
    assert "assistant" in result["error"]
    assert refusals(GetSystemStatusTool(), verbose=True) == []  # dropped, not refused


# -- delegation ---------------------------------------------------------------


def test_delegate_starts_a_budgeted_subagent(actor: Actor, assistant: FakeAssistant) -> None:
    assistant.execution_config = {"sub_agents_enabled": True, "sub_agent_budget": 6}
    result = run_tool(DelegateTaskTool(), actor, task="List every market object.",
                      tools=["search_by_tag", "get_attributes"], budget=20)
    assert result["success"] is True and result["status"] == "started"
    assert result["budget"] == 6  # capped by the configuration
    started = assistant.subagents[result["task_id"]]
    assert started == {"task": "List every market object.", "budget": 6, "status": "running",
                       "tools": ["search_by_tag", "get_attributes"]}
    status = run_tool(GetDelegationStatusTool(), actor, task_id=result["task_id"])
    assert status["success"] is True and status["status"] == "running"


def test_delegate_uses_the_configured_budget_by_default(
    actor: Actor, assistant: FakeAssistant
) -> None:
    assistant.execution_config = {"sub_agent_budget": 4}
    result = run_tool(DelegateTaskTool(), actor, task="Count the lanterns.", tools=["noop"])
    assert result["budget"] == 4


def test_delegate_refused_when_disabled(actor: Actor, assistant: FakeAssistant) -> None:
    assistant.execution_config = {"sub_agents_enabled": False}
    result = run_tool(DelegateTaskTool(), actor, task="Count the lanterns.", tools=["noop"])
    assert result["success"] is False and result["status"] == "disabled"
    assert assistant.subagents == {}


def test_delegate_refuses_recursive_delegation(actor: Actor, assistant: FakeAssistant) -> None:
    result = run_tool(DelegateTaskTool(), actor, task="Delegate this again.",
                      tools=["delegate_task", "say"])
    assert result["status"] == "invalid" and result["not_delegable"] == ["delegate_task"]
    assert assistant.subagents == {}


def test_delegation_needs_an_assistant() -> None:
    alone = Actor(character_id="c")
    assert run_tool(DelegateTaskTool(), alone, task="Count the lanterns.",
                    tools=["noop"])["status"] == "unavailable"
    assert run_tool(GetDelegationStatusTool(), alone, task_id="x")["status"] == "unavailable"


def test_unknown_delegated_task(actor: Actor) -> None:
    result = run_tool(GetDelegationStatusTool(), actor, task_id="sub-9")
    assert result["success"] is False and result["status"] == "not_found"


def test_delegation_settings_defaults_and_bad_values() -> None:
    assert delegation_settings(None) == (True, 10)
    assert delegation_settings({"sub_agent_budget": "x"}) == (True, 10)
    assert delegation_settings({"sub_agent_budget": 1000}) == (True, 50)
    assert delegation_settings({"sub_agents_enabled": False, "sub_agent_budget": 0}) == (False, 1)


@pytest.mark.parametrize(
    ("params", "bad"),
    [
        ({"tools": ["say"]}, "task"),
        ({"task": "short", "tools": ["say"]}, "task"),
        ({"task": "A long enough task."}, "tools"),
        ({"task": "A long enough task.", "tools": []}, "tools"),
        ({"task": "A long enough task.", "tools": ["Bad Name"]}, "tools"),
        ({"task": "A long enough task.", "tools": ["say"], "budget": 0}, "budget"),
        ({"task": "A long enough task.", "tools": ["say"], "budget": 51}, "budget"),
    ],
)
def test_delegate_schema_refusals(params: dict, bad: str) -> None:
    assert any(p.startswith(bad) for p in refusals(DelegateTaskTool(), **params))


# -- sleep, wait, noop --------------------------------------------------------


def test_go_to_sleep_switches_mode(actor: Actor, assistant: FakeAssistant) -> None:
    result = run_tool(GoToSleepTool(), actor, reason="quiet night")
    assert result == {"success": True, "mode": "sleep", "changed": True,
                      "previous_mode": "awake", "reason": "quiet night"}
    assert assistant.mode_changes == [("sleep", "quiet night")]
    again = run_tool(GoToSleepTool(), actor)
    assert again["changed"] is False and len(assistant.mode_changes) == 1


def test_go_to_sleep_needs_an_assistant() -> None:
    result = run_tool(GoToSleepTool(), Actor(character_id="c"))
    assert result["status"] == "unavailable"
    assert "reason" in refusals(GoToSleepTool(), reason="")
    assert "reason" in refusals(GoToSleepTool(), reason="x" * 501)


def test_wait_and_noop_do_nothing(actor: Actor) -> None:
    assert run_tool(WaitTool(), actor, reason="for Bob") == {
        "success": True, "waiting": True, "reason": "for Bob"}
    assert run_tool(NoopTool(), Actor(character_id=None))["noop"] is True
    assert "reason" in refusals(NoopTool(), reason=5)
    assert "reason" in refusals(WaitTool(), reason="")


def test_results_are_plain_json(actor: Actor) -> None:
    import json

    result = fired(GetSystemStatusTool().execute(actor))
    assert json.loads(json.dumps(result)) == result
