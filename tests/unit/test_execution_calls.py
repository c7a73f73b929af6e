"""A call the model layer parsed already is checked as its native dict would be, and
run_tool_call answers at once (no Deferred) when a call ends at once."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from twisted.internet import defer

from ai_tools.execution.calls import ToolCallParseError, parse_tool_call
from ai_tools.execution.engine import run_tool_call
from ai_tools.execution.outcome import CallStatus, OutcomeKind, ToolCallOutcome
from ai_tools.execution.reasons import TerminationReason
from ai_tools.llm.events import ToolCall
from tests.unit.execution_fakes import PendingTool, call, make_context, run

_names = st.one_of(st.sampled_from(["look", " look ", "", "   ", "a\x00b", "x" * 201]),
                   st.text(max_size=8), st.integers(), st.none())
_ids = st.one_of(st.sampled_from(["call_1", " c ", "", "x" * 300]), st.integers(0, 5),
                 st.none(), st.floats(allow_nan=False))
_arguments = st.one_of(
    st.dictionaries(st.text(max_size=3), st.one_of(st.integers(), st.text(max_size=3),
                                                   st.none()), max_size=3),
    st.just({"x": float("nan")}), st.just({1: "non-string key"}), st.just({"s": {1, 2}}),
)
_reasoning = st.one_of(st.just(""), st.text(max_size=5), st.none())


def _fields(call: ToolCall) -> tuple[Any, ...]:
    return (call.name, dict(call.arguments), call.arguments_json, call.reasoning or "")


@given(call_id=_ids, name=_names, arguments=_arguments, reasoning=_reasoning)
def test_a_parsed_call_is_checked_as_its_native_shape(call_id: Any, name: Any,
                                                      arguments: dict[Any, Any],
                                                      reasoning: Any) -> None:
    """The engine's one check of a call, whether the model layer parsed it already or
    the engine parses its native dict: the same call, or the same error."""
    raw = {"id": call_id, "type": "function",
           "function": {"name": name, "arguments": dict(arguments)}, "reasoning": reasoning}
    model_call = ToolCall(id=call_id, name=name, arguments=dict(arguments),
                          reasoning=reasoning)
    try:
        parsed = parse_tool_call(raw)
    except ToolCallParseError as e:
        with pytest.raises(ToolCallParseError) as checked_error:
            parse_tool_call(model_call)
        assert str(checked_error.value) == str(e)
        return
    checked = parse_tool_call(model_call)
    assert _fields(checked) == _fields(parsed)
    generated = call_id is None or (parsed.id.startswith("call_")
                                    and parsed.id != str(call_id).strip())
    if generated:  # none given, or an unusable one: a fresh id each time
        assert checked.id != parsed.id
    else:
        assert checked.id == parsed.id


def test_the_engine_takes_the_model_layers_call() -> None:
    context = make_context()
    model_call = ToolCall(id="call_9", name="look", arguments={"text": "room"})
    outcome = run(context, model_call)
    assert (outcome.kind, outcome.status) == (OutcomeKind.HISTORY, CallStatus.SUCCESS)
    assert outcome.call is model_call  # checked, nothing to correct: the same object
    assert context.history.has_tool_call_id("call_9")


def test_run_tool_call_answers_at_once_without_a_deferred() -> None:
    context = make_context()
    outcome = run_tool_call(context, call("look", text="room"))
    assert isinstance(outcome, ToolCallOutcome)
    assert outcome.status == CallStatus.SUCCESS
    same = run(make_context(), call("look", text="room"))
    assert (outcome.kind, outcome.status, outcome.result) == (same.kind, same.status,
                                                              same.result)


def test_run_tool_call_gives_a_cancellable_deferred_for_a_waiting_tool() -> None:
    context = make_context()
    pending = context.registry.get_tool("pending")
    assert isinstance(pending, PendingTool)
    answer = run_tool_call(context, call("pending"))
    assert isinstance(answer, defer.Deferred)
    results: list[Any] = []
    answer.addBoth(results.append)
    answer.cancel()  # a kill: the tool's Deferred is cancelled, nothing is written
    assert pending.cancelled == 1
    assert [r.status for r in results] == [TerminationReason.STOPPED_BY_USER]
    assert len(context.history) == 0
