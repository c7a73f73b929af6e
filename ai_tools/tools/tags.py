"""Tags domain: labels on world objects, for grouping and finding them."""

from __future__ import annotations

from typing import ClassVar

from ai_tools.json_types import JSONObject
from ai_tools.tools import outcomes
from ai_tools.tools.base import Actor, ToolCategory
from ai_tools.tools.library_tool import (
    OBJECT_REFERENCE,
    LibraryTool,
    call,
    resolve_object,
    summarize,
)

TAG: JSONObject = {
    "type": "string",
    "minLength": 1,
    "maxLength": 64,
    "pattern": "^\\S(.*\\S)?$",
}
TAG_CATEGORY: JSONObject = {
    "type": "string",
    "minLength": 1,
    "maxLength": 64,
    "pattern": "^\\S(.*\\S)?$",
}


class GetTagsTool(LibraryTool):
    """List the tags on one object."""

    name = "get_tags"
    description = "List an object's tags."
    category = ToolCategory.SAFE_CHAIN
    cacheable = True
    cache_scope = "tick"
    parameters: ClassVar[JSONObject] = {
        "type": "object",
        "properties": {"object": OBJECT_REFERENCE, "category": TAG_CATEGORY},
        "required": ["object"],
        "additionalProperties": False,
    }
    example: ClassVar[JSONObject] = {"object": "here", "category": "zone"}

    async def run(
        self, actor: Actor, object: str, category: str | None = None, **_: object
    ) -> JSONObject:
        world = self.world(actor)
        target = await resolve_object(world, self.character(actor), object)
        tags = [dict(t) for t in await call(world.get_tags, target["id"], category) or ()]
        return outcomes.succeed(object=summarize(target), tags=tags, count=len(tags))


class AddTagTool(LibraryTool):
    """Put a tag on an object, with the character's rights."""

    name = "add_tag"
    description = "Tag an object, optionally in a category."
    category = ToolCategory.DANGEROUS
    parameters: ClassVar[JSONObject] = {
        "type": "object",
        "properties": {"object": OBJECT_REFERENCE, "tag": TAG, "category": TAG_CATEGORY},
        "required": ["object", "tag"],
        "additionalProperties": False,
    }
    example: ClassVar[JSONObject] = {"object": "lantern", "tag": "lighting", "category": "kind"}

    async def run(
        self, actor: Actor, object: str, tag: str, category: str | None = None, **_: object
    ) -> JSONObject:
        world = self.world(actor)
        char_id = self.character(actor)
        target = await resolve_object(world, char_id, object)
        await call(world.add_tag, char_id, target["id"], tag, category)
        return outcomes.succeed(object=summarize(target), tag=tag, category=category)


class RemoveTagTool(LibraryTool):
    """Take a tag off an object, with the character's rights."""

    name = "remove_tag"
    description = "Remove a tag from an object."
    category = ToolCategory.DANGEROUS
    parameters: ClassVar[JSONObject] = {
        "type": "object",
        "properties": {"object": OBJECT_REFERENCE, "tag": TAG, "category": TAG_CATEGORY},
        "required": ["object", "tag"],
        "additionalProperties": False,
    }
    example: ClassVar[JSONObject] = {"object": "lantern", "tag": "lighting", "category": "kind"}

    async def run(
        self, actor: Actor, object: str, tag: str, category: str | None = None, **_: object
    ) -> JSONObject:
        world = self.world(actor)
        char_id = self.character(actor)
        target = await resolve_object(world, char_id, object)
        removed = await call(world.remove_tag, char_id, target["id"], tag, category)
        if not removed:
            where = f" in category {category!r}" if category else ""
            return outcomes.not_found(
                f"{target.get('key')!r} has no tag {tag!r}{where}", object=summarize(target)
            )
        return outcomes.succeed(object=summarize(target), tag=tag, category=category)


class SearchByTagTool(LibraryTool):
    """Find the objects carrying a tag."""

    name = "search_by_tag"
    description = "Find the objects with a tag."
    category = ToolCategory.SAFE_CHAIN
    cacheable = True
    cache_scope = "tick"
    requires_character = False
    parameters: ClassVar[JSONObject] = {
        "type": "object",
        "properties": {
            "tag": TAG,
            "category": TAG_CATEGORY,
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": 100,
                "default": 20,
            },
        },
        "required": ["tag"],
        "additionalProperties": False,
    }
    example: ClassVar[JSONObject] = {"tag": "market", "category": "zone"}

    async def run(
        self, actor: Actor, tag: str, category: str | None = None, limit: int = 20, **_: object
    ) -> JSONObject:
        world = self.world(actor)
        found = await call(world.search_by_tag, tag, category, limit)
        results = [dict(o) for o in found or ()][:limit]
        result = outcomes.succeed(tag=tag, category=category, count=len(results), results=results)
        if not results:
            result["message"] = f"no object carries tag {tag!r}"
        return result


TOOLS = (GetTagsTool, AddTagTool, RemoveTagTool, SearchByTagTool)
