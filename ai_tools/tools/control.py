"""Control tools: changing the assistant's own persona, and signalling it is done."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from ai_tools.errors import PermissionDenied
from ai_tools.json_types import JSONObject
from ai_tools.tools import outcomes
from ai_tools.tools.base import Actor, ToolCategory
from ai_tools.tools.function_tool import tool
from ai_tools.tools.library_tool import LibraryTool, Reason, call

PROMPT_PERMISSION = "Admin"
"""World permission the assistant's character needs to rewrite its own system prompt."""


class UpdateSystemPromptTool(LibraryTool):
    """Replace the assistant's persona / system prompt (admins' assistants only)."""

    name = "update_system_prompt"
    description = "Replace your persona (system prompt) when your operators ask."
    category = ToolCategory.DANGEROUS
    needs_world = True
    needs_assistant = True
    parameters: ClassVar[JSONObject] = {
        "type": "object",
        "properties": {
            "prompt": {
                "type": "string",
                "minLength": 20,
                "maxLength": 8000,
                "pattern": "\\w",
            },
            "reason": {
                "type": "string",
                "minLength": 1,
                "maxLength": 500,
                "description": "Who asked for it and why.",
            },
        },
        "required": ["prompt", "reason"],
        "additionalProperties": False,
    }
    example: ClassVar[JSONObject] = {
        "prompt": "You are Ada, the plaza's patient builder. Answer briefly.",
        "reason": "the game's admin asked for a shorter style",
    }

    async def run(self, actor: Actor, prompt: str, reason: str, **_: object) -> JSONObject:
        allowed = await call(
            self.world(actor).has_permission, self.character(actor), PROMPT_PERMISSION
        )
        if not allowed:
            raise PermissionDenied(
                f"changing your system prompt needs the {PROMPT_PERMISSION} permission"
            )
        await call(self.assistant(actor).set_system_prompt, prompt.strip())
        return outcomes.succeed(updated=True, length=len(prompt.strip()), reason=reason)


# SAFE_CHAIN: it has no effect; the ReAct loop recognises it by name and stops.
@tool(example={"reason": "no one is asking for anything"})
def noop(reason: Reason = "") -> Mapping[str, object]:
    """Nothing (more) to do now: end the turn."""
    return outcomes.succeed(noop=True, reason=reason)


TOOLS = (UpdateSystemPromptTool, noop)
