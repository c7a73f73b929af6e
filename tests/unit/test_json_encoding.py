"""The shared JSON encodings give what json.dumps gives with their options."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ai_tools.json_encoding import (
    canonical_json,
    compact_ascii_json,
    model_json,
    model_json_ascii,
)

ENCODINGS = [
    (canonical_json, {"sort_keys": True, "separators": (",", ":"), "allow_nan": False}),
    (compact_ascii_json, {"separators": (",", ":"), "allow_nan": False}),
    (model_json, {"ensure_ascii": False, "allow_nan": False}),
    (model_json_ascii, {"allow_nan": False}),
]

_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False,
                                                         allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                max_size=3),
    max_leaves=10)


@given(_values)
def test_the_same_text_as_json_dumps(value: Any) -> None:
    for encode, options in ENCODINGS:
        assert encode(value) == json.dumps(value, **options)


@pytest.mark.parametrize(("value", "error"), [
    ({"x": math.nan}, ValueError), ({"x": {1, 2}}, TypeError)])
def test_the_same_errors(value: Any, error: type[Exception]) -> None:
    for encode, _ in ENCODINGS:
        with pytest.raises(error):
            encode(value)


def test_a_circular_value_is_refused() -> None:
    circular: dict[str, Any] = {}
    circular["self"] = circular
    for encode, _ in ENCODINGS:
        with pytest.raises(ValueError, match="Circular reference"):
            encode(circular)
