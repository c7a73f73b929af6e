"""The record tools on the SQLite and PostgreSQL stores: real full-text searches (FTS5 with
BM25, PostgreSQL text search with ts_rank) through the stores' threads."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import task

from ai_tools.store.postgres import PostgreSQLStore
from ai_tools.store.sqlite import SQLiteStore
from ai_tools.tools.base import Actor
from ai_tools.tools.context import SessionMemoryTool
from ai_tools.tools.entity import RecallEntityProfileTool, RelationshipsTool
from ai_tools.tools.goals import AddGoalTool, UpdateGoalTool
from ai_tools.tools.journal import AddJournalEntryTool, SearchJournalTool
from ai_tools.tools.memory import RecallMemoriesTool, SearchEpisodicTool, StoreMemoryTool
from tests.unit.tool_fakes import FakeAssistant


@pytest_twisted.async_yield_fixture(params=["sqlite", "postgres"])
async def actor(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Actor]:
    clock = task.Clock()
    clock.advance(1_700_000_000)
    store: Any
    if request.param == "sqlite":
        store = SQLiteStore(str(tmp_path / "state.sqlite"), clock=clock)
    else:
        db = request.getfixturevalue("postgres_db")
        store = PostgreSQLStore(db.dsn, password=db.password, clock=clock)
    await store.open()
    yield Actor(character_id="char:ada", store=store, assistant=FakeAssistant(name="ada"))
    await store.close()


async def call(tool: object, actor: Actor, **params: object) -> dict:
    checked = tool.validate_parameters(params)  # type: ignore[attr-defined]
    assert checked.valid, checked.errors
    return await tool.execute(actor, **checked.cleaned_params)  # type: ignore[attr-defined,no-any-return]


@pytest_twisted.ensureDeferred
async def test_memories_rank_best_first(actor: Actor) -> None:
    await call(StoreMemoryTool(), actor, content="The market opens at dawn.")
    best = await call(StoreMemoryTool(), actor,
                      content="Bob sells brass lanterns; brass is his trade.", about="Bob")
    await call(StoreMemoryTool(), actor, content="It rained all day.")
    found = await call(RecallMemoriesTool(), actor, query="brass lanterns market")
    assert found["success"] is True
    assert found["memories"][0]["id"] == best["memory"]["id"]
    assert {m["content"] for m in found["memories"]} == {
        "Bob sells brass lanterns; brass is his trade.", "The market opens at dawn."}
    assert all(m["score"] > 0 for m in found["memories"])
    assert found["memories"][0]["time"] == "2023-11-14T22:13:20Z"
    # FTS5 operators in model text are searched as words, never parsed
    odd = await call(RecallMemoriesTool(), actor, query='brass" OR NEAR(x* AND')
    assert odd["success"] is True and odd["memories"][0]["id"] == best["memory"]["id"]


@pytest_twisted.ensureDeferred
async def test_journal_and_episodes_search(actor: Actor) -> None:
    await call(AddJournalEntryTool(), actor, entry="Talked to Cy about the weather.")
    mine = await call(AddJournalEntryTool(), actor, entry="Set the lantern fuel to ten.",
                      tags=["plaza"])
    hit = await call(SearchJournalTool(), actor, query="lantern fuel")
    assert [e["id"] for e in hit["entries"]] == [mine["entry"]["id"]]
    assert hit["entries"][0]["tags"] == ["plaza"]
    await actor.store.add_record(  # type: ignore[union-attr]
        "ada", "episodes", "Bob ordered a lantern.", {"participants": ["Bob"]})
    episodes = await call(SearchEpisodicTool(), actor, query="lantern", participant="Bob")
    assert [e["content"] for e in episodes["episodes"]] == ["Bob ordered a lantern."]
    none = await call(SearchEpisodicTool(), actor, query="dragons")
    assert none["success"] is True and none["episodes"] == []


@pytest_twisted.ensureDeferred
async def test_profile_goals_and_session_notes(actor: Actor) -> None:
    await call(RelationshipsTool(), actor, action="set", entity="Bob", relation="client")
    await call(StoreMemoryTool(), actor, content="He likes brass.", about="Bob")
    profile = await call(RecallEntityProfileTool(), actor, entity="Bob")
    assert profile["relationship"]["relation"] == "client"
    assert [m["content"] for m in profile["memories"]] == ["He likes brass."]
    goal = await call(AddGoalTool(), actor, description="Furnish the plaza")
    done = await call(UpdateGoalTool(), actor, goal_id=goal["goal"]["id"], status="completed")
    assert done["goal"]["progress"] == 100
    notes = SessionMemoryTool()
    await call(notes, actor, action="set", key="k", value="v1")
    await call(notes, actor, action="set", key="k", value="v2")
    assert (await call(notes, actor, action="get", key="k"))["value"] == "v2"
    await call(notes, actor, action="delete", key="k")
    assert (await call(notes, actor, action="list"))["notes"] == {}
