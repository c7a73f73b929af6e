"""Communication domain: speaking to the room or to one character.

All five tools are TERMINAL: after speaking, the loop ends to await an answer.
Each message carries its call's effect key (:meth:`~ai_tools.tools.base.Actor.effect_key`):
a call made again after a failover, with the same id, is delivered once.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ai_tools.json_types import JSONObject
from ai_tools.tools import outcomes
from ai_tools.tools.base import Actor, ToolCategory
from ai_tools.tools.library_tool import LibraryTool, call, resolve_object, summarize

MAX_MESSAGE = 2000


TEXT: JSONObject = {"type": "string", "minLength": 1, "maxLength": MAX_MESSAGE}
"""JSON Schema of a message's text."""


TARGET: JSONObject = {
    "type": "string",
    "minLength": 1,
    "maxLength": 200,
}


class _RoomMessageTool(LibraryTool):
    """Deliver text to everyone in the character's room (say, pose, emit)."""

    category = ToolCategory.TERMINAL
    kind: ClassVar[str] = "say"
    text_param: ClassVar[str] = "message"

    async def run(self, actor: Actor, **params: Any) -> JSONObject:
        text = str(params[self.text_param]).strip()
        if not text:
            return outcomes.invalid(f"{self.text_param} is blank")
        world = self.world(actor)
        key = actor.effect_key(self.name, text)
        heard_by = await call(world.message_location, self.character(actor), text, self.kind,
                              dedupe_key=key)
        heard = list(heard_by or ())
        result = outcomes.succeed(kind=self.kind, text=text, delivered_to=heard)
        if not heard:
            result["message"] = "delivered, but no one else is here to hear it"
        return result


class SayTool(_RoomMessageTool):
    """Say something aloud to the room."""

    name = "say"
    description = "Say something to everyone in your room."
    kind = "say"
    parameters: ClassVar[JSONObject] = {
        "type": "object",
        "properties": {"message": TEXT},
        "required": ["message"],
        "additionalProperties": False,
    }
    example: ClassVar[JSONObject] = {"message": "The lantern is ready."}


class PoseTool(_RoomMessageTool):
    """Describe an action of the character to the room."""

    name = "pose"
    description = "Show an action: 'nods.' shows as '<your name> nods.'"
    kind = "pose"
    text_param = "action"
    parameters: ClassVar[JSONObject] = {
        "type": "object",
        "properties": {"action": TEXT},
        "required": ["action"],
        "additionalProperties": False,
    }
    example: ClassVar[JSONObject] = {"action": "polishes the brass lantern."}


class EmitTool(_RoomMessageTool):
    """Show narration text to the room without attribution (builders only)."""

    name = "emit"
    description = "Narrate to your room, shown as written, without your name."
    kind = "emit"
    parameters: ClassVar[JSONObject] = {
        "type": "object",
        "properties": {"message": TEXT},
        "required": ["message"],
        "additionalProperties": False,
    }
    example: ClassVar[JSONObject] = {"message": "A cold wind sweeps across the plaza."}


class _DirectMessageTool(LibraryTool):
    """Deliver text to one character (whisper, page)."""

    category = ToolCategory.TERMINAL
    kind: ClassVar[str] = "whisper"
    parameters: ClassVar[JSONObject] = {
        "type": "object",
        "properties": {"target": TARGET, "message": TEXT},
        "required": ["target", "message"],
        "additionalProperties": False,
    }

    async def run(self, actor: Actor, target: str, message: str, **_: object) -> JSONObject:
        text = message.strip()
        if not text:
            return outcomes.invalid("message is blank")
        world = self.world(actor)
        char_id = self.character(actor)
        key = actor.effect_key(self.name, target, text)  # read before the first wait
        recipient = await resolve_object(world, char_id, target, kind="character")
        if recipient.get("id") == char_id:
            return outcomes.invalid(f"you cannot {self.kind} to yourself")
        await call(world.message_character, char_id, recipient["id"], text, self.kind,
                   dedupe_key=key)
        return outcomes.succeed(kind=self.kind, text=text, target=summarize(recipient))


class WhisperTool(_DirectMessageTool):
    """Whisper to a character in the same room."""

    name = "whisper"
    description = "Whisper to one character in your room."
    kind = "whisper"
    example: ClassVar[JSONObject] = {"target": "Bob", "message": "Meet me at the well."}


class PageTool(_DirectMessageTool):
    """Send a private message to a character anywhere in the world."""

    name = "page"
    description = "Message a character anywhere in the world."
    kind = "page"
    example: ClassVar[JSONObject] = {"target": "Bob", "message": "Your shop is built."}


TOOLS = (SayTool, PoseTool, EmitTool, PageTool, WhisperTool)
