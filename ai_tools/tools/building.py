"""Building domain: creating objects from prototypes and running batches of commands.

Nothing here runs Python supplied by a model: ``execute_batchcode`` runs a list
of ordinary world commands one by one, each with the character's own rights.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ai_tools.errors import NotFound, PermissionDenied
from ai_tools.json_types import JSONObject
from ai_tools.tools import outcomes
from ai_tools.tools.attributes import ATTRIBUTE_NAME
from ai_tools.tools.base import Actor, ToolCategory
from ai_tools.tools.command import COMMAND_TEXT, run_world_command
from ai_tools.tools.library_tool import OBJECT_REFERENCE, LibraryTool, call, resolve_object

BATCH_PERMISSION = "Builder"
"""World permission needed to run a batch of commands at all."""
MAX_BATCH = 50


class SpawnPrototypeTool(LibraryTool):
    """Create a new object from a prototype, optionally renamed and customised."""

    name = "spawn_prototype"
    description = "Create an object from a prototype (a template)."
    category = ToolCategory.DANGEROUS
    parameters: ClassVar[JSONObject] = {
        "type": "object",
        "properties": {
            "prototype": {
                "type": "string",
                "minLength": 1,
                "maxLength": 100,
            },
            "location": {
                **OBJECT_REFERENCE,
                "description": "Default: your room.",
            },
            "key": {
                "type": "string",
                "minLength": 1,
                "maxLength": 80,
                "pattern": "^\\S(.*\\S)?$",
                "description": "Its name (default: the prototype's).",
            },
            "description": {
                "type": "string",
                "minLength": 1,
                "maxLength": 4000,
            },
            "attributes": {
                "type": "object",
                "propertyNames": ATTRIBUTE_NAME,
                "maxProperties": 20,
            },
        },
        "required": ["prototype"],
        "additionalProperties": False,
    }
    example: ClassVar[JSONObject] = {
        "prototype": "lantern",
        "key": "brass lantern",
        "attributes": {"fuel": 10},
    }

    async def run(
        self,
        actor: Actor,
        prototype: str,
        location: str | None = None,
        key: str | None = None,
        description: str | None = None,
        attributes: JSONObject | None = None,
        **_: object,
    ) -> JSONObject:
        world = self.world(actor)
        char_id = self.character(actor)
        destination = None
        if location is not None:
            destination = (await resolve_object(world, char_id, location))["id"]
        overrides: JSONObject = {}
        if key is not None:
            overrides["key"] = key
        if description is not None:
            overrides["description"] = description
        if attributes:
            overrides["attributes"] = dict(attributes)
        try:
            created = await call(
                world.spawn_prototype, char_id, prototype, destination, overrides or None
            )
        except NotFound as exc:
            available = [p.get("key") for p in await call(world.list_prototypes) or ()]
            return outcomes.not_found(exc, prototypes=available)
        return outcomes.succeed(prototype=prototype, object=dict(created))


class ExecuteBatchcodeTool(LibraryTool):
    """Run a list of world commands in order (builders only); never Python."""

    name = "execute_batchcode"
    description = "Run game commands in order."
    category = ToolCategory.DANGEROUS
    timeout = 120
    parameters: ClassVar[JSONObject] = {
        "type": "object",
        "properties": {
            "commands": {
                "type": "array",
                "items": COMMAND_TEXT,
                "minItems": 1,
                "maxItems": MAX_BATCH,
            },
            "stop_on_error": {
                "type": "boolean",
                "default": True,
            },
        },
        "required": ["commands"],
        "additionalProperties": False,
    }
    example: ClassVar[JSONObject] = {
        "commands": ["look", "inventory"],
        "stop_on_error": True,
    }

    async def run(
        self, actor: Actor, commands: list[str], stop_on_error: bool = True, **_: object
    ) -> JSONObject:
        world = self.world(actor)
        char_id = self.character(actor)
        if not await call(world.has_permission, char_id, BATCH_PERMISSION):
            raise PermissionDenied(f"running a batch of commands needs {BATCH_PERMISSION} rights")
        results: list[JSONObject] = []
        failures: list[dict[str, Any]] = []
        for index, command in enumerate(commands):
            try:
                ran = await run_world_command(world, char_id, command.strip())
            except (PermissionDenied, NotFound) as exc:
                status = (
                    outcomes.PERMISSION_DENIED
                    if isinstance(exc, PermissionDenied)
                    else outcomes.NOT_FOUND
                )
                ran = {"command": command, "output": [str(exc)], "success": False,
                       "error": status}
            results.append({"index": index, **ran})
            if not ran["success"]:
                failures.append(results[-1])
                if stop_on_error:
                    break
        summary = {
            "executed": sum(1 for r in results if r["success"]),
            "total": len(commands),
            "results": results,
        }
        if not failures:
            return outcomes.succeed(**summary)
        first = failures[0]
        reason = first["output"][0] if first["output"] else first["error"]
        prefix = "permission denied: " if first["error"] == outcomes.PERMISSION_DENIED else ""
        return outcomes.refuse(
            f"{prefix}command {first['index'] + 1} ({first['command']!r}) failed: {reason}",
            first["error"],
            **summary,
        )


TOOLS = (SpawnPrototypeTool, ExecuteBatchcodeTool)
