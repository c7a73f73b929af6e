"""The types of JSON data: what a decoded JSON document, object or array is.

Data that arrives as JSON (model answers, tool arguments, API bodies, MCP messages, stored
rows) is typed with these instead of ``Any``: a reader must narrow a value (``isinstance``)
before it uses it as a ``str`` or a ``dict``, which is exactly the check untrusted data needs.
Parameters take ``JSONMapping``/``JSONSequence`` (read-only, so a ``dict[str, str]`` is
accepted); values built here and handed on are ``JSONObject``/``JSONArray``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeAlias

JSONScalar: TypeAlias = "bool | int | float | str | None"
"""A JSON leaf value."""

JSONValue: TypeAlias = "JSONScalar | list[JSONValue] | dict[str, JSONValue]"
"""Any decoded JSON document."""

JSONObject: TypeAlias = "dict[str, JSONValue]"
"""A decoded JSON object."""

JSONArray: TypeAlias = "list[JSONValue]"
"""A decoded JSON array."""

JSONMapping: TypeAlias = "Mapping[str, object]"
"""A JSON object as a parameter: read-only, any value (narrowed where it is used)."""

JSONSequence: TypeAlias = "Sequence[object]"
"""A JSON array as a parameter: read-only, any item (narrowed where it is used)."""


def as_object(value: object) -> JSONMapping:
    """``value`` if it is a JSON object, else an empty one (reading an optional object)."""
    return value if isinstance(value, dict) else {}
