"""ai_tools.tools.model_view: the model sees the shape of a schema, the validator the bounds."""

from __future__ import annotations

import copy
from typing import Any

import jsonschema
import pytest

from ai_tools.tools import ToolRegistry, register_default_tools
from ai_tools.tools.model_view import LEFT_OUT, model_view

TOOLS = register_default_tools(ToolRegistry()).get_all_tools()

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "text": {"type": "string", "minLength": 1, "maxLength": 2000, "pattern": "\\S",
                 "description": "What to say."},
        "count": {"type": "integer", "minimum": 1, "maximum": 10, "default": 3},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 40},
                 "maxItems": 10, "uniqueItems": True},
        "kind": {"type": "string", "enum": ["a", "b"], "default": "a"},
        # properties named like keywords are parameters, not keywords: they stay
        "pattern": {"type": "string", "maxLength": 5},
        "default": {"type": "boolean"},
        "attrs": {"type": "object", "propertyNames": {"pattern": "^[a-z]+$"},
                  "maxProperties": 20, "additionalProperties": {"type": "integer"}},
    },
    "required": ["text"],
    "additionalProperties": False,
}


def test_the_bounds_are_left_out_and_the_shape_kept() -> None:
    """Types, enums, required, descriptions and nested schemas stay; bounds and defaults go."""
    assert model_view(SCHEMA) == {
        "type": "object",
        "properties": {
            "text": {"type": "string", "description": "What to say."},
            "count": {"type": "integer"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "kind": {"type": "string", "enum": ["a", "b"]},
            "pattern": {"type": "string"},
            "default": {"type": "boolean"},
            "attrs": {"type": "object", "additionalProperties": {"type": "integer"}},
        },
        "required": ["text"],
    }


def test_an_empty_required_list_is_left_out() -> None:
    assert model_view({"type": "object", "properties": {}, "required": []}) == {
        "type": "object", "properties": {}}


def test_the_view_is_a_copy() -> None:
    """Changing the view never changes the schema it was made from."""
    original = copy.deepcopy(SCHEMA)
    view = model_view(SCHEMA)
    view["required"].append("count")
    view["properties"]["kind"]["enum"].append("c")
    view["properties"]["tags"]["items"]["type"] = "integer"
    assert original == SCHEMA


def test_left_out_holds_only_keywords_that_do_not_change_the_shape() -> None:
    """Nothing that says which parameters exist, their types or their choices is left out."""
    assert not LEFT_OUT & {"type", "properties", "items", "required", "enum", "const",
                           "anyOf", "oneOf", "allOf", "description"}


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
def test_every_call_the_tool_accepts_passes_what_the_model_is_shown(tool: Any) -> None:
    """The view is a valid schema that accepts the tool's example: it only drops bounds."""
    shown = tool.schema()["function"]["parameters"]
    jsonschema.Draft202012Validator.check_schema(shown)
    jsonschema.validate(dict(tool.example), shown)


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
def test_validation_still_applies_the_bounds(tool: Any) -> None:
    """An argument past a bound the model is not shown is still refused, naming the rule."""
    for name, prop in tool.parameters["properties"].items():
        if "maxLength" in prop:
            params = {**tool.example, name: "x" * (prop["maxLength"] + 1)}
            result = tool.validate_parameters(params)
            assert not result.valid
            assert str(prop["maxLength"]) in result.format_for_llm(tool.name)
            return
    pytest.skip(f"{tool.name} has no string parameter with a maximum length")
