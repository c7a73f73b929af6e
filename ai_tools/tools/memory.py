"""Memory domain: the assistant's long-term memories and its past episodes."""

from __future__ import annotations

from typing import Any, ClassVar

from ai_tools.json_types import JSONObject
from ai_tools.tools import outcomes, records
from ai_tools.tools.base import Actor, ToolCategory
from ai_tools.tools.library_tool import LibraryTool, call

QUERY: JSONObject = {
    "type": "string",
    "minLength": 1,
    "maxLength": 500,
    "pattern": "\\w",
}


def _limit(default: int, maximum: int = 50) -> JSONObject:
    return {
        "type": "integer",
        "minimum": 1,
        "maximum": maximum,
        "default": default,
    }


class StoreMemoryTool(LibraryTool):
    """Remember a fact or observation for later ticks and sessions."""

    name = "store_memory"
    description = "Save something to your long-term memory."
    category = ToolCategory.ASYNC_REQUIRED
    needs_world = False
    needs_store = True
    requires_character = False
    parameters: ClassVar[JSONObject] = {
        "type": "object",
        "properties": {
            "content": {
                "type": "string",
                "minLength": 1,
                "maxLength": 4000,
                "pattern": "\\S",
            },
            "importance": {
                "type": "integer",
                "minimum": 1,
                "maximum": 10,
                "default": 5,
                "description": "1 trivial to 10 vital.",
            },
            "tags": records.SHORT_TAGS,
            "about": {
                "type": "string",
                "minLength": 1,
                "maxLength": 200,
            },
        },
        "required": ["content"],
        "additionalProperties": False,
    }
    example: ClassVar[JSONObject] = {
        "content": "Bob prefers brass fittings over iron.",
        "importance": 6,
        "tags": ["preference"],
        "about": "Bob",
    }

    async def run(
        self,
        actor: Actor,
        content: str,
        importance: int = 5,
        tags: list[str] | None = None,
        about: str | None = None,
        **_: object,
    ) -> JSONObject:
        metadata: JSONObject = {"importance": importance, "tags": list(tags or ())}
        if about:
            metadata["about"] = about
        if actor.character_id:
            metadata["character"] = actor.character_id
        record = await call(
            self.store(actor).add_record, actor.owner, records.MEMORIES, content.strip(), metadata
        )
        return outcomes.succeed(memory=records.present(record))


class RecallMemoriesTool(LibraryTool):
    """Search long-term memories (or list the newest)."""

    name = "recall_memories"
    description = "Search your long-term memories (latest ones without a query)."
    category = ToolCategory.SAFE_CHAIN
    needs_world = False
    needs_store = True
    requires_character = False
    parameters: ClassVar[JSONObject] = {
        "type": "object",
        "properties": {
            "query": QUERY,
            "limit": _limit(5),
            "min_importance": {
                "type": "integer",
                "minimum": 1,
                "maximum": 10,
            },
        },
        "required": [],
        "additionalProperties": False,
    }
    example: ClassVar[JSONObject] = {"query": "Bob brass", "limit": 5}

    async def run(
        self,
        actor: Actor,
        query: str | None = None,
        limit: int = 5,
        min_importance: int | None = None,
        **_: object,
    ) -> JSONObject:
        store = self.store(actor)
        # Fetch extra when filtering so the filter does not starve the answer.
        fetch = min(200, limit * 4) if min_importance else limit
        if query:
            found = await call(store.search_records, actor.owner, records.MEMORIES, query, fetch)
        else:
            found = await call(store.list_records, actor.owner, records.MEMORIES, fetch, True)
        if min_importance:
            found = [
                r for r in found
                if int((r.get("metadata") or {}).get("importance", 0)) >= min_importance
            ]
        memories = [records.present(r) for r in found[:limit]]
        result = outcomes.succeed(query=query, count=len(memories), memories=memories)
        if not memories:
            result["message"] = "no memory matches" if query else "you have no memories yet"
        return result


class SearchEpisodicTool(LibraryTool):
    """Search summaries of past exchanges and events."""

    name = "search_episodic"
    description = "Search summaries of your past conversations and events."
    category = ToolCategory.SAFE_CHAIN
    needs_world = False
    needs_store = True
    requires_character = False
    parameters: ClassVar[JSONObject] = {
        "type": "object",
        "properties": {
            "query": QUERY,
            "participant": {
                "type": "string",
                "minLength": 1,
                "maxLength": 200,
            },
            "limit": _limit(5),
        },
        "required": ["query"],
        "additionalProperties": False,
    }
    example: ClassVar[JSONObject] = {"query": "market stall", "participant": "Bob"}

    async def run(
        self,
        actor: Actor,
        query: str,
        participant: str | None = None,
        limit: int = 5,
        **_: object,
    ) -> JSONObject:
        store = self.store(actor)
        fetch = min(200, limit * 4) if participant else limit
        found = await call(store.search_records, actor.owner, records.EPISODES, query, fetch)
        if participant:
            found = [r for r in found if involves(r, participant)]
        episodes = [records.present(r) for r in found[:limit]]
        result = outcomes.succeed(query=query, count=len(episodes), episodes=episodes)
        if not episodes:
            result["message"] = "no episode matches"
        return result


def involves(record: dict[str, Any], who: str) -> bool:
    """Whether an episode names ``who`` among its participants (case-insensitive)."""
    folded = who.casefold()
    participants = (record.get("metadata") or {}).get("participants") or ()
    return any(str(p).casefold() == folded for p in participants)


TOOLS = (RecallMemoriesTool, StoreMemoryTool, SearchEpisodicTool)
