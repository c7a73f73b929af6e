"""prebuilt_encode gives what JSONEncoder.encode gives: the same text, the same errors."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ai_tools.json_encoding import prebuilt_encode

ENCODERS = [
    json.JSONEncoder(sort_keys=True, separators=(",", ":"), allow_nan=False),
    json.JSONEncoder(ensure_ascii=False, allow_nan=False),
    json.JSONEncoder(allow_nan=False),
    json.JSONEncoder(),
]

VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=5) | st.integers() | st.booleans() | st.none(),
                      children, max_size=4),
    max_leaves=15,
)


def _outcome(encode: Any, value: Any) -> Any:
    try:
        return encode(value)
    except Exception as e:
        return type(e).__name__, str(e)


@given(value=VALUES)
def test_same_text_or_same_error_as_the_encoder(value: Any) -> None:
    """Any JSON-like value: identical output, or the identical exception."""
    for encoder in ENCODERS:
        assert _outcome(prebuilt_encode(encoder), value) == _outcome(encoder.encode, value)


def _circular() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return loop


def _deep() -> list[Any]:
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    return deep


@pytest.mark.parametrize("value", [
    {"x": _circular()}, {"x": object()}, {"x": float("nan")}, {(1, 2): 3}, "text", 2.5,
    {"x": (1, 2)}, {"x": "\ud800"}, _deep(),
])
def test_edge_values(value: Any) -> None:
    """Circular and too-deep values, non-JSON objects and keys, NaN, bare strings."""
    for encoder in ENCODERS:
        assert _outcome(prebuilt_encode(encoder), value) == _outcome(encoder.encode, value)


def test_a_circular_value_gives_the_standard_error() -> None:
    """Without the circular check the C encoder recurses; the fallback names the cycle."""
    with pytest.raises(ValueError, match="Circular reference detected"):
        prebuilt_encode(ENCODERS[0])({"x": _circular()})


def test_encoders_it_cannot_speed_up_are_used_as_they_are() -> None:
    """Indented output and encoders without the circular check keep their own encode."""
    indented = json.JSONEncoder(indent=2)
    assert prebuilt_encode(indented) == indented.encode
    unchecked = json.JSONEncoder(check_circular=False)
    assert prebuilt_encode(unchecked) == unchecked.encode
