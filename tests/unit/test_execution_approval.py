"""The engine and approvals: a call that needs an operator's yes waits for it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from twisted.internet import defer

from ai_tools.errors import ConfigError
from ai_tools.execution.approval import (
    ApprovalDecision,
    check_tool_approval,
    needs_approval,
)
from ai_tools.execution.outcome import CallStatus, OutcomeKind
from ai_tools.execution.reasons import TerminationReason
from ai_tools.llm.events import ToolCall
from ai_tools.tools.base import Tool
from tests.unit.execution_fakes import call, make_context, run, start


class Hook:
    """An approval hook asking for every call of ``names``; records what it was asked."""

    def __init__(self, *names: str) -> None:
        self.names = set(names)
        self.asked: list[tuple[str, dict[str, Any]]] = []
        self.waits: list[defer.Deferred[Any]] = []
        self.cancelled = 0

    def __call__(self, tool: Tool, tool_call: ToolCall,
                 params: Mapping[str, Any]) -> defer.Deferred[Any] | None:
        self.asked.append((tool.name, dict(params)))
        if tool.name not in self.names:
            return None
        d: defer.Deferred[Any] = defer.Deferred(lambda _: self._cancelled())
        self.waits.append(d)
        return d

    def _cancelled(self) -> None:
        self.cancelled += 1


def dig_calls(ctx: Any) -> list[dict[str, Any]]:
    return ctx.registry.get_tool("dig").calls  # type: ignore[no-any-return]


def test_a_call_needing_no_approval_runs_at_once() -> None:
    hook = Hook("dig")
    ctx = make_context(approval=hook)
    assert run(ctx, call("echo", text="hi")).status == CallStatus.SUCCESS
    assert hook.asked == [("echo", {"text": "hi"})]


def test_an_approved_call_runs_after_the_yes() -> None:
    hook = Hook("dig")
    ctx = make_context(approval=hook)
    _, results = start(ctx, call("dig", text="hole"))
    assert not results and dig_calls(ctx) == []
    assert ctx.state.current_tool_call["status"] == "awaiting_approval"  # type: ignore[index]
    hook.waits[0].callback(ApprovalDecision(True, by="console"))
    outcome = results[0]
    assert outcome.status == CallStatus.SUCCESS and dig_calls(ctx) == [{"text": "hole"}]
    assert outcome.ends_loop is TerminationReason.DANGEROUS_TOOL


def test_a_refused_call_does_not_run_and_the_model_is_told() -> None:
    hook = Hook("dig")
    ctx = make_context(approval=hook)
    _, results = start(ctx, call("dig", text="hole"))
    hook.waits[0].callback(ApprovalDecision(False, by="manhole", reason="not today"))
    outcome = results[0]
    assert outcome.kind == OutcomeKind.HISTORY and outcome.status == CallStatus.APPROVAL_REFUSED
    assert dig_calls(ctx) == [] and not outcome.dispatched and outcome.ends_loop is None
    assert outcome.result["success"] is False and outcome.result["retryable"] is False
    assert "refused" in outcome.result["error"] and "not today" in outcome.result["error"]
    assert "(manhole)" in outcome.result["error"]
    assert ctx.history.unanswered_tool_calls() == [] and len(ctx.history) == 2
    assert ctx.state.current_tool_call["status"] == "approval_refused"  # type: ignore[index]


def test_an_unanswered_call_times_out_without_running() -> None:
    hook = Hook("dig")
    ctx = make_context(approval=hook)
    _, results = start(ctx, call("dig", text="hole"))
    hook.waits[0].callback(ApprovalDecision(False, by="service", reason="no answer within 60s",
                                            timed_out=True))
    outcome = results[0]
    assert outcome.status == CallStatus.APPROVAL_TIMED_OUT and dig_calls(ctx) == []
    assert "in time: no answer within 60s" in outcome.result["error"]


def test_killing_a_call_waiting_for_approval_cancels_the_request() -> None:
    hook = Hook("dig")
    ctx = make_context(approval=hook)
    d, results = start(ctx, call("dig", text="hole"))
    d.cancel()
    assert hook.cancelled == 1 and dig_calls(ctx) == []
    assert results[0].kind == OutcomeKind.ABORT
    assert results[0].status == TerminationReason.STOPPED_BY_USER
    assert len(ctx.history) == 0


def test_a_stop_during_the_wait_aborts_after_the_yes() -> None:
    stop = []
    hook = Hook("dig")
    ctx = make_context(approval=hook, stop_requested=lambda: bool(stop))
    _, results = start(ctx, call("dig", text="hole"))
    stop.append(True)
    hook.waits[0].callback(ApprovalDecision(True))
    assert results[0].kind == OutcomeKind.ABORT and dig_calls(ctx) == []


def test_retries_do_not_ask_again() -> None:
    hook = Hook("scripted")
    ctx = make_context(approval=hook)
    ctx.registry.get_tool("scripted").script = [  # type: ignore[union-attr]
        {"success": False, "error": "busy", "retryable": True}, {"success": True}]
    _, results = start(ctx, call("scripted"))
    hook.waits[0].callback(ApprovalDecision(True))
    ctx.clock.advance(60)
    assert results[0].status == CallStatus.SUCCESS and results[0].attempts == 2
    assert len(hook.asked) == 1


def test_the_policy_table_then_the_tool_then_dangerous_tools() -> None:
    ctx = make_context()
    dig, echo = ctx.registry.get_tool("dig"), ctx.registry.get_tool("echo")
    assert needs_approval(dig, "operator", {}) and not needs_approval(echo, "operator", {})
    assert not needs_approval(dig, "never", {})
    assert needs_approval(echo, "never", {"echo": "operator"})
    assert not needs_approval(dig, "operator", {"dig": "never"})

    class Careful(Tool):
        name = "careful"
        approval = "operator"

    assert needs_approval(Careful(), "never", {})
    assert not needs_approval(Careful(), "never", {"careful": "never"})


@pytest.mark.parametrize("table", [{"dig": "always"}, {"": "never"}, ["dig"]])
def test_a_bad_tool_approval_table_is_refused(table: Any) -> None:
    with pytest.raises(ConfigError, match="tool_approval"):
        check_tool_approval(table, "tool_approval")
