"""The engine's shortcuts for the usual call give what the general steps give."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet import task
from twisted.internet.defer import Deferred

from ai_tools.execution.engine import (
    ExecutionContext,
    _plain_validation,
    prepare_tool_call,
    run_tool_call,
)
from ai_tools.execution.history import ConversationHistory
from ai_tools.execution.results import MIN_MAX_RESULT_BYTES, plain_content, shape_result
from ai_tools.tools.base import Actor, Tool
from ai_tools.tools.registry import ToolRegistry
from ai_tools.tools.validation import ValidationResult

# -- result shaping ------------------------------------------------------------------

_leaves = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(),
                    st.text(max_size=40), st.just("\ud800 lone"), st.just("é☃" * 300),
                    st.just("x" * 2000), st.sets(st.integers(), max_size=2))
_values = st.recursive(_leaves, lambda inner: st.lists(inner, max_size=3)
                       | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=8)


@given(st.dictionaries(st.text(max_size=5), _values, max_size=4),
       st.sampled_from([MIN_MAX_RESULT_BYTES, 1024, 16 * 1024]))
def test_plain_content_is_what_shaping_gives(result: dict[str, Any], max_bytes: int) -> None:
    """When plain_content gives a text, shape_result gives the same text and the result
    itself, untouched; when it gives None, shape_result had something to do."""
    content = plain_content(result, max_bytes)
    shaped = shape_result(result, "t", max_bytes)
    if content is None:
        assert shaped.not_serialisable or shaped.truncated or _lone_surrogates(result)
    else:
        assert shaped.content == content
        assert shaped.result is result
        assert not shaped.truncated and not shaped.not_serialisable


def _lone_surrogates(result: dict[str, Any]) -> bool:
    """(shape_result escapes them, so its text is not the plain encoding)"""
    try:
        json.dumps(result, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def test_plain_content_refuses_what_needs_shaping() -> None:
    assert plain_content({"a": {1, 2}}) is None
    assert plain_content({"a": math.nan}) is None
    assert plain_content({"a": "\ud800"}) is None
    assert plain_content({"a": "x" * 600}, MIN_MAX_RESULT_BYTES) is None
    assert plain_content({"a": "é"}) == '{"a": "é"}'


# -- parameter validation ------------------------------------------------------------


class Echo(Tool):
    """Validates as Tool does."""

    name = "echo"
    description = "Echo."
    parameters = {"type": "object",
                  "properties": {"text": {"type": "string", "maxLength": 5},
                                 "count": {"type": "integer", "minimum": 0},
                                 "tags": {"type": "array", "items": {"type": "string"}},
                                 "ratio": {"type": "number"}},
                  "required": ["text"]}

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[dict[str, Any]] = []

    def execute(self, actor: Actor, **params: Any) -> dict[str, Any]:
        self.calls.append(params)
        return {"success": True, "params": params}


class GeneralEcho(Echo):
    """The same validation through an override: the engine takes the general path."""

    def validate_parameters(self, params: Any) -> ValidationResult:
        return super().validate_parameters(params)


def _run(tool_class: type[Echo], arguments: dict[str, Any]) -> tuple[Any, Echo]:
    registry = ToolRegistry([tool_class])
    ctx = ExecutionContext(registry=registry, actor=Actor("char-1"),
                           history=ConversationHistory(), clock=task.Clock())
    outcome = run_tool_call(ctx, prepare_tool_call("c1", "echo", dict(arguments)))
    tool = registry.get_tool("echo")
    assert isinstance(tool, Echo)
    current = ctx.state.current_tool_call
    if current is not None:  # the parameters it ran with are its own, not the call's
        assert current["parameters"] is not outcome.call.arguments
    return outcome, tool


_json = st.one_of(st.none(), st.booleans(), st.integers(-3, 3),
                  st.floats(allow_nan=False, allow_infinity=False),
                  st.text(max_size=7), st.lists(st.text(max_size=3) | st.integers(), max_size=2))


@settings(max_examples=200)
@given(st.dictionaries(st.sampled_from(["text", "count", "tags", "ratio", "other"]), _json,
                       max_size=5))
def test_valid_as_is_gives_what_validation_gives(arguments: dict[str, Any]) -> None:
    """Outcome, history and the parameters the tool ran with are those of the general path."""
    fast, fast_tool = _run(Echo, arguments)
    general, general_tool = _run(GeneralEcho, arguments)
    assert _plain_validation(fast_tool) and not _plain_validation(general_tool)
    assert (fast.status, fast.result, fast.history_entries) == \
        (general.status, general.result, general.history_entries)
    assert fast_tool.calls == general_tool.calls


def test_any_own_validation_takes_the_general_path() -> None:
    class Custom(Echo):
        def custom_validation(self, params: dict[str, Any], result: ValidationResult) -> None:
            result.add_error("text", "no")

    assert _plain_validation(Echo())
    assert not _plain_validation(Custom())
    patched = Echo()
    patched.validate_parameters = lambda params: ValidationResult(valid=False)  # type: ignore
    assert not _plain_validation(patched)
    outcome, _ = _run(Custom, {"text": "hi"})
    assert outcome.status == "invalid_parameters"


def test_the_native_exchange_carries_the_calls_own_entry() -> None:
    """The assistant message's tool_calls entry is what ToolCall.native() gives."""
    from ai_tools.execution.history import ToolCall, build_tool_exchange

    call = ToolCall(id="c9", name="look", arguments={"at": "é"}, reasoning="why")
    assistant, answer = build_tool_exchange(call, "{}", native=True, assistant_content="hm")
    assert assistant == {"role": "assistant", "content": "hm", "tool_calls": [call.native()]}
    assert answer == {"role": "tool", "tool_call_id": "c9", "content": "{}"}


# -- ids and results ---------------------------------------------------------------


@given(st.one_of(st.text(max_size=5), st.just("x" * 256), st.just(" " + "x" * 256),
                 st.just("x" * 257), st.integers(), st.none(), st.floats(allow_nan=False)))
def test_a_prepared_calls_id_is_the_one_call_id_gives(raw: Any) -> None:
    from ai_tools.execution.engine import _ID_PREFIX, _call_id

    prepared = prepare_tool_call(raw, "look", {}).id
    expected = _call_id(raw)
    if expected.startswith(_ID_PREFIX) and not (isinstance(raw, str) and raw.strip() == expected):
        assert prepared.startswith(_ID_PREFIX)  # a fresh one each time
    else:
        assert prepared == expected


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
    outcome = run_tool_call(ctx, prepare_tool_call("c1", "returns", {}))
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
    d = execute_tool_call(ctx, prepare_tool_call("c1", "returns", {}),
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
    dict returned through a Deferred (status, result, entries, attempts, errors)."""
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
    """The engine's shortcut for a synchronous result keeps reflection mode's rule."""
    registry = ToolRegistry([Returns])
    tool = registry.get_tool("returns")
    assert isinstance(tool, Returns)
    tool.value = {"success": True}
    ctx = ExecutionContext(registry=registry, actor=Actor("char-1"),
                           history=ConversationHistory(), clock=task.Clock(),
                           reflection_mode=True)
    outcome = run_tool_call(ctx, prepare_tool_call("c1", "returns", {}))
    assert not isinstance(outcome, Deferred)
    assert outcome.status == "success" and not outcome.recorded
    assert len(outcome.history_entries) == 2 and ctx.history.messages == []
