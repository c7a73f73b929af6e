"""``ai_tools.tool``: the schema a typed function is offered with, and the errors it refuses with.

(No ``from __future__ import annotations`` here: the tools below use local
names in their hints, as a user's module would use its own.)
"""

import dataclasses
import enum
import json
from typing import Annotated, Any, Literal, Optional, TypedDict

import attrs
import msgspec
import pytest

from ai_tools import tool
from ai_tools.errors import ToolRegistrationError
from ai_tools.tools import Actor, ToolCategory, ToolRegistry
from ai_tools.tools.callable_tool import CallableTool, callable_tool


class Mood(enum.Enum):
    """How an NPC feels."""

    CALM = "calm"
    ANGRY = "angry"


@dataclasses.dataclass
class Point:
    x: Annotated[int, "West to east."]
    y: int = dataclasses.field(default=0, metadata={"description": "South to north."})


@attrs.define
class Box:
    width: float = attrs.field(metadata={"description": "In metres."})
    label: str = "crate"


class Label(TypedDict):
    text: str
    size: int


def params_of(tool_class: type[CallableTool]) -> dict[str, Any]:
    return tool_class.parameters


def prop(annotation: Any, default: Any = ...) -> dict[str, Any]:
    """The schema of one parameter typed ``annotation`` (with ``default`` if given)."""
    if default is ...:
        def f(value):  # type: ignore[no-untyped-def]
            """Test."""
    else:
        def f(value=default):  # type: ignore[no-untyped-def]
            """Test."""
    f.__annotations__ = {"value": annotation}
    return params_of(tool(f))["properties"]["value"]


# -- each supported type ------------------------------------------------------------


@pytest.mark.parametrize(("annotation", "expected"), [
    (str, {"type": "string"}),
    (int, {"type": "integer"}),
    (float, {"type": "number"}),
    (bool, {"type": "boolean"}),
    (Literal["north", "south"], {"type": "string", "enum": ["north", "south"]}),
    (Literal[4, 6, 20], {"type": "integer", "enum": [4, 6, 20]}),
    (Mood, {"type": "string", "enum": ["angry", "calm"], "description": "How an NPC feels."}),
    (Optional[int], {"anyOf": [{"type": "integer"}, {"type": "null"}]}),  # noqa: UP045
    (int | None, {"anyOf": [{"type": "integer"}, {"type": "null"}]}),
    (list[str], {"type": "array", "items": {"type": "string"}}),
    (list, {"type": "array"}),
    (tuple[int, str], {"type": "array", "minItems": 2, "maxItems": 2,
                       "prefixItems": [{"type": "integer"}, {"type": "string"}],
                       "items": False}),
    (tuple[int, ...], {"type": "array", "items": {"type": "integer"}}),
    (dict[str, int], {"type": "object", "additionalProperties": {"type": "integer"}}),
    (Label, {"type": "object", "properties": {"text": {"type": "string"},
                                              "size": {"type": "integer"}},
             "required": ["size", "text"]}),
    (Point, {"type": "object", "properties": {
        "x": {"description": "West to east.", "type": "integer"},
        "y": {"description": "South to north.", "type": "integer", "default": 0}},
        "required": ["x"]}),
    (Box, {"type": "object", "properties": {
        "width": {"description": "In metres.", "type": "number"},
        "label": {"type": "string", "default": "crate"}},
        "required": ["width"]}),
    (list[Point], {"type": "array", "items": {"type": "object", "properties": {
        "x": {"description": "West to east.", "type": "integer"},
        "y": {"description": "South to north.", "type": "integer", "default": 0}},
        "required": ["x"]}}),
    (Annotated[int, "How many dice."], {"description": "How many dice.", "type": "integer"}),
    (Annotated[int, msgspec.Meta(ge=1, le=10)], {"type": "integer", "minimum": 1,
                                                  "maximum": 10}),
])
def test_each_supported_type(annotation: Any, expected: dict[str, Any]) -> None:
    """Each supported type hint gives its JSON Schema, definitions written in place."""
    assert prop(annotation) == expected


def test_required_follow_the_defaults() -> None:
    """A parameter without a default is required; a default is recorded, not required."""

    @tool
    def move(direction: Literal["north", "south"], steps: int = 1,
             note: str | None = None) -> None:
        """Walk."""

    schema = params_of(move)
    assert schema["required"] == ["direction"]
    assert schema["properties"]["steps"]["default"] == 1
    assert schema["properties"]["note"]["default"] is None
    assert schema["additionalProperties"] is False


def test_schema_is_offered_to_the_model_without_bounds() -> None:
    """The model is shown types, enums, required and descriptions; the bounds stay with the
    validator (as for every tool: ai_tools/tools/model_view.py)."""

    @tool
    def roll_dice(count: Annotated[int, msgspec.Meta(ge=1, le=10), "How many dice."],
                  sides: Literal[4, 6, 20] = 6) -> int:
        """Roll dice and report the total.

        Args:
            sides: Sides of each die.
        """
        return count * sides

    assert ToolRegistry([roll_dice]).get_tool_schemas() == [{
        "type": "function",
        "function": {
            "name": "roll_dice",
            "description": "Roll dice and report the total.",
            "parameters": {
                "type": "object",
                "properties": {
                    "count": {"description": "How many dice.", "type": "integer"},
                    "sides": {"description": "Sides of each die.", "type": "integer",
                              "enum": [4, 6, 20]},
                },
                "required": ["count"],
            },
        },
    }]


# -- docstrings ---------------------------------------------------------------------

def google(count: int, sides: int) -> None:
    """Roll dice and
    report the total.

    Longer text the model does not read.

    Args:
        count: How many
            dice.
        sides (int): Sides of each die.
    """


def numpy(count: int, sides: int) -> None:
    """Roll dice and report the total.

    Parameters
    ----------
    count : int
        How many dice.
    sides
        Sides of each die.
    """


def rest(count: int, sides: int) -> None:
    """Roll dice and report the total.

    :param count: How many dice.
    :param int sides: Sides of each die.
    """


@pytest.mark.parametrize("function", [google, numpy, rest], ids=["google", "numpy", "rest"])
def test_docstring_styles(function: Any) -> None:
    """Google, NumPy and reST docstrings: the summary and each parameter's description."""
    made = tool(function)
    assert made.description == "Roll dice and report the total."
    properties = params_of(made)["properties"]
    assert properties["count"]["description"] == "How many dice."
    assert properties["sides"]["description"] == "Sides of each die."


def test_annotated_text_wins_over_the_docstring_and_description_over_the_summary() -> None:
    """``Annotated[..., "text"]`` beats the docstring; ``description=`` beats the summary."""

    def look(target: Annotated[str, "What to look at."]) -> str:
        """Look.

        Args:
            target: Ignored here.
        """
        return target

    made = tool(look, description="Look closely at one thing.", name="peer")
    assert (made.name, made.description) == ("peer", "Look closely at one thing.")
    assert params_of(made)["properties"]["target"]["description"] == "What to look at."


# -- the injected actor -------------------------------------------------------------


def test_actor_parameter_is_injected_and_hidden() -> None:
    """A parameter typed Actor is not in the schema; it receives the call's actor."""

    @tool
    def whoami(actor: Actor, shout: bool = False) -> str:
        """Say who acts."""
        name = actor.character_id or "nobody"
        return name.upper() if shout else name

    assert params_of(whoami) == {"type": "object",
                                 "properties": {"shout": {"type": "boolean", "default": False}},
                                 "additionalProperties": False}
    instance = whoami()
    assert instance.execute(Actor("char:ada"), shout=True) == {"success": True,
                                                               "result": "CHAR:ADA"}
    assert whoami.requires_character is True  # it acts as someone


def test_optional_actor_and_requires_character_default() -> None:
    """``Actor | None`` is injected too; a function without an actor needs no character."""

    @tool
    def where(place: str, actor: Actor | None = None) -> str:
        """Where."""
        return place

    @tool
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    assert list(params_of(where)["properties"]) == ["place"]
    assert where.requires_character is True
    assert add.requires_character is False
    assert tool(add.function, name="add2", requires_character=True).requires_character


# -- the decorator's arguments ------------------------------------------------------


def test_decorator_arguments_become_tool_attributes() -> None:
    """category, timeout, retries, cache, cache_ttl, permission: the Tool attributes."""

    @tool(category=ToolCategory.DANGEROUS, timeout=5, retries=2, cache="session",
          cache_ttl=60, permission="Builder")
    def dig(direction: str) -> None:
        """Dig an exit."""

    assert (dig.category, dig.timeout, dig.max_attempts, dig.cacheable, dig.cache_scope,
            dig.cache_ttl, dig.permission) == (ToolCategory.DANGEROUS, 5, 3, True, "session",
                                               60, "Builder")
    assert issubclass(dig, CallableTool) and dig.function.__name__ == "dig"
    assert dig.__doc__ == "Dig an exit."
    assert not tool(lambda_free_tool).cacheable


def lambda_free_tool(x: int) -> int:
    """A plain module-level function, made a tool by the plain call form."""
    return x


def test_the_function_form_registers_an_existing_callable() -> None:
    """``tool(existing)`` is the same as decorating it; the function is unchanged."""
    made = tool(lambda_free_tool, timeout=3)
    registry = ToolRegistry([made])
    assert registry.get_tool("lambda_free_tool") is not None
    assert lambda_free_tool(4) == 4 and made.function is lambda_free_tool


def test_schema_is_built_once_at_decoration() -> None:
    """Every instance shares the one compiled validator; registering compiles nothing."""

    @tool
    def ping(text: str) -> str:
        """Ping."""
        return text

    first, second = ToolRegistry([ping]), ToolRegistry([ping])
    assert first.get_tool("ping").parameter_validator is \
        second.get_tool("ping").parameter_validator  # type: ignore[union-attr]


# -- errors at decoration time: they name the function and the parameter ------------


def no_hint(count, sides: int) -> None:  # type: ignore[no-untyped-def]
    """Roll."""


def star_args(*dice: int) -> None:
    """Roll."""


def star_kwargs(**dice: int) -> None:
    """Roll."""


def positional(count: int, /) -> None:
    """Roll."""


def unsupported(value: complex) -> None:
    """Roll."""


def two_actors(a: Actor, b: Actor) -> None:
    """Roll."""


def undocumented(count: int) -> None:
    pass


def wrong_doc(count: int) -> None:
    """Roll.

    Args:
        cuont: How many.
    """


def unresolved(count: "Undefined") -> None:  # type: ignore[name-defined] # noqa: F821
    """Roll."""


@dataclasses.dataclass
class Node:
    name: str
    children: "list[Node]"


def recursive(tree: Node) -> None:
    """Walk."""


HERE = __name__


@pytest.mark.parametrize(("function", "message"), [
    (no_hint, f"Cannot make a tool of {HERE}.no_hint: parameter 'count' has no type hint "
              "(its schema is built from it)"),
    (star_args, f"Cannot make a tool of {HERE}.star_args: parameter *dice: a tool's "
                "parameters are named one by one (the model sends an object of them), "
                "not *args or **kwargs"),
    (star_kwargs, f"Cannot make a tool of {HERE}.star_kwargs: parameter **dice: a tool's "
                  "parameters are named one by one (the model sends an object of them), "
                  "not *args or **kwargs"),
    (positional, f"Cannot make a tool of {HERE}.positional: parameter 'count' is "
                 "positional-only; the model passes parameters by name"),
    (unsupported, f"Cannot make a tool of {HERE}.unsupported: parameter 'value': its type "
                  "complex cannot be described by a JSON Schema (type <class 'complex'> is "
                  "not supported)"),
    (two_actors, f"Cannot make a tool of {HERE}.two_actors: parameter 'b': only one "
                 "parameter may be the Actor ('a' is already)"),
    (undocumented, f"Cannot make a tool of {HERE}.undocumented: it has no description; "
                   "write a docstring (its summary is what the model reads) or pass "
                   "description="),
    (wrong_doc, f"Cannot make a tool of {HERE}.wrong_doc: its docstring describes 'cuont', "
                "which is not a parameter"),
    (unresolved, f"Cannot make a tool of {HERE}.unresolved: its type hints cannot be "
                 "resolved: NameError: name 'Undefined' is not defined"),
    (recursive, f"Cannot make a tool of {HERE}.recursive: parameter 'tree': type Node "
                "contains itself; a tool's parameters must have a finite schema"),
])
def test_decoration_errors(function: Any, message: str) -> None:
    """Each function a schema cannot describe is refused at once, naming what is wrong."""
    with pytest.raises(ToolRegistrationError) as caught:
        tool(function)
    assert str(caught.value) == message


def test_settings_are_checked_at_decoration() -> None:
    """A bad name, timeout, cache scope or retries fails where the tool is written."""

    def roll(count: int) -> int:
        """Roll."""
        return count

    with pytest.raises(ToolRegistrationError) as caught:
        tool(roll, name="roll dice", timeout=-1, cache="forever", retries=-1)
    assert str(caught.value) == (
        f"Cannot register tool 'roll dice' ({HERE}.test_settings_are_checked_at_decoration."
        "<locals>.roll): 'name' 'roll dice' must be 1-64 letters, digits, '_' or '-' (the "
        "function-name rule of model APIs); 'cache_scope' must be one of persistent, session, "
        "tick, not 'forever'; 'timeout' must be a positive number of seconds, not -1; "
        "'max_attempts' must be None or an integer >= 1, not 0")
    with pytest.raises(ToolRegistrationError, match=r"Cannot register tool '<lambda>'"):
        tool(lambda: None, description="Nothing.")
    with pytest.raises(ToolRegistrationError, match="it is not callable"):
        tool(42)  # type: ignore[call-overload]


def test_callable_tool_is_the_generic_entry() -> None:
    """A callable and a hand-made schema become a checked registry entry."""
    seen: list[Any] = []

    def call(actor: Actor, params: dict[str, Any]) -> dict[str, Any]:
        seen.append((actor.character_id, params))
        return {"success": True}

    remote = callable_tool(call, name="remote_echo", description="Echo remotely.",
                           parameters={"type": "object",
                                       "properties": {"text": {"type": "string"}}})
    instance = ToolRegistry([remote]).get_tool("remote_echo")
    assert instance is not None
    assert instance.execute(Actor("c"), text="hi") == {"success": True}
    assert seen == [("c", {"text": "hi"})]
    with pytest.raises(ToolRegistrationError, match="not a valid JSON Schema"):
        callable_tool(call, name="bad", description="Bad.",
                      parameters={"type": "object", "properties": {"x": {"type": "strng"}}})


def test_schema_is_json() -> None:
    """The schema of a rich signature is plain JSON (it is sent to the model)."""

    @tool
    def rich(mood: Mood, where: Point, box: Box | None = None,
             labels: list[Label] | None = None) -> None:
        """Rich."""

    assert json.loads(json.dumps(params_of(rich))) == params_of(rich)


def test_ai_tools_exports_every_public_name() -> None:
    """``ai_tools.__all__`` (written out for readers and pydoctor) is the lazy table's names."""
    import ai_tools

    assert sorted(ai_tools.__all__) == sorted(["__version__", *ai_tools._PUBLIC])
    assert ai_tools.tool is tool


def test_example_is_checked_at_decoration() -> None:
    """``example=`` (shown in the tool docs) must be a valid call of the tool."""

    def move(steps: Annotated[int, msgspec.Meta(ge=1)]) -> int:
        """Move."""
        return steps

    assert tool(move, example={"steps": 2}).example == {"steps": 2}
    assert tool(move, name="move2").example == {}
    with pytest.raises(ToolRegistrationError) as caught:
        tool(move, name="move3", example={"steps": 0})
    assert str(caught.value) == (
        f"Cannot make a tool of {HERE}.test_example_is_checked_at_decoration.<locals>.move: "
        "its example is not a valid call: Parameter validation failed for 'move3':   "
        "- steps: Must be at least 1 (expected: minimum: 1) (got: 0)")
