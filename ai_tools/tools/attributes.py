"""Attributes domain: reading and setting the named values stored on world objects."""

from __future__ import annotations

import json
from typing import Any, ClassVar

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
from ai_tools.tools.validation import ValidationResult

ATTRIBUTE_NAME: JSONObject = {
    "type": "string",
    "pattern": "^[A-Za-z_][A-Za-z0-9_]{0,63}$",
    "description": "Letters, digits, '_'.",
}
MAX_VALUE_BYTES = 8192
"""Largest JSON encoding of an attribute value a model may store in one call."""


class GetAttributesTool(LibraryTool):
    """Read attribute values of one object."""

    name = "get_attributes"
    description = "Read an object's attributes."
    category = ToolCategory.SAFE_CHAIN
    cacheable = True
    cache_scope = "tick"
    parameters: ClassVar[JSONObject] = {
        "type": "object",
        "properties": {
            "object": OBJECT_REFERENCE,
            "names": {
                "type": "array",
                "items": ATTRIBUTE_NAME,
                "minItems": 1,
                "maxItems": 50,
                "uniqueItems": True,
            },
        },
        "required": ["object"],
        "additionalProperties": False,
    }
    example: ClassVar[JSONObject] = {"object": "lantern", "names": ["fuel"]}

    async def run(
        self, actor: Actor, object: str, names: list[str] | None = None, **_: object
    ) -> JSONObject:
        world = self.world(actor)
        target = await resolve_object(world, self.character(actor), object)
        values = dict(await call(world.get_attributes, target["id"], names) or {})
        if names is not None:
            values = {n: values[n] for n in names if n in values}
        missing = [n for n in names or () if n not in values]
        return outcomes.succeed(
            object=summarize(target), attributes=values, count=len(values), missing=missing
        )


class ListAttributesTool(LibraryTool):
    """List the attribute names of one object."""

    name = "list_attributes"
    description = "List an object's attribute names."
    category = ToolCategory.SAFE_CHAIN
    cacheable = True
    cache_scope = "tick"
    parameters: ClassVar[JSONObject] = {
        "type": "object",
        "properties": {"object": OBJECT_REFERENCE},
        "required": ["object"],
        "additionalProperties": False,
    }
    example: ClassVar[JSONObject] = {"object": "here"}

    async def run(self, actor: Actor, object: str, **_: object) -> JSONObject:
        world = self.world(actor)
        target = await resolve_object(world, self.character(actor), object)
        values = dict(await call(world.get_attributes, target["id"], None) or {})
        listed = [{"name": n, "type": _json_type(values[n])} for n in sorted(values)]
        return outcomes.succeed(object=summarize(target), attributes=listed, count=len(listed))


class SetAttributeTool(LibraryTool):
    """Set (create or replace) one attribute on an object, with the character's rights."""

    name = "set_attribute"
    description = "Set an object's attribute; returns the old value."
    category = ToolCategory.DANGEROUS
    parameters: ClassVar[JSONObject] = {
        "type": "object",
        "properties": {
            "object": OBJECT_REFERENCE,
            "name": ATTRIBUTE_NAME,
            "value": {
                "type": ["string", "number", "integer", "boolean", "array", "object", "null"],
            },
        },
        "required": ["object", "name", "value"],
        "additionalProperties": False,
    }
    example: ClassVar[JSONObject] = {"object": "lantern", "name": "fuel", "value": 10}

    def custom_validation(self, params: dict[str, object], result: ValidationResult) -> None:
        """Refuse values too large to be a sensible attribute."""
        size = len(json.dumps(params.get("value"), ensure_ascii=False).encode("utf-8"))
        if size > MAX_VALUE_BYTES:
            result.add_error(
                "value", f"value is {size} bytes encoded", f"at most {MAX_VALUE_BYTES} bytes"
            )

    async def run(
        self, actor: Actor, object: str, name: str, value: Any, **_: object
    ) -> JSONObject:
        world = self.world(actor)
        char_id = self.character(actor)
        target = await resolve_object(world, char_id, object)
        before = dict(await call(world.get_attributes, target["id"], [name]) or {})
        updated = await call(world.set_attribute, char_id, target["id"], name, value)
        shown = summarize(updated) if isinstance(updated, dict) else summarize(target)
        return outcomes.succeed(
            object=shown,
            name=name,
            value=value,
            previous=before.get(name),
            created=name not in before,
        )


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    return "object"


TOOLS = (GetAttributesTool, ListAttributesTool, SetAttributeTool)
