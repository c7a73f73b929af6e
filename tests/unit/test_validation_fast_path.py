"""The validation fast path gives exactly what the staged checks give.

A call whose parameters need nothing done (declared keys, values already of
their declared types, accepted by the schema) is validated with one schema
check; every other call goes through the stages.  These tests compare the two
on arbitrary parameters and on the cases at the edge of the fast path.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ai_tools.tools import validation
from ai_tools.tools.coercion import untouched_types
from ai_tools.tools.validation import ParameterValidator, ValidationResult, compile_validator

BACKENDS = [True, False]


def obj(properties: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """An object schema with ``properties`` and other keywords."""
    return {"type": "object", "properties": properties, **extra}


SCHEMAS: list[dict[str, Any]] = [
    obj({"query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1}},
        required=["query"]),
    obj({"n": {"type": "number"}, "i": {"type": ["integer", "string"]},
         "b": {"type": "boolean"}, "z": {"type": "null"}, "any": {}}),
    obj({"tags": {"type": "array", "items": {"type": "integer"}},
         "raw": {"type": "array"},
         "opts": obj({"deep": {"type": "integer"}}),
         "blob": {"type": "object"}}),
    obj({"a": {"type": "string"}}, additionalProperties=True),
    obj({"a": {"type": "string"}}, additionalProperties={"type": "integer"}),
    obj({"a": {"type": "string"}}, patternProperties={"^x_": {"type": "integer"}}),
    obj({"u": {"type": "integer"}, "v": {"type": "string"}},
        dependentRequired={"u": ["v"]}, **{"not": {"required": ["u", "v"]}}),
    {"properties": {"a": {"type": "integer"}}},
    {"type": ["object", "null"], "properties": {"a": {"anyOf": [{"type": "integer"}]}}},
]

VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5)
    | st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from([5.0, -2.0])
    | st.text(max_size=4) | st.sampled_from(["5", "2.5", "true", "x_1"]),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.sampled_from(["deep", "other"]), children, max_size=2),
    max_leaves=6,
)
KEYS = st.sampled_from(["query", "limit", "n", "i", "b", "z", "any", "tags", "raw", "opts",
                        "blob", "a", "x_1", "u", "v", "other"])
PARAMS = st.dictionaries(KEYS, VALUES, max_size=5)


def staged(validator: ParameterValidator, params: Any) -> ValidationResult:
    """``validator.validate(params)`` with the fast path turned off."""
    def never(self: ParameterValidator, params: dict[Any, Any]) -> bool:
        return False

    fast = ParameterValidator._accepts_as_is
    ParameterValidator._accepts_as_is = never  # type: ignore[method-assign]
    try:
        return validator.validate(params)
    finally:
        ParameterValidator._accepts_as_is = fast  # type: ignore[method-assign]


def same(a: ValidationResult, b: ValidationResult) -> None:
    assert a.valid == b.valid
    assert a.errors == b.errors
    assert a.warnings == b.warnings
    assert a.cleaned_params == b.cleaned_params
    assert type(a.cleaned_params) is dict


VALIDATORS = [compile_validator(schema, use_jsonschema=b) for schema in SCHEMAS
              for b in BACKENDS]


@given(params=PARAMS)
def test_fast_path_agrees_with_the_stages(params: dict[str, Any]) -> None:
    """Whatever the parameters, the result is the one the staged checks give."""
    for validator in VALIDATORS:
        same(validator.validate(params), staged(validator, params))


@pytest.mark.parametrize("use_jsonschema", BACKENDS)
def test_fast_path_is_taken_for_a_clean_call(use_jsonschema: bool) -> None:
    """A clean call is accepted by the fast path; the cleaned params are a new dict."""
    validator = compile_validator(SCHEMAS[0], use_jsonschema=use_jsonschema)
    params = {"query": "lamp", "limit": 5}
    assert validator._accepts_as_is(params)
    result = validator.validate(params)
    assert result.valid and result.cleaned_params == params
    assert result.cleaned_params is not params


@pytest.mark.parametrize("params", [
    {"query": "lamp", "limit": "5"},      # needs coercion
    {"query": "lamp", "limit": 5.0},      # integral float: normalised to an int
    {"query": "lamp", "limit": True},     # a bool is not an integer
    {"query": "lamp", "colour": "red"},   # undeclared: dropped with a warning
    {"limit": 5},                         # missing required
    {"query": "lamp", "limit": 0},        # below the minimum
])
def test_fast_path_refuses_what_needs_the_stages(params: dict[str, Any]) -> None:
    """Coercion, normalisation, undeclared keys and invalid values take the staged path."""
    validator = compile_validator(SCHEMAS[0])
    assert not validator._accepts_as_is(params)
    same(validator.validate(params), staged(validator, params))


def test_fast_path_normalises_nothing_it_lets_through() -> None:
    """5.0 for an integer still becomes 5; nested containers still get coerced."""
    validator = compile_validator(SCHEMAS[2])
    result = validator.validate({"tags": ["1", 2], "opts": {"deep": "3"}, "raw": ["1"]})
    assert result.cleaned_params == {"tags": [1, 2], "opts": {"deep": 3}, "raw": ["1"]}
    assert compile_validator(SCHEMAS[0]).validate(
        {"query": "q", "limit": 5.0}).cleaned_params == {"query": "q", "limit": 5}


def test_a_checker_failure_on_the_fast_path_is_an_error() -> None:
    """If the schema check itself blows up, the call fails with a plain error."""

    def explode(*args: Any) -> bool:
        raise RecursionError("too deep")

    compiled = compile_validator(SCHEMAS[0])
    # the jsonschema check (schemas outside the compiled subset), then the compiled check
    for validator in (attrs.evolve(compiled, instance_is_valid=explode, fast_check=None),
                      attrs.evolve(compiled, fast_check=explode)):
        result = validator.validate({"query": "lamp"})
        assert not result.valid
        assert result.errors[0]["stage"] == "internal"
        assert "RecursionError" in result.errors[0]["message"]


def test_untouched_types() -> None:
    """The exact types coercion leaves alone, per declared type."""
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


def test_a_schema_whose_top_is_not_an_object_has_no_fast_path() -> None:
    """A non-object top-level type always takes the staged path (it reports the type)."""
    validator = compile_validator({"type": "string"})
    assert validator._untouched is None
    assert not validator.validate({}).valid
    assert validation.compile_validator(obj({})).validate({}).valid
