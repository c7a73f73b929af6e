"""ToolRegistry: what it accepts, what it refuses (and says why), and its lookups."""

from __future__ import annotations

import math
import re
from typing import Any, ClassVar

import pytest

from ai_tools.errors import ToolRegistrationError
from ai_tools.tools import (
    TOOL_REGISTRY,
    Actor,
    Tool,
    ToolCategory,
    ToolRegistry,
    register_default_tools,
)
from ai_tools.tools.library import DEFAULT_TOOLS


class Look(Tool):
    """A minimal valid tool."""

    name = "look"
    description = "Look around."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"detail": {"type": "string", "enum": ["brief", "full"]}},
    }

    def execute(self, actor: Actor, **params: Any) -> dict[str, Any]:
        return {"success": True}


class Say(Look):
    name = "say"
    description = "Say something."
    category = ToolCategory.TERMINAL
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    }


class Dig(Look):
    name = "dig"
    description = "Dig a new room."
    category = ToolCategory.DANGEROUS


class Remember(Look):
    name = "remember"
    description = "Store a memory."
    category = ToolCategory.ASYNC_REQUIRED


def make_tool(**attributes: Any) -> type[Tool]:
    """A subclass of Look with some attributes replaced."""
    return type("Custom", (Look,), attributes)


def refusal(tool_class: Any, registry: ToolRegistry | None = None) -> str:
    """The message of the error registering ``tool_class`` raises."""
    registry = registry if registry is not None else ToolRegistry()
    before = registry.as_mapping()
    with pytest.raises(ToolRegistrationError) as caught:
        registry.register(tool_class)
    assert registry.as_mapping() == before
    return str(caught.value)


# ---------------------------------------------------------------- accepted


def test_register_returns_the_instance_and_lookups_find_it() -> None:
    """A registered tool is found by name, listed, counted and contained."""
    registry = ToolRegistry()
    tool = registry.register(Look)
    assert isinstance(tool, Look)
    assert registry.get_tool("look") is tool
    assert registry.get_tool("nope") is None
    assert "look" in registry and "nope" not in registry
    assert len(registry) == 1
    assert registry.list_tools() == ["look"]
    assert registry.as_mapping() == {"look": tool}


def test_registries_are_independent() -> None:
    """One registry per service or test: registering in one leaves the others alone."""
    first, second = ToolRegistry(), ToolRegistry([Look])
    first.register(Say)
    assert first.list_tools() == ["say"]
    assert second.list_tools() == ["look"]


def test_unregister() -> None:
    """A tool can be removed (and removing a missing one is harmless)."""
    registry = ToolRegistry([Look, Say])
    registry.unregister("look")
    registry.unregister("look")
    assert registry.list_tools() == ["say"]
    registry.register(Look)  # the name is free again
    assert registry.list_tools() == ["look", "say"]


@pytest.fixture
def registry() -> ToolRegistry:
    """A registry with one tool of each category."""
    return ToolRegistry([Say, Look, Dig, Remember])


def test_listing_is_sorted(registry: ToolRegistry) -> None:
    """Names and tools come sorted by name, whatever the registration order."""
    assert registry.list_tools() == ["dig", "look", "remember", "say"]
    assert [t.name for t in registry.get_all_tools()] == ["dig", "look", "remember", "say"]


def test_names_by_category(registry: ToolRegistry) -> None:
    """Each category lists its own tools."""
    assert registry.get_tool_names_by_category(ToolCategory.SAFE_CHAIN) == ["look"]
    assert registry.get_tool_names_by_category(ToolCategory.TERMINAL) == ["say"]
    assert registry.get_tool_names_by_category(ToolCategory.DANGEROUS) == ["dig"]
    assert registry.get_tool_names_by_category(ToolCategory.ASYNC_REQUIRED) == ["remember"]


def test_filter_tools(registry: ToolRegistry) -> None:
    """Every criterion given must match; none given means everything."""
    names = lambda tools: [t.name for t in tools]  # noqa: E731
    assert names(registry.filter_tools()) == ["dig", "look", "remember", "say"]
    assert names(registry.filter_tools(
        include_categories={ToolCategory.SAFE_CHAIN, ToolCategory.TERMINAL})) == ["look", "say"]
    assert names(registry.filter_tools(
        exclude_categories={ToolCategory.DANGEROUS})) == ["look", "remember", "say"]
    assert names(registry.filter_tools(tool_names={"say", "dig", "absent"})) == ["dig", "say"]
    assert names(registry.filter_tools(
        include_categories={ToolCategory.SAFE_CHAIN, ToolCategory.TERMINAL},
        exclude_categories={ToolCategory.TERMINAL},
        tool_names={"look", "say"},
    )) == ["look"]
    assert registry.filter_tools(include_categories=[]) == []
    assert registry.filter_tools(tool_names=[]) == []


def test_tool_schemas_are_openai_function_schemas(registry: ToolRegistry) -> None:
    """Schemas have the shape of the ``tools=`` field of chat completions."""
    schemas = registry.get_tool_schemas()
    assert [s["function"]["name"] for s in schemas] == ["dig", "look", "remember", "say"]
    say = schemas[-1]
    assert say == {
        "type": "function",
        "function": {"name": "say", "description": "Say something.",
                     "parameters": Say.parameters},
    }
    terminal = registry.get_tool_schemas(categories=[ToolCategory.TERMINAL])
    assert [s["function"]["name"] for s in terminal] == ["say"]
    picked = registry.get_tool_schemas(tool_names=["look"])
    assert [s["function"]["name"] for s in picked] == ["look"]


def test_changing_a_returned_schema_does_not_change_the_tool(registry: ToolRegistry) -> None:
    """Callers get copies: editing one never corrupts the tool's own schema."""
    schema = registry.get_tool_schemas(tool_names=["say"])[0]
    schema["function"]["parameters"]["properties"]["text"]["type"] = "integer"
    assert Say.parameters["properties"]["text"]["type"] == "string"


def test_the_validator_is_compiled_at_registration() -> None:
    """The schema is compiled once when registered, not on the first call."""
    tool = ToolRegistry().register(Say)
    assert tool._parameter_validator is not None
    validator = tool.parameter_validator
    tool.validate_parameters({"text": "hi"})
    tool.validate_parameters({"text": 5})
    assert tool.parameter_validator is validator


# ---------------------------------------------------------------- refused


@pytest.mark.parametrize("name", ["", None, 5, "has space", "dots.in.it", "é", "x" * 65])
def test_bad_names_are_refused(name: Any) -> None:
    """Names must be non-empty strings model APIs accept as function names."""
    message = refusal(make_tool(name=name))
    assert "'name'" in message


def test_longest_allowed_name() -> None:
    """64 characters of letters, digits, '_' and '-' are fine."""
    ToolRegistry().register(make_tool(name="a-b_C9" + "x" * 58))


def test_duplicate_names_are_refused() -> None:
    """A second tool with a taken name is refused, naming the tool that has it."""
    registry = ToolRegistry([Look])
    message = refusal(Look, registry)
    assert "a tool named 'look' is already registered (test_registry.Look)" in message.replace(
        "tests.unit.", "")
    other = make_tool(description="Another look.")
    assert "already registered" in refusal(other, registry)
    assert len(registry) == 1


@pytest.mark.parametrize("description", ["", "   ", None, 3])
def test_missing_description_is_refused(description: Any) -> None:
    """The model reads the description: it must say something."""
    assert "'description' must be a non-empty string" in refusal(
        make_tool(description=description))


@pytest.mark.parametrize(
    ("parameters", "fragment"),
    [
        (None, "'parameters' must be a JSON Schema dict, not NoneType"),
        ([], "'parameters' must be a JSON Schema dict, not list"),
        ({"type": "object", "properties": {"a": {"enum": {1, 2}}}},
         "'parameters' must be JSON-serialisable"),
        ({"type": "object", "properties": {"a": {"type": "strng"}}},
         "'parameters' is not a valid JSON Schema: parameters.properties.a.type:"),
        ({"type": "object", "properties": {"a": {"type": "string", "pattern": "(["}}},
         "parameters.properties.a.pattern"),
        ({"type": "object", "properties": {"a": {"minimum": "1"}}},
         "parameters.properties.a.minimum"),
        ({"type": "object", "required": "a"}, "parameters.required"),
        ({"type": "array", "items": {}}, "must be an object schema"),
        ({"properties": {"a": {}}}, "must be an object schema"),
        ({"type": "object", "properties": {"a": {}}, "required": ["a", "b"]},
         "required parameter(s) 'b' not declared in 'properties'"),
    ],
)
def test_bad_parameter_schemas_are_refused(parameters: Any, fragment: str) -> None:
    """``parameters`` must be a valid object JSON Schema, checked against the metaschema."""
    assert fragment in refusal(make_tool(parameters=parameters))


def test_required_names_may_be_undeclared_in_an_open_schema() -> None:
    """With ``additionalProperties`` allowed, a required name need not be a property."""
    ToolRegistry().register(make_tool(parameters={
        "type": "object", "required": ["x"], "additionalProperties": True}))


@pytest.mark.parametrize("category", ["safe_chain", None, 1])
def test_bad_category_is_refused(category: Any) -> None:
    """The category must be a ToolCategory member, not its value."""
    assert "'category' must be a ToolCategory" in refusal(make_tool(category=category))


@pytest.mark.parametrize("scope", ["forever", "", None, "TICK"])
def test_bad_cache_scope_is_refused(scope: Any) -> None:
    """Only tick, session and persistent exist."""
    message = refusal(make_tool(cache_scope=scope))
    assert "'cache_scope' must be one of persistent, session, tick" in message


@pytest.mark.parametrize("timeout", [0, -1, True, math.nan, math.inf, "30", None])
def test_bad_timeout_is_refused(timeout: Any) -> None:
    """A timeout is a positive, finite number of seconds."""
    assert "'timeout' must be a positive number of seconds" in refusal(make_tool(timeout=timeout))


@pytest.mark.parametrize("ttl", [0, -5, "60", True])
def test_bad_cache_ttl_is_refused(ttl: Any) -> None:
    """A TTL is None or a positive number of seconds."""
    assert "'cache_ttl' must be None or a positive number" in refusal(make_tool(cache_ttl=ttl))


@pytest.mark.parametrize("flag", ["cacheable", "requires_character"])
def test_flags_must_be_booleans(flag: str) -> None:
    """``cacheable="yes"`` is a mistake, not a truthy value."""
    assert f"'{flag}' must be True or False" in refusal(make_tool(**{flag: "yes"}))


def test_good_optional_attributes_are_accepted() -> None:
    """The documented optional attributes in their valid forms register fine."""
    ToolRegistry().register(make_tool(cacheable=True, cache_scope="persistent", cache_ttl=60,
                                      timeout=0.5, requires_character=False))


def test_execute_must_be_overridden() -> None:
    """A tool that does nothing is refused at registration, not at the first call."""

    class Lazy(Tool):
        name = "lazy"
        description = "Does nothing."

    assert "it must override execute(actor, **params)" in refusal(Lazy)


@pytest.mark.parametrize("thing", [Look(), len, 5, "look", None])
def test_non_classes_are_refused(thing: Any) -> None:
    """Only classes can be registered; an instance gets a hint."""
    message = refusal(thing)
    assert "expected a Tool subclass" in message
    if isinstance(thing, Tool):
        assert "pass the class (Look), not an instance" in message


@pytest.mark.parametrize("thing", [object, dict, Tool])
def test_classes_that_are_not_tools_are_refused(thing: Any) -> None:
    """A class must subclass Tool (and not be Tool itself)."""
    assert "is not a subclass of ai_tools.tools.Tool" in refusal(thing)


def test_every_problem_is_named_at_once() -> None:
    """One refusal lists all problems of the class, so they can be fixed together."""
    message = refusal(make_tool(description="", timeout=-1, cache_scope="x"))
    assert message.startswith("Cannot register tool 'look' (")
    for fragment in ("'description'", "'timeout'", "'cache_scope'"):
        assert fragment in message


def test_a_constructor_that_fails_is_refused() -> None:
    """An exception while creating the tool becomes a registration error."""

    def broken_init(self: Tool) -> None:
        raise ValueError("no config")

    message = refusal(make_tool(__init__=broken_init))
    assert re.search(r"creating it failed: ValueError: no config", message)


# ---------------------------------------------------------------- the default registry


def test_default_tools_register_cleanly_and_only_once() -> None:
    """Every default tool passes registration; calling it twice changes nothing."""
    registry = register_default_tools(ToolRegistry())
    assert len(registry) == len(DEFAULT_TOOLS)
    assert sorted(registry.list_tools()) == sorted(t.name for t in DEFAULT_TOOLS)
    assert register_default_tools(registry) is registry
    assert len(registry) == len(DEFAULT_TOOLS)


def test_the_module_registry_is_a_registry() -> None:
    """``TOOL_REGISTRY`` is the default registry register_default_tools fills."""
    assert isinstance(TOOL_REGISTRY, ToolRegistry)
    assert register_default_tools() is TOOL_REGISTRY
    assert set(TOOL_REGISTRY.list_tools()) >= {t.name for t in DEFAULT_TOOLS}
