"""Tests for ai_tools.history_format: the one description of a history entry.

The fallback result prefix, the fallback recognition and the text of a content
were written twice before (with drifted values); these pin the one behaviour
every user now shares.
"""

from __future__ import annotations

from typing import Any

import pytest

from ai_tools.execution.history import is_tool_result
from ai_tools.history_format import (
    INTERRUPTED_CONTENT,
    content_text,
    fallback_result_parts,
    fallback_result_text,
    is_fallback_result,
    repair_history,
    unanswered_tool_calls,
)
from ai_tools.llm import messages
from ai_tools.llm.parsing import parse_tool_calls
from ai_tools.llm.tokens import TokenCounter
from ai_tools.store import history_repair

WITH_SPACE = {"role": "user", "content": '[TOOL RESULT: look]\n{"success": true}'}
WITHOUT_SPACE = {"role": "user", "content": '[TOOL RESULT:look]\n{"success": true}'}


def test_a_fallback_result_is_written_with_the_space() -> None:
    assert fallback_result_text("look", "{}") == "[TOOL RESULT: look]\n{}"
    assert messages.fallback_result_message("look", {"success": True}) == WITH_SPACE


@pytest.mark.parametrize("message", [WITH_SPACE, WITHOUT_SPACE])
def test_a_fallback_result_is_read_with_or_without_the_space(message: dict[str, Any]) -> None:
    assert is_fallback_result(message)
    assert messages.is_fallback_result(message)
    assert is_tool_result(message)
    assert fallback_result_parts(message) == ("look", '{"success": true}')


@pytest.mark.parametrize("message", [
    {"role": "user", "content": "[TOOL RESULTS are in]"},
    {"role": "user", "content": "look at [TOOL RESULT: x]"},
    {"role": "assistant", "content": "[TOOL RESULT: look]\n{}"},
    {"role": "user", "content": [{"type": "text", "text": "[TOOL RESULT: look]"}]},
])
def test_other_messages_are_not_fallback_results(message: dict[str, Any]) -> None:
    assert not is_fallback_result(message)
    assert fallback_result_parts(message) is None


@pytest.mark.parametrize("answer", [WITH_SPACE, WITHOUT_SPACE])
def test_a_saved_history_with_either_prefix_repairs_the_same(answer: dict[str, Any]) -> None:
    """A history saved by an earlier version (either prefix) loads unchanged."""
    history = [{"role": "user", "content": "hi"},
               {"role": "assistant", "content": '{"tool": "look", "parameters": {}}'},
               answer]
    repaired, report = repair_history(history)
    assert repaired == history and not report.changed
    assert unanswered_tool_calls(history) == []


def test_an_unanswered_fallback_call_gets_the_written_form() -> None:
    history = [{"role": "assistant", "content": '{"tool": "look", "parameters": {}}'}]
    repaired, report = repair_history(history)
    assert report.added == 1
    answer = fallback_result_text("look", INTERRUPTED_CONTENT)
    assert repaired[1] == {"role": "user", "content": answer}


def test_the_prefix_is_one_value_everywhere() -> None:
    assert messages.FALLBACK_RESULT_PREFIX == history_repair.FALLBACK_RESULT_PREFIX
    assert history_repair.repair_history is repair_history


PARTS = [{"type": "text", "text": "Hello, "}, {"type": "image_url", "image_url": {"url": "x"}},
         {"type": "text", "text": "world"}]


@pytest.mark.parametrize(("content", "text"), [
    (None, ""),
    ("plain", "plain"),
    (PARTS, "Hello, world"),
    (["a", "b"], "ab"),
    ({"k": "é"}, '{"k": "é"}'),
])
def test_content_text(content: Any, text: str) -> None:
    assert content_text(content) == text


class _CharEncoding:
    """One token per character: the counted text is visible in the count."""

    def encode(self, text: str, *, disallowed_special: Any = ()) -> list[int]:
        return [ord(c) for c in text]


def test_the_parser_and_the_counter_read_a_list_of_parts_alike() -> None:
    """The model's visible text and the text counted for it are the same text."""
    parsed = parse_tool_calls({"role": "assistant", "content": PARTS}, ["look"])
    assert parsed.visible_text == "Hello, world"
    counter = TokenCounter(loader=lambda name: _CharEncoding())
    as_parts = counter.count_message({"role": "user", "content": PARTS})
    as_text = counter.count_message({"role": "user", "content": "Hello, world"})
    assert as_parts == as_text


@pytest.mark.parametrize("answer", [WITH_SPACE, WITHOUT_SPACE])
def test_the_scripted_model_does_not_take_a_result_for_a_player_line(
        answer: dict[str, Any]) -> None:
    from ai_tools.llm.scripted import last_user_message

    assert last_user_message([{"role": "user", "content": "hello"}]) == "hello"
    assert last_user_message([{"role": "user", "content": "hello"}, answer]) is None
