"""Tests for ai_tools.store.history_repair: every tool call answered after a crash."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ai_tools.store.history_repair import (
    INTERRUPTED_CONTENT,
    INTERRUPTED_ERROR,
    fallback_tool_calls,
    repair_history,
    repair_state,
    unanswered_tool_calls,
)


def call(call_id: str, name: str = "look") -> dict[str, Any]:
    """A native tool call entry."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}


def answer(call_id: str) -> dict[str, Any]:
    """A native tool result."""
    return {"role": "tool", "tool_call_id": call_id, "content": '{"success": true}'}


def test_valid_history_is_unchanged() -> None:
    """A history where every call is answered comes back equal, with no changes reported."""
    history = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [call("a"), call("b")]},
        answer("a"),
        answer("b"),
        {"role": "assistant", "content": "done"},
    ]
    repaired, report = repair_history(history)
    assert repaired == history
    assert not report.changed
    assert unanswered_tool_calls(history) == []


def test_trailing_unanswered_calls_get_interrupted_results() -> None:
    """Calls at the end of history without answers get the synthetic result, in order."""
    history = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [call("a"), call("b"), call("c")]},
        answer("a"),
    ]
    assert unanswered_tool_calls(history) == ["b", "c"]
    repaired, report = repair_history(history)
    assert report.added == 2
    assert repaired[3:] == [
        {"role": "tool", "tool_call_id": "b", "content": INTERRUPTED_CONTENT},
        {"role": "tool", "tool_call_id": "c", "content": INTERRUPTED_CONTENT},
    ]
    assert json.loads(INTERRUPTED_CONTENT) == {"success": False, "error": INTERRUPTED_ERROR}
    assert unanswered_tool_calls(repaired) == []


def test_unanswered_call_in_the_middle_is_answered_before_the_next_message() -> None:
    """The synthetic answer goes right after the block, before the next user message."""
    history = [
        {"role": "assistant", "content": None, "tool_calls": [call("x")]},
        {"role": "user", "content": "are you there?"},
    ]
    repaired, report = repair_history(history)
    assert report.added == 1
    assert [m["role"] for m in repaired] == ["assistant", "tool", "user"]


def test_orphan_and_duplicate_results_are_dropped() -> None:
    """Tool results answering no pending call are removed (models refuse them)."""
    history = [
        answer("ghost"),
        {"role": "assistant", "content": None, "tool_calls": [call("a")]},
        answer("a"),
        answer("a"),
    ]
    repaired, report = repair_history(history)
    assert report.dropped == 2
    assert report.added == 0
    assert repaired == history[1:3]


def test_input_is_not_modified() -> None:
    """Repair works on a copy."""
    history = [{"role": "assistant", "content": None, "tool_calls": [call("a")]}]
    snapshot = json.loads(json.dumps(history))
    repair_history(history)
    assert history == snapshot


def test_fallback_call_without_result_is_answered() -> None:
    """A fallback-format JSON call with no [TOOL RESULT] user message gets one."""
    history = [
        {"role": "user", "content": "look around"},
        {"role": "assistant", "content": '{"tool": "inspect_location", "parameters": {}}'},
    ]
    assert unanswered_tool_calls(history) == ["inspect_location"]
    repaired, report = repair_history(history)
    assert report.added == 1
    assert repaired[-1]["role"] == "user"
    assert repaired[-1]["content"].startswith("[TOOL RESULT: inspect_location]")
    assert INTERRUPTED_ERROR in repaired[-1]["content"]
    assert unanswered_tool_calls(repaired) == []


def test_fallback_call_with_result_is_unchanged() -> None:
    """An answered fallback call stays as it is."""
    history = [
        {
            "role": "assistant",
            "content": '```json\n{"tool": "say", "arguments": {"text": "hi"}}\n```',
        },
        {"role": "user", "content": '[TOOL RESULT: say]\n{"success": true}'},
    ]
    repaired, report = repair_history(history)
    assert repaired == history
    assert not report.changed


def test_fallback_list_of_calls_partially_answered() -> None:
    """A list of fallback calls with one result gets the remaining one."""
    history = [
        {"role": "assistant", "content": '[{"tool": "a"}, {"tool": "b"}]'},
        {"role": "user", "content": "[TOOL RESULT: a]\n{}"},
    ]
    repaired, report = repair_history(history)
    assert report.added == 1
    assert repaired[-1]["content"].startswith("[TOOL RESULT: b]")


def test_prose_and_other_json_are_not_calls() -> None:
    """Plain text, JSON without a tool name, and broken JSON are not tool calls."""
    assert fallback_tool_calls("I will look around.") == []
    assert fallback_tool_calls('{"answer": 42}') == []
    assert fallback_tool_calls('{"tool": 3}') == []
    assert fallback_tool_calls('{"tool": "x"') == []
    assert fallback_tool_calls(None) == []
    assert fallback_tool_calls('[{"tool": "a"}, "b"]') == []


def test_repair_state_touches_only_history() -> None:
    """repair_state fixes state['history'] and copies the rest; no history, no change."""
    state = {"mode": "awake", "history": [{"role": "assistant", "tool_calls": [call("z")]}]}
    fixed, report = repair_state(state)
    assert report.added == 1
    assert fixed["mode"] == "awake"
    assert len(state["history"]) == 1
    same, report2 = repair_state({"mode": "sleep"})
    assert same == {"mode": "sleep"}
    assert not report2.changed


_ids = st.sampled_from(["a", "b", "c", "d"])
_message = st.one_of(
    st.builds(lambda t: {"role": "user", "content": t}, st.text(max_size=5)),
    st.builds(lambda t: {"role": "assistant", "content": t}, st.text(max_size=5)),
    st.builds(
        lambda ids: {"role": "assistant", "content": None, "tool_calls": [call(i) for i in ids]},
        st.lists(_ids, min_size=1, max_size=3, unique=True),
    ),
    st.builds(answer, _ids),
    st.builds(lambda n: {"role": "assistant", "content": json.dumps({"tool": n})}, _ids),
    st.builds(lambda n: {"role": "user", "content": f"[TOOL RESULT: {n}]\n{{}}"}, _ids),
)


@given(st.lists(_message, max_size=20))
def test_any_history_is_valid_after_repair(history: list[dict[str, Any]]) -> None:
    """Property: after repair no call is unanswered, and repairing again changes nothing."""
    repaired, _ = repair_history(history)
    assert unanswered_tool_calls(repaired) == []
    again, report = repair_history(repaired)
    assert again == repaired
    assert not report.changed


def test_log_repair_logs_only_a_changed_history() -> None:
    """One INFO line naming the assistant and the counts; nothing for a clean history."""
    from twisted.logger import globalLogPublisher

    from ai_tools.store.history_repair import RepairReport, log_repair

    events: list[dict[str, object]] = []
    globalLogPublisher.addObserver(events.append)
    try:
        log_repair("pip", RepairReport())
        log_repair("pip", RepairReport(added=2, dropped=1))
    finally:
        globalLogPublisher.removeObserver(events.append)
    repaired = [e for e in events if "Repaired history" in str(e.get("log_format", ""))]
    assert len(repaired) == 1
    assert (repaired[0]["name"], repaired[0]["added"], repaired[0]["dropped"]) == ("pip", 2, 1)
