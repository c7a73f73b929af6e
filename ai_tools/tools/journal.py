"""Journal domain: the assistant's own log of what it did and thought."""

from __future__ import annotations

from typing import ClassVar

from ai_tools.json_types import JSONObject
from ai_tools.tools import outcomes, records
from ai_tools.tools.base import Actor, ToolCategory
from ai_tools.tools.library_tool import LibraryTool, call
from ai_tools.tools.memory import QUERY


class AddJournalEntryTool(LibraryTool):
    """Write an entry in the assistant's journal."""

    name = "add_journal_entry"
    description = "Write in your journal what you did, decided or learned."
    category = ToolCategory.ASYNC_REQUIRED
    needs_world = False
    needs_store = True
    requires_character = False
    parameters: ClassVar[JSONObject] = {
        "type": "object",
        "properties": {
            "entry": {
                "type": "string",
                "minLength": 1,
                "maxLength": 8000,
                "pattern": "\\S",
            },
            "title": {
                "type": "string",
                "minLength": 1,
                "maxLength": 200,
            },
            "tags": records.SHORT_TAGS,
        },
        "required": ["entry"],
        "additionalProperties": False,
    }
    example: ClassVar[JSONObject] = {
        "title": "Lantern for the plaza",
        "entry": "Spawned a lantern in the plaza, set fuel to 10, tagged it lighting.",
        "tags": ["plaza"],
    }

    async def run(
        self,
        actor: Actor,
        entry: str,
        title: str | None = None,
        tags: list[str] | None = None,
        **_: object,
    ) -> JSONObject:
        metadata: JSONObject = {"tags": list(tags or ())}
        if title:
            metadata["title"] = title.strip()
        record = await call(
            self.store(actor).add_record, actor.owner, records.JOURNAL, entry.strip(), metadata
        )
        return outcomes.succeed(entry=records.present(record))


class ReviewJournalTool(LibraryTool):
    """Read the newest journal entries."""

    name = "review_journal"
    description = "Read your latest journal entries."
    category = ToolCategory.SAFE_CHAIN
    needs_world = False
    needs_store = True
    requires_character = False
    parameters: ClassVar[JSONObject] = {
        "type": "object",
        "properties": {
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": 50,
                "default": 10,
            },
            "tag": {
                "type": "string",
                "minLength": 1,
                "maxLength": 40,
            },
            "order": {
                "type": "string",
                "enum": ["newest_first", "oldest_first"],
                "default": "newest_first",
            },
        },
        "required": [],
        "additionalProperties": False,
    }
    example: ClassVar[JSONObject] = {"limit": 5, "tag": "plaza"}

    async def run(
        self,
        actor: Actor,
        limit: int = 10,
        tag: str | None = None,
        order: str = "newest_first",
        **_: object,
    ) -> JSONObject:
        store = self.store(actor)
        fetch = 500 if tag else limit
        found = await call(store.list_records, actor.owner, records.JOURNAL, fetch, True)
        if tag:
            found = [r for r in found if records.has_tag(r, tag)]
        found = found[:limit]
        if order == "oldest_first":
            found.reverse()
        entries = [records.present(r) for r in found]
        result = outcomes.succeed(count=len(entries), entries=entries)
        if not entries:
            result["message"] = "no journal entry" + (f" tagged {tag!r}" if tag else " yet")
        return result


class SearchJournalTool(LibraryTool):
    """Full-text search over journal entries."""

    name = "search_journal"
    description = "Search your journal."
    category = ToolCategory.SAFE_CHAIN
    needs_world = False
    needs_store = True
    requires_character = False
    parameters: ClassVar[JSONObject] = {
        "type": "object",
        "properties": {
            "query": QUERY,
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": 50,
                "default": 5,
            },
        },
        "required": ["query"],
        "additionalProperties": False,
    }
    example: ClassVar[JSONObject] = {"query": "lantern fuel"}

    async def run(self, actor: Actor, query: str, limit: int = 5, **_: object) -> JSONObject:
        found = await call(
            self.store(actor).search_records, actor.owner, records.JOURNAL, query, limit
        )
        entries = [records.present(r) for r in found]
        result = outcomes.succeed(query=query, count=len(entries), entries=entries)
        if not entries:
            result["message"] = "no journal entry matches"
        return result


TOOLS = (AddJournalEntryTool, ReviewJournalTool, SearchJournalTool)
