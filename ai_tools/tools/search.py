"""Search domain: finding world objects by name."""

from __future__ import annotations

from typing import ClassVar

from ai_tools.json_types import JSONArray, JSONObject
from ai_tools.tools import outcomes
from ai_tools.tools.base import Actor, ToolCategory
from ai_tools.tools.library_tool import LibraryTool, call, location_of

OBJECT_KINDS: JSONArray = ["room", "exit", "character", "object"]


class SearchObjectTool(LibraryTool):
    """Find objects whose name or alias matches a query, best match first."""

    name = "search_object"
    description = "Find rooms, exits, characters or things by name; gives ids."
    category = ToolCategory.SAFE_CHAIN
    cacheable = True
    cache_scope = "tick"
    parameters: ClassVar[JSONObject] = {
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "minLength": 1,
                "maxLength": 200,
            },
            "kind": {
                "type": "string",
                "enum": OBJECT_KINDS,
            },
            "scope": {
                "type": "string",
                "enum": ["here", "world"],
                "default": "world",
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": 50,
                "default": 10,
            },
        },
        "required": ["query"],
        "additionalProperties": False,
    }
    example: ClassVar[JSONObject] = {"query": "lantern", "scope": "here"}

    async def run(
        self,
        actor: Actor,
        query: str,
        kind: str | None = None,
        scope: str = "world",
        limit: int = 10,
        **_: object,
    ) -> JSONObject:
        world = self.world(actor)
        char_id = self.character(actor)
        location = await location_of(world, char_id) if scope == "here" else None
        found = await call(
            world.search, query, char_id=char_id, location=location, kind=kind, limit=limit
        )
        results = [dict(o) for o in found or ()][:limit]
        result = outcomes.succeed(query=query, scope=scope, count=len(results), results=results)
        if not results:
            result["message"] = f"nothing matches {query!r}"
        return result


TOOLS = (SearchObjectTool,)
