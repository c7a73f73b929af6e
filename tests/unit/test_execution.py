"""The execution engine: one tool call from the model's request to the history entry."""

from __future__ import annotations

import json
from typing import Any

import pytest
from twisted.internet import defer, task

from ai_tools.errors import PermissionDenied
from ai_tools.execution.cache import ToolCache
from ai_tools.execution.engine import ExecutionContext, ExecutionState, skip_tool_call
from ai_tools.execution.history import ConversationHistory
from ai_tools.execution.outcome import RESTART_KEY, CallStatus, OutcomeKind, ToolCallOutcome
from ai_tools.execution.reasons import TerminationReason
from ai_tools.retry import RetryPolicy
from ai_tools.tools.base import Actor, ToolCategory
from ai_tools.tools.registry import ToolRegistry
from tests.unit.execution_fakes import (
    EchoTool,
    FakeCacheStore,
    PendingTool,
    ScriptedTool,
    Switch,
    call,
    captured_events,
    make_context,
    run,
    start,
)


def tool(context: ExecutionContext, name: str) -> Any:
    return context.registry.get_tool(name)


class Gate:
    """A gate allowing a fixed set of categories."""

    def __init__(self, *categories: ToolCategory) -> None:
        self.categories = set(categories)

    def allows(self, name: str, category: ToolCategory) -> bool:
        return category in self.categories


# -- the happy path and the history formats ----------------------------------------


def test_sync_tool_native_history() -> None:
    """A native call runs once; the call and its answer are both in the history."""
    ctx = make_context()
    outcome = run(ctx, call("echo", "call_a", text="hi"))
    assert (outcome.kind, outcome.status, outcome.success) == \
        (OutcomeKind.HISTORY, CallStatus.SUCCESS, True)
    assert outcome.result == {"success": True, "echo": "hi", "actor": "char-1"}
    assert outcome.attempts == 1 and not outcome.from_cache and outcome.recorded
    assert outcome.tool_name == "echo" and outcome.tool_call_id == "call_a"
    assert ctx.history.messages == [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_a", "type": "function",
             "function": {"name": "echo", "arguments": '{"text":"hi"}'}}]},
        {"role": "tool", "tool_call_id": "call_a",
         "content": json.dumps(outcome.result, ensure_ascii=False)},
    ]
    assert list(outcome.history_entries) == ctx.history.messages
    assert tool(ctx, "echo").calls == [{"text": "hi"}]


def test_fallback_history_format() -> None:
    """Fallback mode: the JSON call as assistant content, the result as a user message."""
    ctx = make_context(native_tools=False)
    outcome = run(ctx, {"tool": "echo", "parameters": {"text": "hi"}, "reasoning": "greet"},
                  assistant_content="Let me answer.")
    assistant, result = ctx.history.messages
    assert assistant["role"] == "assistant"
    first, _, body = assistant["content"].partition("\n")
    assert first == "Let me answer."
    assert json.loads(body) == {"tool": "echo", "parameters": {"text": "hi"},
                                "reasoning": "greet"}
    assert result["role"] == "user"
    header, _, payload = result["content"].partition("\n")
    assert header == "[TOOL RESULT: echo]"
    assert json.loads(payload) == outcome.result
    assert ctx.history.unanswered_tool_calls() == []


def test_assistant_content_in_native_message() -> None:
    ctx = make_context()
    run(ctx, call("echo", text="x"), assistant_content="thinking aloud")
    assert ctx.history.messages[0]["content"] == "thinking aloud"


def test_deferred_tool() -> None:
    ctx = make_context()
    _d, results = start(ctx, call("pending"))
    assert results == []
    tool(ctx, "pending").deferreds[0].callback({"success": True, "n": 1})
    assert results[0].result == {"success": True, "n": 1}
    assert results[0].status == CallStatus.SUCCESS


def test_async_def_tool() -> None:
    ctx = make_context()
    _d, results = start(ctx, call("async_tool"))
    assert results == []
    tool(ctx, "async_tool").waiting.callback(7)
    assert results[0].result == {"success": True, "value": 7}


def test_missing_id_is_generated_and_unique() -> None:
    ctx = make_context()
    first = run(ctx, {"tool": "echo", "parameters": {"text": "a"}})
    second = run(ctx, {"tool": "echo", "parameters": {"text": "b"}})
    assert first.tool_call_id and second.tool_call_id
    assert first.tool_call_id != second.tool_call_id
    assert ctx.history.unanswered_tool_calls() == []


def test_reused_id_gets_a_fresh_one() -> None:
    """A model repeating an id must not give that id two answers."""
    ctx = make_context()
    run(ctx, call("echo", "call_0", text="a"))
    second = run(ctx, call("echo", "call_0", text="b"))
    assert second.tool_call_id != "call_0"
    ids = [m["tool_call_id"] for m in ctx.history.messages if m["role"] == "tool"]
    assert len(ids) == len(set(ids)) == 2


def test_top_level_parameters_are_moved_with_a_warning() -> None:
    ctx = make_context()
    with captured_events() as events:
        outcome = run(ctx, {"tool": "echo", "text": "hi", "reasoning": "r"})
    assert outcome.status == CallStatus.SUCCESS
    assert tool(ctx, "echo").calls == [{"text": "hi"}]
    warnings = [e for e in events if "top level" in e.get("log_format", "")]
    assert warnings and warnings[0]["keys"] == ["text"]


def test_decision_and_completion_logs() -> None:
    ctx = make_context()
    clock = ctx.clock
    with captured_events() as events:
        _d, results = start(ctx, {"id": "c9", "tool": "pending", "parameters": {},
                                 "reasoning": "wait for it"})
        clock.advance(1.5)
        tool(ctx, "pending").deferreds[0].callback({"success": True})
    decision = [e for e in events if e.get("log_format", "").startswith("Assistant decision")]
    assert decision[0]["tool"] == "pending" and decision[0]["reasoning"] == "wait for it"
    assert decision[0]["tool_call_id"] == "c9"
    done = [e for e in events
            if e.get("log_format") == "Function call completed: {name} ({ms}ms)"]
    assert len(done) == 1
    assert done[0]["name"] == "pending" and done[0]["ms"] == 1500
    # one info line per loop says what it did; the per-call lines are debug (issue 24)
    assert decision[0]["log_level"].name == done[0]["log_level"].name == "debug"
    assert results[0].duration_ms == pytest.approx(1500.0)


# -- refusals before dispatch ------------------------------------------------------


def test_unknown_tool_lists_valid_names() -> None:
    ctx = make_context()
    outcome = run(ctx, call("fly", text="up"))
    assert (outcome.kind, outcome.status, outcome.success) == \
        (OutcomeKind.HISTORY, CallStatus.UNKNOWN_TOOL, False)
    assert outcome.result["valid_tools"] == ctx.registry.list_tools()
    assert "fly" in outcome.result["error"] and "echo" in outcome.result["error"]
    assert outcome.attempts == 0 and outcome.ends_loop is None
    assert ctx.history.unanswered_tool_calls() == []
    assert ctx.state.errors == 1 and ctx.state.calls == 0


def test_gate_blocks_without_dispatching() -> None:
    ctx = make_context(gate=Gate(ToolCategory.SAFE_CHAIN))
    outcome = run(ctx, call("dig", text="hole"))
    assert outcome.status == CallStatus.BLOCKED_BY_TOOL_MODE
    assert outcome.result["status"] == CallStatus.BLOCKED_BY_TOOL_MODE
    assert outcome.result["success"] is False
    assert "dig" not in outcome.result["allowed_tools"]
    assert "echo" in outcome.result["allowed_tools"]
    assert tool(ctx, "dig").calls == []
    assert outcome.attempts == 0 and outcome.ends_loop is None
    assert ctx.history.messages[1]["role"] == "tool"


def test_gate_accepts_the_loops_gate_policy() -> None:
    from ai_tools.loop import GatePolicy

    ctx = make_context(gate=GatePolicy(allowed_names=frozenset({"echo"})))
    assert run(ctx, call("echo", "c1", text="x")).status == CallStatus.SUCCESS
    assert run(ctx, call("look", "c2", text="x")).status == CallStatus.BLOCKED_BY_TOOL_MODE


def test_gate_allows_matching_tool() -> None:
    ctx = make_context(gate=Gate(ToolCategory.DANGEROUS))
    assert run(ctx, call("dig", text="hole")).status == CallStatus.SUCCESS


def test_unknown_tool_lists_only_allowed_names_under_a_gate() -> None:
    ctx = make_context(gate=Gate(ToolCategory.TERMINAL))
    assert run(ctx, call("nope")).result["valid_tools"] == ["say"]


def test_invalid_parameters_are_model_visible_and_not_dispatched() -> None:
    ctx = make_context()
    outcome = run(ctx, call("echo", text=5))
    assert outcome.status == CallStatus.INVALID_PARAMETERS
    assert "Parameter validation failed for 'echo'" in outcome.result["error"]
    assert tool(ctx, "echo").calls == []


def test_validation_that_raises_is_an_invalid_parameters_answer() -> None:
    ctx = make_context()
    echo = tool(ctx, "echo")

    def broken(params: Any) -> Any:
        raise RuntimeError("validator bug")

    echo.validate_parameters = broken
    outcome = run(ctx, call("echo", text="x"))
    assert outcome.status == CallStatus.INVALID_PARAMETERS and echo.calls == []


def test_malformed_call_aborts_and_writes_nothing() -> None:
    ctx = make_context()
    outcome = run(ctx, {"type": "function", "function": {"arguments": "{}"}})
    assert (outcome.kind, outcome.status) == (OutcomeKind.ABORT, TerminationReason.PARSE_ERROR)
    assert "names no tool" in outcome.result["error"]
    assert outcome.call is None and outcome.tool_name is None
    assert len(ctx.history) == 0


@pytest.mark.parametrize("arguments", ["[1, 2]", "not json", "42", '"text"'])
def test_non_object_arguments_are_a_parse_error(arguments: str) -> None:
    ctx = make_context()
    outcome = run(ctx, {"id": "x", "type": "function",
                        "function": {"name": "echo", "arguments": arguments}})
    assert outcome.status == TerminationReason.PARSE_ERROR
    assert len(ctx.history) == 0


# -- results ---------------------------------------------------------------------


def test_tool_error_result_is_not_retried() -> None:
    ctx = make_context()
    scripted = tool(ctx, "scripted")
    scripted.script = [{"success": False, "error": "no such door"}]
    outcome = run(ctx, call("scripted"))
    assert outcome.status == CallStatus.TOOL_ERROR and outcome.attempts == 1
    assert outcome.result == {"success": False, "error": "no such door"}
    assert ctx.state.errors == 1 and ctx.state.retries == 0


def test_non_retryable_exception_is_tried_once() -> None:
    ctx = make_context()
    tool(ctx, "scripted").script = [PermissionDenied("you may not"), {"success": True}]
    outcome = run(ctx, call("scripted"))
    assert outcome.status == CallStatus.TOOL_ERROR and outcome.attempts == 1
    assert outcome.result == {"success": False, "error": "you may not"}


def test_unexpected_exception_names_its_type() -> None:
    ctx = make_context()
    tool(ctx, "scripted").script = [KeyError("slot")]
    with captured_events() as events:
        outcome = run(ctx, call("scripted"))
    assert outcome.result["error"] == "KeyError: 'slot'"
    assert any(e.get("log_failure") is not None for e in events)


@pytest.mark.parametrize("value", [None, "text", 3, ["a"], {"success": "yes"}])
def test_non_dict_result_is_invalid_result(value: Any) -> None:
    ctx = make_context()
    tool(ctx, "scripted").script = [value]
    outcome = run(ctx, call("scripted"))
    assert outcome.status == CallStatus.INVALID_RESULT and outcome.success is False
    assert outcome.result["success"] is False
    assert ctx.history.unanswered_tool_calls() == []


def test_non_serialisable_result_becomes_a_clear_error() -> None:
    ctx = make_context()
    tool(ctx, "scripted").script = [{"success": True, "items": {1, 2}}]
    outcome = run(ctx, call("scripted"))
    assert outcome.status == CallStatus.INVALID_RESULT and not outcome.success
    assert "not JSON-serialisable" in outcome.result["error"]
    assert json.loads(ctx.history.messages[1]["content"]) == outcome.result


def test_oversized_result_is_truncated_before_history() -> None:
    ctx = make_context(max_result_bytes=2048)
    tool(ctx, "scripted").script = [{"success": True, "blob": "x" * 50_000}]
    outcome = run(ctx, call("scripted"))
    content = ctx.history.messages[1]["content"]
    assert len(content.encode()) <= 2048
    assert json.loads(content) == outcome.result
    assert outcome.result["truncated"] is True and outcome.success
    assert "TRUNCATED" in outcome.result["note"]


def test_result_without_success_key_counts_as_success() -> None:
    ctx = make_context()
    tool(ctx, "scripted").script = [{"data": 1}]
    outcome = run(ctx, call("scripted"))
    assert outcome.status == CallStatus.SUCCESS and outcome.success


def test_restart_outcome_writes_nothing() -> None:
    ctx = make_context()
    tool(ctx, "scripted").script = [{"success": True, RESTART_KEY: True, "context": "more"}]
    outcome = run(ctx, call("scripted"))
    assert outcome.kind == OutcomeKind.RESTART and outcome.result["context"] == "more"
    assert len(ctx.history) == 0 and outcome.history_entries == ()


# -- timeouts and retries ----------------------------------------------------------


def test_hanging_tool_times_out_at_exactly_its_timeout_and_is_cancelled() -> None:
    ctx = make_context(retry_policy=RetryPolicy(max_attempts=1))
    clock: task.Clock = ctx.clock
    pending: PendingTool = tool(ctx, "pending")
    _d, results = start(ctx, call("pending"))
    clock.advance(29.999)
    assert results == [] and pending.cancelled == 0
    clock.advance(0.001)
    assert pending.cancelled == 1
    outcome = results[0]
    assert (outcome.kind, outcome.status) == (OutcomeKind.HISTORY, CallStatus.TIMED_OUT)
    assert outcome.result == {"success": False, "error": "timed out after 30s"}
    assert ctx.state.timeouts == 1
    assert clock.getDelayedCalls() == []


def test_retry_delays_follow_the_formula() -> None:
    """Attempts start at t=0 then after 1, 2, 4 s of backoff (jitter source 1.0 = full delay)."""
    ctx = make_context()
    clock: task.Clock = ctx.clock
    scripted: ScriptedTool = tool(ctx, "scripted")
    scripted.script = [ConnectionError("reset")] * 4
    _d, results = start(ctx, call("scripted"))
    clock.pump([0.5] * 30)
    assert scripted.attempt_times == [0.0, 1.0, 3.0, 7.0]
    outcome = results[0]
    assert outcome.attempts == 4 and outcome.status == CallStatus.TOOL_ERROR
    assert outcome.result["retries"] == 3 and outcome.result["attempts"] == 4
    assert "gave up after 4 attempts" in outcome.result["error"]
    assert ctx.state.retries == 3


def test_retry_delay_uses_injected_jitter() -> None:
    ctx = make_context(rand=lambda: 0.0)
    clock: task.Clock = ctx.clock
    scripted: ScriptedTool = tool(ctx, "scripted")
    scripted.script = [ConnectionError("reset")] * 3 + [{"success": True}]
    _d, results = start(ctx, call("scripted"))
    clock.pump([0.25] * 20)
    assert scripted.attempt_times == [0.0, 0.5, 1.5, 3.5]
    assert results[0].status == CallStatus.SUCCESS and results[0].attempts == 4


def test_retry_delay_is_capped() -> None:
    ctx = make_context(retry_policy=RetryPolicy(max_attempts=6))
    clock: task.Clock = ctx.clock
    scripted: ScriptedTool = tool(ctx, "scripted")
    scripted.script = [{"success": False, "error": "rate limit"}] * 6
    start(ctx, call("scripted"))
    clock.pump([1.0] * 40)
    gaps = [b - a for a, b in zip(scripted.attempt_times, scripted.attempt_times[1:],
                                  strict=False)]
    assert gaps == [1.0, 2.0, 4.0, 8.0, 10.0]


def test_retryable_returned_failure_then_success() -> None:
    ctx = make_context()
    clock: task.Clock = ctx.clock
    tool(ctx, "scripted").script = [{"success": False, "error": "Temporary glitch"},
                                    {"success": True, "ok": 1}]
    _d, results = start(ctx, call("scripted"))
    assert results == []
    clock.advance(1.0)
    outcome = results[0]
    assert outcome.status == CallStatus.SUCCESS and outcome.attempts == 2
    assert outcome.result == {"success": True, "ok": 1}


def test_timeouts_are_retried_then_reported_with_the_count() -> None:
    ctx = make_context()
    clock: task.Clock = ctx.clock
    pending: PendingTool = tool(ctx, "pending")
    _d, results = start(ctx, call("pending"))
    clock.pump([1.0] * 200)
    outcome = results[0]
    assert outcome.status == CallStatus.TIMED_OUT and outcome.attempts == 4
    assert outcome.result["error"] == "timed out after 30s (gave up after 4 attempts)"
    assert pending.cancelled == 4 and ctx.state.timeouts == 4
    assert outcome.duration_ms == pytest.approx((4 * 30 + 1 + 2 + 4) * 1000)
    assert clock.getDelayedCalls() == []


def test_every_attempt_gets_a_fresh_timeout() -> None:
    """An attempt that starts late still has its whole timeout."""
    ctx = make_context()
    clock: task.Clock = ctx.clock
    pending: PendingTool = tool(ctx, "pending")
    _d, results = start(ctx, call("pending"))
    clock.advance(30)  # first attempt times out; backoff 1 s
    clock.advance(1)   # second attempt starts at t=31
    clock.advance(29.5)
    assert len(pending.deferreds) == 2 and pending.cancelled == 1
    pending.deferreds[1].callback({"success": True})
    assert results[0].status == CallStatus.SUCCESS and results[0].attempts == 2


# -- kill and stop -----------------------------------------------------------------


def test_kill_mid_call_aborts_with_no_history() -> None:
    ctx = make_context()
    clock: task.Clock = ctx.clock
    pending: PendingTool = tool(ctx, "pending")
    d, results = start(ctx, call("pending"))
    clock.advance(5)
    d.cancel()
    outcome = results[0]
    assert (outcome.kind, outcome.status) == (OutcomeKind.ABORT, TerminationReason.STOPPED_BY_USER)
    assert pending.cancelled == 1
    assert len(ctx.history) == 0
    assert clock.getDelayedCalls() == []
    assert ctx.state.current_tool_call is not None
    assert ctx.state.current_tool_call["status"] == TerminationReason.STOPPED_BY_USER


def test_kill_reaches_an_async_tool_as_cancelled_error() -> None:
    ctx = make_context()
    d, results = start(ctx, call("async_tool"))
    d.cancel()
    assert tool(ctx, "async_tool").saw_cancel
    assert results[0].status == TerminationReason.STOPPED_BY_USER


def test_kill_during_backoff_leaves_no_delayed_calls() -> None:
    ctx = make_context()
    clock: task.Clock = ctx.clock
    scripted: ScriptedTool = tool(ctx, "scripted")
    scripted.script = [ConnectionError("reset")] * 4
    d, results = start(ctx, call("scripted"))
    assert len(clock.getDelayedCalls()) == 1  # the backoff
    d.cancel()
    assert clock.getDelayedCalls() == []
    assert results[0].status == TerminationReason.STOPPED_BY_USER
    clock.advance(100)
    assert len(scripted.attempt_times) == 1


def test_a_tool_ignoring_cancellation_cannot_answer_after_a_kill() -> None:
    ctx = make_context()
    late: defer.Deferred[Any] = defer.Deferred()  # no canceller: Twisted eats the late result
    tool(ctx, "pending").execute = lambda actor, **p: late
    d, results = start(ctx, call("pending"))
    d.cancel()
    late.callback({"success": True})  # suppressed: the Deferred was cancelled
    assert len(results) == 1 and results[0].status == TerminationReason.STOPPED_BY_USER
    assert len(ctx.history) == 0


def test_cancel_after_completion_changes_nothing() -> None:
    ctx = make_context()
    d, results = start(ctx, call("echo", text="x"))
    d.cancel()
    assert results[0].status == CallStatus.SUCCESS and len(ctx.history) == 2


def test_stop_requested_before_dispatch() -> None:
    switch = Switch()
    switch.on = True
    ctx = make_context(stop_requested=switch)
    outcome = run(ctx, call("echo", text="x"))
    assert (outcome.kind, outcome.status) == (OutcomeKind.ABORT, TerminationReason.STOPPED_BY_USER)
    assert tool(ctx, "echo").calls == [] and len(ctx.history) == 0


def test_stop_requested_while_the_tool_runs() -> None:
    switch = Switch()
    ctx = make_context(stop_requested=switch)
    _d, results = start(ctx, call("pending"))
    switch.on = True
    tool(ctx, "pending").deferreds[0].callback({"success": True})
    assert results[0].status == TerminationReason.STOPPED_BY_USER and len(ctx.history) == 0


def test_stop_requested_during_backoff_stops_before_the_next_attempt() -> None:
    switch = Switch()
    ctx = make_context(stop_requested=switch)
    scripted: ScriptedTool = tool(ctx, "scripted")
    scripted.script = [ConnectionError("reset")] * 4
    _d, results = start(ctx, call("scripted"))
    switch.on = True
    ctx.clock.advance(1)
    assert results[0].status == TerminationReason.STOPPED_BY_USER
    assert len(scripted.attempt_times) == 1


def test_kill_while_a_persistent_cache_read_is_pending() -> None:
    store = FakeCacheStore()
    store.hold = True
    clock = task.Clock()
    ctx = make_context(clock=clock, cache=ToolCache(clock, store=store))
    d, results = start(ctx, call("archive", text="x"))
    assert results == [] and store.pending
    d.cancel()
    assert results[0].status == TerminationReason.STOPPED_BY_USER
    assert tool(ctx, "archive").calls == []


# -- categories, counters, state ---------------------------------------------------


def test_ends_loop_by_category() -> None:
    ctx = make_context()
    assert run(ctx, call("say", "c1", text="hi")).ends_loop == "terminal_tool"
    assert run(ctx, call("dig", "c2", text="hole")).ends_loop == "dangerous_tool"
    assert run(ctx, call("dig", "c3", text="fail")).ends_loop == "dangerous_tool"
    assert run(ctx, call("echo", "c4", text="x")).ends_loop is None
    assert run(ctx, call("say", "c5")).ends_loop is None  # invalid: never dispatched


def test_failed_terminal_call_does_not_end_the_loop() -> None:
    ctx = make_context()
    say = tool(ctx, "say")
    say.execute = lambda actor, **p: {"success": False, "error": "nobody here"}
    assert run(ctx, call("say", text="hi")).ends_loop is None


def test_counters_and_current_tool_call() -> None:
    state = ExecutionState()
    ctx = make_context(state=state)
    run(ctx, call("echo", "c1", text="x"))
    run(ctx, call("dig", "c2", text="fail"))
    run(ctx, call("nope", "c3"))
    assert state.counters() == {"activity_since_wake": 1, "calls": 2, "retries": 0,
                                "cache_hits": 0, "timeouts": 0, "errors": 2}
    assert state.current_tool_call == {
        "id": "c2", "tool": "dig", "parameters": {"text": "fail"}, "status": CallStatus.TOOL_ERROR,
        "started_at": 0.0, "success": False, "duration_ms": 0.0,
    }


def test_current_tool_call_while_running() -> None:
    ctx = make_context()
    start(ctx, call("pending", "c7"))
    assert ctx.state.current_tool_call is not None
    assert ctx.state.current_tool_call["status"] == "running"
    assert ctx.state.current_tool_call["id"] == "c7"


def test_reflection_mode_writes_nothing_but_returns_the_entries() -> None:
    ctx = make_context(reflection_mode=True)
    outcome = run(ctx, call("echo", text="x"))
    assert outcome.status == CallStatus.SUCCESS and not outcome.recorded
    assert len(ctx.history) == 0
    assert [m["role"] for m in outcome.history_entries] == ["assistant", "tool"]


def test_outcome_as_dict_is_json() -> None:
    ctx = make_context()
    summary = run(ctx, call("echo", text="x")).as_dict()
    assert json.loads(json.dumps(summary))["tool"] == "echo"
    assert summary["success"] is True


def test_internal_error_is_an_abort_not_an_exception() -> None:
    class BrokenHistory(ConversationHistory):
        def add_tool_exchange(self, *a: Any, **kw: Any) -> Any:
            raise RuntimeError("disk full")

    ctx = make_context(history=BrokenHistory())
    outcome = run(ctx, call("echo", text="x"))
    assert (outcome.kind, outcome.status) == (OutcomeKind.ABORT, TerminationReason.INTERNAL_ERROR)


def test_context_rejects_a_tiny_result_limit() -> None:
    with pytest.raises(ValueError, match="max_result_bytes"):
        make_context(max_result_bytes=10)


def test_namespace_defaults_to_the_actor_owner() -> None:
    clock = task.Clock()
    ctx = ExecutionContext(ToolRegistry([EchoTool]), Actor("char-9"), ConversationHistory(),
                           clock)
    assert ctx.cache_namespace == "char-9"
    assert run(ctx, call("echo", text="x")).status == CallStatus.SUCCESS


# -- skipped calls -----------------------------------------------------------------


def test_skip_tool_call_answers_without_running() -> None:
    ctx = make_context()
    outcome = skip_tool_call(ctx, call("dig", "c5", text="x"), "the loop ended (terminal_tool)")
    assert outcome.status == CallStatus.SKIPPED and outcome.result["status"] == CallStatus.SKIPPED
    assert "terminal_tool" in outcome.result["error"]
    assert tool(ctx, "dig").calls == []
    assert ctx.history.unanswered_tool_calls() == []
    assert ctx.history.messages[1]["tool_call_id"] == "c5"


def test_skip_tool_call_with_garbage_writes_nothing() -> None:
    ctx = make_context()
    outcome = skip_tool_call(ctx, ["junk"], "whatever")
    assert outcome.status == TerminationReason.PARSE_ERROR and len(ctx.history) == 0


def test_every_written_id_has_exactly_one_answer_across_a_mixed_run() -> None:
    ctx = make_context()
    clock: task.Clock = ctx.clock
    run(ctx, call("echo", "a", text="x"))
    run(ctx, call("nope", "b"))
    d, _ = start(ctx, call("pending", "c"))
    d.cancel()
    run(ctx, call("echo", "d", text=1))
    start(ctx, call("pending", "e"))
    clock.pump([1.0] * 200)
    skip_tool_call(ctx, call("dig", "f", text="x"), "ended")
    run(ctx, "garbage")
    messages = ctx.history.messages
    asked = [c["id"] for m in messages for c in m.get("tool_calls") or ()]
    answered = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert sorted(asked) == sorted(answered) == ["a", "b", "d", "e", "f"]
    assert ctx.history.unanswered_tool_calls() == []


def test_outcome_is_frozen() -> None:
    outcome = ToolCallOutcome(kind=OutcomeKind.ABORT, status=TerminationReason.PARSE_ERROR,
                              result={})
    with pytest.raises(AttributeError):
        outcome.status = "x"  # type: ignore[misc]


def test_a_tool_that_kills_its_own_call_writes_nothing() -> None:
    """On a retry, a tool stops its own assistant (which cancels the call) while it runs."""
    ctx = make_context()
    outer: list[defer.Deferred[Any]] = []
    attempts: list[int] = []

    def stop_myself(actor: Actor, **params: Any) -> dict[str, Any]:
        attempts.append(1)
        if len(attempts) == 1:
            raise ConnectionError("reset")
        outer[0].cancel()
        return {"success": True}

    tool(ctx, "scripted").execute = stop_myself
    d, results = start(ctx, call("scripted"))
    outer.append(d)
    ctx.clock.advance(1)
    assert len(attempts) == 2
    assert len(results) == 1 and results[0].status == TerminationReason.STOPPED_BY_USER
    assert len(ctx.history) == 0
    assert ctx.state.current_tool_call is not None
    assert ctx.state.current_tool_call["status"] == TerminationReason.STOPPED_BY_USER


def test_a_cache_hit_is_not_activity() -> None:
    """Only a tool that ran and succeeded counts for the sleep safeguard: a cache hit
    runs nothing (the tool-execution spec answers it before the post-execution step)."""
    state = ExecutionState()
    ctx = make_context(state=state)
    assert not run(ctx, call("look", "c1", text="a")).from_cache
    assert run(ctx, call("look", "c2", text="a")).from_cache
    assert state.activity_since_wake == 1
    assert (state.calls, state.cache_hits) == (2, 1)


def test_every_tool_that_acts_as_a_character_needs_one() -> None:
    """requires_character is the engine's rule, for any tool: refused before dispatch,
    with an answer the model can read; a tool that does not require one runs."""
    from ai_tools.tools.base import Tool

    class Shout(Tool):
        name = "shout"
        description = "Shout."
        ran = 0

        def execute(self, actor: Actor, **params: Any) -> dict[str, Any]:
            Shout.ran += 1
            return {"success": True}

    class Think(Shout):
        name = "think"
        requires_character = False

    registry = ToolRegistry([Shout, Think])
    ctx = make_context(registry=registry, actor=Actor(character_id=None))
    refused = run(ctx, call("shout", "c1"))
    assert (refused.kind, refused.status, refused.attempts) == (
        OutcomeKind.HISTORY, CallStatus.NO_CHARACTER, 0)
    assert refused.result["success"] is False and "character" in refused.result["error"]
    assert not refused.dispatched and refused.ends_loop is None
    assert run(ctx, call("think", "c2")).status == CallStatus.SUCCESS
    assert Shout.ran == 1
    assert len(ctx.history) == 4  # both answered in the history
