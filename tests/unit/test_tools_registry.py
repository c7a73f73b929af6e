"""Every default tool: a valid schema, a real description, the category of spec 002 §6."""

from __future__ import annotations

import json

import jsonschema
import pytest

from ai_tools.tools import ToolRegistry, register_default_tools
from ai_tools.tools.base import ToolCategory
from ai_tools.tools.library import DEFAULT_TOOLS, DOMAINS
from ai_tools.tools.library_tool import LibraryTool

S, T, D, A = (
    ToolCategory.SAFE_CHAIN,
    ToolCategory.TERMINAL,
    ToolCategory.DANGEROUS,
    ToolCategory.ASYNC_REQUIRED,
)

SPEC_CATEGORIES = {
    # spec 002 §6, "Category Distribution"
    **dict.fromkeys(
        [
            "inspect_location", "recall_memories", "search_object", "get_attributes",
            "list_attributes", "get_tags", "search_by_tag", "review_journal", "search_journal",
            "recall_entity_profile", "recall_conversation_context", "list_projects",
            "get_system_status", "doc_lookup",
        ],
        S,
    ),
    **dict.fromkeys(["say", "pose", "emit", "page", "whisper", "channel_send"], T),
    **dict.fromkeys(
        [
            "execute_command", "set_attribute", "add_tag", "remove_tag", "execute_batchcode",
            "spawn_prototype", "update_system_prompt",
        ],
        D,
    ),
    **dict.fromkeys(["store_memory", "delegate_task", "go_to_sleep"], A),
    # the spec leaves these open; the choices are explained in docs/tools.md
    "search_episodic": S,
    "session_memory": S,
    "get_delegation_status": S,
    "noop": S,
    "relationships": A,
    "add_goal": A,
    "update_goal": A,
    "decompose_goal": A,
    "add_journal_entry": A,
    "wait": T,
}

SPEC_DOMAINS = {
    "attributes": {"get_attributes", "set_attribute", "list_attributes"},
    "building": {"execute_batchcode", "spawn_prototype"},
    "channel": {"channel_send"},
    "command": {"execute_command"},
    "communication": {"say", "pose", "emit", "page", "whisper"},
    "context": {"session_memory", "list_projects", "get_system_status"},
    "delegation": {"delegate_task", "get_delegation_status"},
    "documentation": {"doc_lookup"},
    "entity": {"recall_entity_profile", "relationships", "recall_conversation_context"},
    "goals": {"add_goal", "update_goal", "decompose_goal"},
    "journal": {"add_journal_entry", "review_journal", "search_journal"},
    "location": {"inspect_location"},
    "memory": {"recall_memories", "store_memory", "search_episodic"},
    "search": {"search_object"},
    "sleep": {"go_to_sleep", "wait"},
    "tags": {"get_tags", "add_tag", "remove_tag", "search_by_tag"},
    "control": {"update_system_prompt", "noop"},
}

READ_ONLY_CACHED = {
    "inspect_location": "tick",
    "search_object": "tick",
    "get_attributes": "tick",
    "list_attributes": "tick",
    "get_tags": "tick",
    "search_by_tag": "tick",
    "doc_lookup": "session",
}

REGISTRY = register_default_tools(ToolRegistry())
TOOLS = REGISTRY.get_all_tools()


def test_every_spec_tool_is_registered_and_nothing_else() -> None:
    """The registry holds exactly the tools of spec 002 §6 plus update_system_prompt and noop."""
    assert set(REGISTRY.list_tools()) == set(SPEC_CATEGORIES)
    assert len(DEFAULT_TOOLS) == len(SPEC_CATEGORIES)


def test_each_domain_module_holds_its_tools() -> None:
    """Tools live in the domain module spec 002 §6 names."""
    by_module = {m.__name__.rsplit(".", 1)[1]: {t.name for t in m.TOOLS} for m in DOMAINS}
    assert by_module == SPEC_DOMAINS


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
def test_schema_is_valid_and_strict(tool: LibraryTool) -> None:
    """A valid JSON Schema of an object, closed to unknown parameters, every property typed
    and bounded (the bounds the validator applies; the model is shown the schema without them)."""
    schema = tool.parameters
    jsonschema.Draft202012Validator.check_schema(schema)
    json.dumps(tool.schema())
    assert schema["type"] == "object"
    assert schema.get("additionalProperties") is False
    assert set(schema.get("required", [])) <= set(schema["properties"])
    for name, prop in schema["properties"].items():
        assert "type" in prop, f"{tool.name}.{name} has no type"
        if prop["type"] == "string" and "enum" not in prop:
            assert "maxLength" in prop or "pattern" in prop, f"{tool.name}.{name} is unbounded"
        if prop["type"] == "integer":
            assert "minimum" in prop, f"{tool.name}.{name} has no range"


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
def test_the_model_is_shown_every_parameter(tool: LibraryTool) -> None:
    """What the model is shown names every parameter with its type, enum and whether it
    is required, and every description: only the bounds are left to the validator."""
    shown = tool.schema()["function"]["parameters"]
    schema = tool.parameters
    assert shown.get("required", []) == schema.get("required", [])
    assert shown["properties"].keys() == schema["properties"].keys()
    for name, prop in schema["properties"].items():
        for keyword in ("type", "enum", "description"):
            assert shown["properties"][name].get(keyword) == prop.get(keyword), (name, keyword)


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
def test_description_is_written_for_a_model(tool: LibraryTool) -> None:
    """A sentence that says more than the name, and short: it is sent with every model
    call (the whole offer has a budget, see test_tool_schema_budget)."""
    assert 20 <= len(tool.description) <= 110, len(tool.description)
    assert tool.description[0].isupper()
    assert tool.description.strip() != tool.name


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
def test_category_is_the_one_of_the_spec(tool: LibraryTool) -> None:
    assert tool.category is SPEC_CATEGORIES[tool.name]


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
def test_caching_only_where_read_only(tool: LibraryTool) -> None:
    """Read-only world lookups cache (tick; docs per session); nothing that writes caches."""
    if tool.name in READ_ONLY_CACHED:
        assert tool.cacheable
        assert tool.cache_scope == READ_ONLY_CACHED[tool.name]
    else:
        assert not tool.cacheable
    if tool.category is not S:
        assert not tool.cacheable


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
def test_example_call_is_valid(tool: LibraryTool) -> None:
    """The example shown in docs/tools.md passes the tool's own validation."""
    result = tool.validate_parameters(dict(tool.example))
    assert result.valid, result.format_for_llm(tool.name)


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
def test_unknown_parameter_is_not_passed_on(tool: LibraryTool) -> None:
    """A made-up parameter never reaches the tool."""
    params = {**tool.example, "made_up_parameter": 1}
    result = tool.validate_parameters(params)
    assert "made_up_parameter" not in result.cleaned_params
