"""The Tool base class, ToolCategory and Actor (ai_tools.tools.base)."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from twisted.internet import defer, task
from twisted.logger import capturedLogs

from ai_tools.tools import Actor, Tool, ToolCategory, ToolRegistry, ValidationResult, base


class Move(Tool):
    """A tool with a custom check JSON Schema cannot express."""

    name = "move"
    description = "Move to a room."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"room": {"type": "string"}, "steps": {"type": "integer", "minimum": 1}},
        "required": ["room"],
    }
    calls: ClassVar[list[dict[str, Any]]] = []

    def custom_validation(self, params: dict[str, Any], result: ValidationResult) -> None:
        type(self).calls.append(dict(params))
        if params["room"].strip().lower() == "void":
            result.add_error("room", "Nobody can go to the void", "a room that exists",
                             params["room"])
        params["room"] = params["room"].strip()

    def execute(self, actor: Actor, **params: Any) -> dict[str, Any]:
        return {"success": True, "moved_to": params["room"]}


@pytest.fixture
def move() -> Move:
    """A fresh Move tool with an empty call log."""
    Move.calls = []
    return Move()


def test_categories() -> None:
    """The four categories of the spec, with their string values."""
    assert {c.name: c.value for c in ToolCategory} == {
        "SAFE_CHAIN": "safe_chain",
        "TERMINAL": "terminal",
        "DANGEROUS": "dangerous",
        "ASYNC_REQUIRED": "async_required",
    }
    assert ToolCategory("terminal") is ToolCategory.TERMINAL


def test_defaults() -> None:
    """The documented defaults of the optional attributes."""
    assert Tool.timeout == 30
    assert Tool.category is ToolCategory.SAFE_CHAIN
    assert Tool.cacheable is False
    assert Tool.cache_scope == "tick"
    assert Tool.cache_ttl is None
    assert Tool.requires_character is True
    assert Tool.parameters == {"type": "object", "properties": {}}


def test_execute_must_be_implemented() -> None:
    """The base execute refuses to run."""
    with pytest.raises(NotImplementedError, match="does not implement execute"):
        Tool().execute(Actor("#1"))


def test_validate_parameters_cleans_and_coerces(move: Move) -> None:
    """The tool's validation gives cleaned, coerced parameters."""
    result = move.validate_parameters({"room": " hall ", "steps": "2", "speed": 3})
    assert result.valid
    assert result.cleaned_params == {"room": "hall", "steps": 2}
    assert [w["param"] for w in result.warnings] == ["speed"]


def test_custom_validation_can_refuse(move: Move) -> None:
    """Errors the hook adds make the call invalid and reach the model's text."""
    result = move.validate_parameters({"room": "Void"})
    assert not result.valid
    assert result.errors == [{"param": "room", "message": "Nobody can go to the void",
                              "constraint": "a room that exists", "got": "Void",
                              "stage": "custom"}]
    assert "  - room: Nobody can go to the void (expected: a room that exists) (got: \"Void\")" \
        in result.format_for_llm("move")


def test_custom_validation_runs_only_on_schema_valid_parameters(move: Move) -> None:
    """The hook never sees parameters that failed the schema (it may rely on their types)."""
    assert not move.validate_parameters({"room": 5}).valid
    assert not move.validate_parameters({}).valid
    assert Move.calls == []
    move.validate_parameters({"room": "hall"})
    assert Move.calls == [{"room": "hall"}]


def test_a_crashing_custom_validation_becomes_an_error() -> None:
    """A bug in the hook fails the call with a clear error; validation does not raise."""

    class Fragile(Move):
        def custom_validation(self, params: dict[str, Any], result: ValidationResult) -> None:
            raise KeyError("rooms")

    with capturedLogs() as events:
        result = Fragile().validate_parameters({"room": "hall"})
    assert not result.valid
    assert result.errors[0]["stage"] == "custom"
    assert result.errors[0]["message"] == (
        "The tool's own parameter check failed (KeyError: 'rooms')")
    assert any(e.get("log_failure") is not None for e in events)


def test_the_schema_is_compiled_once_per_tool(monkeypatch: pytest.MonkeyPatch) -> None:
    """Many calls, one compilation."""
    compiled = []
    real = base.compile_validator

    def counting(schema: Any) -> Any:
        compiled.append(schema)
        return real(schema)

    monkeypatch.setattr(base, "compile_validator", counting)
    tool = ToolRegistry().register(Move)
    for params in ({"room": "a"}, {"room": 1}, {}, None, "junk"):
        tool.validate_parameters(params)
    assert compiled == [Move.parameters]


def test_a_subclass_init_without_super_still_validates() -> None:
    """The validator is built lazily, so forgetting ``super().__init__()`` is harmless."""

    class Configured(Move):
        def __init__(self) -> None:
            self.setting = 1

    assert Configured().validate_parameters({"room": "a"}).valid


def test_schema_is_an_openai_function_schema(move: Move) -> None:
    """``schema()`` is what a chat-completions ``tools`` entry looks like, as a copy;
    its parameters are the model's view of the schema (the bounds left to the validator)."""
    schema = move.schema()
    assert schema == {"type": "function", "function": {
        "name": "move", "description": "Move to a room.", "parameters": {
            "type": "object",
            "properties": {"room": {"type": "string"}, "steps": {"type": "integer"}},
            "required": ["room"]}}}
    assert schema["function"]["parameters"]["required"] is not Move.parameters["required"]
    assert not move.validate_parameters({"room": "hall", "steps": 0}).valid  # still bounded


def test_repr(move: Move) -> None:
    """The repr names the class, the tool and its category."""
    assert repr(move) == "<Move 'move' safe_chain>"


class _Assistant:
    name = "helper"


@pytest.mark.parametrize(
    ("actor", "owner"),
    [
        (Actor("#5", assistant=_Assistant()), "helper"),  # type: ignore[arg-type]
        (Actor("#5"), "#5"),
        (Actor(None), "anonymous"),
    ],
)
def test_actor_owner(actor: Actor, owner: str) -> None:
    """Records are namespaced by assistant, else by character."""
    assert actor.owner == owner


def test_execute_may_return_a_deferred_or_be_a_coroutine() -> None:
    """Both shapes of asynchronous tool work with maybeDeferred (and fromCoroutine)."""
    clock = task.Clock()

    class Later(Move):
        def execute(self, actor: Actor, **params: Any) -> Any:
            return task.deferLater(clock, 1.0, lambda: {"success": True, "later": True})

    class Awaiting(Move):
        async def execute(self, actor: Actor, **params: Any) -> Any:
            await task.deferLater(clock, 1.0, lambda: None)
            return {"success": True, "awaited": True}

    results: list[Any] = []
    defer.maybeDeferred(Later().execute, Actor("#1")).addCallback(results.append)
    coroutine = Awaiting().execute(Actor("#1"))
    defer.Deferred.fromCoroutine(coroutine).addCallback(results.append)
    assert results == []
    clock.advance(1.0)
    assert results == [{"success": True, "later": True}, {"success": True, "awaited": True}]
