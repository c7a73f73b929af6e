"""inspect_location and search_object in the sandbox world."""

from __future__ import annotations

from typing import Any

import pytest

from ai_tools.tools.base import Actor
from ai_tools.tools.location import InspectLocationTool
from ai_tools.tools.search import SearchObjectTool
from tests.unit.tool_fakes import fired, refusals, run_tool, sandbox, world_actor


@pytest.fixture
def mason() -> Actor:
    return world_actor(sandbox(), "char:mason")


def test_inspect_location_normal(mason: Actor) -> None:
    result = run_tool(InspectLocationTool(), mason)
    assert result["success"] is True
    assert result["location"]["id"] == "room:workshop"
    assert [e["key"] for e in result["exits"]] == ["west"]
    assert [o["id"] for o in result["contents"]] == ["obj:workbench"]
    assert result["characters"] == []  # Mason himself is not listed


def test_inspect_location_detail_levels() -> None:
    pip = world_actor(sandbox(), "char:pip")
    detailed = run_tool(InspectLocationTool(), pip, detail_level="detailed")
    slate = detailed["contents"][0]
    assert slate["attributes"] == {"soup": "fish chowder", "price": 3}
    assert [c["key"] for c in detailed["characters"]] == ["Bob"]
    brief = run_tool(InspectLocationTool(), pip, detail_level="brief")
    assert brief["location"]["description"] == ""


def test_inspect_location_refusals(mason: Actor) -> None:
    assert refusals(InspectLocationTool(), detail_level="full") == ["detail_level"]
    ghost = Actor(character_id="char:ghost", world=mason.world)
    result = fired(InspectLocationTool().execute(ghost))
    assert result["success"] is False and result["status"] == "not_found"
    alone = fired(InspectLocationTool().execute(Actor(character_id="char:mason")))
    assert alone["status"] == "unavailable" and "world" in alone["error"]
    nobody = no_character_refusal(InspectLocationTool, Actor(character_id=None,
                                                             world=mason.world))
    assert nobody["status"] == "no_character" and "character" in nobody["error"]


def no_character_refusal(tool_class: Any, actor: Actor) -> dict[str, Any]:
    """The engine's answer to a call of a tool that acts as a character, without one."""
    from twisted.internet import task

    from ai_tools.execution.engine import ExecutionContext, run_tool_call
    from ai_tools.execution.history import ConversationHistory
    from ai_tools.llm.events import ToolCall
    from ai_tools.tools.registry import ToolRegistry

    ctx = ExecutionContext(registry=ToolRegistry([tool_class]), actor=actor,
                           history=ConversationHistory(), clock=task.Clock())
    outcome: Any = run_tool_call(ctx, ToolCall(id="c1", name=tool_class.name, arguments={}))
    assert outcome.attempts == 0  # refused before it ran
    return dict(outcome.result)


def test_search_object_world_and_here(mason: Actor) -> None:
    found = run_tool(SearchObjectTool(), mason, query="fountain")
    assert [o["id"] for o in found["results"]] == ["obj:fountain"]
    here = run_tool(SearchObjectTool(), mason, query="fountain", scope="here")
    assert here["results"] == [] and "nothing matches" in here["message"]
    bench = run_tool(SearchObjectTool(), mason, query="bench", scope="here")
    assert [o["id"] for o in bench["results"]] == ["obj:workbench"]


def test_search_object_kind_and_limit(mason: Actor) -> None:
    rooms = run_tool(SearchObjectTool(), mason, query="o", kind="room", limit=2)
    assert rooms["count"] == 2 and all(o["kind"] == "room" for o in rooms["results"])
    people = run_tool(SearchObjectTool(), mason, query="bob", kind="character")
    assert [o["id"] for o in people["results"]] == ["char:bob"]
    assert run_tool(SearchObjectTool(), mason, query="bob", kind="room")["results"] == []


def test_search_object_nothing(mason: Actor) -> None:
    result = run_tool(SearchObjectTool(), mason, query="dragon")
    assert result == {"success": True, "query": "dragon", "scope": "world", "count": 0,
                      "results": [], "message": "nothing matches 'dragon'"}


@pytest.mark.parametrize(
    ("params", "bad"),
    [
        ({}, "query"),
        ({"query": ""}, "query"),
        ({"query": "x" * 201}, "query"),
        ({"query": "x", "kind": "animal"}, "kind"),
        ({"query": "x", "scope": "town"}, "scope"),
        ({"query": "x", "limit": 0}, "limit"),
        ({"query": "x", "limit": 51}, "limit"),
    ],
)
def test_search_object_schema_refusals(params: dict, bad: str) -> None:
    assert any(p.startswith(bad) for p in refusals(SearchObjectTool(), **params))
