"""Entity tools over the store (the world-object half is covered with the sandbox world)."""

from __future__ import annotations

import pytest
from twisted.internet import task

from ai_tools.store.memory import MemoryStore
from ai_tools.tools.base import Actor
from ai_tools.tools.entity import (
    RecallConversationContextTool,
    RecallEntityProfileTool,
    RelationshipsTool,
)
from ai_tools.tools.memory import StoreMemoryTool
from tests.unit.tool_fakes import FakeAssistant, fired, refusals, run_tool


@pytest.fixture
def clock() -> task.Clock:
    return task.Clock()


@pytest.fixture
def actor(clock: task.Clock) -> Actor:
    return Actor(character_id="char:ada", store=MemoryStore(clock=clock),
                 assistant=FakeAssistant(name="ada"))


def episode(actor: Actor, clock: task.Clock, text: str, *who: str) -> None:
    clock.advance(5)
    fired(actor.store.add_record("ada", "episodes", text, {"participants": list(who)}))


def test_relationship_set_then_replace_then_list(actor: Actor) -> None:
    rel = RelationshipsTool()
    first = run_tool(rel, actor, action="set", entity="Bob", relation="client", sentiment=2)
    assert first["created"] is True
    assert first["relationship"]["relation"] == "client"
    assert first["relationship"]["entity"] == "Bob"
    second = run_tool(rel, actor, action="set", entity="bob", sentiment=4, notes="Pays well.")
    assert second["created"] is False
    shown = second["relationship"]
    assert (shown["relation"], shown["sentiment"], shown["content"]) == ("client", 4, "Pays well.")
    run_tool(rel, actor, action="set", entity="Cy", relation="rival")
    assert run_tool(rel, actor)["count"] == 2
    only_bob = run_tool(rel, actor, entity="BOB")
    assert [r["name"] for r in only_bob["relationships"]] == ["Bob"]


def test_relationships_empty(actor: Actor) -> None:
    assert run_tool(RelationshipsTool(), actor)["message"] == "no relationship yet"
    result = run_tool(RelationshipsTool(), actor, entity="Bob")
    assert result["success"] is True and "Bob" in result["message"]


@pytest.mark.parametrize(
    ("params", "bad"),
    [
        ({"action": "set", "relation": "friend"}, "entity"),
        ({"action": "set", "entity": "Bob"}, "relation"),
        ({"action": "befriend"}, "action"),
        ({"action": "set", "entity": "Bob", "sentiment": 6}, "sentiment"),
        ({"action": "set", "entity": "Bob", "sentiment": -6}, "sentiment"),
        ({"entity": ""}, "entity"),
    ],
)
def test_relationship_schema_refusals(params: dict, bad: str) -> None:
    assert any(p.startswith(bad) for p in refusals(RelationshipsTool(), **params))


def test_profile_gathers_relationship_memories_and_conversations(
    actor: Actor, clock: task.Clock
) -> None:
    run_tool(RelationshipsTool(), actor, action="set", entity="Bob", relation="client")
    run_tool(StoreMemoryTool(), actor, content="He wants brass fittings.", about="Bob")
    run_tool(StoreMemoryTool(), actor, content="Bob owes me ten coins.")
    run_tool(StoreMemoryTool(), actor, content="The sky is blue.")
    episode(actor, clock, "Talked shop.", "Bob")
    episode(actor, clock, "Talked weather.", "Cy")
    result = run_tool(RecallEntityProfileTool(), actor, entity="Bob")
    assert result["success"] is True and result["object"] is None
    assert result["relationship"]["relation"] == "client"
    contents = {m["content"] for m in result["memories"]}
    assert contents == {"He wants brass fittings.", "Bob owes me ten coins."}
    assert result["conversation_count"] == 1


def test_profile_of_a_stranger(actor: Actor) -> None:
    result = run_tool(RecallEntityProfileTool(), actor, entity="Zed")
    assert result["success"] is False and result["status"] == "not_found"
    assert "memory_limit" in refusals(RecallEntityProfileTool(), entity="Zed", memory_limit=21)


def test_conversation_context_is_chronological(actor: Actor, clock: task.Clock) -> None:
    for n in range(4):
        episode(actor, clock, f"exchange {n}", "Bob")
    episode(actor, clock, "other", "Cy")
    result = run_tool(RecallConversationContextTool(), actor, entity="bob", limit=3)
    assert [c["content"] for c in result["conversations"]] == [
        "exchange 1", "exchange 2", "exchange 3"]


def test_conversation_context_empty(actor: Actor) -> None:
    result = run_tool(RecallConversationContextTool(), actor, entity="Bob")
    assert result["success"] is True and result["conversations"] == []
    assert refusals(RecallConversationContextTool()) == ["entity"]
