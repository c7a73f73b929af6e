"""A function's signature as a tool's parameter schema, built once when the tool is made.

Each parameter becomes a property of an object JSON Schema: its type hint gives
the type (msgspec writes the JSON Schema of a type: str/int/float/bool,
``Literal``, ``Enum``, ``Optional``/``| None``, ``list``/``tuple``/``dict``,
``TypedDict``, dataclasses and attrs classes...), a parameter without a default
is required, and the description is the parameter's ``Annotated[..., "text"]``
or, failing that, what the docstring says of it.  The schema is self-contained
(shared definitions are written in place), so the compiled validator, the
coercion of model text and the model's view all work on it as on a hand-written
schema.

One parameter may be typed :class:`~ai_tools.tools.base.Actor`: it receives
the actor of the call (who acts, the world, the store, the call id) and is not
part of the schema, so the model never sees it.

Values that JSON does not carry as they are (an enum member, a dataclass, a
tuple...) are converted from the validated JSON by msgspec before the call;
parameters of plain JSON types (the common case) are passed as validated,
without a conversion step.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import json
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import attrs
import msgspec

from ai_tools.json_types import JSONArray, JSONObject
from ai_tools.tools.base import Actor

__all__ = ["SignatureSchema", "describe_signature"]

_PLAIN = (str, int, float, bool, type(None))
_UNION_ORIGINS = (typing.Union, types.UnionType)
_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean"}


@attrs.frozen
class SignatureSchema:
    """What the engine needs to call a function as a tool."""

    parameters: JSONObject
    """The object JSON Schema of the parameters the model gives."""
    actor_parameter: str | None
    """The name of the parameter the actor is passed as, or None."""
    converted: dict[str, object]
    """Parameters whose validated JSON is converted (by msgspec) to their type: name -> type."""


def describe_signature(function: Callable[..., object],
                       descriptions: Mapping[str, str]) -> SignatureSchema:
    """The schema of ``function``'s parameters; ``descriptions`` come from its docstring.

    Raises ``ValueError`` naming the parameter that cannot be described: no
    type hint, ``*args``/``**kwargs``, a positional-only parameter, a type
    JSON Schema cannot express, a second actor parameter.
    """
    signature = inspect.signature(function)
    try:
        hints = typing.get_type_hints(function, include_extras=True)
    except Exception as e:  # an undefined name in an annotation...
        raise ValueError(f"its type hints cannot be resolved: {type(e).__name__}: {e}") from e
    actor_parameter = None
    described: dict[str, object] = {}
    required: JSONArray = []
    for name, parameter in signature.parameters.items():
        annotation = _checked_annotation(name, parameter, hints)
        if _is_actor(annotation):
            if actor_parameter is not None:
                raise ValueError(f"parameter {name!r}: only one parameter may be the Actor "
                                 f"({actor_parameter!r} is already)")
            actor_parameter = name
            continue
        described[name] = annotation
        if parameter.default is inspect.Parameter.empty:
            required.append(name)
    properties = _properties(described, descriptions, signature)
    schema: JSONObject = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    schema["additionalProperties"] = False
    converted = {name: _strip_annotated(tp) for name, tp in described.items()
                 if _needs_conversion(tp)}
    return SignatureSchema(parameters=schema, actor_parameter=actor_parameter,
                           converted=converted)


def _checked_annotation(name: str, parameter: inspect.Parameter,
                        hints: Mapping[str, object]) -> object:
    kind = parameter.kind
    if kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
        star = "*" if kind is parameter.VAR_POSITIONAL else "**"
        raise ValueError(f"parameter {star}{name}: a tool's parameters are named one by one "
                         "(the model sends an object of them), not *args or **kwargs")
    if kind is parameter.POSITIONAL_ONLY:
        raise ValueError(f"parameter {name!r} is positional-only; the model passes "
                         "parameters by name")
    if name not in hints:
        raise ValueError(f"parameter {name!r} has no type hint (its schema is built from it)")
    return hints[name]


def _properties(described: Mapping[str, object], descriptions: Mapping[str, str],
                signature: inspect.Signature) -> JSONObject:
    """Each parameter's schema, definitions written in place, with its description."""
    for name, annotation in described.items():
        try:
            msgspec.json.schema(annotation)
        except (TypeError, ValueError) as e:
            raise ValueError(f"parameter {name!r}: its type {_type_name(annotation)} cannot be "
                             f"described by a JSON Schema ({_first_line(e)})") from e
    schemas, definitions = msgspec.json.schema_components(
        list(described.values()), ref_template="#/$defs/{name}")
    _describe_fields(described.values(), definitions)
    properties: JSONObject = {}
    for (name, annotation), schema in zip(described.items(), schemas, strict=True):
        try:
            prop = _inline(schema, definitions, ())
        except ValueError as e:
            raise ValueError(f"parameter {name!r}: {e}") from e
        description = _annotated_text(annotation) or descriptions.get(name)
        if description:
            prop = {"description": description, **prop}
        default = signature.parameters[name].default
        if default is not inspect.Parameter.empty and _is_json(default):
            prop["default"] = default
        properties[name] = prop
    return properties


def _inline(schema: object, definitions: Mapping[str, object], seen: tuple[str, ...]) -> Any:
    """``schema`` with every ``$ref`` replaced by its definition (titles left out)."""
    if isinstance(schema, list):
        return [_inline(item, definitions, seen) for item in schema]
    if not isinstance(schema, dict):
        return schema
    ref = schema.get("$ref")
    if isinstance(ref, str):
        name = ref.rsplit("/", 1)[-1]
        if name in seen:
            raise ValueError(f"type {name} contains itself; a tool's parameters must have "
                             "a finite schema")
        return _inline(definitions[name], definitions, (*seen, name))
    inlined = {key: _inline(value, definitions, seen) for key, value in schema.items()
               if key != "title"}
    if "enum" in inlined and "type" not in inlined:
        kinds = {_JSON_TYPES.get(type(v)) for v in inlined["enum"]}
        if len(kinds) == 1 and None not in kinds:  # a Literal or an Enum of one kind
            inlined = {"type": kinds.pop(), **inlined}
    return inlined


def _describe_fields(annotations: Iterable[object], definitions: dict[str, Any]) -> None:
    """Field descriptions msgspec does not read: ``Annotated[..., "text"]`` and
    ``metadata={"description": ...}`` of dataclass and attrs fields."""
    for cls in _classes(annotations):
        definition = definitions.get(cls.__name__)
        if definition is None:
            continue
        properties = definition.get("properties", {})
        for field, text in _field_descriptions(cls).items():
            if field in properties and "description" not in properties[field]:
                properties[field] = {"description": text, **properties[field]}


def _field_descriptions(cls: type) -> dict[str, str]:
    texts: dict[str, str] = {}
    metadata: dict[str, Mapping[str, Any]] = {}
    if dataclasses.is_dataclass(cls):
        metadata = {f.name: f.metadata for f in dataclasses.fields(cls)}
    elif attrs.has(cls):
        metadata = {f.name: f.metadata for f in attrs.fields(cls)}
    for name, meta in metadata.items():
        if isinstance(meta.get("description"), str):
            texts[name] = meta["description"]
    for name, hint in _class_hints(cls).items():
        text = _annotated_text(hint)
        if text:
            texts[name] = text
    return texts


def _class_hints(cls: type) -> dict[str, object]:
    try:
        return typing.get_type_hints(cls, include_extras=True)
    except Exception:  # msgspec resolved them already, or refused the type
        return {}


def _classes(annotations: Iterable[object]) -> Iterator[type]:
    """Every dataclass, attrs class and TypedDict reachable from ``annotations``."""
    pending, seen = list(annotations), set()
    while pending:
        tp = _strip_annotated(pending.pop())
        if id(tp) in seen:
            continue
        seen.add(id(tp))
        pending.extend(typing.get_args(tp))
        if isinstance(tp, type) and _is_record(tp):
            yield tp
            pending.extend(_class_hints(tp).values())


def _is_record(tp: type) -> bool:
    return dataclasses.is_dataclass(tp) or attrs.has(tp) or typing.is_typeddict(tp)


def _is_actor(annotation: object) -> bool:
    """``Actor``, or ``Actor | None`` (a default of None keeps the function callable alone)."""
    tp = _strip_annotated(annotation)
    if typing.get_origin(tp) in _UNION_ORIGINS:
        return set(typing.get_args(tp)) == {Actor, type(None)}
    return tp is Actor


def _needs_conversion(annotation: object) -> bool:
    """Whether a validated JSON value must be converted to be of this type."""
    tp = _strip_annotated(annotation)
    origin = typing.get_origin(tp)
    if tp in _PLAIN or tp is Any or tp in (list, dict) or origin is typing.Literal:
        return False
    if origin in _UNION_ORIGINS:
        return any(_needs_conversion(arg) for arg in typing.get_args(tp))
    if origin is list:
        return any(_needs_conversion(arg) for arg in typing.get_args(tp))
    if origin is dict:
        key, value = (*typing.get_args(tp), Any, Any)[:2]
        return key is not str or _needs_conversion(value)
    if isinstance(tp, type) and typing.is_typeddict(tp):
        return any(_needs_conversion(h) for h in _class_hints(tp).values())
    return True  # enums, dataclasses, attrs classes, tuples, sets, dates...


def _strip_annotated(annotation: object) -> object:
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]  # Annotated[T, ...]: T
    return annotation


def _annotated_text(annotation: object) -> str | None:
    """The description ``Annotated[..., "text"]`` gives (the last string), or None."""
    if typing.get_origin(annotation) is not typing.Annotated:
        return None
    texts = [m for m in typing.get_args(annotation)[1:] if isinstance(m, str)]
    return " ".join(texts[-1].split()) if texts else None


def _is_json(value: object) -> bool:
    if isinstance(value, enum.Enum):
        return False
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


def _type_name(annotation: object) -> str:
    if isinstance(annotation, type) and typing.get_origin(annotation) is None:
        return annotation.__qualname__
    return repr(annotation).replace("typing.", "")


def _first_line(error: Exception) -> str:
    lines = [line for line in str(error).splitlines() if line.strip()]
    return lines[-1].strip() if lines else type(error).__name__
