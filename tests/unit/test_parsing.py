"""Tool-call parsing: structured calls, fallback JSON in text, partition, parse errors."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ai_tools.llm.events import ChatResponse, ToolCall
from ai_tools.llm.parsing import TOOL_PARSE_ERROR, ParsedCalls, parse_tool_calls

NORMAL = ["look", "say", "noop"]
EXIT = ["report_mood"]


def native(name: str, arguments: str = "{}", call_id: str = "c1") -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


# -- structured calls ----------------------------------------------------------------


def test_structured_calls_partitioned_in_order() -> None:
    """Normal, exit and unknown calls are sorted; the order of calls is kept."""
    message = {
        "role": "assistant",
        "content": "Let me see.",
        "tool_calls": [
            native("look", '{"detail": "full"}', "a"),
            native("report_mood", '{"mood": "happy"}', "b"),
            native("say", '{"text": "hi"}', "c"),
        ],
    }
    parsed = parse_tool_calls(message, NORMAL, EXIT)
    assert parsed.ok and parsed.mode == "native"
    assert [c.name for c in parsed.normal] == ["look", "say"]
    assert [c.name for c in parsed.exit] == ["report_mood"]
    assert [c.id for c in parsed.calls] == ["a", "b", "c"]
    assert parsed.visible_text == "Let me see."
    assert dict(parsed.normal[0].arguments) == {"detail": "full"}


def test_chat_response_is_accepted() -> None:
    """A ChatResponse from the client parses like its message."""
    response = ChatResponse.from_message({"role": "assistant", "tool_calls": [native("noop")]})
    parsed = parse_tool_calls(response, NORMAL)
    assert [c.name for c in parsed.normal] == ["noop"]


def test_structured_calls_win_over_json_in_text() -> None:
    """With native calls present, JSON in the text is not parsed as another call."""
    message = {"content": '{"tool": "say", "parameters": {}}', "tool_calls": [native("look")]}
    parsed = parse_tool_calls(message, NORMAL)
    assert [c.name for c in parsed.normal] == ["look"]


def test_unknown_structured_call_is_parse_error_keeping_output() -> None:
    """An unknown name fails with tool_parse_error, listing what is available."""
    parsed = parse_tool_calls(
        {"content": "partial words", "tool_calls": [native("fly")]}, NORMAL, EXIT
    )
    assert not parsed.ok
    assert parsed.error is not None
    assert parsed.error.reason == TOOL_PARSE_ERROR
    assert "fly" in parsed.error.detail and "look" in parsed.error.detail
    assert parsed.error.raw_output == "partial words"
    assert [c.name for c in parsed.unknown] == ["fly"]


@pytest.mark.parametrize("arguments", ["[1, 2]", '"text"', "{truncated", '{"a": ', "null", "42"])
def test_structured_arguments_not_an_object_is_parse_error(arguments: str) -> None:
    """Arguments that are not a JSON object (or cut off) fail; the raw text is kept."""
    parsed = parse_tool_calls({"tool_calls": [native("look", arguments)]}, NORMAL)
    assert parsed.error is not None and parsed.error.tool_name == "look"
    assert parsed.invalid[0].raw_arguments == arguments
    assert parsed.normal == ()


def test_empty_arguments_mean_no_arguments() -> None:
    """'' (some servers) and a missing field are an empty object."""
    parsed = parse_tool_calls({"tool_calls": [native("look", "")]}, NORMAL)
    assert parsed.ok and dict(parsed.normal[0].arguments) == {}


def test_exit_call_with_bad_arguments_is_still_recorded() -> None:
    """Exit calls are signals: best-effort arguments, never a parse error."""
    parsed = parse_tool_calls({"tool_calls": [native("report_mood", "{oops")]}, NORMAL, EXIT)
    assert parsed.ok
    assert parsed.exit[0].raw_arguments == "{oops"


def test_noop_is_just_a_tool_name() -> None:
    """noop gets no special treatment."""
    assert parse_tool_calls({"tool_calls": [native("noop")]}, ["look"]).unknown[0].name == "noop"


def test_malformed_message_entries_do_not_raise() -> None:
    """tool_calls entries that are not objects become invalid, unknown calls."""
    parsed = parse_tool_calls({"tool_calls": ["junk", 3]}, NORMAL)
    assert not parsed.ok


# -- fallback calls in text ------------------------------------------------------------


def test_fenced_block_with_reasoning() -> None:
    """A ```json block is a call; reasoning is kept; the block leaves the visible text."""
    text = (
        "I should look around.\n\n```json\n"
        '{"tool": "look", "parameters": {"detail": "full"}, "reasoning": "new room"}\n'
        "```\n\nBack soon."
    )
    parsed = parse_tool_calls(text, NORMAL)
    assert parsed.ok and parsed.mode == "fallback"
    call = parsed.normal[0]
    assert (call.name, dict(call.arguments), call.reasoning, call.native) == (
        "look",
        {"detail": "full"},
        "new room",
        False,
    )
    assert parsed.visible_text == "I should look around.\n\nBack soon."


def test_bare_object_with_name_and_arguments_string() -> None:
    """{"name", "arguments"} with arguments as JSON text is accepted."""
    parsed = parse_tool_calls('{"name": "say", "arguments": "{\\"text\\": \\"hi\\"}"}', NORMAL)
    assert dict(parsed.normal[0].arguments) == {"text": "hi"}
    assert parsed.visible_text == ""


def test_json_line_inside_prose() -> None:
    """A JSON line among prose is found and stripped; the prose stays."""
    text = 'Hello there.\n{"tool": "say", "arguments": {"text": "Welcome!"}}\nAnything else?'
    parsed = parse_tool_calls(text, NORMAL)
    assert [c.name for c in parsed.normal] == ["say"]
    assert parsed.visible_text == "Hello there.\n\nAnything else?"


def test_several_fallback_calls_and_exit_call() -> None:
    """Calls keep their order; exit calls are separated and stripped too."""
    text = (
        '{"tool": "look", "parameters": {}}\n'
        '{"tool": "report_mood", "parameters": {"mood": "calm"}}\n'
        '{"tool": "say", "parameters": {"text": "x"}}'
    )
    parsed = parse_tool_calls(text, NORMAL, EXIT)
    assert [c.name for c in parsed.calls] == ["look", "report_mood", "say"]
    assert [c.name for c in parsed.exit] == ["report_mood"]
    assert [c.id for c in parsed.calls] == ["fallback_0", "fallback_1", "fallback_2"]
    assert parsed.visible_text == ""


def test_array_of_calls() -> None:
    """A bare JSON array of call objects is several calls."""
    parsed = parse_tool_calls(
        '[{"tool": "look"}, {"tool": "say", "parameters": {"text": "a"}}]', NORMAL
    )
    assert [c.name for c in parsed.normal] == ["look", "say"]


def test_array_of_calls_after_text() -> None:
    """Text, then an array of calls on its own lines (how a history records several
    fallback calls of one answer): the calls, and the text alone is visible."""
    parsed = parse_tool_calls(
        'I will look twice.\n[{"tool": "look"},\n {"tool": "say", "parameters": {"text": "a"}}]',
        NORMAL)
    assert [c.name for c in parsed.normal] == ["look", "say"]
    assert parsed.visible_text == "I will look twice."


def test_openai_shaped_object_in_text() -> None:
    """{"type": "function", "function": {...}} written as text is understood."""
    text = json.dumps({"type": "function", "function": {"name": "look", "arguments": "{}"}})
    assert parse_tool_calls(text, NORMAL).normal[0].name == "look"


def test_top_level_parameters_are_auto_corrected_with_warning() -> None:
    """Parameters beside "tool" (a common model mistake) are used, with a warning."""
    parsed = parse_tool_calls('{"tool": "say", "text": "hi", "reasoning": "greet"}', NORMAL)
    assert dict(parsed.normal[0].arguments) == {"text": "hi"}
    assert parsed.normal[0].reasoning == "greet"
    assert parsed.warnings and "top level" in parsed.warnings[0]


def test_plain_text_and_unrelated_json_are_not_calls() -> None:
    """Prose, code and JSON without a tool key leave the text untouched."""
    text = 'Config is {"name": "Bob", "age": 3} and code {x: 1}. Done {'
    parsed = parse_tool_calls(text, NORMAL)
    assert parsed.ok and not parsed.has_calls and parsed.mode == "none"
    assert parsed.visible_text == text


def test_truncated_fallback_call_is_parse_error_with_output_preserved() -> None:
    """A call cut off mid-JSON fails and keeps the text as it was."""
    text = 'Sure.\n{"tool": "say", "parameters": {"text": "Hello wor'
    parsed = parse_tool_calls(text, NORMAL)
    assert parsed.error is not None and "cut off" in parsed.error.detail
    assert parsed.error.raw_output == text and parsed.visible_text == text


def test_malformed_fenced_call_is_parse_error() -> None:
    """A fenced block that looks like a call but is not JSON is a parse error."""
    text = "```json\n{'tool': 'look', \"parameters\": {}}\n```"
    parsed = parse_tool_calls(text, NORMAL)
    assert parsed.error is not None


def test_unknown_fallback_name_is_parse_error() -> None:
    """An unknown name in text fails like a structured one; the text is preserved."""
    text = 'ok {"tool": "teleport", "parameters": {}}'
    parsed = parse_tool_calls(text, NORMAL)
    assert parsed.error is not None and "teleport" in parsed.error.detail
    assert parsed.visible_text == text


def test_fallback_arguments_not_object() -> None:
    """ "parameters": [..] in text is a parse error."""
    parsed = parse_tool_calls('{"tool": "look", "parameters": [1]}', NORMAL)
    assert parsed.error is not None and parsed.invalid[0].name == "look"


def test_fallback_can_be_disabled() -> None:
    """fallback=False: text is text."""
    parsed = parse_tool_calls('{"tool": "look"}', NORMAL, fallback=False)
    assert parsed.ok and not parsed.has_calls


def test_none_and_content_parts() -> None:
    """None and list-of-parts contents are handled."""
    assert parse_tool_calls(None, NORMAL) == ParsedCalls()
    parts = {"content": [{"type": "text", "text": '{"tool": "look"}'}]}
    assert parse_tool_calls(parts, NORMAL).normal[0].name == "look"


def test_deep_nesting_does_not_raise() -> None:
    """Pathological nesting (RecursionError inside json) is handled."""
    text = '{"tool": "look", "parameters": ' + "[" * 100_000
    parsed = parse_tool_calls(text, NORMAL)
    assert parsed.error is not None


def test_tool_call_round_trips_to_openai() -> None:
    """ToolCall.to_openai gives the history entry of spec 000 §7."""
    call = ToolCall(id="x", name="look", arguments={"detail": "full"})
    assert call.to_openai() == {
        "id": "x",
        "type": "function",
        "function": {"name": "look", "arguments": '{"detail": "full"}'},
    }


# -- properties ---------------------------------------------------------------------

_jsonish = st.text(alphabet='{}[]":,tool nameparmsrgu\\ 01\n`', max_size=120)


@given(st.one_of(st.text(max_size=300), _jsonish))
def test_arbitrary_text_never_raises(text: str) -> None:
    """Whatever a model writes, the parser returns a ParsedCalls."""
    parsed = parse_tool_calls(text, NORMAL, EXIT)
    assert isinstance(parsed, ParsedCalls)
    if parsed.error is not None:
        assert parsed.error.raw_output == text


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=10),
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
        ),
        max_leaves=10,
    )
)
def test_arbitrary_message_dicts_never_raise(value: object) -> None:
    """Odd message shapes (tool_calls of any type) never raise."""
    parse_tool_calls({"content": value, "tool_calls": value}, NORMAL, EXIT)  # type: ignore[dict-item]


@given(st.text(max_size=40), st.dictionaries(st.text(max_size=5), st.integers(), max_size=3))
def test_embedded_call_found_and_stripped(prose: str, params: dict) -> None:
    """A call written anywhere in prose is found with its parameters."""
    call = json.dumps({"tool": "say", "parameters": params})
    parsed = parse_tool_calls(prose.replace("{", "(") + "\n" + call, NORMAL)
    assert parsed.ok, parsed.error
    assert [dict(c.arguments) for c in parsed.normal][-1] == params
