"""Sleep domain: resting, and letting a tick end without acting."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from ai_tools.json_types import JSONObject
from ai_tools.tools import outcomes
from ai_tools.tools.base import Actor, ToolCategory
from ai_tools.tools.function_tool import tool
from ai_tools.tools.library_tool import LibraryTool, Reason, call

REASON: JSONObject = {
    "type": "string",
    "minLength": 1,
    "maxLength": 500,
}

class GoToSleepTool(LibraryTool):
    """Switch the assistant to sleep mode (consolidation and reflection ticks)."""

    name = "go_to_sleep"
    description = "Idle for long? Sleep until someone addresses you or it is time to wake."
    category = ToolCategory.ASYNC_REQUIRED
    needs_world = False
    needs_assistant = True
    requires_character = False
    parameters: ClassVar[JSONObject] = {
        "type": "object",
        "properties": {"reason": REASON},
        "required": [],
        "additionalProperties": False,
    }
    example: ClassVar[JSONObject] = {"reason": "the plaza is quiet"}

    async def run(self, actor: Actor, reason: str = "", **_: object) -> JSONObject:
        assistant = self.assistant(actor)
        previous = getattr(assistant, "mode", None)
        if previous == "sleep":
            return outcomes.succeed(mode="sleep", changed=False, message="already asleep")
        await call(assistant.set_mode, "sleep", reason or "chose to sleep")
        return outcomes.succeed(mode="sleep", changed=True, previous_mode=previous, reason=reason)


# TERMINAL: like speaking, waiting ends the loop to await the next input.
@tool(category=ToolCategory.TERMINAL, example={"reason": "waiting for Bob's answer"})
def wait(reason: Reason = "") -> Mapping[str, object]:
    """Wait for an answer or an event without speaking."""
    return outcomes.succeed(waiting=True, reason=reason)


TOOLS = (GoToSleepTool, wait)
