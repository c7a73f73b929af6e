"""ConversationHistory: both formats, the one-answer-per-call rule, persistence and repair."""

from __future__ import annotations

import json

import pytest

from ai_tools.execution.history import (
    ConversationHistory,
    build_tool_exchange,
    fallback_call_text,
)
from ai_tools.llm.events import ToolCall


def a_call(call_id: str = "call_1", name: str = "look", **arguments: object) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=arguments, reasoning="because")


def native(call: ToolCall) -> dict[str, object]:
    return {"id": call.id, "type": "function",
            "function": {"name": call.name, "arguments": call.arguments_json}}


def test_tool_call_serialises_its_arguments_once() -> None:
    """Canonical JSON (compact, sorted keys), computed once per call."""
    call = a_call(text="hi", at="x")
    assert call.arguments_json == '{"at":"x","text":"hi"}'
    assert call.arguments_json is call.arguments_json


def test_fallback_text_is_the_json_call() -> None:
    assert json.loads(fallback_call_text(a_call(text="hi"))) == {
        "tool": "look", "parameters": {"text": "hi"}, "reasoning": "because"}
    bare = ToolCall(id="x", name="look", arguments={})
    assert json.loads(fallback_call_text(bare)) == {"tool": "look", "parameters": {}}


def test_native_exchange() -> None:
    assistant, answer = build_tool_exchange(a_call(), '{"success": true}', native=True,
                                            assistant_content="hm")
    assert assistant == {"role": "assistant", "content": "hm",
                         "tool_calls": [native(a_call())]}
    assert answer == {"role": "tool", "tool_call_id": "call_1", "content": '{"success": true}'}


def test_fallback_exchange() -> None:
    assistant, answer = build_tool_exchange(a_call(), '{"success": true}', native=False)
    assert assistant == {"role": "assistant", "content": fallback_call_text(a_call())}
    assert answer == {"role": "user", "content": '[TOOL RESULT: look]\n{"success": true}'}


def test_add_tool_exchange_appends_both_and_indexes_the_id() -> None:
    history = ConversationHistory()
    history.add_user("hello")
    entries = history.add_tool_exchange(a_call(), "{}", native=True)
    assert history.messages[1:] == list(entries)
    assert history.has_tool_call_id("call_1") and not history.has_tool_call_id("call_2")
    assert history.unanswered_tool_calls() == []


def test_duplicate_native_id_is_refused() -> None:
    history = ConversationHistory()
    history.add_tool_exchange(a_call(), "{}", native=True)
    with pytest.raises(ValueError, match="already in the history"):
        history.add_tool_exchange(a_call(), "{}", native=True)
    assert len(history) == 2


def test_fallback_ids_are_not_indexed() -> None:
    history = ConversationHistory()
    history.add_tool_exchange(a_call(), "{}", native=False)
    history.add_tool_exchange(a_call(), "{}", native=False)
    assert not history.has_tool_call_id("call_1")
    assert history.unanswered_tool_calls() == []


@pytest.mark.parametrize("message", [
    {"role": "tool", "tool_call_id": "x", "content": "{}"},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "x"}]},
    {"role": "robot", "content": "beep"},
    {"content": "no role"},
])
def test_append_refuses_tool_traffic_and_bad_roles(message: dict[str, object]) -> None:
    history = ConversationHistory()
    with pytest.raises(ValueError):
        history.append(message)
    assert len(history) == 0


def test_append_plain_messages() -> None:
    history = ConversationHistory()
    history.append({"role": "system", "content": "be nice"})
    history.add_user("hi")
    history.add_assistant("hello")
    assert [m["role"] for m in history] == ["system", "user", "assistant"]


def test_messages_is_a_copy() -> None:
    history = ConversationHistory()
    history.add_user("hi")
    history.messages.append({"role": "user", "content": "sneaky"})
    assert len(history) == 1


def test_to_list_is_deep_and_round_trips() -> None:
    history = ConversationHistory()
    history.add_tool_exchange(a_call(), "{}", native=True)
    saved = history.to_list()
    saved[0]["tool_calls"][0]["id"] = "changed"
    assert history.messages[0]["tool_calls"][0]["id"] == "call_1"
    loaded = ConversationHistory.from_list(json.loads(json.dumps(history.to_list())))
    assert loaded.messages == history.messages
    assert loaded.has_tool_call_id("call_1")


def test_copy_is_independent() -> None:
    history = ConversationHistory()
    history.add_user("hi")
    other = history.copy()
    other.add_user("only in the copy")
    assert len(history) == 1 and len(other) == 2


def test_from_list_repairs_an_interrupted_call() -> None:
    saved = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [native(a_call())]},
    ]
    history = ConversationHistory.from_list(saved)
    assert history.unanswered_tool_calls() == []
    answer = history.messages[2]
    assert answer["role"] == "tool" and answer["tool_call_id"] == "call_1"
    assert json.loads(answer["content"])["success"] is False


def test_from_list_of_nothing() -> None:
    assert len(ConversationHistory.from_list(None)) == 0


def test_replace_reindexes_and_repair_reports() -> None:
    history = ConversationHistory()
    history.replace([{"role": "assistant", "content": None,
                      "tool_calls": [native(a_call("a")), native(a_call("b"))]},
                     {"role": "tool", "tool_call_id": "a", "content": "{}"}])
    assert history.has_tool_call_id("b")
    assert history.unanswered_tool_calls() == ["b"]
    report = history.repair()
    assert report.added == 1 and history.unanswered_tool_calls() == []
    assert not history.repair().changed


def test_clear() -> None:
    history = ConversationHistory()
    history.add_tool_exchange(a_call(), "{}", native=True)
    history.clear()
    assert len(history) == 0 and not history.has_tool_call_id("call_1")


def test_take_back_removes_that_very_message() -> None:
    """Events a loop delivered but no answer saw leave the history again (and only them)."""
    history = ConversationHistory()
    history.add_user("before")
    events = history.add_user("[EVENTS] x")
    version = history.version
    assert history.take_back(events)
    assert history.messages == [{"role": "user", "content": "before"}]
    assert history.version != version
    assert not history.take_back(events)
    assert not history.take_back({"role": "user", "content": "before"})  # an equal copy


# -- the calls of one answer share its assistant message ------------------------------


def test_same_answer_joins_the_assistant_message() -> None:
    """A call of the same answer joins its assistant message (a new object in its place;
    the one handed out before is unchanged); its result follows the earlier ones."""
    history = ConversationHistory()
    first, one = history.add_tool_exchange(a_call("c1"), '{"a":1}', native=True,
                                           assistant_content="Looking.")
    rewrites = history.rewrites
    joined, two = history.add_tool_exchange(a_call("c2", at="x"), '{"b":2}', native=True,
                                            same_answer=True)
    assert history.messages == [joined, one, two]
    assert joined["content"] == "Looking."
    assert joined["tool_calls"] == [native(a_call("c1")), native(a_call("c2", at="x"))]
    assert first["tool_calls"] == [native(a_call("c1"))]
    assert history.has_tool_call_id("c2") and history.unanswered_tool_calls() == []
    assert history.rewrites == rewrites + 1


def test_same_answer_after_another_change_starts_a_message() -> None:
    """Anything recorded between two calls closes the answer: no call joins across it."""
    history = ConversationHistory()
    history.add_tool_exchange(a_call("c1"), "{}", native=True)
    history.add_user("meanwhile")
    history.add_tool_exchange(a_call("c2"), "{}", native=True, same_answer=True)
    assert [m["role"] for m in history.messages] == ["assistant", "tool", "user",
                                                     "assistant", "tool"]


def test_same_answer_never_joins_a_loaded_history() -> None:
    """Old histories (one assistant message per call) load as they are, and a new call
    after a load starts its own message."""
    old = [
        {"role": "assistant", "content": "Hm.", "tool_calls": [native(a_call("c1"))]},
        {"role": "tool", "tool_call_id": "c1", "content": "{}"},
        {"role": "assistant", "content": None, "tool_calls": [native(a_call("c2"))]},
        {"role": "tool", "tool_call_id": "c2", "content": "{}"},
    ]
    history = ConversationHistory.from_list(old)
    assert history.messages == old
    history.add_tool_exchange(a_call("c3"), "{}", native=True, same_answer=True)
    assert len(history) == 6 and history.messages[4]["tool_calls"] == [native(a_call("c3"))]


def test_an_interrupted_grouped_answer_is_repaired() -> None:
    """A saved answer whose later calls have no results gets "interrupted" answers after
    the results that exist (old and grouped histories repair alike)."""
    history = ConversationHistory.from_list([
        {"role": "assistant", "content": None,
         "tool_calls": [native(a_call("c1")), native(a_call("c2"))]},
        {"role": "tool", "tool_call_id": "c1", "content": "{}"},
        {"role": "user", "content": "next"},
    ])
    assert [m.get("tool_call_id") for m in history.messages] == [None, "c1", "c2", None]
    assert "interrupted" in history.messages[2]["content"]


def test_fallback_same_answer_is_one_array() -> None:
    history = ConversationHistory()
    history.add_tool_exchange(a_call("c1"), "{}", native=False, assistant_content="Hm.")
    history.add_tool_exchange(a_call("c2", at="x"), "{}", native=False, same_answer=True)
    assistant, *results = history.messages
    text, _, calls = assistant["content"].partition("\n")
    assert text == "Hm." and [c["tool"] for c in json.loads(calls)] == ["look", "look"]
    assert [r["content"].split("\n")[0] for r in results] == ["[TOOL RESULT: look]"] * 2
