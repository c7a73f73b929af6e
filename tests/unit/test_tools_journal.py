"""Journal tools: add_journal_entry, review_journal, search_journal over the real MemoryStore."""

from __future__ import annotations

import pytest
from twisted.internet import task

from ai_tools.store.memory import MemoryStore
from ai_tools.tools.base import Actor
from ai_tools.tools.journal import AddJournalEntryTool, ReviewJournalTool, SearchJournalTool
from tests.unit.tool_fakes import FakeAssistant, fired, refusals, run_tool


@pytest.fixture
def clock() -> task.Clock:
    return task.Clock()


@pytest.fixture
def actor(clock: task.Clock) -> Actor:
    return Actor(character_id="char:ada", store=MemoryStore(clock=clock),
                 assistant=FakeAssistant(name="ada"))


def write(actor: Actor, clock: task.Clock, entry: str, **params: object) -> dict:
    clock.advance(60)
    result = run_tool(AddJournalEntryTool(), actor, entry=entry, **params)
    assert result["success"] is True
    return result["entry"]


def test_add_entry_stores_title_and_tags(actor: Actor, clock: task.Clock) -> None:
    entry = write(actor, clock, "Built a lantern.", title="Lantern", tags=["plaza"])
    assert entry["title"] == "Lantern" and entry["tags"] == ["plaza"]
    stored = fired(actor.store.get_record(entry["id"]))
    assert stored["collection"] == "journal" and stored["content"] == "Built a lantern."


def test_review_newest_first_oldest_first_and_by_tag(actor: Actor, clock: task.Clock) -> None:
    write(actor, clock, "one", tags=["plaza"])
    write(actor, clock, "two")
    write(actor, clock, "three", tags=["Plaza"])
    review = ReviewJournalTool()
    assert [e["content"] for e in run_tool(review, actor)["entries"]] == ["three", "two", "one"]
    oldest = run_tool(review, actor, limit=2, order="oldest_first")
    assert [e["content"] for e in oldest["entries"]] == ["two", "three"]
    tagged = run_tool(review, actor, tag="plaza")
    assert [e["content"] for e in tagged["entries"]] == ["three", "one"]


def test_review_empty_and_unknown_tag(actor: Actor, clock: task.Clock) -> None:
    empty = run_tool(ReviewJournalTool(), actor)
    assert empty["success"] is True and empty["count"] == 0 and "yet" in empty["message"]
    write(actor, clock, "one")
    none = run_tool(ReviewJournalTool(), actor, tag="nothing")
    assert none["entries"] == [] and "nothing" in none["message"]


def test_search_journal_ranks_matches(actor: Actor, clock: task.Clock) -> None:
    write(actor, clock, "Talked to Bob about the weather.")
    target = write(actor, clock, "Lantern fuel set to ten; lantern tagged lighting.")
    write(actor, clock, "Nothing happened.")
    result = run_tool(SearchJournalTool(), actor, query="lantern fuel")
    assert [e["id"] for e in result["entries"]] == [target["id"]]
    assert result["entries"][0]["score"] > 0 and result["entries"][0]["time"].endswith("Z")


def test_search_journal_no_match(actor: Actor, clock: task.Clock) -> None:
    write(actor, clock, "one")
    result = run_tool(SearchJournalTool(), actor, query="dragons")
    assert result["success"] is True and result["entries"] == []


def test_journal_tools_need_a_store() -> None:
    result = fired(ReviewJournalTool().execute(Actor(character_id="c")))
    assert result["status"] == "unavailable"


@pytest.mark.parametrize(
    ("tool", "params", "bad"),
    [
        (AddJournalEntryTool(), {}, "entry"),
        (AddJournalEntryTool(), {"entry": " "}, "entry"),
        (AddJournalEntryTool(), {"entry": "x", "title": "t" * 201}, "title"),
        (AddJournalEntryTool(), {"entry": "x", "tags": "plaza"}, "tags"),
        (ReviewJournalTool(), {"limit": 0}, "limit"),
        (ReviewJournalTool(), {"order": "random"}, "order"),
        (SearchJournalTool(), {}, "query"),
        (SearchJournalTool(), {"query": "x", "limit": 100}, "limit"),
    ],
)
def test_schema_refusals(tool: object, params: dict, bad: str) -> None:
    assert any(p.startswith(bad) for p in refusals(tool, **params))  # type: ignore[arg-type]
