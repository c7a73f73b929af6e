"""plain_native_calls: the loop's shortcut says yes only where parse_tool_calls passes calls on."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ai_tools.llm.events import ChatResponse
from ai_tools.llm.parsing import parse_tool_calls, plain_native_calls

NORMAL = ["look", "say", "noop"]
EXIT = ["page"]
PLAIN = frozenset(NORMAL) - frozenset(EXIT)

_calls = st.lists(
    st.tuples(st.sampled_from(["look", "say", "noop", "page", "nosuch", ""]),
              st.sampled_from(['{"at": "room"}', "{}", "", "not json", "[1]", '"x"'])),
    max_size=3,
)


def _response(calls: list[tuple[str, str]], content: Any) -> ChatResponse:
    tool_calls = [{"id": f"call_{i}", "type": "function",
                   "function": {"name": name, "arguments": args}}
                  for i, (name, args) in enumerate(calls)]
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return ChatResponse.from_message(message, finish_reason="tool_calls")


@given(calls=_calls, content=st.sampled_from([None, "", "thinking", '{"tool": "look"}']))
def test_agrees_with_parse_tool_calls(calls: list[tuple[str, str]], content: Any) -> None:
    response = _response(calls, content)
    plain = plain_native_calls(response, PLAIN)
    for fallback in (True, False):
        parsed = parse_tool_calls(response, NORMAL, EXIT, fallback=fallback)
        if plain is not None:
            assert parsed.error is None and not parsed.unknown and not parsed.invalid
            assert not parsed.exit and not parsed.warnings
            assert parsed.calls == parsed.normal == plain
            assert parsed.visible_text == response.content


def test_what_it_leaves_to_the_parser() -> None:
    assert plain_native_calls(_response([("look", "{}")], None), PLAIN) is not None
    assert plain_native_calls(_response([], "just text"), PLAIN) is None
    assert plain_native_calls(_response([("page", "{}")], None), PLAIN) is None  # exit
    assert plain_native_calls(_response([("nosuch", "{}")], None), PLAIN) is None  # unknown
    assert plain_native_calls(_response([("look", "not json")], None), PLAIN) is None
    assert plain_native_calls(_response([("look", "{}"), ("page", "{}")], None), PLAIN) is None
