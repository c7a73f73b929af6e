"""Tools that combine the world and the store: entities, status, documentation with help."""

from __future__ import annotations

from ai_tools.tools.context import GetSystemStatusTool
from ai_tools.tools.documentation import DocLookupTool
from ai_tools.tools.entity import RecallEntityProfileTool, RelationshipsTool
from tests.unit.tool_fakes import run_tool, sandbox, world_actor


def test_entity_profile_includes_the_world_object() -> None:
    pip = world_actor(sandbox(), "char:pip")
    run_tool(RelationshipsTool(), pip, action="set", entity="bob", relation="regular")
    profile = run_tool(RecallEntityProfileTool(), pip, entity="Bob")
    assert profile["entity"] == "char:bob"
    assert profile["object"]["description"] == "A fisherman, mostly beard."
    assert profile["relationship"]["relation"] == "regular"
    assert profile["relationship"]["name"] == "Bob"  # the world's name, not the typed one
    by_id = run_tool(RecallEntityProfileTool(), pip, entity="char:bob")
    assert by_id["relationship"]["id"] == profile["relationship"]["id"]


def test_entity_profile_of_a_world_object_with_no_records() -> None:
    pip = world_actor(sandbox(), "char:pip")
    result = run_tool(RecallEntityProfileTool(), pip, entity="Alice")
    assert result["success"] is True and result["relationship"] is None
    assert result["object"]["id"] == "char:alice" and result["memories"] == []


def test_system_status_says_where_the_character_is() -> None:
    mason = world_actor(sandbox(), "char:mason")
    result = run_tool(GetSystemStatusTool(), mason)
    assert result["world"] == "sandbox" and result["location"] == "room:workshop"
    assert result["character"] == "char:mason"


def test_doc_lookup_reads_the_world_help() -> None:
    mason = world_actor(sandbox(), "char:mason")
    result = run_tool(DocLookupTool(), mason, query="spawn prototype", source="help")
    assert result["docs"] == []
    assert result["help"][0]["key"] == "building"
    both = run_tool(DocLookupTool(), mason, query="spawn prototype")
    assert both["docs"] and both["help"]
