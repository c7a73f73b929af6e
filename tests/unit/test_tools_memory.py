"""Memory tools: store_memory, recall_memories, search_episodic over the real MemoryStore."""

from __future__ import annotations

import pytest
from twisted.internet import task

from ai_tools.store.memory import MemoryStore
from ai_tools.tools.base import Actor
from ai_tools.tools.memory import RecallMemoriesTool, SearchEpisodicTool, StoreMemoryTool
from tests.unit.tool_fakes import FakeAssistant, fired, refusals, run_tool


@pytest.fixture
def clock() -> task.Clock:
    return task.Clock()


@pytest.fixture
def actor(clock: task.Clock) -> Actor:
    store = MemoryStore(clock=clock)
    fired(store.open())
    return Actor(character_id="char:ada", store=store, assistant=FakeAssistant(name="ada"))


def remember(actor: Actor, clock: task.Clock, content: str, **params: object) -> dict:
    clock.advance(10)
    return run_tool(StoreMemoryTool(), actor, content=content, **params)


def test_store_memory_keeps_a_record_with_metadata(actor: Actor, clock: task.Clock) -> None:
    clock.advance(1_700_000_000)
    result = remember(actor, clock, "Bob prefers brass.", importance=7, tags=["pref"], about="Bob")
    assert result["success"] is True
    memory = result["memory"]
    assert memory["content"] == "Bob prefers brass."
    assert memory["importance"] == 7 and memory["tags"] == ["pref"] and memory["about"] == "Bob"
    assert memory["time"] == "2023-11-14T22:13:30Z"
    stored = fired(actor.store.get_record(memory["id"]))
    assert stored["owner"] == "ada" and stored["collection"] == "memories"
    assert stored["metadata"]["character"] == "char:ada"


def test_recall_ranks_by_relevance_with_ids_scores_and_times(
    actor: Actor, clock: task.Clock
) -> None:
    remember(actor, clock, "The market opens at dawn.")
    best = remember(actor, clock, "Bob sells brass lanterns at the market, brass only.")
    remember(actor, clock, "It rained all day.")
    result = run_tool(RecallMemoriesTool(), actor, query="brass market")
    assert result["success"] is True
    ids = [m["id"] for m in result["memories"]]
    assert ids[0] == best["memory"]["id"]
    assert len(ids) == 2  # "It rained" matches no word
    scores = [m["score"] for m in result["memories"]]
    assert scores == sorted(scores, reverse=True) and scores[-1] > 0
    assert all("created_at" in m and "time" in m for m in result["memories"])


def test_recall_without_query_lists_newest_first(actor: Actor, clock: task.Clock) -> None:
    for text in ("first", "second", "third"):
        remember(actor, clock, text)
    result = run_tool(RecallMemoriesTool(), actor, limit=2)
    assert [m["content"] for m in result["memories"]] == ["third", "second"]


def test_recall_filters_by_importance(actor: Actor, clock: task.Clock) -> None:
    remember(actor, clock, "lantern trivia", importance=2)
    remember(actor, clock, "lantern vital fact", importance=9)
    result = run_tool(RecallMemoriesTool(), actor, query="lantern", min_importance=5)
    assert [m["content"] for m in result["memories"]] == ["lantern vital fact"]


def test_recall_sees_only_its_own_memories(actor: Actor, clock: task.Clock) -> None:
    other = Actor(character_id="char:bo", store=actor.store, assistant=FakeAssistant(name="bo"))
    remember(other, clock, "secret of bo's lantern")
    result = run_tool(RecallMemoriesTool(), actor, query="lantern")
    assert result["success"] is True and result["memories"] == []
    assert "no memory" in result["message"]


def test_recall_with_nothing_stored(actor: Actor) -> None:
    result = run_tool(RecallMemoriesTool(), actor)
    assert result == {
        "success": True, "query": None, "count": 0, "memories": [],
        "message": "you have no memories yet",
    }


def test_store_memory_needs_a_store() -> None:
    result = fired(StoreMemoryTool().execute(Actor(character_id="c"), content="x"))
    assert result["success"] is False and result["status"] == "unavailable"
    assert result["retryable"] is False


@pytest.mark.parametrize(
    ("params", "bad"),
    [
        ({}, "content"),
        ({"content": ""}, "content"),
        ({"content": "   "}, "content"),
        ({"content": "x" * 4001}, "content"),
        ({"content": "x", "importance": 0}, "importance"),
        ({"content": "x", "importance": 11}, "importance"),
        ({"content": "x", "tags": [f"t{i}" for i in range(11)]}, "tags"),
        ({"content": "x", "tags": ["a", "a"]}, "tags"),
        ({"content": "x", "about": ""}, "about"),
    ],
)
def test_store_memory_schema_refusals(params: dict, bad: str) -> None:
    assert any(p.startswith(bad) for p in refusals(StoreMemoryTool(), **params))


@pytest.mark.parametrize(
    ("params", "bad"),
    [
        ({"query": ""}, "query"),
        ({"query": "!!!"}, "query"),
        ({"limit": 0}, "limit"),
        ({"limit": 51}, "limit"),
        ({"min_importance": 11}, "min_importance"),
    ],
)
def test_recall_schema_refusals(params: dict, bad: str) -> None:
    assert any(p.startswith(bad) for p in refusals(RecallMemoriesTool(), **params))


def add_episode(actor: Actor, clock: task.Clock, text: str, *who: str) -> int:
    clock.advance(10)
    record = fired(actor.store.add_record(
        "ada", "episodes", text, {"participants": list(who), "kind": "conversation"}))
    return int(record["id"])


def test_search_episodic_finds_and_filters_by_participant(
    actor: Actor, clock: task.Clock
) -> None:
    bob = add_episode(actor, clock, "Bob asked for a lantern at the market.", "Bob", "#7")
    add_episode(actor, clock, "Cy asked about the market hours.", "Cy")
    everyone = run_tool(SearchEpisodicTool(), actor, query="market")
    assert everyone["count"] == 2
    only_bob = run_tool(SearchEpisodicTool(), actor, query="market", participant="bob")
    assert [e["id"] for e in only_bob["episodes"]] == [bob]
    assert only_bob["episodes"][0]["participants"] == ["Bob", "#7"]
    assert only_bob["episodes"][0]["score"] > 0


def test_search_episodic_empty(actor: Actor) -> None:
    result = run_tool(SearchEpisodicTool(), actor, query="dragons")
    assert result["success"] is True and result["episodes"] == []


def test_search_episodic_requires_a_query() -> None:
    assert refusals(SearchEpisodicTool()) == ["query"]
    assert "participant" in refusals(SearchEpisodicTool(), query="x", participant="")
