"""Channel domain: posting on the world's chat channels (a post carries its call's effect
key: made again after a failover with the same call id, it is delivered once)."""

from __future__ import annotations

from typing import ClassVar

from ai_tools.errors import NotFound
from ai_tools.json_types import JSONObject
from ai_tools.tools import outcomes
from ai_tools.tools.base import Actor, ToolCategory
from ai_tools.tools.library_tool import LibraryTool, call


class ChannelSendTool(LibraryTool):
    """Post a message on a channel as the character."""

    name = "channel_send"
    description = "Post on a chat channel, e.g. 'public'."
    category = ToolCategory.TERMINAL
    parameters: ClassVar[JSONObject] = {
        "type": "object",
        "properties": {
            "channel": {
                "type": "string",
                "minLength": 1,
                "maxLength": 64,
            },
            "message": {
                "type": "string",
                "minLength": 1,
                "maxLength": 2000,
            },
        },
        "required": ["channel", "message"],
        "additionalProperties": False,
    }
    example: ClassVar[JSONObject] = {"channel": "public", "message": "The market opens."}

    async def run(self, actor: Actor, channel: str, message: str, **_: object) -> JSONObject:
        text = message.strip()
        if not text:
            return outcomes.invalid("message is blank")
        world = self.world(actor)
        key = actor.effect_key(self.name, channel, text)
        try:
            received = await call(world.channel_send, self.character(actor), channel, text,
                                  dedupe_key=key)
        except NotFound as exc:
            known = [c.get("key") for c in await call(world.list_channels) or ()]
            return outcomes.not_found(exc, channels=known)
        return outcomes.succeed(channel=channel, text=text, delivered_to=list(received or ()))


TOOLS = (ChannelSendTool,)
