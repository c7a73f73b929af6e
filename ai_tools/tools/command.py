"""Command domain: running one world command as the character."""

from __future__ import annotations

from typing import Any, ClassVar

from ai_tools.interfaces import IWorld
from ai_tools.json_types import JSONObject
from ai_tools.tools import outcomes
from ai_tools.tools.base import Actor, ToolCategory
from ai_tools.tools.library_tool import LibraryTool, call

COMMAND_TEXT: JSONObject = {
    "type": "string",
    "minLength": 1,
    "maxLength": 1000,
    "pattern": "\\S",
    "description": "As a player types it, e.g. 'look lamp'.",
}


async def run_world_command(world: IWorld, char_id: str, command: str) -> JSONObject:
    """Run one command; the world's answer as ``{command, output: [lines], success[, error]}``.

    A world reports a refused or failed command in its answer (``success``
    false and an ``error`` code such as ``permission_denied``), like a game
    shows the player; an answer without ``success`` counts as a success.
    """
    answer = dict(await call(world.execute_command, char_id, command) or {})
    output = answer.get("output", [])
    if isinstance(output, str):
        output = output.splitlines()
    ran: dict[str, Any] = {
        "command": answer.get("command", command),
        "output": [str(x) for x in output],
        "success": answer.get("success", True) is not False,
    }
    if not ran["success"]:
        ran["error"] = str(answer.get("error") or "failed")
    return ran


def command_refusal(ran: dict[str, Any], **fields: Any) -> JSONObject:
    """The model-visible refusal of a failed command (its status is the world's code)."""
    first = ran["output"][0] if ran["output"] else ran["error"]
    status = ran["error"]
    prefix = "permission denied: " if status == outcomes.PERMISSION_DENIED else ""
    return outcomes.refuse(
        f"{prefix}{ran['command']!r} failed: {first}",
        status,
        command=ran["command"],
        output=ran["output"],
        **fields,
    )


class ExecuteCommandTool(LibraryTool):
    """Run one world command with the character's own rights."""

    name = "execute_command"
    description = "Run a game command (when no tool fits) and read its output."
    category = ToolCategory.DANGEROUS
    parameters: ClassVar[JSONObject] = {
        "type": "object",
        "properties": {"command": COMMAND_TEXT},
        "required": ["command"],
        "additionalProperties": False,
    }
    example: ClassVar[JSONObject] = {"command": "look"}

    async def run(self, actor: Actor, command: str, **_: object) -> JSONObject:
        ran = await run_world_command(self.world(actor), self.character(actor), command.strip())
        if not ran["success"]:
            return command_refusal(ran)
        return outcomes.succeed(command=ran["command"], output=ran["output"])


TOOLS = (ExecuteCommandTool,)
