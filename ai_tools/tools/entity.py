"""Entity domain: what the assistant knows about the people and things it deals with.

An entity is named by a world id when the world knows it (so a renamed
character keeps its profile) and otherwise by its name.  Relationships are
records of the ``entities`` collection; conversations are ``episodes`` whose
``participants`` name the entity; memories ``about`` it come from ``memories``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ai_tools.errors import NotFound
from ai_tools.interfaces import IStore
from ai_tools.json_types import JSONObject
from ai_tools.tools import outcomes, records
from ai_tools.tools.base import Actor, ToolCategory
from ai_tools.tools.library_tool import (
    AmbiguousReference,
    LibraryTool,
    call,
    resolve_object,
    summarize,
)
from ai_tools.tools.memory import involves
from ai_tools.tools.validation import ValidationResult

ENTITY: JSONObject = {
    "type": "string",
    "minLength": 1,
    "maxLength": 200,
}
SCAN_LIMIT = 500
"""How many records of a collection an entity lookup scans, newest first."""


async def identify(actor: Actor, entity: str) -> tuple[dict[str, Any] | None, set[str], str]:
    """The world object meant by ``entity`` (if any), every name it goes by, its key.

    The key is the world id when the world knows the entity, else its name.
    """
    found: dict[str, Any] | None = None
    if actor.world is not None and actor.character_id:
        try:
            found = await resolve_object(actor.world, actor.character_id, entity)
        except (NotFound, AmbiguousReference):
            found = None
    names = {entity.strip().casefold()}
    if found is not None:
        names.update(str(found.get(k, "")).casefold() for k in ("id", "key"))
        names.update(str(a).casefold() for a in found.get("aliases") or ())
        names.discard("")
        return found, names, str(found["id"])
    return None, names, entity.strip()


def _names_entity(record: dict[str, Any], names: set[str]) -> bool:
    meta = record.get("metadata") or {}
    return any(
        str(meta.get(k, "")).casefold() in names for k in ("entity", "name", "about") if meta.get(k)
    )


async def _relationship(actor: Actor, store: IStore, names: set[str]) -> dict[str, Any] | None:
    rows = await call(store.list_records, actor.owner, records.ENTITIES, SCAN_LIMIT, True)
    for row in rows:
        if _names_entity(row, names):
            return dict(row)
    return None


class RecallEntityProfileTool(LibraryTool):
    """Everything the assistant knows about one entity."""

    name = "recall_entity_profile"
    description = "What you know about someone or something."
    category = ToolCategory.SAFE_CHAIN
    needs_world = False
    needs_store = True
    requires_character = False
    parameters: ClassVar[JSONObject] = {
        "type": "object",
        "properties": {
            "entity": ENTITY,
            "memory_limit": {
                "type": "integer",
                "minimum": 0,
                "maximum": 20,
                "default": 5,
            },
        },
        "required": ["entity"],
        "additionalProperties": False,
    }
    example: ClassVar[JSONObject] = {"entity": "Bob"}

    async def run(
        self, actor: Actor, entity: str, memory_limit: int = 5, **_: object
    ) -> JSONObject:
        store = self.store(actor)
        obj, names, key = await identify(actor, entity)
        relation = await _relationship(actor, store, names)
        memories: list[JSONObject] = []
        if memory_limit:
            rows = await call(store.list_records, actor.owner, records.MEMORIES, SCAN_LIMIT, True)
            about = [r for r in rows if _names_entity(r, names)]
            if len(about) < memory_limit:
                query = " ".join(sorted(names))
                hits = await call(
                    store.search_records, actor.owner, records.MEMORIES, query, memory_limit
                )
                seen = {r["id"] for r in about}
                about.extend(r for r in hits if r["id"] not in seen)
            memories = [records.present(r) for r in about[:memory_limit]]
        episodes = await call(store.list_records, actor.owner, records.EPISODES, SCAN_LIMIT, True)
        conversations = sum(1 for r in episodes if any(involves(r, n) for n in names))
        if obj is None and relation is None and not memories and not conversations:
            return outcomes.not_found(
                f"nothing is known about {entity!r}: it is not in this world and you have no "
                "records about it"
            )
        shown_obj = None
        if obj is not None:
            shown_obj = {**summarize(obj), "description": obj.get("description")}
        return outcomes.succeed(
            entity=key,
            object=shown_obj,
            relationship=records.present(relation) if relation else None,
            memories=memories,
            conversation_count=conversations,
        )


class RelationshipsTool(LibraryTool):
    """List or record the assistant's relationships with others."""

    name = "relationships"
    description = "List or set how you relate to others."
    category = ToolCategory.ASYNC_REQUIRED
    needs_world = False
    needs_store = True
    requires_character = False
    parameters: ClassVar[JSONObject] = {
        "type": "object",
        "properties": {
            "action": {
                "type": "string",
                "enum": ["list", "set"],
                "default": "list",
            },
            "entity": ENTITY,
            "relation": {
                "type": "string",
                "minLength": 1,
                "maxLength": 100,
            },
            "sentiment": {
                "type": "integer",
                "minimum": -5,
                "maximum": 5,
                "description": "-5 hostile to 5 devoted.",
            },
            "notes": {
                "type": "string",
                "minLength": 1,
                "maxLength": 2000,
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": 100,
                "default": 20,
            },
        },
        "required": [],
        "additionalProperties": False,
    }
    example: ClassVar[JSONObject] = {
        "action": "set",
        "entity": "Bob",
        "relation": "client",
        "sentiment": 3,
        "notes": "Ordered a lantern for his stall.",
    }

    def custom_validation(self, params: dict[str, object], result: ValidationResult) -> None:
        """'set' needs an entity and something to record."""
        if params.get("action") != "set":
            return
        if "entity" not in params:
            result.add_error("entity", "'set' needs the entity", "required with action 'set'")
        if not any(k in params for k in ("relation", "sentiment", "notes")):
            result.add_error(
                "relation", "'set' needs relation, sentiment or notes",
                "one of relation, sentiment, notes",
            )

    async def run(
        self,
        actor: Actor,
        action: str = "list",
        entity: str | None = None,
        relation: str | None = None,
        sentiment: int | None = None,
        notes: str | None = None,
        limit: int = 20,
        **_: object,
    ) -> JSONObject:
        store = self.store(actor)
        if action == "set":
            if entity is None:
                return outcomes.invalid("action 'set' needs an entity")
            return await self._set(actor, store, entity, relation, sentiment, notes)
        rows = await call(store.list_records, actor.owner, records.ENTITIES, SCAN_LIMIT, True)
        if entity is not None:
            _obj, names, _key = await identify(actor, entity)
            rows = [r for r in rows if _names_entity(r, names)]
        shown = [records.present(r) for r in rows[:limit]]
        result = outcomes.succeed(count=len(shown), relationships=shown)
        if not shown:
            result["message"] = (
                f"no relationship recorded with {entity!r}" if entity else "no relationship yet"
            )
        return result

    async def _set(
        self,
        actor: Actor,
        store: IStore,
        entity: str,
        relation: str | None,
        sentiment: int | None,
        notes: str | None,
    ) -> JSONObject:
        obj, names, key = await identify(actor, entity)
        existing = await _relationship(actor, store, names)
        metadata = dict((existing or {}).get("metadata") or {})
        if obj is not None or existing is None:
            metadata.update(entity=key, name=(obj or {}).get("key") or entity.strip())
        if relation is not None:
            metadata["relation"] = relation
        if sentiment is not None:
            metadata["sentiment"] = sentiment
        content = notes.strip() if notes else (existing or {}).get("content") or (
            f"{metadata['name']}: {metadata.get('relation', 'acquaintance')}"
        )
        if existing is None:
            record = await call(store.add_record, actor.owner, records.ENTITIES, content, metadata)
        else:
            record = await call(store.update_record, existing["id"], content, metadata)
        return outcomes.succeed(
            action="set", created=existing is None, relationship=records.present(record)
        )


class RecallConversationContextTool(LibraryTool):
    """The latest exchanges with one entity, oldest first."""

    name = "recall_conversation_context"
    description = "Your latest conversations with someone."
    category = ToolCategory.SAFE_CHAIN
    needs_world = False
    needs_store = True
    requires_character = False
    parameters: ClassVar[JSONObject] = {
        "type": "object",
        "properties": {
            "entity": ENTITY,
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": 50,
                "default": 10,
            },
        },
        "required": ["entity"],
        "additionalProperties": False,
    }
    example: ClassVar[JSONObject] = {"entity": "Bob", "limit": 5}

    async def run(self, actor: Actor, entity: str, limit: int = 10, **_: object) -> JSONObject:
        store = self.store(actor)
        _obj, names, key = await identify(actor, entity)
        rows = await call(store.list_records, actor.owner, records.EPISODES, SCAN_LIMIT, True)
        mine = [r for r in rows if any(involves(r, n) for n in names)][:limit]
        mine.reverse()
        shown = [records.present(r) for r in mine]
        result = outcomes.succeed(entity=key, count=len(shown), conversations=shown)
        if not shown:
            result["message"] = f"no recorded conversation with {entity!r}"
        return result


TOOLS = (RecallEntityProfileTool, RelationshipsTool, RecallConversationContextTool)
