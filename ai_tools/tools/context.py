"""Context domain: the assistant's scratchpad, its projects and its own status."""

from __future__ import annotations

from typing import Any, ClassVar

from ai_tools.json_types import JSONObject
from ai_tools.tools import outcomes, records
from ai_tools.tools.base import Actor, ToolCategory
from ai_tools.tools.goals import STATUSES
from ai_tools.tools.library_tool import LibraryTool, call
from ai_tools.tools.validation import ValidationResult

SCAN_LIMIT = 500
NOTE_KEY: JSONObject = {
    "type": "string",
    "pattern": "^[A-Za-z0-9_.:-]{1,64}$",
    "description": "Letters, digits, '_', '.', ':' or '-'.",
}


class SessionMemoryTool(LibraryTool):
    """A key-value scratchpad for the work in progress."""

    name = "session_memory"
    description = "Notes for the work in progress (lasting facts: store_memory)."
    category = ToolCategory.SAFE_CHAIN
    needs_world = False
    needs_store = True
    requires_character = False
    parameters: ClassVar[JSONObject] = {
        "type": "object",
        "properties": {
            "action": {
                "type": "string",
                "enum": ["set", "get", "list", "delete"],
            },
            "key": NOTE_KEY,
            "value": {
                "type": "string",
                "minLength": 1,
                "maxLength": 4000,
            },
        },
        "required": ["action"],
        "additionalProperties": False,
    }
    example: ClassVar[JSONObject] = {
        "action": "set",
        "key": "lantern_id",
        "value": "obj:lantern-1",
    }

    def custom_validation(self, params: dict[str, object], result: ValidationResult) -> None:
        """'set' needs key and value; 'get' and 'delete' need a key."""
        action = params.get("action")
        if action in ("set", "get", "delete") and "key" not in params:
            result.add_error("key", f"'{action}' needs a key", f"required with action '{action}'")
        if action == "set" and "value" not in params:
            result.add_error("value", "'set' needs a value", "required with action 'set'")

    async def run(
        self,
        actor: Actor,
        action: str,
        key: str | None = None,
        value: str | None = None,
        **_: object,
    ) -> JSONObject:
        store = self.store(actor)
        rows = await call(store.list_records, actor.owner, records.SESSION, SCAN_LIMIT, True)
        notes: dict[str, JSONObject] = {}
        for row in rows:
            note_key = (row.get("metadata") or {}).get("key")
            if note_key is not None and note_key not in notes:
                notes[note_key] = dict(row)
        if action == "list":
            listed = {k: notes[k]["content"] for k in sorted(notes)}
            return outcomes.succeed(action="list", count=len(listed), notes=listed)
        assert key is not None  # custom_validation guarantees it
        existing = notes.get(key)
        if action == "get":
            if existing is None:
                return outcomes.not_found(f"no note named {key!r}", keys=sorted(notes))
            return outcomes.succeed(action="get", key=key, value=existing["content"])
        if action == "delete":
            if existing is None:
                return outcomes.not_found(f"no note named {key!r}", keys=sorted(notes))
            if hasattr(store, "delete_record"):
                await call(store.delete_record, existing["id"])
            else:  # a store without deletion: the note loses its key and drops out
                await call(store.update_record, existing["id"], None, {"deleted_key": key})
            return outcomes.succeed(action="delete", key=key)
        assert value is not None
        if existing is None:
            await call(store.add_record, actor.owner, records.SESSION, value, {"key": key})
        else:
            await call(store.update_record, existing["id"], value, None)
        return outcomes.succeed(action="set", key=key, value=value, created=existing is None)


class ListProjectsTool(LibraryTool):
    """The assistant's top-level goals, with sub-goal progress."""

    name = "list_projects"
    description = "List your top-level goals and their progress."
    category = ToolCategory.SAFE_CHAIN
    needs_world = False
    needs_store = True
    requires_character = False
    parameters: ClassVar[JSONObject] = {
        "type": "object",
        "properties": {
            "status": {
                "type": "string",
                "enum": [*STATUSES, "all"],
                "default": "active",
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": 50,
                "default": 10,
            },
        },
        "required": [],
        "additionalProperties": False,
    }
    example: ClassVar[JSONObject] = {"status": "active"}

    async def run(
        self, actor: Actor, status: str = "active", limit: int = 10, **_: object
    ) -> JSONObject:
        store = self.store(actor)
        goals = await call(store.list_records, actor.owner, records.GOALS, SCAN_LIMIT, True)
        children: dict[int, list[dict[str, Any]]] = {}
        for goal in goals:
            if goal.get("parent_id") is not None:
                children.setdefault(goal["parent_id"], []).append(goal)
        projects = []
        for goal in goals:
            if goal.get("parent_id") is not None:
                continue
            goal_status = (goal.get("metadata") or {}).get("status", "active")
            if status != "all" and goal_status != status:
                continue
            subs = children.get(goal["id"], [])
            shown = records.present(goal)
            shown["subgoals"] = len(subs)
            shown["subgoals_completed"] = sum(
                1 for s in subs if (s.get("metadata") or {}).get("status") == "completed"
            )
            projects.append(shown)
        projects = projects[:limit]
        result = outcomes.succeed(status=status, count=len(projects), projects=projects)
        if not projects:
            result["message"] = "no project" + ("" if status == "all" else f" is {status}")
        return result


class GetSystemStatusTool(LibraryTool):
    """The assistant's own status: mode, counters, budget, the world it is in."""

    name = "get_system_status"
    description = "Your own mode, counters, tool budget and room."
    category = ToolCategory.SAFE_CHAIN
    needs_world = False
    needs_assistant = True
    requires_character = False
    parameters: ClassVar[JSONObject] = {
        "type": "object",
        "properties": {},
        "required": [],
        "additionalProperties": False,
    }
    example: ClassVar[JSONObject] = {}

    async def run(self, actor: Actor, **_: object) -> JSONObject:
        assistant = self.assistant(actor)
        status = dict(await call(assistant.status) or {})
        world = self.world(actor)
        where: JSONObject = {"world": getattr(world, "name", None) if world else None}
        if world is not None and actor.character_id:
            me = await call(world.get_object, actor.character_id)
            where["character"] = actor.character_id
            where["location"] = (me or {}).get("location")
        return outcomes.succeed(assistant=str(assistant.name), status=status, **where)


TOOLS = (SessionMemoryTool, ListProjectsTool, GetSystemStatusTool)
