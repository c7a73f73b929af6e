"""prepare_tool_call (a call the loop parsed already) and run_tool_call (no Deferred
for a call that ends at once) behave like parse_tool_call and execute_tool_call."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from twisted.internet import defer

from ai_tools.execution.engine import (
    HISTORY,
    STOPPED_BY_USER,
    SUCCESS,
    ToolCallOutcome,
    ToolCallParseError,
    parse_tool_call,
    prepare_tool_call,
    run_tool_call,
)
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
_reasoning = st.one_of(st.just(""), st.text(max_size=5), st.none(), st.integers(),
                       st.just(["a", 1]))


@given(call_id=_ids, name=_names, arguments=_arguments, reasoning=_reasoning)
def test_prepare_is_parse_of_the_native_shape(call_id: Any, name: Any,
                                              arguments: dict[Any, Any],
                                              reasoning: Any) -> None:
    raw = {"id": call_id, "type": "function",
           "function": {"name": name, "arguments": dict(arguments)}, "reasoning": reasoning}
    try:
        parsed = parse_tool_call(raw)
    except ToolCallParseError as e:
        with pytest.raises(ToolCallParseError) as prepared_error:
            prepare_tool_call(call_id, name, dict(arguments), reasoning)
        assert str(prepared_error.value) == str(e)
        return
    prepared = prepare_tool_call(call_id, name, dict(arguments), reasoning)
    generated = call_id is None or (parsed.id.startswith("call_")
                                    and parsed.id != str(call_id).strip())
    if generated:  # none given, or an unusable one: a fresh id each time
        assert prepared.id != parsed.id
        prepared = type(prepared)(id=parsed.id, name=prepared.name,
                                  arguments=prepared.arguments,
                                  reasoning=prepared.reasoning,
                                  arguments_json=prepared.arguments_json)
    assert prepared == parsed


def test_the_engine_takes_a_prepared_call() -> None:
    context = make_context()
    prepared = prepare_tool_call("call_9", "look", {"text": "room"})
    outcome = run(context, prepared)
    assert (outcome.kind, outcome.status) == (HISTORY, SUCCESS)
    assert outcome.call == prepared
    assert context.history.has_tool_call_id("call_9")


def test_run_tool_call_answers_at_once_without_a_deferred() -> None:
    context = make_context()
    outcome = run_tool_call(context, call("look", text="room"))
    assert isinstance(outcome, ToolCallOutcome)
    assert outcome.status == SUCCESS
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
    assert [r.status for r in results] == [STOPPED_BY_USER]
    assert len(context.history) == 0
