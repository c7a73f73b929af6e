"""Turn failed schema keywords into short errors a model can act on.

The schema checker (jsonschema) reports a failure as a :class:`SchemaProblem`:
the keyword that failed, its value, the instance and the (sub)schema.
:func:`describe_problem` turns one into :class:`ErrorEntry` values with a plain
message (``Must be at least 1``), the constraint (``minimum: 1``) and the
offending value — never a raw validator dump.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Final, cast

import attrs

from ai_tools.json_types import JSONMapping
from ai_tools.tools.coercion import Path, declared_types

STAGE_REQUIRED = "required"
STAGE_TYPE = "type"
STAGE_CONSTRAINT = "constraint"
STAGE_DEPENDENCY = "dependency"
STAGE_CUSTOM = "custom"
STAGE_INTERNAL = "internal"
STAGE_ORDER = {
    STAGE_REQUIRED: 0,
    STAGE_TYPE: 1,
    STAGE_CONSTRAINT: 2,
    STAGE_CUSTOM: 3,
    STAGE_DEPENDENCY: 4,
    STAGE_INTERNAL: 5,
}

class _NotGiven(enum.Enum):
    NOT_GIVEN = "not given"

    def __repr__(self) -> str:
        return "NOT_GIVEN"


NOT_GIVEN: Final = _NotGiven.NOT_GIVEN
"""Marks an error without an offending value (e.g. a missing parameter)."""

IsValid = Callable[[object, object], bool]
"""``is_valid(instance, subschema)`` — used to explain ``oneOf``/``anyOf`` failures."""

_PREVIEW_LIMIT = 80


@attrs.frozen
class SchemaProblem:
    """One failed schema keyword, as the checker finds it."""

    path: Path
    keyword: str
    keyword_value: object
    instance: object
    schema: JSONMapping | bool


@attrs.frozen
class ErrorEntry:
    """One model-facing error: where, what, what was expected, what was sent."""

    param: str
    message: str
    constraint: str | None
    got: object
    stage: str


def format_path(path: Path) -> str:
    """``("filter", "tags", 1)`` → ``"filter.tags[1]"``; the root is ``"parameters"``."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text or "parameters"


def preview(value: object, limit: int = _PREVIEW_LIMIT) -> str:
    """Short JSON-like text of ``value`` (truncated; never raises)."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=repr)
    except (ValueError, TypeError, RecursionError):
        try:
            text = repr(value)
        except Exception:
            text = f"<{type(value).__name__}>"
    return _shorten(text, limit)


def describe_types(types: Sequence[str]) -> str:
    """``("integer", "null")`` → ``"integer or null"``."""
    names = list(types)
    if len(names) <= 1:
        return "".join(names)
    return f"{', '.join(names[:-1])} or {names[-1]}"


def _join(path: Path, key: str | int) -> str:
    return format_path((*path, key))


def _names(values: Sequence[object]) -> str:
    return ", ".join(f"'{v}'" for v in values)


def _required_only(schema: object) -> list[str] | None:
    """The names when ``schema`` is exactly ``{"required": [names...]}``."""
    if isinstance(schema, Mapping) and set(schema) == {"required"}:
        names = schema["required"]
        if isinstance(names, list) and names and all(isinstance(n, str) for n in names):
            return names
    return None


def missing_constraint(schema: object, name: str) -> str | None:
    """The constraint shown for a missing parameter: its declared type, if any."""
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    if isinstance(properties, Mapping) and isinstance(properties.get(name), Mapping):
        types = declared_types(properties[name])
        if types:
            return f"type: {describe_types(types)}"
    return None


Entry = Callable[..., ErrorEntry]
"""Makes an entry of one problem: ``entry(message, constraint=None, got=<the instance>,
stage=STAGE_CONSTRAINT, where=<the parameter>)``."""


def describe_problem(problem: SchemaProblem, is_valid: IsValid) -> list[ErrorEntry]:
    """The model-facing errors for one failed keyword (usually one entry)."""
    keyword, value = problem.keyword, problem.keyword_value
    param = format_path(problem.path)

    def entry(message: str, constraint: str | None = None, got: object = problem.instance,
              stage: str = STAGE_CONSTRAINT, where: str = param) -> ErrorEntry:
        return ErrorEntry(where, message, constraint, got, stage)

    simple = _SIMPLE.get(keyword)
    if simple is not None:
        message, constraint = simple(value)
        return [entry(message, constraint)]
    special = _SPECIAL.get(keyword)
    if special is not None:
        return special(problem, is_valid, entry)
    return [entry(f"Fails the '{keyword}' rule", f"{keyword}: {preview(value)}")]


_SIMPLE: dict[str, Callable[[object], tuple[str, str | None]]] = {
    "enum": lambda v: ("Must be one of the allowed values", f"one of: {preview_list(v)}"),
    "const": lambda v: (f"Must be exactly {preview(v)}", f"const: {preview(v)}"),
    "multipleOf": lambda v: (f"Must be a multiple of {preview(v)}", f"multipleOf: {v}"),
    "pattern": lambda v: ("Does not match the required pattern", f"pattern: {v}"),
    "format": lambda v: (f"Must be a valid {v}", f"format: {v}"),
    "uniqueItems": lambda v: ("Items must be unique (no duplicates)", None),
}
"""Keywords whose error depends on their value alone: (message, constraint)."""


def _required_entries(problem: SchemaProblem, is_valid: IsValid, entry: Entry
                      ) -> list[ErrorEntry]:
    instance = problem.instance
    return [entry("Missing required parameter", missing_constraint(problem.schema, name),
                  NOT_GIVEN, STAGE_REQUIRED, _join(problem.path, name))
            for name in cast("list[str]", problem.keyword_value)
            if isinstance(instance, Mapping) and name not in instance]


def _type_entries(problem: SchemaProblem, is_valid: IsValid, entry: Entry) -> list[ErrorEntry]:
    declared = declared_types(cast("JSONMapping", problem.schema))
    kinds = describe_types(declared or cast("tuple[str]", (problem.keyword_value,)))
    return [entry(f"Expected {kinds}", f"type: {kinds}", stage=STAGE_TYPE)]


def _bound_entries(problem: SchemaProblem, is_valid: IsValid, entry: Entry
                   ) -> list[ErrorEntry]:
    return [_bound_entry(problem.keyword, problem.keyword_value, problem.schema, entry)]


def _count_entries(problem: SchemaProblem, is_valid: IsValid, entry: Entry
                   ) -> list[ErrorEntry]:
    keyword, value = problem.keyword, problem.keyword_value
    what, bound = _COUNTS[keyword]
    if keyword == "minLength" and value == 1:
        return [entry("Must not be empty", "minLength: 1")]
    unit = what if value != 1 else what.rstrip("s")
    return [entry(f"Must have {bound} {value} {unit}", f"{keyword}: {value}")]


def _additional_entries(problem: SchemaProblem, is_valid: IsValid, entry: Entry
                        ) -> list[ErrorEntry]:
    extra = _extra_keys(problem.instance, problem.schema)
    return [entry(f"Unexpected key(s): {_names(extra)}", "additionalProperties: false",
                  NOT_GIVEN)]


def _not_entries(problem: SchemaProblem, is_valid: IsValid, entry: Entry) -> list[ErrorEntry]:
    value = problem.keyword_value
    names = _required_only(value)
    if names is None:
        return [entry("Must not match the forbidden form", f"not: {preview(value)}")]
    if len(names) == 2:
        message = f"Use either '{names[0]}' or '{names[1]}', not both"
    else:
        message = f"Do not use {_names(names)} all together"
    where = ", ".join(_join(problem.path, n) for n in names)
    return [entry(message, None, NOT_GIVEN, STAGE_DEPENDENCY, where)]


def _dependency_entries(problem: SchemaProblem, is_valid: IsValid, entry: Entry
                        ) -> list[ErrorEntry]:
    """One entry per missing dependency: ``unit: Required when 'amount' is given``."""
    entries: list[ErrorEntry] = []
    instance = problem.instance
    if not isinstance(instance, Mapping) or not isinstance(problem.keyword_value, Mapping):
        return entries
    for trigger, needed in problem.keyword_value.items():
        if trigger not in instance or not isinstance(needed, list):
            continue
        for name in needed:
            if name not in instance:
                entries.append(entry(f"Required when '{trigger}' is given", None, NOT_GIVEN,
                                     STAGE_DEPENDENCY, _join(problem.path, name)))
    return entries


def _alternatives_entries(problem: SchemaProblem, is_valid: IsValid, entry: Entry
                          ) -> list[ErrorEntry]:
    return [_alternatives_entry(problem, is_valid, entry)]


_SPECIAL: dict[str, Callable[[SchemaProblem, IsValid, Entry], list[ErrorEntry]]] = {
    "required": _required_entries,
    "type": _type_entries,
    **dict.fromkeys(("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"),
                    _bound_entries),
    **dict.fromkeys(("minLength", "maxLength", "minItems", "maxItems", "minProperties",
                     "maxProperties"), _count_entries),
    "additionalProperties": _additional_entries,
    "dependentRequired": _dependency_entries,
    "dependencies": _dependency_entries,
    "not": _not_entries,
    "oneOf": _alternatives_entries,
    "anyOf": _alternatives_entries,
}
"""Keywords whose errors need the problem itself."""


def preview_list(values: object, limit: int = 12) -> str:
    """``["a", "b"]`` → ``"a", "b"`` (long lists shortened)."""
    if not isinstance(values, list):
        return preview(values)
    shown = ", ".join(preview(v, 40) for v in values[:limit])
    if len(values) > limit:
        shown += f", ... ({len(values)} values)"
    return shown


_COUNTS = {
    "minLength": ("characters", "at least"),
    "maxLength": ("characters", "at most"),
    "minItems": ("items", "at least"),
    "maxItems": ("items", "at most"),
    "minProperties": ("keys", "at least"),
    "maxProperties": ("keys", "at most"),
}


def _bound_entry(keyword: str, value: object, schema: object, entry: Entry) -> ErrorEntry:
    exclusive = keyword.startswith("exclusive")
    if not exclusive and isinstance(schema, Mapping):
        # Draft 4 spells exclusive bounds as a boolean next to minimum/maximum.
        sibling = "exclusiveMinimum" if keyword == "minimum" else "exclusiveMaximum"
        exclusive = schema.get(sibling) is True
    lower = keyword in {"minimum", "exclusiveMinimum"}
    if lower:
        words = "greater than" if exclusive else "at least"
    else:
        words = "less than" if exclusive else "at most"
    name = keyword if keyword.startswith("exclusive") or not exclusive else (
        "exclusiveMinimum" if lower else "exclusiveMaximum")
    return entry(f"Must be {words} {preview(value)}", f"{name}: {preview(value)}")


def _extra_keys(instance: object, schema: object) -> list[str]:
    if not isinstance(instance, Mapping) or not isinstance(schema, Mapping):
        return []
    properties = schema.get("properties")
    known = set(properties) if isinstance(properties, Mapping) else set()
    patterns = schema.get("patternProperties")
    extra = []
    for key in instance:
        if key in known:
            continue
        if isinstance(patterns, Mapping) and isinstance(key, str):
            if any(re.search(p, key) for p in patterns):
                continue
        extra.append(str(key))
    return sorted(extra)


def _alternatives_entry(problem: SchemaProblem, is_valid: IsValid, entry: Entry) -> ErrorEntry:
    """Explain a failed ``oneOf``/``anyOf``; name the parameters for required-only forms."""
    branches = problem.keyword_value if isinstance(problem.keyword_value, list) else []
    groups = [_required_only(b) for b in branches]
    one = problem.keyword == "oneOf"
    if groups and all(g is not None and len(g) == 1 for g in groups):
        names = [g[0] for g in groups if g is not None]
        where = ", ".join(_join(problem.path, n) for n in names)
        given = [n for n in names if isinstance(problem.instance, Mapping)
                 and n in problem.instance]
        if one and given:
            return entry(f"Give only one of {_names(names)}, not several", None, NOT_GIVEN,
                         STAGE_DEPENDENCY, where)
        return entry(f"Give {'exactly' if one else 'at least'} one of {_names(names)}",
                     None, NOT_GIVEN, STAGE_DEPENDENCY, where)
    matching = sum(1 for b in branches if _safe_is_valid(is_valid, problem.instance, b))
    forms = _shorten(" | ".join(preview(b, 60) for b in branches), 160)
    if one and matching > 1:
        return entry("Matches more than one allowed form; it must match exactly one",
                     f"exactly one of: {forms}")
    return entry("Does not match any allowed form",
                 f"one of: {forms}" if one else f"any of: {forms}")


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def _safe_is_valid(is_valid: IsValid, instance: object, schema: object) -> bool:
    try:
        return is_valid(instance, schema)
    except Exception:
        return False
