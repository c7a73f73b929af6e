"""Safe, lossless type coercion of tool-call parameters.

Models often send ``"5"`` where a schema says ``integer`` or ``"true"`` where it
says ``boolean``.  When the text means exactly one value of the declared type,
we convert it; when it does not (``"5.5"`` for an integer, ``"abc"`` for a
number, ``"yes"`` for a boolean), we refuse and report a type error, so a
tool never runs on a guess.

The rules, for a value that matches none of the schema's declared types:

- ``integer``: a string of ASCII digits with an optional sign (``" 42 "`` → 42).
- ``number``: a string in decimal or exponent notation that gives a finite
  float (``"2.5"`` → 2.5, ``"5"`` → 5, ``"1e3"`` → 1000.0).
- ``boolean``: ``"true"``/``"false"`` in any letter case (``"True"`` → True).
- nothing else is ever coerced: not numbers to strings, not ``1``/``0`` or
  ``"yes"`` to booleans, not booleans to numbers.

A float with an integral value where only ``integer`` is allowed (``5.0``) is
valid JSON Schema and is normalised to the int ``5`` so tools can use it as one.

Coercion walks into nested objects (``properties``) and arrays (``items``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

import attrs

Path = tuple[str | int, ...]

_INTEGER_TEXT = re.compile(r"[+-]?[0-9]+", re.ASCII)
_NUMBER_TEXT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)
_BOOLEAN_TEXT = {"true": True, "false": False}
_MAX_NUMBER_TEXT = 100  # longer "numbers" are not what a model means; refuse them


def is_json_type(value: object, type_name: str) -> bool:
    """Whether ``value`` is an instance of the JSON Schema type ``type_name``.

    Follows JSON Schema (and jsonschema's defaults): booleans are never
    numbers, and a float with an integral value is an integer.
    """
    if type_name == "string":
        return isinstance(value, str)
    if type_name == "integer":
        if isinstance(value, bool):
            return False
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if type_name == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if type_name == "boolean":
        return isinstance(value, bool)
    if type_name == "null":
        return value is None
    if type_name == "array":
        return isinstance(value, list)
    if type_name == "object":
        return isinstance(value, dict)
    return True  # an unknown type name constrains nothing here; the schema check decides


def declared_types(schema: Mapping[str, object]) -> tuple[str, ...]:
    """The type names a schema declares (empty when it declares none)."""
    declared = schema.get("type")
    if isinstance(declared, str):
        return (declared,)
    if isinstance(declared, list):
        return tuple(t for t in declared if isinstance(t, str))
    return ()


_PYTHON_TYPES: dict[str, frozenset[type]] = {
    "string": frozenset({str}),
    "integer": frozenset({int}),
    "number": frozenset({int, float}),
    "boolean": frozenset({bool}),
    "null": frozenset({type(None)}),
    "array": frozenset({list}),
    "object": frozenset({dict}),
}
_ALL_JSON_TYPES = frozenset().union(*_PYTHON_TYPES.values())


def untouched_types(schema: object, *, walk_containers: bool = True) -> frozenset[type] | None:
    """The exact Python types of values :func:`coerce_value` returns as they are, unreported.

    None means any value.  A value whose ``type()`` is in the set matches a
    declared type, so it is neither converted nor reported as a mismatch; an
    integral float where only integers are allowed (normalised to an int) and
    containers coercion walks into (``properties``, ``items``) are left out,
    unless ``walk_containers`` is False (the caller checks their content).  A
    value of another type may or may not be touched: ask :func:`coerce_value`.
    """
    if not isinstance(schema, Mapping):
        return None
    types = declared_types(schema)
    known = [_PYTHON_TYPES[t] for t in types if t in _PYTHON_TYPES]
    if not types or len(known) < len(types):  # no type, or one that accepts anything
        accepted = set(_ALL_JSON_TYPES)
    else:
        accepted = set().union(*known)
    if "integer" in types and "number" not in types:
        accepted.discard(float)
    if walk_containers and isinstance(schema.get("properties"), Mapping):
        accepted.discard(dict)
    if walk_containers and isinstance(schema.get("items"), Mapping):
        accepted.discard(list)
    if accepted == _ALL_JSON_TYPES and (not types or len(known) < len(types)):
        return None
    return frozenset(accepted)


def coerce_text(text: str, type_name: str) -> tuple[bool, object]:
    """Convert ``text`` to ``type_name`` if that is lossless; ``(ok, value)``."""
    stripped = text.strip()
    if type_name == "integer":
        if len(stripped) <= _MAX_NUMBER_TEXT and _INTEGER_TEXT.fullmatch(stripped):
            return True, int(stripped)
    elif type_name == "number":
        if len(stripped) <= _MAX_NUMBER_TEXT and _NUMBER_TEXT.fullmatch(stripped):
            if _INTEGER_TEXT.fullmatch(stripped):
                return True, int(stripped)
            number = float(stripped)
            if math.isfinite(number):
                return True, number
    elif type_name == "boolean":
        flag = _BOOLEAN_TEXT.get(stripped.lower())
        if flag is not None:
            return True, flag
    return False, None


@attrs.frozen
class TypeMismatch:
    """A value that is not of its declared type and cannot be safely coerced."""

    path: Path
    expected: tuple[str, ...]
    got: object


def coerce_value(value: object, schema: object, path: Path,
                 mismatches: list[TypeMismatch]) -> object:
    """Return ``value`` with safe coercions applied, following ``schema``.

    Values that cannot be made to match their declared type are left as they
    are and reported in ``mismatches``.  The input is never mutated: a changed
    container is a new one, an unchanged value is returned as is.
    """
    if not isinstance(schema, Mapping):
        return value
    types = declared_types(schema)
    if types and not any(is_json_type(value, t) for t in types):
        if isinstance(value, str):
            for type_name in types:
                ok, coerced = coerce_text(value, type_name)
                if ok:
                    return coerced
        mismatches.append(TypeMismatch(path, types, value))
        return value
    if (
        isinstance(value, float)
        and "integer" in types
        and "number" not in types
        and value.is_integer()
    ):
        return int(value)
    if isinstance(value, dict):
        return _coerce_object(value, schema, path, mismatches)
    if isinstance(value, list):
        return _coerce_array(value, schema, path, mismatches)
    return value


def _coerce_object(
    value: dict[str, object], schema: Mapping[str, object], path: Path,
    mismatches: list[TypeMismatch],
) -> dict[str, object]:
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return value
    changed: dict[str, object] | None = None
    for key, item in value.items():
        if key not in properties:
            continue
        new = coerce_value(item, properties[key], (*path, key), mismatches)
        if new is not item:
            if changed is None:
                changed = dict(value)
            changed[key] = new
    return value if changed is None else changed


def _coerce_array(
    value: list[object], schema: Mapping[str, object], path: Path, mismatches: list[TypeMismatch]
) -> list[object]:
    items = schema.get("items")
    if not isinstance(items, Mapping):
        return value
    changed: list[object] | None = None
    for index, item in enumerate(value):
        new = coerce_value(item, items, (*path, index), mismatches)
        if new is not item:
            if changed is None:
                changed = list(value)
            changed[index] = new
    return value if changed is None else changed
