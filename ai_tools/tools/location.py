"""Location domain: what the assistant's character sees around it."""

from __future__ import annotations

from typing import ClassVar

from ai_tools.json_types import JSONObject
from ai_tools.tools import outcomes
from ai_tools.tools.base import Actor, ToolCategory
from ai_tools.tools.library_tool import LibraryTool, call


class InspectLocationTool(LibraryTool):
    """Describe the room the character stands in: exits, objects, other characters."""

    name = "inspect_location"
    description = "Look around your room: exits, objects, people."
    category = ToolCategory.SAFE_CHAIN
    cacheable = True
    cache_scope = "tick"
    parameters: ClassVar[JSONObject] = {
        "type": "object",
        "properties": {
            "detail_level": {
                "type": "string",
                "enum": ["brief", "normal", "detailed"],
                "default": "normal",
            }
        },
        "required": [],
        "additionalProperties": False,
    }
    example: ClassVar[JSONObject] = {"detail_level": "normal"}

    async def run(self, actor: Actor, detail_level: str = "normal", **_: object) -> JSONObject:
        world = self.world(actor)
        described = await call(world.describe_location, self.character(actor), detail_level)
        if not described or described.get("room") is None:
            return outcomes.not_found("you are not in any room")
        return outcomes.succeed(
            detail_level=detail_level,
            location=described.get("room"),
            exits=list(described.get("exits") or ()),
            contents=list(described.get("contents") or ()),
            characters=list(described.get("characters") or ()),
        )


TOOLS = (InspectLocationTool,)
