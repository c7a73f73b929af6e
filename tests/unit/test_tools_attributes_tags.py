"""Attribute and tag tools in the sandbox world, with its permission rules."""

from __future__ import annotations

import pytest

from ai_tools.tools.attributes import GetAttributesTool, ListAttributesTool, SetAttributeTool
from ai_tools.tools.building import SpawnPrototypeTool
from ai_tools.tools.tags import AddTagTool, GetTagsTool, RemoveTagTool, SearchByTagTool
from ai_tools.world.sandbox import SandboxWorld
from tests.unit.tool_fakes import WORLD_KINDS, refusals, run_tool, sandbox, world_actor


@pytest.fixture(params=WORLD_KINDS)
def world(request: pytest.FixtureRequest) -> SandboxWorld:
    return sandbox(kind=request.param)


# -- reading --------------------------------------------------------------------


def test_get_attributes_all_some_and_missing(world: SandboxWorld) -> None:
    pip = world_actor(world, "char:pip")
    every = run_tool(GetAttributesTool(), pip, object="slate")
    assert every["attributes"] == {"soup": "fish chowder", "price": 3}
    assert every["object"]["id"] == "obj:slate"
    some = run_tool(GetAttributesTool(), pip, object="obj:slate", names=["price", "colour"])
    assert some["attributes"] == {"price": 3} and some["missing"] == ["colour"]


def test_get_attributes_here_me_and_nothing(world: SandboxWorld) -> None:
    mason = world_actor(world, "char:mason")
    here = run_tool(GetAttributesTool(), mason, object="here")
    assert here["object"]["id"] == "room:workshop" and here["attributes"] == {}
    me = run_tool(GetAttributesTool(), mason, object="me")
    assert me["object"]["id"] == "char:mason"


def test_get_attributes_unknown_and_ambiguous(world: SandboxWorld) -> None:
    mason = world_actor(world, "char:mason")
    missing = run_tool(GetAttributesTool(), mason, object="dragon")
    assert missing["success"] is False and missing["status"] == "not_found"
    assert "dragon" in missing["error"]
    run_tool(SpawnPrototypeTool(), mason, prototype="chair")
    run_tool(SpawnPrototypeTool(), mason, prototype="chair")
    twice = run_tool(GetAttributesTool(), mason, object="chair")
    assert twice["status"] == "ambiguous" and len(twice["candidates"]) == 2
    assert all(c["id"].startswith("obj:wooden-chair") for c in twice["candidates"])
    by_id = run_tool(GetAttributesTool(), mason, object=twice["candidates"][1]["id"])
    assert by_id["attributes"] == {"sturdiness": 3}


def test_list_attributes_names_and_types(world: SandboxWorld) -> None:
    mason = world_actor(world, "char:mason")
    result = run_tool(ListAttributesTool(), mason, object="notice board")
    assert result["attributes"] == [{"name": "notices", "type": "array"}]
    empty = run_tool(ListAttributesTool(), mason, object="here")
    assert empty["count"] == 0
    assert run_tool(ListAttributesTool(), mason, object="nowhere")["status"] == "not_found"


# -- setting --------------------------------------------------------------------


def test_set_attribute_as_builder(world: SandboxWorld) -> None:
    mason = world_actor(world, "char:mason")
    result = run_tool(SetAttributeTool(), mason, object="workbench", name="tools",
                      value=["saw"])
    assert result["success"] is True
    assert result["previous"] == ["saw", "plane", "hammer"] and result["created"] is False
    new = run_tool(SetAttributeTool(), mason, object="workbench", name="polished", value=True)
    assert new["created"] is True and new["previous"] is None
    assert world.get_attributes("obj:workbench") == {"tools": ["saw"], "polished": True}


def test_set_attribute_owner_may_player_may_not(world: SandboxWorld) -> None:
    pip = world_actor(world, "char:pip")
    own = run_tool(SetAttributeTool(), pip, object="slate", name="soup", value="leek")
    assert own["success"] is True
    refused = run_tool(SetAttributeTool(), pip, object="obj:fountain", name="coins_in_basin",
                       value=0)
    assert refused == {
        "success": False, "status": "permission_denied", "retryable": False,
        "error": refused["error"],
    }
    assert refused["error"].startswith("permission denied: Pip may not")
    assert world.get_attributes("obj:fountain")["coins_in_basin"] == 12


def test_set_attribute_internal_name_refused_by_the_world(world: SandboxWorld) -> None:
    mason = world_actor(world, "char:mason")
    result = run_tool(SetAttributeTool(), mason, object="workbench", name="_lock", value=1)
    assert result["status"] == "permission_denied"


def test_set_attribute_unknown_object(world: SandboxWorld) -> None:
    mason = world_actor(world, "char:mason")
    result = run_tool(SetAttributeTool(), mason, object="obj:nothing", name="x", value=1)
    assert result["status"] == "not_found"


@pytest.mark.parametrize(
    ("params", "bad"),
    [
        ({"name": "x", "value": 1}, "object"),
        ({"object": "bench", "value": 1}, "name"),
        ({"object": "bench", "name": "x"}, "value"),
        ({"object": "bench", "name": "1x", "value": 1}, "name"),
        ({"object": "bench", "name": "has space", "value": 1}, "name"),
        ({"object": "bench", "name": "x" * 65, "value": 1}, "name"),
        ({"object": "bench", "name": "x", "value": "v" * 9000}, "value"),
        ({"object": "", "name": "x", "value": 1}, "object"),
    ],
)
def test_set_attribute_schema_refusals(params: dict, bad: str) -> None:
    assert any(p.startswith(bad) for p in refusals(SetAttributeTool(), **params))


def test_get_attributes_schema_refusals() -> None:
    assert refusals(GetAttributesTool()) == ["object"]
    assert any(p.startswith("names") for p in refusals(GetAttributesTool(), object="x",
                                                        names=[]))
    assert any(p.startswith("names") for p in refusals(GetAttributesTool(), object="x",
                                                        names=["a", "a"]))
    assert refusals(ListAttributesTool()) == ["object"]


# -- tags -------------------------------------------------------------------------


def test_get_tags_with_and_without_category(world: SandboxWorld) -> None:
    alice = world_actor(world, "char:alice")
    every = run_tool(GetTagsTool(), alice, object="here")
    assert {(t["tag"], t["category"]) for t in every["tags"]} == {
        ("outdoors", None), ("town", "zone")}
    zone = run_tool(GetTagsTool(), alice, object="here", category="zone")
    assert zone["tags"] == [{"tag": "town", "category": "zone"}]
    assert run_tool(GetTagsTool(), alice, object="notice board")["tags"] == []


def test_add_and_remove_tag_as_builder(world: SandboxWorld) -> None:
    mason = world_actor(world, "char:mason")
    added = run_tool(AddTagTool(), mason, object="workbench", tag="furniture", category="kind")
    assert added["success"] is True
    assert {"tag": "furniture", "category": "kind"} in world.get_tags("obj:workbench")
    removed = run_tool(RemoveTagTool(), mason, object="workbench", tag="furniture",
                       category="kind")
    assert removed["success"] is True and world.get_tags("obj:workbench") == []
    again = run_tool(RemoveTagTool(), mason, object="workbench", tag="furniture",
                     category="kind")
    assert again["success"] is False and again["status"] == "not_found"


def test_tag_permission_refusals(world: SandboxWorld) -> None:
    pip = world_actor(world, "char:pip")
    refused = run_tool(AddTagTool(), pip, object="fountain", tag="mine")
    assert refused["status"] == "permission_denied"
    assert run_tool(RemoveTagTool(), pip, object="fountain", tag="landmark")[
        "status"] == "permission_denied"
    assert {"tag": "landmark", "category": None} in world.get_tags("obj:fountain")
    mason = world_actor(world, "char:mason")
    system = run_tool(AddTagTool(), mason, object="workbench", tag="x", category="system")
    assert system["status"] == "permission_denied" and "Developer" in system["error"]


def test_search_by_tag(world: SandboxWorld) -> None:
    alice = world_actor(world, "char:alice")
    town = run_tool(SearchByTagTool(), alice, tag="town", category="zone")
    assert {o["id"] for o in town["results"]} == {
        "room:plaza", "room:library", "room:workshop", "room:inn"}
    limited = run_tool(SearchByTagTool(), alice, tag="town", category="zone", limit=2)
    assert limited["count"] == 2
    none = run_tool(SearchByTagTool(), alice, tag="dragon")
    assert none["results"] == [] and "dragon" in none["message"]


@pytest.mark.parametrize(
    ("tool", "params", "bad"),
    [
        (AddTagTool(), {"object": "x"}, "tag"),
        (AddTagTool(), {"object": "x", "tag": " padded"}, "tag"),
        (AddTagTool(), {"object": "x", "tag": ""}, "tag"),
        (AddTagTool(), {"object": "x", "tag": "t" * 65}, "tag"),
        (RemoveTagTool(), {"tag": "t"}, "object"),
        (RemoveTagTool(), {"object": "x", "tag": "t", "category": ""}, "category"),
        (GetTagsTool(), {}, "object"),
        (SearchByTagTool(), {}, "tag"),
        (SearchByTagTool(), {"tag": "t", "limit": 101}, "limit"),
    ],
)
def test_tag_schema_refusals(tool: object, params: dict, bad: str) -> None:
    assert any(p.startswith(bad) for p in refusals(tool, **params))  # type: ignore[arg-type]
