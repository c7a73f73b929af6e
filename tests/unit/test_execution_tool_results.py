"""What a tool returns, at once or later, and what the model reads of it."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from twisted.internet import task
from twisted.internet.defer import Deferred

from ai_tools.execution.engine import PARAMETER_WARNINGS_KEY, ExecutionContext, run_tool_call
from ai_tools.execution.history import ConversationHistory
from ai_tools.llm.events import ToolCall
from ai_tools.tools.base import Actor, Tool
from ai_tools.tools.registry import ToolRegistry


def _call(name: str = "returns", **arguments: Any) -> ToolCall:
    return ToolCall(id="c1", name=name, arguments=arguments)


class Returns(Tool):
    """Returns what the test puts in ``value``."""

    name = "returns"
    description = "Returns a value."
    parameters = {"type": "object", "properties": {}}
    value: Any = None

    def execute(self, actor: Actor, **params: Any) -> Any:
        return self.value


class _Text(str):
    pass


@given(st.dictionaries(st.sampled_from(["success", "error", "x"]),
                       st.one_of(st.none(), st.booleans(), st.integers(0, 1),
                                 st.text(max_size=3), st.builds(_Text, st.text(max_size=3))),
                       max_size=3))
def test_a_result_is_taken_as_validate_tool_result_takes_it(value: dict[str, Any]) -> None:
    """Kept as it is exactly when validate_tool_result keeps it; else an invalid_result."""
    from ai_tools.tools.validation import validate_tool_result

    registry = ToolRegistry([Returns])
    tool = registry.get_tool("returns")
    assert isinstance(tool, Returns)
    tool.value = value
    ctx = ExecutionContext(registry=registry, actor=Actor("char-1"),
                           history=ConversationHistory(), clock=task.Clock())
    outcome = run_tool_call(ctx, _call())
    assert not isinstance(outcome, Deferred)
    if validate_tool_result(value, "returns") is value:
        assert outcome.status != "invalid_result" and outcome.result == value
    else:
        assert outcome.status == "invalid_result"


# -- a synchronous tool's result --------------------------------------------------


class Later(Returns):
    """Returns the same value through a Deferred: the engine's general path."""

    name = "returns"

    def execute(self, actor: Actor, **params: Any) -> Any:
        from twisted.internet.defer import succeed

        return succeed(self.value)


def _run_returning(tool_class: type[Returns], value: Any) -> tuple[Any, ExecutionContext]:
    from ai_tools.execution.engine import execute_tool_call

    registry = ToolRegistry([tool_class])
    tool = registry.get_tool("returns")
    assert isinstance(tool, Returns)
    tool.value = value
    ctx = ExecutionContext(registry=registry, actor=Actor("char-1"),
                           history=ConversationHistory(), clock=task.Clock(),
                           rand=lambda: 0.0)
    d = execute_tool_call(ctx, _call(),
                          assistant_content="hm")
    clock = ctx.clock
    for _ in range(10):  # (retries back off on the clock)
        clock.advance(3600)
    return d.result, ctx


@given(st.dictionaries(st.sampled_from(["success", "error", "x", "retryable"]),
                       st.one_of(st.none(), st.booleans(), st.integers(0, 1),
                                 st.text(max_size=3), st.just("timeout")),
                       max_size=4))
def test_a_synchronous_result_is_taken_as_a_later_one(value: dict[str, Any]) -> None:
    """A dict returned at once gives the outcome, history and counters of the same
    dict returned through a Deferred (status, result, entries, attempts, errors): a
    tool may do either, and only the one without a Deferred ends without one."""
    fast, fast_ctx = _run_returning(Returns, dict(value))
    general, general_ctx = _run_returning(Later, dict(value))
    assert (fast.kind, fast.status, fast.result, fast.history_entries, fast.attempts,
            fast.recorded, fast.from_cache, fast.category) == \
        (general.kind, general.status, general.result, general.history_entries,
         general.attempts, general.recorded, general.from_cache, general.category)
    assert fast_ctx.state.counters() == general_ctx.state.counters()
    # (both end in the same completion step: its figures checked on their own too)
    assert fast_ctx.state.errors == (fast.result.get("success") is False)
    assert [m["role"] for m in fast_ctx.history.messages] == ["assistant", "tool"]
    assert fast_ctx.history.messages[0]["content"] == "hm"
    assert fast_ctx.history.messages == general_ctx.history.messages
    assert fast_ctx.state.current_tool_call == general_ctx.state.current_tool_call


def test_a_reflection_call_is_not_recorded_in_the_history() -> None:
    """In reflection mode the outcome carries the exchange; the history gets nothing."""
    registry = ToolRegistry([Returns])
    tool = registry.get_tool("returns")
    assert isinstance(tool, Returns)
    tool.value = {"success": True}
    ctx = ExecutionContext(registry=registry, actor=Actor("char-1"),
                           history=ConversationHistory(), clock=task.Clock(),
                           reflection_mode=True)
    outcome = run_tool_call(ctx, _call())
    assert not isinstance(outcome, Deferred)
    assert outcome.status == "success" and not outcome.recorded
    assert len(outcome.history_entries) == 2 and ctx.history.messages == []


class Echo(Tool):
    """Echoes its one declared parameter."""

    name = "echo"
    description = "Echo."
    parameters = {"type": "object", "properties": {"text": {"type": "string"}}}

    def execute(self, actor: Actor, **params: Any) -> dict[str, Any]:
        return {"success": True, "params": params}


def test_dropped_parameters_are_told_to_the_model() -> None:
    """A parameter the schema does not declare is dropped with a warning, and the model
    reads the warning with the result (it is not kept in the cache's copy)."""
    ctx = ExecutionContext(registry=ToolRegistry([Echo]), actor=Actor("char-1"),
                           history=ConversationHistory(), clock=task.Clock())
    outcome = run_tool_call(ctx, _call("echo", text="hi", txet="typo"))
    assert not isinstance(outcome, Deferred)
    assert outcome.status == "success"
    assert outcome.result["params"] == {"text": "hi"}
    assert outcome.result[PARAMETER_WARNINGS_KEY] == [
        "txet: Unknown parameter, ignored (did you mean 'text'?)"]
    assert PARAMETER_WARNINGS_KEY in ctx.history.messages[-1]["content"]
    clean = run_tool_call(ctx, ToolCall(id="c2", name="echo", arguments={"text": "hi"}))
    assert not isinstance(clean, Deferred)
    assert PARAMETER_WARNINGS_KEY not in clean.result
