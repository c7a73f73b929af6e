"""Parameter and result validation (ai_tools.tools.validation)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ai_tools.tools import validation
from ai_tools.tools.validation import (
    ValidationResult,
    compile_validator,
    schema_problems,
    validate_tool_result,
)


def obj(properties: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """An object schema with ``properties`` and other keywords."""
    return {"type": "object", "properties": properties, **extra}


@pytest.fixture
def check() -> Any:
    """``check(params, schema)``: compile ``schema`` and validate ``params``."""

    def run(params: Any, schema: dict[str, Any]) -> ValidationResult:
        return compile_validator(schema).validate(params)

    return run


def errors_of(result: ValidationResult) -> list[tuple[str, str, str]]:
    """``(param, stage, message)`` of each error, in order."""
    return [(e["param"], e["stage"], e["message"]) for e in result.errors]


def only_error(result: ValidationResult) -> dict[str, Any]:
    """The single error of a failed result."""
    assert not result.valid
    assert len(result.errors) == 1, result.errors
    return result.errors[0]


# ---------------------------------------------------------------- stage 1: required


def test_missing_required_parameter_names_it_and_its_type(check: Any) -> None:
    """A missing required parameter is an error naming the parameter and its type."""
    schema = obj({"name": {"type": "string"}, "age": {"type": "integer"}}, required=["name"])
    error = only_error(check({"age": 3}, schema))
    assert error["param"] == "name"
    assert error["stage"] == "required"
    assert error["constraint"] == "type: string"
    assert "got" not in error


def test_every_missing_required_parameter_is_reported(check: Any) -> None:
    """All missing parameters are reported at once, so the model fixes them in one go."""
    schema = obj({"a": {"type": "string"}, "b": {}}, required=["a", "b"])
    result = check({}, schema)
    assert errors_of(result) == [
        ("a", "required", "Missing required parameter"),
        ("b", "required", "Missing required parameter"),
    ]
    assert result.errors[1]["constraint"] is None


def test_none_parameters_count_as_no_parameters(check: Any) -> None:
    """``null`` arguments are an empty call: fine without required parameters."""
    assert check(None, obj({"x": {"type": "string"}})).valid
    assert errors_of(check(None, obj({"x": {}}, required=["x"])))[0][1] == "required"


@pytest.mark.parametrize("params", [[], [1, 2], "name=3", 5, 2.5, True])
def test_parameters_must_be_an_object(check: Any, params: Any) -> None:
    """Anything but an object of named parameters is refused with a clear error."""
    error = only_error(check(params, obj({"x": {}})))
    assert error["param"] == "parameters"
    assert error["message"] == "Expected an object of named parameters"
    assert error["got"] == params


# ---------------------------------------------------------------- stage 2: type + coercion

COERCED = [
    ("integer", "5", 5),
    ("integer", " -7 ", -7),
    ("integer", "+3", 3),
    ("integer", "0", 0),
    ("integer", 5.0, 5),
    ("number", "2.5", 2.5),
    ("number", "5", 5),
    ("number", "-0.5", -0.5),
    ("number", "1e3", 1000.0),
    ("number", ".5", 0.5),
    ("boolean", "true", True),
    ("boolean", "false", False),
    ("boolean", "TRUE", True),
    ("boolean", " False ", False),
]


@pytest.mark.parametrize(("type_name", "sent", "expected"), COERCED)
def test_safe_lossless_coercion(check: Any, type_name: str, sent: Any, expected: Any) -> None:
    """Text (and integral floats) that mean exactly one value of the type are converted."""
    result = check({"v": sent}, obj({"v": {"type": type_name}}))
    assert result.valid, result.errors
    assert result.cleaned_params["v"] == expected
    assert type(result.cleaned_params["v"]) is type(expected)


REFUSED = [
    ("integer", "5.5"),
    ("integer", "abc"),
    ("integer", ""),
    ("integer", "1e3"),
    ("integer", "5.0"),
    ("integer", "\u0663"),  # ARABIC-INDIC DIGIT THREE: not ASCII
    ("integer", "1" * 200),
    ("integer", True),
    ("integer", False),
    ("integer", 5.5),
    ("integer", None),
    ("integer", [5]),
    ("number", "abc"),
    ("number", "nan"),
    ("number", "inf"),
    ("number", "1e999"),
    ("number", "1_000"),
    ("number", "0x10"),
    ("number", "5 5"),
    ("number", True),
    ("boolean", "yes"),
    ("boolean", "1"),
    ("boolean", "t"),
    ("boolean", 1),
    ("boolean", 0),
    ("boolean", None),
    ("string", 123),
    ("string", True),
    ("string", None),
    ("string", ["a"]),
    ("null", "null"),
    ("array", "[1, 2]"),
    ("object", "{}"),
]


@pytest.mark.parametrize(("type_name", "sent"), REFUSED)
def test_refused_coercions_are_type_errors(check: Any, type_name: str, sent: Any) -> None:
    """Lossy or ambiguous conversions are never made: the call fails with a type error."""
    error = only_error(check({"v": sent}, obj({"v": {"type": type_name}})))
    assert error["stage"] == "type"
    assert error["message"] == f"Expected {type_name}"
    assert error["constraint"] == f"type: {type_name}"
    assert error["got"] == sent


def test_values_of_the_right_type_are_kept_as_they_are(check: Any) -> None:
    """No coercion happens when the value already matches: "5" stays a string."""
    schema = obj({"s": {"type": "string"}, "n": {"type": ["integer", "string"]},
                  "f": {"type": "number"}})
    result = check({"s": "5", "n": "5", "f": 2.5}, schema)
    assert result.valid
    assert result.cleaned_params == {"s": "5", "n": "5", "f": 2.5}


def test_union_types_coerce_to_the_first_type_that_fits(check: Any) -> None:
    """With ``["integer", "null"]``, null is fine and "5" becomes 5."""
    schema = obj({"v": {"type": ["integer", "null"]}})
    assert check({"v": None}, schema).cleaned_params == {"v": None}
    assert check({"v": "5"}, schema).cleaned_params == {"v": 5}
    error = only_error(check({"v": "x"}, schema))
    assert error["message"] == "Expected integer or null"


def test_coercion_reaches_array_items_and_nested_objects(check: Any) -> None:
    """Items of arrays and properties of nested objects are coerced too."""
    schema = obj({
        "ids": {"type": "array", "items": {"type": "integer"}},
        "filter": obj({"limit": {"type": "integer"}, "exact": {"type": "boolean"}}),
    })
    params = {"ids": ["1", 2, "3"], "filter": {"limit": "10", "exact": "false"}}
    result = check(params, schema)
    assert result.valid, result.errors
    assert result.cleaned_params == {"ids": [1, 2, 3], "filter": {"limit": 10, "exact": False}}
    assert params == {"ids": ["1", 2, "3"], "filter": {"limit": "10", "exact": "false"}}


def test_nested_type_errors_name_the_path(check: Any) -> None:
    """A bad item deep inside is reported as ``filter.ids[1]``."""
    schema = obj({"filter": obj({"ids": {"type": "array", "items": {"type": "integer"}}})})
    error = only_error(check({"filter": {"ids": [1, "x"]}}, schema))
    assert error["param"] == "filter.ids[1]"
    assert error["got"] == "x"


def test_cleaned_params_are_a_copy(check: Any) -> None:
    """Changing cleaned_params never changes the caller's dict."""
    params = {"a": "x"}
    result = check(params, obj({"a": {"type": "string"}}))
    result.cleaned_params["a"] = "changed"
    assert params == {"a": "x"}


# ---------------------------------------------------------------- stage 3: constraints

CONSTRAINTS: list[tuple[dict[str, Any], Any, str, str | None]] = [
    ({"enum": ["brief", "normal"]}, "full", "Must be one of the allowed values",
     'one of: "brief", "normal"'),
    ({"enum": [1, 2]}, True, "Must be one of the allowed values", "one of: 1, 2"),
    ({"const": "yes"}, "no", 'Must be exactly "yes"', 'const: "yes"'),
    ({"type": "integer", "minimum": 1}, 0, "Must be at least 1", "minimum: 1"),
    ({"type": "integer", "maximum": 10}, 11, "Must be at most 10", "maximum: 10"),
    ({"type": "number", "exclusiveMinimum": 0}, 0, "Must be greater than 0",
     "exclusiveMinimum: 0"),
    ({"type": "number", "exclusiveMaximum": 1}, 1, "Must be less than 1",
     "exclusiveMaximum: 1"),
    ({"type": "integer", "multipleOf": 5}, 7, "Must be a multiple of 5", "multipleOf: 5"),
    ({"type": "number", "multipleOf": 0.5}, 0.7, "Must be a multiple of 0.5",
     "multipleOf: 0.5"),
    ({"type": "string", "pattern": "^[a-z]+$"}, "ABC", "Does not match the required pattern",
     "pattern: ^[a-z]+$"),
    ({"type": "string", "minLength": 1}, "", "Must not be empty", "minLength: 1"),
    ({"type": "string", "minLength": 3}, "ab", "Must have at least 3 characters",
     "minLength: 3"),
    ({"type": "string", "maxLength": 2}, "abc", "Must have at most 2 characters",
     "maxLength: 2"),
    ({"type": "array", "minItems": 1}, [], "Must have at least 1 item", "minItems: 1"),
    ({"type": "array", "maxItems": 2}, [1, 2, 3], "Must have at most 2 items", "maxItems: 2"),
    ({"type": "array", "uniqueItems": True}, [1, 2, 1], "Items must be unique (no duplicates)",
     None),
    ({"type": "object", "minProperties": 1}, {}, "Must have at least 1 key",
     "minProperties: 1"),
    ({"type": "object", "maxProperties": 1}, {"a": 1, "b": 2}, "Must have at most 1 key",
     "maxProperties: 1"),
]


@pytest.mark.parametrize(("subschema", "sent", "message", "constraint"), CONSTRAINTS)
def test_constraint_errors(check: Any, subschema: dict[str, Any], sent: Any, message: str,
                           constraint: str | None) -> None:
    """Each failed constraint gives a short message, the constraint and the value sent."""
    error = only_error(check({"v": sent}, obj({"v": subschema})))
    assert (error["param"], error["stage"], error["message"]) == ("v", "constraint", message)
    assert error["constraint"] == constraint
    assert error["got"] == sent


@pytest.mark.parametrize(
    ("subschema", "sent"),
    [
        ({"enum": ["brief", "normal"]}, "brief"),
        ({"enum": [1, 2]}, 1.0),
        ({"type": "integer", "minimum": 1, "maximum": 10}, 1),
        ({"type": "integer", "minimum": 1, "maximum": 10}, 10),
        ({"type": "number", "exclusiveMinimum": 0}, 0.001),
        ({"type": "integer", "multipleOf": 5}, 15),
        ({"type": "string", "pattern": "[a-z]"}, "A-b"),  # search, not full match
        ({"type": "string", "minLength": 2, "maxLength": 2}, "\u00e9\u00e9"),
        ({"type": "array", "uniqueItems": True}, [1, True, "1"]),
    ],
)
def test_values_within_constraints_pass(check: Any, subschema: dict[str, Any], sent: Any
                                        ) -> None:
    """Boundaries are inclusive unless exclusive; True and 1 are different values."""
    result = check({"v": sent}, obj({"v": subschema}))
    assert result.valid, result.errors


def test_constraints_apply_after_coercion(check: Any) -> None:
    """"0" becomes 0, which then fails ``minimum: 1``."""
    error = only_error(check({"v": "0"}, obj({"v": {"type": "integer", "minimum": 1}})))
    assert error["message"] == "Must be at least 1"
    assert error["got"] == 0


def test_no_constraint_errors_on_a_value_with_a_type_error(check: Any) -> None:
    """A value of the wrong type gets its type error only, not a pile of follow-ups."""
    schema = obj({"v": {"type": "integer", "enum": [1, 2], "minimum": 1}})
    error = only_error(check({"v": "abc"}, schema))
    assert error["stage"] == "type"


def test_draft4_boolean_exclusive_bounds(check: Any) -> None:
    """Draft 4 spells exclusive bounds as booleans next to minimum/maximum."""
    schema = {
        "$schema": "http://json-schema.org/draft-04/schema#",
        **obj({"v": {"type": "number", "minimum": 0, "exclusiveMinimum": True,
                     "maximum": 1, "exclusiveMaximum": True}}),
    }
    assert check({"v": 0.5}, schema).valid
    low = only_error(check({"v": 0}, schema))
    assert (low["message"], low["constraint"]) == ("Must be greater than 0",
                                                   "exclusiveMinimum: 0")
    high = only_error(check({"v": 1}, schema))
    assert high["message"] == "Must be less than 1"


def test_every_failed_constraint_is_reported(check: Any) -> None:
    """Errors on several parameters come together, ordered by stage then name."""
    schema = obj(
        {"a": {"type": "integer", "maximum": 3}, "b": {"type": "string", "maxLength": 1},
         "c": {"type": "boolean"}, "d": {}},
        required=["d"],
    )
    result = check({"a": 5, "b": "long", "c": "maybe"}, schema)
    assert errors_of(result) == [
        ("d", "required", "Missing required parameter"),
        ("c", "type", "Expected boolean"),
        ("a", "constraint", "Must be at most 3"),
        ("b", "constraint", "Must have at most 1 character"),
    ]


def test_nested_constraints_and_nested_required(check: Any) -> None:
    """Constraints and ``required`` inside nested objects name the nested path."""
    schema = obj({"filter": obj({"limit": {"type": "integer", "minimum": 1},
                                 "kind": {"type": "string"}}, required=["kind"])})
    result = check({"filter": {"limit": 0}}, schema)
    assert errors_of(result) == [
        ("filter.kind", "required", "Missing required parameter"),
        ("filter.limit", "constraint", "Must be at least 1"),
    ]


def test_nested_objects_refuse_unexpected_keys_when_closed(check: Any) -> None:
    """Only top-level unknown keys are dropped; a closed nested object reports them."""
    schema = obj({"opts": obj({"a": {}}, additionalProperties=False)})
    error = only_error(check({"opts": {"a": 1, "zz": 2}}, schema))
    assert (error["param"], error["message"]) == ("opts", "Unexpected key(s): 'zz'")


# ---------------------------------------------------------------- stage 4: dependencies


def test_dependent_required(check: Any) -> None:
    """``dependentRequired``: if X is given, Y is required."""
    schema = obj({"amount": {"type": "number"}, "unit": {"type": "string"}},
                 dependentRequired={"unit": ["amount"]})
    assert check({"amount": 3}, schema).valid
    assert check({"amount": 3, "unit": "kg"}, schema).valid
    error = only_error(check({"unit": "kg"}, schema))
    assert (error["param"], error["stage"]) == ("amount", "dependency")
    assert error["message"] == "Required when 'unit' is given"


def test_a_missing_dependency_that_is_also_required_is_reported_once(check: Any) -> None:
    """When Y is required anyway, "required when X is given" adds nothing."""
    schema = obj({"x": {}, "y": {}}, required=["y"], dependentRequired={"x": ["y"]})
    assert errors_of(check({"x": 1}, schema)) == [
        ("y", "required", "Missing required parameter")]


@pytest.mark.parametrize("draft", [None, "http://json-schema.org/draft-07/schema#"])
def test_legacy_dependencies_keyword(check: Any, draft: str | None) -> None:
    """``dependencies`` works in draft 7 and is still honoured under the 2020-12 default."""
    schema = obj({"a": {}, "b": {}, "c": {}, "n": {"type": "integer"}},
                 dependencies={"a": ["b", "c"], "n": {"required": ["a"]}})
    if draft:
        schema["$schema"] = draft
    result = check({"a": 1}, schema)
    assert errors_of(result) == [
        ("b", "dependency", "Required when 'a' is given"),
        ("c", "dependency", "Required when 'a' is given"),
    ]
    nested = check({"n": 1}, schema)
    assert errors_of(nested) == [("a", "required", "Missing required parameter")]
    assert check({"a": 1, "b": 2, "c": 3, "n": 4}, schema).valid


def test_mutual_exclusion_with_not_required(check: Any) -> None:
    """``not: {required: [X, Y]}`` says "X or Y, not both"."""
    schema = obj({"x": {"type": "string"}, "y": {"type": "string"}},
                 **{"not": {"required": ["x", "y"]}})
    assert check({"x": "1"}, schema).valid
    assert check({}, schema).valid
    error = only_error(check({"x": "1", "y": "2"}, schema))
    assert (error["param"], error["stage"]) == ("x, y", "dependency")
    assert error["message"] == "Use either 'x' or 'y', not both"


def test_several_mutual_exclusions_through_all_of(check: Any) -> None:
    """Several exclusive pairs combine with ``allOf``; three names at once are refused too."""
    schema = obj({n: {} for n in "abcde"}, allOf=[
        {"not": {"required": ["a", "b"]}},
        {"not": {"required": ["c", "d", "e"]}},
    ])
    result = check({"a": 1, "b": 2, "c": 3, "d": 4, "e": 5}, schema)
    assert errors_of(result) == [
        ("a, b", "dependency", "Use either 'a' or 'b', not both"),
        ("c, d, e", "dependency", "Do not use 'c', 'd', 'e' all together"),
    ]


def test_exactly_one_of(check: Any) -> None:
    """``oneOf`` of single-name ``required`` lists: exactly one of the names."""
    schema = obj({"id": {}, "key": {}}, oneOf=[{"required": ["id"]}, {"required": ["key"]}])
    assert check({"id": 1}, schema).valid
    none = only_error(check({}, schema))
    assert (none["param"], none["message"]) == ("id, key", "Give exactly one of 'id', 'key'")
    both = only_error(check({"id": 1, "key": 2}, schema))
    assert both["message"] == "Give only one of 'id', 'key', not several"


def test_at_least_one_of(check: Any) -> None:
    """``anyOf`` of ``required`` lists: at least one of the names."""
    schema = obj({"id": {}, "key": {}}, anyOf=[{"required": ["id"]}, {"required": ["key"]}])
    assert check({"id": 1, "key": 2}, schema).valid
    error = only_error(check({}, schema))
    assert (error["stage"], error["message"]) == ("dependency", "Give at least one of 'id', 'key'")


def test_general_alternatives(check: Any) -> None:
    """Other ``oneOf``/``anyOf`` failures say whether no form or several forms matched."""
    schema = obj({"v": {"oneOf": [{"type": "integer"}, {"type": "number", "minimum": 0}]},
                  "w": {"anyOf": [{"type": "string"}, {"type": "integer"}]}})
    several = only_error(check({"v": 5}, schema))
    assert several["message"] == "Matches more than one allowed form; it must match exactly one"
    assert check({"v": 0.5}, schema).valid
    none = only_error(check({"v": -0.5}, schema))
    assert none["message"] == "Does not match any allowed form"
    assert none["constraint"].startswith("one of: ")
    any_error = only_error(check({"w": None}, schema))
    assert any_error["constraint"].startswith("any of: ")


def test_if_then_else(check: Any) -> None:
    """Conditional schemas apply ``then``/``else`` errors as usual."""
    schema = obj({"kind": {"type": "string"}, "size": {"type": "integer"}},
                 **{"if": {"properties": {"kind": {"const": "box"}}},
                    "then": {"required": ["size"]},
                    "else": {"properties": {"size": {"maximum": 0}}}})
    assert errors_of(check({"kind": "box"}, schema)) == [
        ("size", "required", "Missing required parameter")]
    assert check({"kind": "box", "size": 3}, schema).valid
    assert errors_of(check({"kind": "bag", "size": 3}, schema)) == [
        ("size", "constraint", "Must be at most 0")]


def test_not_with_a_general_schema(check: Any) -> None:
    """A ``not`` that is not a required-list names the forbidden form."""
    error = only_error(check({"v": "x"}, obj({"v": {"not": {"type": "string"}}})))
    assert error["message"] == "Must not match the forbidden form"


# ---------------------------------------------------------------- unexpected keys


def test_unknown_parameters_are_removed_with_a_warning(check: Any) -> None:
    """Undeclared keys leave cleaned_params; the warning suggests the likely name."""
    schema = obj({"color": {"type": "string"}, "size": {"type": "integer"}})
    result = check({"colour": "red", "size": 2, "zzz": 1}, schema)
    assert result.valid
    assert result.cleaned_params == {"size": 2}
    assert [(w["param"], w["message"]) for w in result.warnings] == [
        ("colour", "Unknown parameter, ignored (did you mean 'color'?)"),
        ("zzz", "Unknown parameter, ignored (known: color, size)"),
    ]


def test_unknown_parameters_to_a_tool_without_parameters(check: Any) -> None:
    """A tool that takes nothing says so."""
    result = check({"x": 1}, {"type": "object"})
    assert result.valid and result.cleaned_params == {}
    assert result.warnings[0]["message"] == (
        "Unknown parameter, ignored (this tool takes no parameters)")


def test_explicitly_closed_schema_also_drops_with_a_warning(check: Any) -> None:
    """``additionalProperties: false`` at the top drops unknown keys (not an error)."""
    result = check({"a": 1, "b": 2}, obj({"a": {}}, additionalProperties=False))
    assert result.valid and result.cleaned_params == {"a": 1}
    assert len(result.warnings) == 1


def test_open_schema_keeps_unknown_parameters(check: Any) -> None:
    """``additionalProperties: true`` or a schema keeps extras (and checks them)."""
    assert check({"a": 1, "b": 2}, obj({"a": {}}, additionalProperties=True)
                 ).cleaned_params == {"a": 1, "b": 2}
    typed = obj({"a": {}}, additionalProperties={"type": "integer"})
    assert check({"a": 1, "b": "2"}, typed).valid is False
    assert only_error(check({"a": 1, "b": "x"}, typed))["param"] == "b"
    assert check({"a": 1, "b": 2}, typed).warnings == []


def test_pattern_properties_are_declared(check: Any) -> None:
    """Keys matching ``patternProperties`` are known, and checked against their schema."""
    schema = obj({}, patternProperties={"^x_": {"type": "integer"}})
    result = check({"x_a": 1, "y": 2}, schema)
    assert result.cleaned_params == {"x_a": 1}
    assert only_error(check({"x_a": "no"}, schema))["param"] == "x_a"


def test_non_string_keys_are_dropped(check: Any) -> None:
    """Python callers may pass odd keys; they are unknown parameters."""
    result = check({1: "x", "a": 1}, obj({"a": {}}))
    assert result.valid and result.cleaned_params == {"a": 1}
    assert result.warnings[0]["param"] == "1"


def test_unknown_key_next_to_a_missing_one(check: Any) -> None:
    """The warning about 'mesage' comes with the error about 'message'."""
    result = check({"mesage": "hi"}, obj({"message": {"type": "string"}}, required=["message"]))
    text = result.format_for_llm("say")
    assert "message: Missing required parameter" in text
    assert "mesage: Unknown parameter, ignored (did you mean 'message'?)" in text


# ---------------------------------------------------------------- the model-facing text


def test_format_for_llm_matches_the_documented_form(check: Any) -> None:
    """The example of the spec, to the character."""
    result = check({"name": 123}, obj({"name": {"type": "string"}}))
    assert result.format_for_llm("my_tool") == (
        "Parameter validation failed for 'my_tool':\n"
        "  - name: Expected string (expected: type: string) (got: 123)"
    )


def test_format_for_llm_shows_long_values_shortened() -> None:
    """A huge value is cut, so one error never floods the model's context."""
    result = ValidationResult()
    result.add_error("text", "Too long", "maxLength: 10", "x" * 5000)
    line = result.format_for_llm("t").splitlines()[1]
    assert len(line) < 150
    assert line.endswith('...)')


def test_add_error_with_and_without_a_value() -> None:
    """``got=None`` means the model sent null; leaving it out means no value."""
    result = ValidationResult()
    assert result.valid
    result.add_error("a", "Bad", got=None)
    result.add_error("b", "Missing")
    assert not result.valid
    assert result.errors[0]["got"] is None
    assert "got" not in result.errors[1]
    assert result.format_for_llm("t").splitlines()[1:] == ["  - a: Bad (got: null)",
                                                           "  - b: Missing"]


def test_format_for_llm_of_a_valid_result_with_notes() -> None:
    """A valid result says so and still lists its notes."""
    result = ValidationResult()
    result.add_warning("x", "Unknown parameter, ignored")
    assert result.format_for_llm("t") == (
        "Parameters for 't' are valid.\nAlso note:\n  - x: Unknown parameter, ignored")
    assert result.warning_text() == "  - x: Unknown parameter, ignored"


def test_unprintable_values_are_still_shown() -> None:
    """Values json cannot encode fall back to repr; nothing raises."""
    result = ValidationResult()
    result.add_error("a", "Bad", got={1, 2})
    result.add_error("b", "Bad", got=float("nan"))
    text = result.format_for_llm("t")
    assert "(got: \"{1, 2}\")" in text
    assert "(got: NaN)" in text


# ---------------------------------------------------------------- both backends agree

AGREEMENT_SCHEMA: dict[str, Any] = obj(
    {
        "name": {"type": "string", "minLength": 1, "maxLength": 8, "pattern": "^[a-z]"},
        "count": {"type": "integer", "minimum": 0, "maximum": 10, "multipleOf": 2},
        "ratio": {"type": ["number", "null"], "exclusiveMaximum": 1},
        "flag": {"type": "boolean"},
        "mode": {"enum": ["a", "b", 3]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 3},
                 "maxItems": 3, "uniqueItems": True},
        "opts": obj({"deep": {"type": "integer", "minimum": 1}}, required=["deep"],
                    additionalProperties=False),
        "unit": {"type": "string"},
        "amount": {"type": "number"},
        "x": {},
        "y": {},
    },
    required=["name"],
    dependentRequired={"unit": ["amount"]},
    **{"not": {"required": ["x", "y"]}},
)

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=12,
)
KEYS = st.sampled_from(sorted(AGREEMENT_SCHEMA["properties"])) | st.text(max_size=6)
NUMERIC_TEXT = st.sampled_from(["5", "2.5", "-1", "1e2", "true", "False", "abc", "", "0", "11"])
PARAMS = st.dictionaries(KEYS, JSON | NUMERIC_TEXT, max_size=8)
VALIDATORS = [compile_validator(AGREEMENT_SCHEMA)]


@given(params=PARAMS)
def test_a_valid_result_is_valid_for_jsonschema(params: dict[str, Any]) -> None:
    """Whatever the path inside validate, a valid result's parameters satisfy the schema
    and an invalid one names at least one error."""
    import jsonschema

    result = VALIDATORS[0].validate(params)
    if result.valid:
        jsonschema.validate(result.cleaned_params, AGREEMENT_SCHEMA)
    else:
        assert result.errors


# ---------------------------------------------------------------- never raises

ANY_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=5)
    | st.dictionaries(st.text(max_size=8), children, max_size=5),
    max_leaves=20,
)


@given(params=ANY_JSON)
def test_validation_never_raises_on_arbitrary_json(params: Any) -> None:
    """Whatever the model sends, validation returns a result and no internal error."""
    for validator in VALIDATORS:
        result = validator.validate(params)
        assert isinstance(result, ValidationResult)
        assert result.valid == (not result.errors)
        assert all(e["stage"] != "internal" for e in result.errors)
        assert isinstance(result.format_for_llm("t"), str)


@given(params=st.dictionaries(KEYS, ANY_JSON, max_size=6))
def test_validation_never_raises_on_arbitrary_values(params: Any) -> None:
    """Arbitrary values under the schema's own names: still a result, never an exception."""
    for validator in VALIDATORS:
        result = validator.validate(params)
        assert result.valid == (not result.errors)
        assert all(e["stage"] != "internal" for e in result.errors)


def test_an_internal_failure_becomes_an_error(check: Any, monkeypatch: pytest.MonkeyPatch
                                              ) -> None:
    """If a checker itself blows up, the call fails with a plain error instead of raising."""

    def explode(*args: Any, **kwargs: Any) -> Any:
        raise RecursionError("too deep")

    monkeypatch.setattr(validation, "coerce_value", explode)
    # "1" needs coercion, so the staged path runs (a call needing nothing skips it)
    error = only_error(check({"a": "1"}, obj({"a": {"type": "integer"}})))
    assert error["stage"] == "internal"
    assert "RecursionError" in error["message"]


def test_pathological_python_values_do_not_raise(check: Any) -> None:
    """NaN, objects and deep nesting from Python callers still give a result."""
    deep: Any = 1
    for _ in range(5000):
        deep = [deep]
    schema = obj({"a": {"type": "number", "multipleOf": 0.5},
                  "b": {"type": "array", "items": {"type": "array"}}})
    for params in ({"a": math.nan}, {"a": object()}, {"b": deep}, {"a": 10**400}):
        assert isinstance(check(params, schema), ValidationResult)


# ---------------------------------------------------------------- schema problems


def test_schema_problems_of_a_sound_schema() -> None:
    """A valid schema has no problems."""
    assert schema_problems(AGREEMENT_SCHEMA) == []


@pytest.mark.parametrize(
    ("schema", "where"),
    [
        (obj({"a": {"type": "strng"}}), "parameters.properties.a.type"),
        (obj({"a": {"type": "string", "pattern": "(["}}), "parameters.properties.a.pattern"),
        (obj({"a": {"minimum": "1"}}), "parameters.properties.a.minimum"),
        (obj({"a": {}}, required="a"), "parameters.required"),
        (obj({"a": {"enum": "x"}}), "parameters.properties.a.enum"),
        ({"type": "object", "properties": []}, "parameters.properties"),
    ],
)
def test_schema_problems_name_the_place(schema: dict[str, Any], where: str) -> None:
    """Each mistake is reported with where it is."""
    problems = schema_problems(schema)
    assert problems, schema
    assert problems[0].startswith(f"{where}:"), problems


# ---------------------------------------------------------------- result validation


@pytest.mark.parametrize(
    "result",
    [{}, {"success": True, "data": {"a": 1}}, {"success": False, "error": "no such room"},
     {"success": True, "error": None}, {"rooms": [1, 2]}],
)
def test_valid_results_are_kept_intact(result: dict[str, Any]) -> None:
    """A well-formed dict is returned as the same object, unchanged."""
    before = dict(result)
    assert validate_tool_result(result) is result
    assert result == before


@pytest.mark.parametrize(
    ("result", "fragment"),
    [
        (None, "returned no result (None); expected a dict"),
        ("done", 'returned str "done"; expected a dict'),
        ([1, 2], "returned list [1, 2]; expected a dict"),
        (42, "returned int 42; expected a dict"),
        ({"success": "yes"}, "'success' must be true or false, got \"yes\""),
        ({"success": 1}, "'success' must be true or false, got 1"),
        ({"success": None}, "'success' must be true or false, got null"),
        ({"success": False, "error": 42}, "'error' must be a string, got 42"),
        ({"error": ["a"]}, "'error' must be a string, got [\"a\"]"),
    ],
)
def test_bad_results_become_standard_failures(result: Any, fragment: str) -> None:
    """Anything malformed turns into ``{"success": False, "error": ...}`` saying why."""
    fixed = validate_tool_result(result, tool_name="look")
    assert fixed["success"] is False
    assert set(fixed) == {"success", "error"}
    assert fixed["error"].startswith("Tool 'look' ")
    assert fragment in fixed["error"]


def test_result_messages_without_a_tool_name() -> None:
    """Without a name the message still reads well."""
    assert validate_tool_result(None)["error"].startswith("The tool returned no result")


# ---------------------------------------------------------------- a call valid as it is


def test_a_clean_call_gives_a_new_dict() -> None:
    """A call needing nothing done is valid; the cleaned parameters are a new dict."""
    validator = compile_validator(obj({"query": {"type": "string"},
                                       "limit": {"type": "integer", "minimum": 1}},
                                      required=["query"]))
    params = {"query": "lamp", "limit": 5}
    result = validator.validate(params)
    assert result.valid and result.cleaned_params == params
    assert result.cleaned_params is not params and not result.warnings


def test_values_are_normalised_whatever_the_path() -> None:
    """5.0 for an integer still becomes 5; nested containers still get coerced."""
    validator = compile_validator(obj({
        "tags": {"type": "array", "items": {"type": "integer"}}, "raw": {"type": "array"},
        "opts": obj({"deep": {"type": "integer"}}), "limit": {"type": "integer"}}))
    result = validator.validate({"tags": ["1", 2], "opts": {"deep": "3"}, "raw": ["1"]})
    assert result.cleaned_params == {"tags": [1, 2], "opts": {"deep": 3}, "raw": ["1"]}
    assert validator.validate({"limit": 5.0}).cleaned_params == {"limit": 5}


def test_a_checker_failure_is_an_error() -> None:
    """If a schema check itself blows up, the call fails with a plain error."""
    import attrs

    def explode(*args: Any) -> bool:
        raise RecursionError("too deep")

    compiled = compile_validator(obj({"query": {"type": "string"}}))
    for validator in (attrs.evolve(compiled, instance_is_valid=explode, fast_check=None),
                      attrs.evolve(compiled, fast_check=explode)):
        result = validator.validate({"query": "lamp"})
        assert not result.valid
        assert result.errors[0]["stage"] == "internal"
        assert "RecursionError" in result.errors[0]["message"]


def test_untouched_types() -> None:
    """The exact types coercion leaves alone, per declared type."""
    from ai_tools.tools.coercion import untouched_types

    assert untouched_types({"type": "string"}) == frozenset({str})
    assert untouched_types({"type": "integer"}) == frozenset({int})
    assert untouched_types({"type": "number"}) == frozenset({int, float})
    assert untouched_types({"type": ["integer", "null"]}) == frozenset({int, type(None)})
    assert untouched_types({}) is None
    assert untouched_types(True) is None
    assert untouched_types({"type": "array", "items": {"type": "string"}}) == frozenset()
    assert untouched_types({"type": "array", "items": {}},
                           walk_containers=False) == frozenset({list})
    custom = untouched_types({"type": ["integer", "custom"]})  # "custom" accepts anything
    assert custom is not None and float not in custom and str in custom
    assert untouched_types({"properties": {}}) == frozenset(
        {str, int, float, bool, type(None), list})


def test_a_schema_whose_top_is_not_an_object() -> None:
    """A non-object top-level type reports the type of the parameters object."""
    assert not compile_validator({"type": "string"}).validate({}).valid
    assert compile_validator(obj({})).validate({}).valid


def test_pattern_properties_declare_their_keys() -> None:
    """Keys matching ``patternProperties`` are kept; others are dropped with a warning."""
    validator = compile_validator(obj({"a": {"type": "string"}},
                                      patternProperties={"^x_": {"type": "integer"}}))
    result = validator.validate({"a": "s", "x_1": 2, "y": 3})
    assert result.cleaned_params == {"a": "s", "x_1": 2}
    assert [w["param"] for w in result.warnings] == ["y"]
