"""Property tests: whatever a model sends, execute_tool_call ends in a defined outcome."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st
from twisted.internet import task

from ai_tools.execution.engine import execute_tool_call
from ai_tools.execution.history import ConversationHistory
from ai_tools.execution.outcome import CallStatus, OutcomeKind, ToolCallOutcome
from ai_tools.execution.reasons import TerminationReason
from ai_tools.tools.registry import ToolRegistry
from tests.unit.execution_fakes import ALL_TOOLS, make_context

REGISTRY = ToolRegistry(ALL_TOOLS)


def huge_text() -> str:
    """200 kB of text (a model gone wild)."""
    return "x" * 200_000


scalars = (
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40)
    | st.builds(huge_text)
    | st.sampled_from(["{", "[]", "null", '{"a": 1}', "\x00", "\ud800", "say\nme"])
)
junk = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(max_size=10) | st.integers(), children, max_size=4)
        | st.builds(tuple, st.lists(children, max_size=3))
        | st.just({1, 2})
    ),
    max_leaves=12,
)
good_names = st.sampled_from(REGISTRY.list_tools())
names = st.integers(0, 9).flatmap(  # mostly real tools, so calls get past parsing
    lambda n: good_names if n < 7 else st.text(max_size=12) | junk
)
params = st.fixed_dictionaries({}, optional={
    "text": st.text(max_size=20) | junk,
    "tags": st.lists(st.text(max_size=5), max_size=3) | junk,
    "count": st.integers() | junk,
    "other": junk,
})
arguments = st.one_of(
    params, params, params.map(lambda p: json.dumps(p, default=repr)),
    st.dictionaries(st.text(max_size=8), junk, max_size=3), junk,
)
native = st.fixed_dictionaries(
    {"id": st.text(max_size=12) | junk, "type": st.just("function"),
     "function": st.fixed_dictionaries({"name": names, "arguments": arguments})},
    optional={"reasoning": junk},
)
fallback = st.fixed_dictionaries({"tool": names, "parameters": arguments},
                                 optional={"reasoning": junk, "id": junk})
top_level = st.fixed_dictionaries({"tool": names}, optional={
    "text": st.text(max_size=20) | junk, "count": junk, "reasoning": junk, "id": junk,
})
loose = st.fixed_dictionaries({}, optional={
    "id": junk, "type": junk, "function": st.fixed_dictionaries(
        {}, optional={"name": names, "arguments": arguments}) | junk,
    "tool": names, "name": names, "parameters": arguments, "arguments": arguments,
    "reasoning": junk, "text": junk,
})
tool_calls = st.one_of(
    native, native, fallback, top_level, loose, junk,
    native.map(lambda c: json.dumps(c, default=repr)), fallback.map(str),
)


def drive(tool_call: Any, **context: Any) -> tuple[ToolCallOutcome, Any]:
    clock = task.Clock()
    ctx = make_context(clock=clock, registry=REGISTRY, history=ConversationHistory(),
                       **context)
    results: list[Any] = []
    execute_tool_call(ctx, tool_call).addBoth(results.append)
    for _ in range(20):  # pending tools time out (30 s) and retry with backoff
        if results:
            break
        clock.advance(30)
    pending = REGISTRY.get_tool("async_tool")
    if not results and pending is not None and pending.waiting is not None:
        pending.waiting.callback("late")
    assert len(results) == 1, "the call never completed"
    assert clock.getDelayedCalls() == []
    return results[0], ctx


def check(outcome: Any, ctx: Any) -> None:
    assert isinstance(outcome, ToolCallOutcome), outcome
    assert outcome.status != TerminationReason.INTERNAL_ERROR, outcome.result
    event(f"{outcome.kind}/{outcome.status}")
    if outcome.kind == OutcomeKind.HISTORY:
        assert outcome.status in set(CallStatus) - {CallStatus.CONTEXT_RESTART}
        assert len(outcome.history_entries) == 2
    elif outcome.kind == OutcomeKind.ABORT:
        assert outcome.status in {TerminationReason.PARSE_ERROR,
                                  TerminationReason.STOPPED_BY_USER}
        assert outcome.history_entries == ()
    else:
        assert outcome.kind == OutcomeKind.RESTART
    assert isinstance(outcome.result, dict)
    json.dumps(outcome.as_dict())
    assert ctx.history.unanswered_tool_calls() == []
    for message in ctx.history.messages:
        json.dumps(message)
        if message["role"] == "tool":
            assert len(message["content"].encode()) <= ctx.max_result_bytes


@given(tool_calls)
def test_arbitrary_native_payloads_end_in_a_defined_outcome(tool_call: Any) -> None:
    check(*drive(tool_call))


@given(tool_calls)
def test_arbitrary_fallback_payloads_end_in_a_defined_outcome(tool_call: Any) -> None:
    check(*drive(tool_call, native_tools=False))


@settings(max_examples=50)
@given(st.lists(tool_calls, min_size=2, max_size=6))
def test_sequences_keep_one_answer_per_call(calls: list[Any]) -> None:
    clock = task.Clock()
    ctx = make_context(clock=clock, registry=REGISTRY, history=ConversationHistory())
    for tool_call in calls:
        results: list[Any] = []
        d = execute_tool_call(ctx, tool_call)
        d.addBoth(results.append)
        if not results:
            d.cancel()  # kill whatever would wait: nothing may be written for it
        check(results[0], ctx)
    assert clock.getDelayedCalls() == []
    ids = [m["tool_call_id"] for m in ctx.history.messages if m["role"] == "tool"]
    assert len(ids) == len(set(ids))
