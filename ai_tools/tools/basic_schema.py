"""A small JSON Schema checker used when the ``jsonschema`` package is missing.

It covers the keywords tool schemas use — ``type``, ``enum``, ``const``, numeric
bounds (both the draft 4 boolean and the later numeric ``exclusive*`` forms),
``multipleOf``, ``pattern``, string, array and object sizes, ``uniqueItems``,
``properties``, ``patternProperties``, ``additionalProperties``, ``items``
(single schema), ``required``, ``dependentRequired``, ``dependentSchemas``,
``dependencies``, ``not``, ``allOf``, ``anyOf``, ``oneOf`` and
``if``/``then``/``else`` — and reports failures as the same
:class:`~ai_tools.tools.validation_messages.SchemaProblem` values the jsonschema
path produces.  Other keywords (``$ref``, ``format``, ``prefixItems``...) are
ignored: this is a safety net, not a full implementation.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator, Mapping
from fractions import Fraction
from typing import Any

from ai_tools.tools.coercion import Path, is_json_type
from ai_tools.tools.validation_messages import SchemaProblem

Check = Callable[[Any, Any, Mapping[str, Any], Path], Iterator[SchemaProblem]]


def json_equal(left: Any, right: Any) -> bool:
    """JSON equality: ``1 == 1.0`` but ``True != 1`` (as jsonschema compares)."""
    if isinstance(left, bool) or isinstance(right, bool):
        return type(left) is type(right) and left == right
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(map(json_equal, left, right))
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(json_equal(left[k], right[k]) for k in left)
    if isinstance(left, list | dict) or isinstance(right, list | dict):
        return False
    return bool(left == right)


@functools.lru_cache(maxsize=256)
def compiled_regex(pattern: str) -> re.Pattern[str]:
    """``re.compile`` with a cache (patterns repeat across calls)."""
    return re.compile(pattern)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def iter_problems(instance: Any, schema: Any, path: Path = ()) -> Iterator[SchemaProblem]:
    """Every failed keyword of ``instance`` against ``schema``."""
    if not isinstance(schema, Mapping):
        return  # ``true`` (and anything malformed) constrains nothing
    for keyword, value in schema.items():
        check = _CHECKS.get(keyword)
        if check is not None:
            yield from check(value, instance, schema, path)


def check_value(instance: Any, schema: Any, path: Path = ()) -> Iterator[SchemaProblem]:
    """Like :func:`iter_problems`, but also handles the boolean schemas ``true``/``false``."""
    if schema is False:
        yield SchemaProblem(path, "false", False, instance, schema)
        return
    yield from iter_problems(instance, schema, path)


def is_valid(instance: Any, schema: Any) -> bool:
    """Whether ``instance`` satisfies ``schema``."""
    return next(check_value(instance, schema), None) is None


def _problem(keyword: str, value: Any, instance: Any, schema: Mapping[str, Any], path: Path
             ) -> SchemaProblem:
    return SchemaProblem(path, keyword, value, instance, schema)


def _type(value: Any, instance: Any, schema: Mapping[str, Any], path: Path
          ) -> Iterator[SchemaProblem]:
    types = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    if types and not any(is_json_type(instance, t) for t in types if isinstance(t, str)):
        yield _problem("type", value, instance, schema, path)


def _enum(value: Any, instance: Any, schema: Mapping[str, Any], path: Path
          ) -> Iterator[SchemaProblem]:
    if isinstance(value, list) and not any(json_equal(instance, v) for v in value):
        yield _problem("enum", value, instance, schema, path)


def _const(value: Any, instance: Any, schema: Mapping[str, Any], path: Path
           ) -> Iterator[SchemaProblem]:
    if not json_equal(instance, value):
        yield _problem("const", value, instance, schema, path)


def _bound(keyword: str) -> Check:
    lower = keyword in {"minimum", "exclusiveMinimum"}

    def check(value: Any, instance: Any, schema: Mapping[str, Any], path: Path
              ) -> Iterator[SchemaProblem]:
        if not _is_number(instance) or not _is_number(value):
            return  # the draft 4 boolean form is handled by minimum/maximum
        exclusive = keyword.startswith("exclusive") or schema.get(
            "exclusiveMinimum" if lower else "exclusiveMaximum") is True
        if lower:
            failed = instance <= value if exclusive else instance < value
        else:
            failed = instance >= value if exclusive else instance > value
        if failed:
            yield _problem(keyword, value, instance, schema, path)

    return check


def _multiple_of(value: Any, instance: Any, schema: Mapping[str, Any], path: Path
                 ) -> Iterator[SchemaProblem]:
    if not _is_number(instance) or not _is_number(value) or not value:
        return
    if isinstance(value, float) or isinstance(instance, float):
        try:
            quotient = instance / value
            failed = int(quotient) != quotient
        except OverflowError:
            failed = Fraction(instance) % Fraction(value) != 0
        except ValueError:  # NaN
            failed = True
    else:
        failed = bool(instance % value)
    if failed:
        yield _problem("multipleOf", value, instance, schema, path)


def _pattern(value: Any, instance: Any, schema: Mapping[str, Any], path: Path
             ) -> Iterator[SchemaProblem]:
    if not isinstance(instance, str) or not isinstance(value, str):
        return
    if not compiled_regex(value).search(instance):
        yield _problem("pattern", value, instance, schema, path)


def _size(keyword: str, kind: type[str | list[Any] | dict[Any, Any]], at_least: bool) -> Check:
    def check(value: Any, instance: Any, schema: Mapping[str, Any], path: Path
              ) -> Iterator[SchemaProblem]:
        if not isinstance(instance, kind) or not isinstance(value, int):
            return
        size = len(instance)
        if (size < value) if at_least else (size > value):
            yield _problem(keyword, value, instance, schema, path)

    return check


def _unique_items(value: Any, instance: Any, schema: Mapping[str, Any], path: Path
                  ) -> Iterator[SchemaProblem]:
    if value is not True or not isinstance(instance, list):
        return
    for index, item in enumerate(instance):
        if any(json_equal(item, other) for other in instance[index + 1:]):
            yield _problem("uniqueItems", value, instance, schema, path)
            return


def _properties(value: Any, instance: Any, schema: Mapping[str, Any], path: Path
                ) -> Iterator[SchemaProblem]:
    if not isinstance(instance, dict) or not isinstance(value, Mapping):
        return
    for name, subschema in value.items():
        if name in instance:
            yield from check_value(instance[name], subschema, (*path, name))


def _pattern_properties(value: Any, instance: Any, schema: Mapping[str, Any], path: Path
                        ) -> Iterator[SchemaProblem]:
    if not isinstance(instance, dict) or not isinstance(value, Mapping):
        return
    for pattern, subschema in value.items():
        for key, item in instance.items():
            if isinstance(key, str) and compiled_regex(pattern).search(key):
                yield from check_value(item, subschema, (*path, key))


def _additional_properties(value: Any, instance: Any, schema: Mapping[str, Any], path: Path
                           ) -> Iterator[SchemaProblem]:
    if not isinstance(instance, dict):
        return
    properties = schema.get("properties")
    known = properties if isinstance(properties, Mapping) else {}
    patterns = schema.get("patternProperties")
    patterns = list(patterns) if isinstance(patterns, Mapping) else []
    extra = [
        key for key in instance
        if key not in known
        and not (isinstance(key, str) and any(compiled_regex(p).search(key) for p in patterns))
    ]
    if not extra:
        return
    if value is False:
        yield _problem("additionalProperties", value, instance, schema, path)
    elif isinstance(value, Mapping):
        for key in extra:
            yield from check_value(instance[key], value, (*path, key))


def _items(value: Any, instance: Any, schema: Mapping[str, Any], path: Path
           ) -> Iterator[SchemaProblem]:
    if not isinstance(instance, list) or "prefixItems" in schema:
        return
    if isinstance(value, Mapping) or isinstance(value, bool):
        for index, item in enumerate(instance):
            yield from check_value(item, value, (*path, index))


def _required(value: Any, instance: Any, schema: Mapping[str, Any], path: Path
              ) -> Iterator[SchemaProblem]:
    if isinstance(instance, dict) and isinstance(value, list):
        if any(name not in instance for name in value):
            yield _problem("required", value, instance, schema, path)


def _dependent_required(value: Any, instance: Any, schema: Mapping[str, Any], path: Path
                        ) -> Iterator[SchemaProblem]:
    if not isinstance(instance, dict) or not isinstance(value, Mapping):
        return
    for trigger, needed in value.items():
        if trigger in instance and isinstance(needed, list):
            if any(name not in instance for name in needed):
                yield _problem("dependentRequired", value, instance, schema, path)
                return


def _dependent_schemas(value: Any, instance: Any, schema: Mapping[str, Any], path: Path
                       ) -> Iterator[SchemaProblem]:
    if not isinstance(instance, dict) or not isinstance(value, Mapping):
        return
    for trigger, subschema in value.items():
        if trigger in instance:
            yield from check_value(instance, subschema, path)


def _dependencies(value: Any, instance: Any, schema: Mapping[str, Any], path: Path
                  ) -> Iterator[SchemaProblem]:
    """The pre-2019 ``dependencies``: a list of names or a schema per trigger."""
    if not isinstance(instance, dict) or not isinstance(value, Mapping):
        return
    reported = False
    for trigger, needed in value.items():
        if trigger not in instance:
            continue
        if isinstance(needed, list):
            if not reported and any(name not in instance for name in needed):
                reported = True
                yield _problem("dependencies", value, instance, schema, path)
        else:
            yield from check_value(instance, needed, path)


def _not(value: Any, instance: Any, schema: Mapping[str, Any], path: Path
         ) -> Iterator[SchemaProblem]:
    if is_valid(instance, value):
        yield _problem("not", value, instance, schema, path)


def _all_of(value: Any, instance: Any, schema: Mapping[str, Any], path: Path
            ) -> Iterator[SchemaProblem]:
    if isinstance(value, list):
        for subschema in value:
            yield from check_value(instance, subschema, path)


def _any_of(value: Any, instance: Any, schema: Mapping[str, Any], path: Path
            ) -> Iterator[SchemaProblem]:
    if isinstance(value, list) and not any(is_valid(instance, s) for s in value):
        yield _problem("anyOf", value, instance, schema, path)


def _one_of(value: Any, instance: Any, schema: Mapping[str, Any], path: Path
            ) -> Iterator[SchemaProblem]:
    if isinstance(value, list) and sum(1 for s in value if is_valid(instance, s)) != 1:
        yield _problem("oneOf", value, instance, schema, path)


def _if(value: Any, instance: Any, schema: Mapping[str, Any], path: Path
        ) -> Iterator[SchemaProblem]:
    branch = "then" if is_valid(instance, value) else "else"
    if branch in schema:
        yield from check_value(instance, schema[branch], path)


_CHECKS: dict[str, Check] = {
    "type": _type,
    "enum": _enum,
    "const": _const,
    "minimum": _bound("minimum"),
    "maximum": _bound("maximum"),
    "exclusiveMinimum": _bound("exclusiveMinimum"),
    "exclusiveMaximum": _bound("exclusiveMaximum"),
    "multipleOf": _multiple_of,
    "pattern": _pattern,
    "minLength": _size("minLength", str, at_least=True),
    "maxLength": _size("maxLength", str, at_least=False),
    "minItems": _size("minItems", list, at_least=True),
    "maxItems": _size("maxItems", list, at_least=False),
    "minProperties": _size("minProperties", dict, at_least=True),
    "maxProperties": _size("maxProperties", dict, at_least=False),
    "uniqueItems": _unique_items,
    "properties": _properties,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
    "items": _items,
    "required": _required,
    "dependentRequired": _dependent_required,
    "dependentSchemas": _dependent_schemas,
    "dependencies": _dependencies,
    "not": _not,
    "allOf": _all_of,
    "anyOf": _any_of,
    "oneOf": _one_of,
    "if": _if,
}


def check_schema_shape(schema: Any, where: str = "parameters") -> list[str]:
    """Structural mistakes in a schema, for when the metaschema is not available.

    Checks what this module relies on: schemas are objects or booleans, ``type``
    names are known, ``properties`` maps names to schemas, ``required`` and
    ``enum`` are lists, bounds are numbers and patterns compile.
    """
    problems: list[str] = []
    _shape(schema, where, problems)
    return problems


_TYPE_NAMES = {"string", "integer", "number", "boolean", "null", "array", "object"}
_NUMERIC = ("minimum", "maximum", "multipleOf")
_COUNTS = ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties")


def _shape(schema: Any, where: str, problems: list[str]) -> None:
    if isinstance(schema, bool):
        return
    if not isinstance(schema, dict):
        problems.append(f"{where}: a schema must be an object, not {type(schema).__name__}")
        return
    types = schema.get("type")
    names = [types] if isinstance(types, str) else types if isinstance(types, list) else None
    if "type" in schema and (names is None or any(n not in _TYPE_NAMES for n in names)):
        problems.append(f"{where}.type: unknown type {types!r}")
    for key in _NUMERIC:
        if key in schema and not _is_number(schema[key]):
            problems.append(f"{where}.{key}: must be a number")
    for key in ("exclusiveMinimum", "exclusiveMaximum"):
        if key in schema and not (_is_number(schema[key]) or isinstance(schema[key], bool)):
            problems.append(f"{where}.{key}: must be a number")
    for key in _COUNTS:
        value = schema.get(key, 0)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            problems.append(f"{where}.{key}: must be a non-negative integer")
    for key in ("enum", "required", "allOf", "anyOf", "oneOf"):
        if key in schema and not isinstance(schema[key], list):
            problems.append(f"{where}.{key}: must be an array")
    if isinstance(schema.get("required"), list) and not all(
        isinstance(n, str) for n in schema["required"]
    ):
        problems.append(f"{where}.required: must list parameter names (strings)")
    if "pattern" in schema:
        try:
            re.compile(schema["pattern"])
        except (re.error, TypeError) as e:
            problems.append(f"{where}.pattern: not a valid regular expression ({e})")
    for key in ("properties", "patternProperties", "dependentSchemas"):
        if key in schema:
            if not isinstance(schema[key], dict):
                problems.append(f"{where}.{key}: must be an object")
                continue
            for name, subschema in schema[key].items():
                _shape(subschema, f"{where}.{key}.{name}", problems)
    for key in ("items", "additionalProperties", "not", "if", "then", "else"):
        if key in schema:
            _shape(schema[key], f"{where}.{key}", problems)
    for key in ("allOf", "anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            for index, subschema in enumerate(schema[key]):
                _shape(subschema, f"{where}.{key}[{index}]", problems)
