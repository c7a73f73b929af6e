"""What a model is shown of a tool's parameter schema: the shape, not the bounds.

A tool's ``parameters`` is the one rule its arguments are validated against,
bounds included (string lengths, patterns, item counts, no unknown
properties).  The model does not need those bounds to choose and call the
tool — it needs the names, types, enums, what is required, number ranges and
the descriptions — and every character of the schemas is sent again with
every model call (a model with an 8,192-token window would spend most of it
on bounds).  A call that breaks a bound is refused by the validator with a
message naming the rule, and the model corrects it.

Each :meth:`~ai_tools.tools.base.Tool.schema` (the ``tools=`` entry, and
the parameters fallback mode writes into the prompt) shows
:func:`model_view` of ``parameters``: a copy without the bounds of the schema; validation
keeps using the schema itself, so the arguments accepted are exactly the same.
Number ranges (``minimum``/``maximum``) stay: they are short and they carry
meaning (an importance from 1 to 10).
"""

from __future__ import annotations

from ai_tools.json_types import JSONObject, JSONValue

__all__ = ["LEFT_OUT", "model_view"]

LEFT_OUT = frozenset({
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
    "minLength", "maxLength", "pattern",
    "minItems", "maxItems", "uniqueItems",
    "minProperties", "maxProperties", "propertyNames",
    "default", "$comment",
})
"""Keywords left out of what the model is shown: the bounds (the validator still
applies them) and defaults (the tool applies them; a description says so where it matters)."""

_NAME_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions",
                        "dependentSchemas"})
"""Keywords whose value maps names to schemas: the names are kept, the schemas viewed."""


def model_view(schema: JSONValue) -> JSONValue:
    """A copy of the JSON Schema ``schema`` without :data:`LEFT_OUT`.

    Also left out: ``additionalProperties: false`` (a validation bound: the
    properties the model is shown are the ones it may use) and an empty
    ``required``.  Anything that is not a schema dict is copied as it is.
    """
    if isinstance(schema, list):
        return [model_view(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    view: JSONObject = {}
    for key, value in schema.items():
        if key in LEFT_OUT or (key == "additionalProperties" and value is False):
            continue
        if key == "required" and value == []:
            continue
        if key in _NAME_MAPS and isinstance(value, dict):
            view[key] = {name: model_view(sub) for name, sub in value.items()}
        elif key in ("enum", "const", "required", "examples"):
            view[key] = _copy(value)
        else:
            view[key] = model_view(value)
    return view


def _copy(value: JSONValue) -> JSONValue:
    """A deep copy of plain JSON data (lists and dicts are never shared with the tool)."""
    if isinstance(value, list):
        return [_copy(v) for v in value]
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    return value
