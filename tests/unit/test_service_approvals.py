"""Approval of dangerous calls in the service: the board, its bounds, a restart, events."""

from __future__ import annotations

import json
from typing import Any

import pytest
from twisted.internet import task

from ai_tools.errors import ConfigError, NotFound
from ai_tools.execution.approval import ApprovalDecision
from ai_tools.llm.events import ToolCall
from ai_tools.service.approvals import ApprovalBoard
from ai_tools.service.assistant import AssistantConfig
from tests.unit.react_fakes import ScriptedLLM, answer, call, make_registry, text
from tests.unit.service_fakes import LogCapture, add, make_service, settle


def approving_service(*script: Any, **config: Any) -> tuple[Any, Any, Any, list[dict[str, Any]]]:
    """A service with the real loop whose assistant ada needs approval for DANGEROUS calls."""
    llm = ScriptedLLM(list(script))
    clock, service, _ = make_service(llm=llm, registry=make_registry(), loop=False)
    events: list[dict[str, Any]] = []
    service.add_observer(events.append)
    config.setdefault("approval", "operator")
    ada = add(service, clock, name="ada", **config)
    return clock, service, ada, events


def dug(service: Any) -> list[Any]:
    return service.registry.get_tool("dig").calls  # type: ignore[no-any-return]


def kinds(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events if e["type"].startswith("approval")]


def last_tool_result(ada: Any) -> dict[str, Any]:
    return json.loads([m for m in ada.history.messages if m["role"] == "tool"][-1]["content"])


def test_a_dangerous_call_waits_for_the_operator_then_runs() -> None:
    clock, service, ada, events = approving_service(answer(call("dig", {"at": "north"}, "c1")))
    service.send("ada", "dig north")
    settle(clock)
    assert ada.ticking and dug(service) == []
    [pending] = service.approvals.pending()
    assert pending["assistant"] == "ada" and pending["tool"] == "dig"
    assert pending["arguments"] == {"at": "north"} and pending["tool_call_id"] == "c1"
    assert ada.status()["current_tool_call"]["status"] == "awaiting_approval"
    decided = service.approvals.decide(pending["id"], True, by="api")
    settle(clock)
    assert decided["approved"] and dug(service) == [{"at": "north"}]
    assert ada.last_tick["reason"] == "dangerous_tool" and service.approvals.pending() == []
    assert kinds(events) == ["approval_requested", "approval_decided"]


def test_a_refusal_is_what_the_model_reads_and_the_loop_goes_on() -> None:
    clock, service, ada, _ = approving_service(
        answer(call("dig", {"at": "north"}, "c1")), text("Fine, I will not dig."))
    service.send("ada", "dig north")
    settle(clock)
    [pending] = service.approvals.pending()
    service.approvals.decide(pending["id"], False, by="console", reason="the wall is load-bearing")
    settle(clock)
    assert dug(service) == [] and ada.last_tick["reason"] == "completed"
    result = last_tool_result(ada)
    assert result["status"] == "approval_refused" and "load-bearing" in result["error"]


def test_an_unanswered_call_times_out_bounded() -> None:
    clock, service, ada, events = approving_service(
        answer(call("dig", {"at": "north"}, "c1")), text("Nobody answered."),
        approval_timeout=60)
    service.send("ada", "dig north")
    settle(clock)
    with LogCapture() as logs:
        clock.advance(60)
        settle(clock)
    assert dug(service) == [] and service.approvals.pending() == []
    assert last_tool_result(ada)["status"] == "approval_timed_out"
    assert any("timed out" in str(e.get("log_format")) for e in logs.events)
    assert events[-1]["type"] != "approval_requested"
    assert next(e for e in events if e["type"] == "approval_decided")["timed_out"] is True


def test_a_stop_withdraws_the_request() -> None:
    clock, service, ada, events = approving_service(answer(call("dig", {"at": "north"}, "c1")))
    service.send("ada", "dig north")
    settle(clock)
    [pending] = service.approvals.pending()
    assert service.stop_assistant("ada")
    settle(clock)
    assert service.approvals.pending() == [] and dug(service) == []
    assert kinds(events) == ["approval_requested", "approval_withdrawn"]
    with pytest.raises(NotFound):
        service.approvals.decide(pending["id"], True, by="api")
    assert ada.history.unanswered_tool_calls() == []


def test_a_restart_refuses_what_waits_and_logs_it() -> None:
    clock, service, _, _ = approving_service(
        answer(call("dig", {"at": "north"}, "c1")), text("I was refused."))
    service.send("ada", "dig north")
    settle(clock)
    with LogCapture() as logs:
        d = service.stopService()
        settle(clock, 20)
        clock.advance(11)
        settle(clock)
    assert d.called and dug(service) == []
    assert any("still waiting" in str(e.get("log_format")) for e in logs.events)
    saved = service.store.load_assistant("ada").result
    results = [json.loads(m["content"]) for m in saved["history"] if m["role"] == "tool"]
    assert results and results[0]["status"] == "approval_refused"
    assert "restart" in results[0]["error"]


def test_never_asks_nobody() -> None:
    clock, service, _, events = approving_service(answer(call("dig", {"at": "x"}, "c1")),
                                                    approval="never")
    service.send("ada", "dig")
    settle(clock)
    assert dug(service) == [{"at": "x"}] and kinds(events) == []


def test_one_tool_by_name_and_a_changed_setting_applies_to_the_next_call() -> None:
    clock, service, _, _ = approving_service(
        answer(call("look", {}, "c1")), text("ok"), approval="never",
        tool_approval={"look": "operator"})
    service.send("ada", "look")
    settle(clock)
    assert [p["tool"] for p in service.approvals.pending()] == ["look"]


@pytest.mark.parametrize("bad", [{"approval": "always"}, {"approval_timeout": 0},
                                 {"tool_approval": {"dig": "maybe"}}])
def test_bad_settings_are_config_errors(bad: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        AssistantConfig.from_mapping({"name": "ada", **bad})


def test_the_settings_round_trip() -> None:
    config = AssistantConfig.from_mapping({"name": "ada", "approval": "operator",
                                           "tool_approval": {"look": "operator"},
                                           "approval_timeout": 30})
    assert AssistantConfig.from_mapping(config.to_dict()) == config


def test_the_board_is_bounded() -> None:
    clock = task.Clock()
    board = ApprovalBoard(clock, lambda name, event: None, max_pending=2)
    waits = [board.request("ada", "dig", ToolCall(id=f"c{i}", name="dig", arguments={}), 60)
             for i in range(3)]
    assert not waits[0].called and not waits[1].called
    refused: list[ApprovalDecision] = []
    waits[2].addCallback(refused.append)
    assert refused[0].approved is False and "too many" in refused[0].reason
    assert len(board.pending()) == 2


def test_a_helper_loop_of_the_assistant_asks_too() -> None:
    """A sub-agent acts for its assistant: its dangerous calls wait for approval as well."""
    clock, service, ada, _ = approving_service(answer(call("dig", {"at": "east"}, "s1")))
    service.start_subagent(ada, "dig east", ["dig"], 2)
    settle(clock)
    [pending] = service.approvals.pending()
    assert pending["tool"] == "dig" and pending["assistant"] == "ada" and dug(service) == []
    service.approvals.decide(pending["id"], True, by="api")
    settle(clock)
    assert dug(service) == [{"at": "east"}]
