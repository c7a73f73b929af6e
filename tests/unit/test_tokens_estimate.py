"""The one-pass estimate of a message equals counting its pieces one by one."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ai_tools.llm.tokens import CHARS_PER_TOKEN, TokenCounter


class _EstimateAsEncoding:
    """An "encoding" giving ceil(len / CHARS_PER_TOKEN) tokens: forces the piecewise path."""

    def encode(self, text: str, *, disallowed_special: Any = ()) -> list[int]:
        return [0] * math.ceil(len(text) / CHARS_PER_TOKEN)


def _no_tiktoken(name: str) -> Any:
    raise ImportError("no tiktoken here")


class _Text(str):
    """A str subclass (counted as the text it is)."""


TEXT = st.text(max_size=30) | st.builds(_Text, st.text(max_size=10))
ANY = st.none() | st.integers() | st.booleans() | TEXT | st.lists(TEXT, max_size=3) \
    | st.lists(st.dictionaries(st.sampled_from(["text", "type"]), TEXT, max_size=2),
               max_size=3) | st.dictionaries(TEXT, st.integers(), max_size=2)
CALL = st.dictionaries(
    st.sampled_from(["id", "type", "function"]),
    ANY | st.dictionaries(st.sampled_from(["name", "arguments"]), ANY, max_size=2),
    max_size=3,
) | ANY
MESSAGE = st.dictionaries(
    st.sampled_from(["role", "content", "name", "tool_call_id", "tool_calls", "extra"]),
    ANY | st.lists(CALL, max_size=3),
    max_size=6,
)


def _outcome(counter: TokenCounter, message: dict[str, Any]) -> Any:
    try:
        return counter.count_message(message)
    except Exception as e:  # e.g. tool_calls that is not iterable: both paths raise
        return type(e).__name__


@given(message=MESSAGE)
def test_estimate_equals_the_piecewise_count(message: dict[str, Any]) -> None:
    """Whatever the message holds, both paths give the same number (or the same error)."""
    estimate = TokenCounter(loader=_no_tiktoken)
    piecewise = TokenCounter(loader=lambda name: _EstimateAsEncoding())
    assert _outcome(estimate, message) == _outcome(piecewise, message)
    assert estimate.exact is False and piecewise.exact is True


def test_a_native_exchange() -> None:
    """The two messages of a tool exchange, counted by hand."""
    counter = TokenCounter(loader=_no_tiktoken)
    call = {"id": "call_1", "type": "function",
            "function": {"name": "look", "arguments": '{"at":"room"}'}}
    assert counter.count_message({"role": "assistant", "content": None,
                                  "tool_calls": [call]}) == 3 + 3 + 3 + 2 + 1 + 4
    assert counter.count_message({"role": "tool", "tool_call_id": "call_1",
                                  "content": '{"success": true}'}) == 3 + 1 + 5 + 2


@given(st.text(max_size=40), st.text(min_size=1, max_size=20),
       st.dictionaries(st.text(max_size=8), st.integers() | st.text(max_size=20), max_size=4),
       st.none() | st.text(max_size=60), st.text(max_size=200))
def test_native_exchange_estimate_equals_counting_its_messages(
        call_id: str, name: str, arguments: dict[str, Any], assistant_content: str | None,
        content: str) -> None:
    """The exchange counted from its texts' lengths equals counting the two messages."""
    from ai_tools.execution.history import build_tool_exchange
    from ai_tools.llm.events import ToolCall
    from ai_tools.llm.tokens import _estimate_message, estimate_native_exchange

    call = ToolCall(id=call_id, name=name, arguments=arguments)
    assistant, answer = build_tool_exchange(call, content, native=True,
                                            assistant_content=assistant_content)
    assert estimate_native_exchange(call.id, call.name, call.arguments_json,
                                    assistant_content, content) \
        == _estimate_message(assistant) + _estimate_message(answer)
