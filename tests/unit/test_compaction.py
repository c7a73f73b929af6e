"""Tests for ai_tools.loop.compaction: summary, truncation fallback, history validity."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from twisted.internet import defer

from ai_tools.loop.compaction import (
    SUMMARY_PREFIX,
    TRUNCATION_PREFIX,
    CompactionConfig,
    compact_history,
    compact_messages,
    needs_compaction,
    split_point,
    transcript,
    truncate_messages,
)


class FakeSummariser:
    """An ILLMClient stand-in answering every request with one canned outcome."""

    model = "fake"
    context_window = 1000

    def __init__(self, answer: Any = "they talked about apples") -> None:
        self.answer = answer
        self.requests: list[list[dict[str, Any]]] = []
        self.pending: defer.Deferred[Any] | None = None

    def complete(self, messages: Any, tools: Any = None, tool_choice: Any = None,
                 stream: Any = None, on_event: Any = None) -> defer.Deferred[Any]:
        self.requests.append(list(messages))
        if self.answer == "pending":
            self.pending = defer.Deferred()
            return self.pending
        if isinstance(self.answer, Exception):
            return defer.fail(self.answer)

        class Response:
            content = self.answer

        return defer.succeed(Response())

    def close(self) -> defer.Deferred[None]:
        return defer.succeed(None)


def native_exchange(i: int, n_calls: int = 1) -> list[dict[str, Any]]:
    """A user line, an assistant tool-call message and its answers."""
    calls = [{"id": f"c{i}_{k}", "type": "function",
              "function": {"name": "look", "arguments": "{}"}} for k in range(n_calls)]
    msgs: list[dict[str, Any]] = [
        {"role": "user", "content": f"hello {i}"},
        {"role": "assistant", "content": None, "tool_calls": calls},
    ]
    msgs += [{"role": "tool", "tool_call_id": c["id"], "content": '{"success": true}'}
             for c in calls]
    return msgs


def fallback_exchange(i: int) -> list[dict[str, Any]]:
    """The same in fallback format."""
    return [
        {"role": "user", "content": f"hi {i}"},
        {"role": "assistant", "content": json.dumps({"tool": "look", "arguments": {}})},
        {"role": "user", "content": "[TOOL RESULT: look]\n{\"success\": true}"},
    ]


def check_valid(messages: list[dict[str, Any]]) -> None:
    """Every native tool call has exactly one answer and no answer is orphaned."""
    pending: set[str] = set()
    for m in messages:
        if m["role"] == "tool":
            assert m["tool_call_id"] in pending, f"orphaned result {m}"
            pending.remove(m["tool_call_id"])
            continue
        assert not pending, f"unanswered calls {pending}"
        if m["role"] == "assistant":
            pending = {c["id"] for c in m.get("tool_calls") or ()}
    assert not pending
    if messages:
        assert not str(messages[0].get("content")).startswith("[TOOL RESULT:")


def test_thresholds_awake_and_sleep() -> None:
    """80% awake, 70% asleep (defaults), configurable."""
    assert not needs_compaction(79.9, "awake")
    assert needs_compaction(80, "awake")
    assert not needs_compaction(69.9, "sleep")
    assert needs_compaction(70, "sleep")
    assert needs_compaction(30, "awake", CompactionConfig(awake_threshold=30))


def test_bad_window_refused() -> None:
    """A preserve window must be a positive integer."""
    with pytest.raises(ValueError):
        CompactionConfig(preserve_window=0)


def test_split_point_never_starts_with_a_tool_result() -> None:
    """The kept window moves back to include the call its results answer."""
    msgs = native_exchange(0, n_calls=3)  # user, assistant, tool, tool, tool
    assert split_point(msgs, 2) == 1  # back to the assistant message
    assert split_point(msgs, 10) == 0
    fb = fallback_exchange(0) + fallback_exchange(1)
    assert split_point(fb, 1) == 4  # back to the fallback assistant call


def test_summary_replaces_old_messages() -> None:
    """Old messages become one summary message; the window is kept verbatim."""
    msgs = [m for i in range(10) for m in native_exchange(i)]  # 30 messages
    llm = FakeSummariser()
    result = compact_messages(msgs, llm, CompactionConfig(preserve_window=6)).result
    assert result.method == "summary"
    assert result.removed == 24
    assert result.messages[0]["content"].startswith(SUMMARY_PREFIX)
    assert "apples" in result.messages[0]["content"]
    assert list(result.messages[1:]) == msgs[24:]
    check_valid(list(result.messages))
    sent = llm.requests[0][1]["content"]
    assert "hello 0" in sent and "hello 9" not in sent


@pytest.mark.parametrize("answer", [RuntimeError("server down"), "   ", None])
def test_failed_summary_truncates(answer: Any) -> None:
    """A failing or empty model answer falls back to deterministic truncation."""
    msgs = [m for i in range(10) for m in native_exchange(i)]
    result = compact_messages(msgs, FakeSummariser(answer),
                              CompactionConfig(preserve_window=6)).result
    assert result.method == "truncation"
    assert result.error
    assert result.messages[0]["content"].startswith(TRUNCATION_PREFIX)
    assert list(result.messages[1:]) == msgs[24:]


def test_no_model_truncates() -> None:
    """Without a model, truncation."""
    msgs = [m for i in range(10) for m in native_exchange(i)]
    result = compact_messages(msgs, None, CompactionConfig(preserve_window=5)).result
    assert result.method == "truncation"


def test_short_history_untouched() -> None:
    """Nothing older than the window: no model call, method none."""
    llm = FakeSummariser()
    msgs = native_exchange(0)
    result = compact_messages(msgs, llm).result
    assert (result.method, list(result.messages)) == ("none", msgs)
    assert llm.requests == []
    assert truncate_messages(msgs).method == "none"


def test_cancel_propagates_to_the_model_request() -> None:
    """Cancelling compaction cancels the summary request (no truncation happens)."""
    msgs = [m for i in range(10) for m in native_exchange(i)]
    llm = FakeSummariser("pending")
    d = compact_messages(msgs, llm, CompactionConfig(preserve_window=3))
    d.cancel()
    assert llm.pending is not None and llm.pending.called
    failure = []
    d.addErrback(failure.append)
    assert failure and failure[0].check(defer.CancelledError)


def test_compact_history_in_place_list() -> None:
    """A list history is replaced in place, once."""
    msgs = [m for i in range(10) for m in native_exchange(i)]
    history = list(msgs)
    seen = []
    compact_history(history, FakeSummariser(), CompactionConfig(preserve_window=6),
                    on_done=seen.append)
    assert len(history) == 7
    assert seen[0].method == "summary"


def test_compact_history_object_with_replace() -> None:
    """An object exposing ``messages`` and ``replace`` is compacted through them."""

    class History:
        def __init__(self, msgs: list[dict[str, Any]]) -> None:
            self.messages = msgs

        def replace(self, msgs: list[dict[str, Any]]) -> None:
            self.messages = msgs

    h = History([m for i in range(10) for m in fallback_exchange(i)])
    compact_history(h, None, CompactionConfig(preserve_window=4))
    assert h.messages[0]["content"].startswith(TRUNCATION_PREFIX)
    assert h.messages[1]["role"] == "assistant"  # moved back past the fallback result


def test_compact_history_rejects_unknown_object() -> None:
    """A history it cannot read is an error, not silence."""
    d = compact_history(object(), None)
    failures = []
    d.addErrback(failures.append)
    assert failures[0].check(TypeError)


def test_transcript_bounds_size() -> None:
    """Huge histories are cut (oldest first) and long messages clipped."""
    cfg = CompactionConfig(max_transcript_chars=500, max_message_chars=50)
    msgs = [{"role": "user", "content": f"{i} " + "x" * 200} for i in range(100)]
    text = transcript(msgs, cfg)
    assert len(text) < 700
    assert "omitted" in text
    assert "99 " in text


@given(
    st.lists(st.tuples(st.booleans(), st.integers(1, 4)), min_size=1, max_size=25),
    st.integers(1, 30),
    st.booleans(),
)
def test_compaction_keeps_history_valid(
    shapes: list[tuple[bool, int]], window: int, model_ok: bool
) -> None:
    """Whatever the history and window, the result has no orphan or unanswered call."""
    msgs: list[dict[str, Any]] = []
    for i, (native, n) in enumerate(shapes):
        msgs += native_exchange(i, n) if native else fallback_exchange(i)
    llm = FakeSummariser("summary" if model_ok else RuntimeError("boom"))
    result = compact_messages(msgs, llm, CompactionConfig(preserve_window=window)).result
    out = list(result.messages)
    check_valid(out)
    if result.method != "none":
        assert len(out) == len(msgs) - result.removed + 1
        assert out[1:] == msgs[result.removed:]
        assert out[1]["role"] != "tool"
        assert not str(out[1].get("content")).startswith("[TOOL RESULT:")


def test_compacts_a_conversation_history_object() -> None:
    """The engine's ConversationHistory is compacted through messages/replace and stays valid."""
    from ai_tools.execution.history import ConversationHistory

    history = ConversationHistory([m for i in range(12) for m in native_exchange(i, 2)])
    result = compact_history(history, FakeSummariser(), CompactionConfig(preserve_window=5)
                             ).result
    assert result.method == "summary"
    assert history.messages[0]["content"].startswith(SUMMARY_PREFIX)
    assert history.unanswered_tool_calls() == []
    check_valid(history.messages)
    # ids of dropped calls are forgotten; kept ones are still known
    kept_ids = {c["id"] for m in history.messages for c in m.get("tool_calls") or ()}
    assert all(history.has_tool_call_id(i) for i in kept_ids)
    assert not history.has_tool_call_id("c0_0")


