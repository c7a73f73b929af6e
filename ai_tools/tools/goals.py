"""Goals domain: the assistant's goals, kept as a tree of records.

A goal is a record of the ``goals`` collection with ``status``, ``priority``
and ``progress`` in its metadata; a sub-goal points to its goal through
``parent_id``.  Top-level goals are the assistant's projects (see
``list_projects``).
"""

from __future__ import annotations

import json
import re
from typing import Any, ClassVar

from ai_tools.interfaces import IStore
from ai_tools.json_types import JSONArray, JSONObject
from ai_tools.tools import outcomes, records
from ai_tools.tools.base import Actor, ToolCategory
from ai_tools.tools.library_tool import LibraryTool, call
from ai_tools.tools.validation import ValidationResult

STATUSES: JSONArray = ["active", "blocked", "completed", "abandoned"]
PRIORITIES: JSONArray = ["low", "normal", "high", "urgent"]
MAX_NOTES = 20
"""Progress notes kept on one goal (the oldest are dropped)."""

GOAL_TEXT: JSONObject = {
    "type": "string",
    "minLength": 3,
    "maxLength": 1000,
    "pattern": "\\w",
}


async def load_goal(actor: Actor, store: IStore, goal_id: int) -> dict[str, Any] | None:
    """The assistant's goal ``goal_id``, or None (other owners' records do not count)."""
    record = await call(store.get_record, goal_id)
    if record is None or record.get("owner") != actor.owner:
        return None
    if record.get("collection") != records.GOALS:
        return None
    return dict(record)


class AddGoalTool(LibraryTool):
    """Add a goal (or a sub-goal of an existing one)."""

    name = "add_goal"
    description = "Add a goal (a sub-goal with parent_id); returns its id."
    category = ToolCategory.ASYNC_REQUIRED
    needs_world = False
    needs_store = True
    requires_character = False
    parameters: ClassVar[JSONObject] = {
        "type": "object",
        "properties": {
            "description": GOAL_TEXT,
            "priority": {
                "type": "string",
                "enum": PRIORITIES,
                "default": "normal",
            },
            "parent_id": records.RECORD_ID,
        },
        "required": ["description"],
        "additionalProperties": False,
    }
    example: ClassVar[JSONObject] = {"description": "Furnish the plaza", "priority": "high"}

    async def run(
        self,
        actor: Actor,
        description: str,
        priority: str = "normal",
        parent_id: int | None = None,
        **_: object,
    ) -> JSONObject:
        store = self.store(actor)
        if parent_id is not None and await load_goal(actor, store, parent_id) is None:
            return outcomes.not_found(f"goal {parent_id} (the parent_id)")
        metadata = {"status": "active", "priority": priority, "progress": 0}
        record = await call(
            store.add_record, actor.owner, records.GOALS, description.strip(), metadata, parent_id
        )
        return outcomes.succeed(goal=records.present(record))


class UpdateGoalTool(LibraryTool):
    """Change a goal's status, progress, priority or wording, or add a progress note."""

    name = "update_goal"
    description = "Change a goal's status, progress or text, or add a note."
    category = ToolCategory.ASYNC_REQUIRED
    needs_world = False
    needs_store = True
    requires_character = False
    parameters: ClassVar[JSONObject] = {
        "type": "object",
        "properties": {
            "goal_id": records.RECORD_ID,
            "status": {"type": "string", "enum": STATUSES},
            "progress": {
                "type": "integer",
                "minimum": 0,
                "maximum": 100,
                "description": "Percent.",
            },
            "priority": {"type": "string", "enum": PRIORITIES},
            "description": GOAL_TEXT,
            "note": {
                "type": "string",
                "minLength": 1,
                "maxLength": 1000,
            },
        },
        "required": ["goal_id"],
        "additionalProperties": False,
    }
    example: ClassVar[JSONObject] = {"goal_id": 3, "progress": 50, "note": "Lantern placed."}

    def custom_validation(self, params: dict[str, object], result: ValidationResult) -> None:
        """Something must change."""
        if not any(k in params for k in ("status", "progress", "priority", "description", "note")):
            result.add_error(
                "parameters",
                "nothing to update",
                "at least one of status, progress, priority, description, note",
            )

    async def run(
        self,
        actor: Actor,
        goal_id: int,
        status: str | None = None,
        progress: int | None = None,
        priority: str | None = None,
        description: str | None = None,
        note: str | None = None,
        **_: object,
    ) -> JSONObject:
        store = self.store(actor)
        goal = await load_goal(actor, store, goal_id)
        if goal is None:
            return outcomes.not_found(f"goal {goal_id}")
        metadata = dict(goal.get("metadata") or {})
        if status is not None:
            metadata["status"] = status
            if status == "completed":
                metadata["progress"] = 100
        if progress is not None:
            metadata["progress"] = progress
        if priority is not None:
            metadata["priority"] = priority
        if note is not None:
            notes = [*metadata.get("notes", []), note.strip()]
            metadata["notes"] = notes[-MAX_NOTES:]
        content = description.strip() if description is not None else None
        updated = await call(store.update_record, goal_id, content, metadata)
        if updated is None:
            return outcomes.not_found(f"goal {goal_id}")
        return outcomes.succeed(goal=records.present(updated))


DECOMPOSE_PROMPT = (
    "Break the goal below into at most {count} concrete sub-goals, in the order they "
    "should be done. Each sub-goal is one short imperative sentence. Answer with a JSON "
    "array of strings and nothing else.\n\nGoal: {goal}"
)


def parse_subgoals(text: str, limit: int) -> list[str]:
    """Sub-goal sentences from a model's answer: a JSON array, else a list of lines."""
    text = text.strip()
    match = re.search(r"\[.*\]", text, re.DOTALL)
    items: list[object] = []
    if match:
        try:
            parsed = json.loads(match.group(0))
        except ValueError:
            parsed = None
        if isinstance(parsed, list):
            items = [
                i.get("description") or i.get("goal") if isinstance(i, dict) else i for i in parsed
            ]
    if not items:
        items = [re.sub(r"^\s*(?:[-*•]|\d+[.)])\s*", "", line) for line in text.splitlines()]
    subgoals = []
    for item in items:
        sentence = str(item or "").strip().strip('"').strip()
        if len(sentence) >= 3 and re.search(r"\w", sentence) and sentence not in subgoals:
            subgoals.append(sentence[:1000])
    return subgoals[:limit]


class DecomposeGoalTool(LibraryTool):
    """Ask the model to split a goal into ordered sub-goals and store them."""

    name = "decompose_goal"
    description = "Split a big goal into ordered sub-goals."
    category = ToolCategory.ASYNC_REQUIRED
    timeout = 120
    needs_world = False
    needs_store = True
    needs_assistant = True
    requires_character = False
    parameters: ClassVar[JSONObject] = {
        "type": "object",
        "properties": {
            "goal_id": records.RECORD_ID,
            "max_subgoals": {
                "type": "integer",
                "minimum": 2,
                "maximum": 10,
                "default": 5,
            },
            "guidance": {
                "type": "string",
                "minLength": 1,
                "maxLength": 1000,
            },
        },
        "required": ["goal_id"],
        "additionalProperties": False,
    }
    example: ClassVar[JSONObject] = {"goal_id": 3, "max_subgoals": 4}

    async def run(
        self,
        actor: Actor,
        goal_id: int,
        max_subgoals: int = 5,
        guidance: str | None = None,
        **_: object,
    ) -> JSONObject:
        store = self.store(actor)
        goal = await load_goal(actor, store, goal_id)
        if goal is None:
            return outcomes.not_found(f"goal {goal_id}")
        llm = getattr(self.assistant(actor), "llm", None)
        if llm is None:
            return outcomes.unavailable(self.name, "the assistant has no model client")
        prompt = DECOMPOSE_PROMPT.format(count=max_subgoals, goal=goal["content"])
        if guidance:
            prompt += f"\nGuidance: {guidance}"
        messages = [
            {"role": "system", "content": "You plan work as short ordered steps."},
            {"role": "user", "content": prompt},
        ]
        response = await call(llm.complete, messages)
        text = str(getattr(response, "content", response) or "")
        subgoals = parse_subgoals(text, max_subgoals)
        if not subgoals:
            return outcomes.refuse(
                "the model proposed no usable sub-goals; try again with guidance",
                "no_result",
                model_answer=text[:500],
            )
        priority = (goal.get("metadata") or {}).get("priority", "normal")
        created = []
        for order, sentence in enumerate(subgoals, start=1):
            metadata = {"status": "active", "priority": priority, "progress": 0, "order": order}
            record = await call(
                store.add_record, actor.owner, records.GOALS, sentence, metadata, goal_id
            )
            created.append(records.present(record))
        return outcomes.succeed(goal=records.present(goal), subgoals=created, count=len(created))


TOOLS = (AddGoalTool, UpdateGoalTool, DecomposeGoalTool)
