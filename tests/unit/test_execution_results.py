"""Shaping tool results for history: JSON check and size limit."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ai_tools.execution.results import DEFAULT_MAX_RESULT_BYTES, shape_result


def test_small_result_passes_unchanged() -> None:
    result = {"success": True, "text": "héllo"}
    shaped = shape_result(result, "t")
    assert shaped.result is result and not shaped.truncated and not shaped.not_serialisable
    assert json.loads(shaped.content) == result
    assert "héllo" in shaped.content  # readable text, not \\u escapes


@pytest.mark.parametrize("bad", [{1, 2}, object(), float("inf"), b"bytes"])
def test_non_serialisable_result_becomes_an_error(bad: Any) -> None:
    shaped = shape_result({"success": True, "value": bad}, "look")
    assert shaped.not_serialisable and shaped.result["success"] is False
    assert "Tool 'look' returned a result that is not JSON-serialisable" in \
        shaped.result["error"]
    assert json.loads(shaped.content) == shaped.result


def test_circular_result_becomes_an_error() -> None:
    loop: dict[str, Any] = {"success": True}
    loop["self"] = loop
    assert shape_result(loop, "t").not_serialisable


def test_default_limit_is_16_kib() -> None:
    assert DEFAULT_MAX_RESULT_BYTES == 16384
    exactly = {"blob": ""}
    exactly["blob"] = "x" * (16384 - len(json.dumps(exactly)))
    assert not shape_result(exactly, "t").truncated
    exactly["blob"] += "x"
    assert shape_result(exactly, "t").truncated


def test_truncated_result_keeps_success_error_and_a_marker() -> None:
    result = {"success": False, "error": "partial failure", "rows": ["row"] * 10_000}
    shaped = shape_result(result, "t", 1024)
    assert shaped.truncated and len(shaped.content.encode()) <= 1024
    assert shaped.result["success"] is False
    assert shaped.result["error"] == "partial failure"
    assert shaped.result["truncated"] is True
    original = len(json.dumps(result, ensure_ascii=False).encode())
    assert f"was {original} bytes" in shaped.result["note"]
    assert shaped.result["preview"].startswith('{"success": false')


def test_multibyte_text_is_measured_in_bytes() -> None:
    result = {"text": "é" * 3000}  # 3000 characters, 6000 bytes
    shaped = shape_result(result, "t", 4096)
    assert shaped.truncated
    assert len(shaped.content.encode()) <= 4096
    json.loads(shaped.content)


@given(st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=300),
    lambda children: st.lists(children) | st.dictionaries(st.text(max_size=20), children),
    max_leaves=40,
), st.integers(min_value=512, max_value=4096))
def test_shaped_content_is_always_json_within_the_limit(value: Any, limit: int) -> None:
    shaped = shape_result({"success": True, "value": value}, "t", limit)
    assert len(shaped.content.encode()) <= limit
    assert json.loads(shaped.content) == shaped.result
