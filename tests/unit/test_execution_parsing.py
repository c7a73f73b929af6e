"""Defensive parsing of the tool calls models produce."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ai_tools.execution.calls import ToolCallParseError, new_tool_call_id, parse_tool_call
from tests.unit.execution_fakes import captured_events


def test_native_with_json_string_arguments() -> None:
    call = parse_tool_call({"id": "call_9", "type": "function",
                            "function": {"name": "look", "arguments": '{"detail": "full"}'}})
    assert (call.id, call.name, dict(call.arguments)) == ("call_9", "look", {"detail": "full"})


def test_native_with_dict_arguments_and_reasoning() -> None:
    call = parse_tool_call({"id": "c", "function": {"name": "look", "arguments": {"a": 1}},
                            "reasoning": "why not"})
    assert dict(call.arguments) == {"a": 1} and call.reasoning == "why not"


@pytest.mark.parametrize("arguments", [None, "", "   "])
def test_native_with_empty_arguments(arguments: Any) -> None:
    call = parse_tool_call({"id": "c", "function": {"name": "look", "arguments": arguments}})
    assert dict(call.arguments) == {}


def test_double_encoded_arguments_are_decoded() -> None:
    doubled = json.dumps(json.dumps({"a": 1}))
    call = parse_tool_call({"id": "c", "function": {"name": "look", "arguments": doubled}})
    assert dict(call.arguments) == {"a": 1}


@pytest.mark.parametrize("shape", [
    {"tool": "say", "parameters": {"text": "hi"}, "reasoning": "greet"},
    {"tool": "say", "arguments": {"text": "hi"}, "reasoning": "greet"},
    {"name": "say", "arguments": '{"text": "hi"}', "reasoning": "greet"},
    {"tool": "say", "parameters": '{"text": "hi"}', "reasoning": "greet"},
    {"tool": "say", "text": "hi", "reasoning": "greet"},
    {"tool": "say", "parameters": {}, "text": "hi", "reasoning": "greet"},
])
def test_fallback_shapes(shape: dict[str, Any]) -> None:
    call = parse_tool_call(shape)
    assert call.name == "say" and dict(call.arguments) == {"text": "hi"}
    assert call.reasoning == "greet"
    assert call.id.startswith("call_")


def test_with_tool_key_a_name_parameter_is_a_parameter() -> None:
    call = parse_tool_call({"tool": "create", "name": "lamp"})
    assert call.name == "create" and dict(call.arguments) == {"name": "lamp"}


def test_top_level_parameters_are_logged() -> None:
    with captured_events() as events:
        parse_tool_call({"tool": "say", "text": "hi"})
    assert any(e.get("keys") == ["text"] and e["log_level"].name == "warn" for e in events)


def test_json_text_of_a_call() -> None:
    call = parse_tool_call('{"tool": "say", "parameters": {"text": "hi"}}')
    assert call.name == "say"


def test_name_is_stripped() -> None:
    assert parse_tool_call({"tool": "  say "}).name == "say"


@pytest.mark.parametrize("raw_id, kept", [
    ("abc", True), (17, True), (None, False), ("", False), (True, False), ([1], False),
    ("x" * 300, False),
])
def test_ids(raw_id: Any, kept: bool) -> None:
    call = parse_tool_call({"id": raw_id, "tool": "say"})
    assert (call.id == str(raw_id)) is kept
    assert call.id


def test_generated_ids_are_unique() -> None:
    assert len({new_tool_call_id() for _ in range(1000)}) == 1000


def test_non_string_reasoning_is_made_text() -> None:
    assert parse_tool_call({"tool": "say", "reasoning": ["a", 1]}).reasoning == '["a", 1]'
    assert parse_tool_call({"tool": "say", "reasoning": None}).reasoning == ""


@pytest.mark.parametrize("raw, message", [
    (None, "must be an object"),
    (42, "must be an object"),
    (["say"], "must be an object"),
    ("not json", "not JSON"),
    ({}, "names no tool"),
    ({"tool": ""}, "names no tool"),
    ({"tool": 5}, "names no tool"),
    ({"function": "say"}, "'function' must be an object"),
    ({"function": {"arguments": "{}"}}, "names no tool"),
    ({"function": {"name": "x", "arguments": "[1]"}}, "must be a JSON object"),
    ({"function": {"name": "x", "arguments": "{bad"}}, "not valid JSON"),
    ({"tool": "x", "parameters": [1, 2]}, "must be a JSON object"),
    ({"tool": "x", "parameters": 3}, "must be a JSON object"),
    ({"tool": "x" * 201}, "too long"),
    ({"tool": "x", "parameters": {"a": {1, 2}}}, "not plain JSON"),
    ({"tool": "x", "parameters": {"a": float("nan")}}, "not plain JSON"),
    ({"tool": "x", "parameters": {1: "a"}}, "must be strings"),
])
def test_malformed_calls(raw: Any, message: str) -> None:
    with pytest.raises(ToolCallParseError, match=message):
        parse_tool_call(raw)
