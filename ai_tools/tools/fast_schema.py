"""A compiled "valid as is?" check for the common subset of JSON Schema.

Most tool schemas use a handful of keywords: ``type``, ``properties``,
``required``, ``additionalProperties``, ``enum``, bounds, lengths,
``pattern``, ``items``.  Checking a call against them through jsonschema costs
tens of microseconds per call, more than everything else the execution engine
does.  :func:`compile_fast_check` turns such a schema into a few closures that
answer one question: does jsonschema accept this instance?

The answer is one-sided: True means jsonschema accepts the instance; False
means "invalid, or not sure" and the caller asks jsonschema (which also gives
the error messages).  It is conservative where exactness would cost: an
integral float where only ``integer`` is declared, a value of a subclass of a
JSON type, an ``enum`` or ``const`` member of another type than the value.
A schema using anything outside the subset (``$ref``, ``allOf``,
``patternProperties``, ``multipleOf``, an ``additionalProperties`` schema,
``$schema``...) gets no fast check at all: :func:`compile_fast_check` returns
None and every call goes to jsonschema.

``tests/unit/test_fast_schema.py`` checks with hypothesis that the answer
agrees with jsonschema's ``Draft202012Validator``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, TypeGuard

__all__ = ["FastCheck", "compile_fast_check"]

FastCheck = Callable[[object], bool]
"""True: jsonschema accepts the value.  False: it does not, or ask it."""

_NoneType = type(None)

_JSON_TYPES: frozenset[type] = frozenset({str, int, float, bool, _NoneType, list, dict})
"""Exact Python types of JSON values; anything else is left to jsonschema."""

_TYPE_SETS: dict[str, frozenset[type]] = {
    "string": frozenset({str}),
    "integer": frozenset({int}),  # an integral float is an integer too: left to jsonschema
    "number": frozenset({int, float}),
    "boolean": frozenset({bool}),
    "null": frozenset({_NoneType}),
    "array": frozenset({list}),
    "object": frozenset({dict}),
}

_ANNOTATIONS = frozenset({
    "title", "description", "default", "examples", "$comment", "deprecated",
    "readOnly", "writeOnly", "format",  # format asserts nothing without a format checker
})
_KEYWORDS = _ANNOTATIONS | {
    "type", "enum", "const", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "minLength", "maxLength", "pattern", "items", "minItems", "maxItems", "properties",
    "required", "additionalProperties",
}
_SCALARS = (str, int, bool, _NoneType)
"""Types of the ``enum`` / ``const`` members the fast check compares itself."""


def _always(value: object) -> bool:
    return True


def _never(value: object) -> bool:
    return False


def _is_number(value: object) -> bool:
    return type(value) in (int, float)


def _is_count(value: object) -> TypeGuard[int]:
    return type(value) is int and value >= 0


def compile_fast_check(schema: object) -> FastCheck | None:
    """The fast check of ``schema``, or None when it uses anything outside the subset."""
    try:
        return _compile(schema)
    except (TypeError, ValueError, re.error, RecursionError):
        return None


def _compile(schema: object) -> FastCheck | None:
    if schema is True:
        return _always
    if schema is False:
        return _never
    if type(schema) is not dict or not _KEYWORDS.issuperset(schema):
        return None
    type_set = _compile_type(schema.get("type", None))
    if type_set is None:
        return None
    checks: list[Callable[[object, type], bool]] = []
    for build in (_compile_values, _compile_numbers, _compile_strings, _compile_arrays,
                  _compile_objects):
        built = build(schema)
        if built is None:
            return None
        checks.extend(built)
    return _typed_check(type_set, tuple(checks))


def _typed_check(accepted: frozenset[type],
                 constraints: tuple[Callable[[object, type], bool], ...]) -> FastCheck:
    """A value of an ``accepted`` type that passes every constraint."""
    if not constraints:
        if accepted is _JSON_TYPES:
            return _json_value

        def check_type(value: object) -> bool:
            return type(value) in accepted

        return check_type

    def check(value: object) -> bool:
        kind = type(value)
        if kind not in accepted:
            return False
        for constraint in constraints:
            if not constraint(value, kind):
                return False
        return True

    return check


def _json_value(value: object) -> bool:
    return type(value) in _JSON_TYPES


def _compile_type(declared: object) -> frozenset[type] | None:
    """The exact Python types ``type`` accepts (all JSON types when absent)."""
    if declared is None:
        return _JSON_TYPES
    names = [declared] if type(declared) is str else declared
    if type(names) is not list or not names:
        return None
    accepted: set[type] = set()
    for name in names:
        types = _TYPE_SETS.get(name) if type(name) is str else None
        if types is None:
            return None
        accepted |= types
    return frozenset(accepted)


def _member_keys(members: object) -> frozenset[tuple[type, object]] | None:
    """``(type, value)`` of scalar ``enum`` members (so True and 1 stay apart)."""
    if type(members) is not list:
        return None
    if not all(type(m) in _SCALARS for m in members):
        return None
    return frozenset((type(m), m) for m in members)


def _compile_values(schema: Mapping[str, object]) -> list[Callable[[object, type], bool]] | None:
    checks: list[Callable[[object, type], bool]] = []
    if "enum" in schema:
        members = _member_keys(schema["enum"])
        if members is None:
            return None

        def enum(value: object, kind: type) -> bool:
            return kind in _SCALAR_SET and (kind, value) in members

        checks.append(enum)
    if "const" in schema:
        const = _member_keys([schema["const"]])
        if const is None:
            return None

        def const_(value: object, kind: type) -> bool:
            return kind in _SCALAR_SET and (kind, value) in const

        checks.append(const_)
    return checks


_SCALAR_SET = frozenset(_SCALARS)


def _compile_numbers(schema: Mapping[str, object]) -> list[Callable[[object, type], bool]] | None:
    bounds = [(key, schema[key]) for key in
              ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum") if key in schema]
    if not bounds:
        return []
    if not all(_is_number(limit) for _, limit in bounds):
        return None
    low = schema.get("minimum")
    high = schema.get("maximum")
    low_x = schema.get("exclusiveMinimum")
    high_x = schema.get("exclusiveMaximum")

    def numbers(value: Any, kind: type) -> bool:  # kind narrows it
        if kind is not int and kind is not float:
            return True
        if low is not None and value < low:
            return False
        if high is not None and value > high:
            return False
        if low_x is not None and value <= low_x:
            return False
        return not (high_x is not None and value >= high_x)

    return [numbers]


def _compile_strings(schema: Mapping[str, object]) -> list[Callable[[object, type], bool]] | None:
    checks: list[Callable[[object, type], bool]] = []
    low = schema.get("minLength", 0)
    high = schema.get("maxLength")
    if not _is_count(low) or (high is not None and not _is_count(high)):
        return None
    if low or high is not None:
        def lengths(value: Any, kind: type) -> bool:  # kind narrows it
            if kind is not str:
                return True
            return low <= len(value) and (high is None or len(value) <= high)

        checks.append(lengths)
    if "pattern" in schema:
        pattern = schema["pattern"]
        if type(pattern) is not str:
            return None
        search = re.compile(pattern).search

        def matches(value: Any, kind: type) -> bool:  # kind narrows it
            return kind is not str or search(value) is not None

        checks.append(matches)
    return checks


def _compile_arrays(schema: Mapping[str, object]) -> list[Callable[[object, type], bool]] | None:
    checks: list[Callable[[object, type], bool]] = []
    low = schema.get("minItems", 0)
    high = schema.get("maxItems")
    if not _is_count(low) or (high is not None and not _is_count(high)):
        return None
    if low or high is not None:
        def sizes(value: Any, kind: type) -> bool:  # kind narrows it
            if kind is not list:
                return True
            return low <= len(value) and (high is None or len(value) <= high)

        checks.append(sizes)
    if "items" in schema:
        item = _compile(schema["items"])
        if item is None:
            return None

        def items(value: Any, kind: type) -> bool:  # kind narrows it
            if kind is not list:
                return True
            for element in value:
                if not item(element):
                    return False
            return True

        checks.append(items)
    return checks


def _compile_properties(properties: object) -> dict[str, FastCheck] | None:
    if type(properties) is not dict:
        return None
    compiled: dict[str, FastCheck] = {}
    for name, subschema in properties.items():
        check = _compile(subschema)
        if type(name) is not str or check is None:
            return None
        compiled[name] = check
    return compiled


def _compile_objects(schema: Mapping[str, object]) -> list[Callable[[object, type], bool]] | None:
    required = schema.get("required", [])
    additional = schema.get("additionalProperties", True)
    if (type(required) is not list or type(additional) is not bool
            or not all(type(name) is str for name in required)):
        return None
    compiled = _compile_properties(schema.get("properties", {}))
    if compiled is None:
        return None
    if not compiled and not required and additional:
        return []
    needed = tuple(required)
    closed = not additional

    def objects(value: Any, kind: type) -> bool:  # kind narrows it
        if kind is not dict:
            return True
        for name in needed:
            if name not in value:
                return False
        for name, item in value.items():
            check = compiled.get(name)
            if check is None:
                if closed:
                    return False
            elif not check(item):
                return False
        return True

    return [objects]
