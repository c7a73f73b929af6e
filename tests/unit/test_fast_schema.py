"""The fast "valid as is?" check agrees with jsonschema on the subset it compiles."""

from __future__ import annotations

import math
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ai_tools.tools.fast_schema import compile_fast_check
from ai_tools.tools.validation import compile_validator

# -- strategies ---------------------------------------------------------------------

_names = st.sampled_from(["a", "b", "c", "at", "count"])
_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=4),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, 1.0, -2.0, 2.5]),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(_names, inner, max_size=3)),
    max_leaves=6,
)
_type_names = st.sampled_from(["string", "integer", "number", "boolean", "null", "array",
                               "object"])
_enum_members = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.text(max_size=2))


def _leaf_schemas() -> st.SearchStrategy[dict[str, Any]]:
    keyword = st.one_of(
        st.builds(lambda t: {"type": t}, _type_names),
        st.builds(lambda ts: {"type": ts}, st.lists(_type_names, min_size=1, max_size=3)),
        st.builds(lambda m: {"enum": m}, st.lists(_enum_members, max_size=4)),
        st.builds(lambda m: {"const": m}, _enum_members),
        st.builds(lambda n: {"minimum": n}, st.integers(-3, 3) | st.floats(-3, 3)),
        st.builds(lambda n: {"maximum": n}, st.integers(-3, 3)),
        st.builds(lambda n: {"exclusiveMinimum": n}, st.integers(-3, 3)),
        st.builds(lambda n: {"exclusiveMaximum": n}, st.floats(-3, 3)),
        st.builds(lambda n: {"minLength": n}, st.integers(0, 3)),
        st.builds(lambda n: {"maxLength": n}, st.integers(0, 3)),
        st.builds(lambda p: {"pattern": p}, st.sampled_from(["^a", "b$", "[0-9]", ""])),
        st.builds(lambda n: {"minItems": n}, st.integers(0, 2)),
        st.builds(lambda n: {"maxItems": n}, st.integers(0, 2)),
        st.just({"description": "annotation", "format": "email", "default": 3}),
    )
    return st.lists(keyword, max_size=3).map(lambda parts: {k: v for p in parts
                                                             for k, v in p.items()})


def _extend(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.builds(lambda base, items: {**base, "items": items}, _leaf_schemas(), inner),
        st.builds(
            lambda base, props, required, additional: {
                **base, "properties": props, "required": required,
                **({} if additional is None else {"additionalProperties": additional}),
            },
            _leaf_schemas(), st.dictionaries(_names, inner, max_size=3),
            st.lists(_names, max_size=2, unique=True), st.none() | st.booleans(),
        ),
    )


_schemas = st.recursive(_leaf_schemas() | st.booleans(), _extend, max_leaves=5)


def _exact_subset(value: Any) -> bool:
    """Values on which the fast check is exact (it defers on integral or odd floats)."""
    if type(value) is float:
        return math.isfinite(value) and not value.is_integer()
    if type(value) is list:
        return all(_exact_subset(v) for v in value)
    if type(value) is dict:
        return all(_exact_subset(v) for v in value.values())
    return True


# -- properties -----------------------------------------------------------------------


@settings(max_examples=600, suppress_health_check=[HealthCheck.too_slow])
@given(schema=_schemas, value=_values)
def test_agrees_with_jsonschema(schema: Any, value: Any) -> None:
    check = compile_fast_check(schema)
    assert check is not None, schema  # every generated schema is in the subset
    valid = jsonschema.Draft202012Validator(schema).is_valid(value)
    fast = check(value)
    if fast:
        assert valid, (schema, value)  # never accepts what jsonschema refuses
    if _exact_subset(value):
        assert fast == valid, (schema, value)


@settings(max_examples=200)
@given(schema=_schemas, value=_values)
def test_validator_result_unchanged_by_fast_path(schema: Any, value: Any) -> None:
    """validate() returns the same result with and without the fast check."""
    if not isinstance(schema, dict):
        return
    top = {**schema, "type": "object"}
    params = value if isinstance(value, dict) else {"a": value}
    fast = compile_validator(top)
    # (a schema naming its draft gets no fast check: jsonschema alone decides)
    slow = compile_validator({"$schema": "https://json-schema.org/draft/2020-12/schema",
                              **top})
    a, b = fast.validate(params), slow.validate(params)
    assert (a.valid, a.errors, a.warnings, a.cleaned_params) == \
        (b.valid, b.errors, b.warnings, b.cleaned_params)


# -- examples ---------------------------------------------------------------------------


@pytest.mark.parametrize("schema", [
    {"$ref": "#/defs/x"},
    {"allOf": [{"type": "string"}]},
    {"type": "object", "patternProperties": {"^x": {}}},
    {"type": "object", "additionalProperties": {"type": "string"}},
    {"type": "number", "multipleOf": 2},
    {"type": "strange"},
    {"type": []},
    {"enum": [[1], {"a": 1}]},
    {"enum": "abc"},
    {"minimum": "3"},
    {"minimum": True},
    {"minLength": -1},
    {"maxItems": 1.5},
    {"pattern": "("},
    {"items": [{"type": "string"}]},
    {"properties": {"a": {"oneOf": []}}},
    {"required": "a"},
    "not a schema",
])
def test_outside_the_subset_gets_no_fast_check(schema: Any) -> None:
    assert compile_fast_check(schema) is None


def test_typical_tool_schema() -> None:
    schema = {"type": "object", "additionalProperties": False, "required": ["at"],
              "properties": {"at": {"type": "string", "minLength": 1},
                             "count": {"type": "integer", "minimum": 1, "maximum": 9},
                             "mode": {"enum": ["quick", "slow"]}}}
    check = compile_fast_check(schema)
    assert check is not None
    assert check({"at": "room"})
    assert check({"at": "x", "count": 3, "mode": "slow"})
    assert not check({})  # required
    assert not check({"at": ""})  # minLength
    assert not check({"at": "x", "count": 10})  # maximum
    assert not check({"at": "x", "count": True})  # a boolean is no integer
    assert not check({"at": "x", "mode": "fast"})  # enum
    assert not check({"at": "x", "extra": 1})  # additionalProperties
    assert not check({"at": "x", "count": 3.0})  # integral float: jsonschema decides
    assert not check(["at"])


def test_subclass_values_are_left_to_jsonschema() -> None:
    class Text(str):
        pass

    check = compile_fast_check({"type": "string"})
    assert check is not None
    assert check("x")
    assert not check(Text("x"))


_bound_keys = st.sampled_from(["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                               "minLength", "maxLength", "minItems", "maxItems"])


@settings(max_examples=400)
@given(key=_bound_keys, bound=st.integers(0, 3),
       value=st.one_of(st.integers(-1, 4), st.sampled_from([0.5, 2.5, 3.5]),
                       st.text("ab", max_size=4), st.lists(st.none(), max_size=4)))
def test_bounds_at_their_edges(key: str, bound: int, value: Any) -> None:
    """Bounds and lengths, with values around the bound (where off-by-ones hide)."""
    schema = {key: bound}
    check = compile_fast_check(schema)
    assert check is not None
    assert check(value) == jsonschema.Draft202012Validator(schema).is_valid(value)
