"""No assistant is disabled by its own history.

One oversized entry (a megabyte of tool-call arguments, a huge reply) is
clipped with a marker before it reaches the history; a history of a few huge
messages is brought under the compaction target by clipping inside the
preserve window, also after a restart; the first iteration counts the prompt
and tools it sends.
"""

from __future__ import annotations

import json
from typing import Any

from twisted.internet import task

from ai_tools.execution.history import ConversationHistory, build_tool_exchange
from ai_tools.execution.results import CLIPPED_KEY, clip_arguments, clip_text
from ai_tools.llm.events import ToolCall
from ai_tools.llm.tokens import TokenCounter
from ai_tools.loop import TerminationReason, execute_react_loop
from ai_tools.loop.compaction import HistoryBudget, compact_messages
from ai_tools.loop.fitting import TRUNCATION_PREFIX, fit_messages
from ai_tools.service.tick import RAN
from ai_tools.store.memory import MemoryStore
from ai_tools.tools.base import Actor, Tool
from ai_tools.tools.registry import ToolRegistry
from tests.unit.react_fakes import (
    SayTool,
    ScriptedLLM,
    answer,
    call,
    check_history_valid,
    make_ctx,
    text,
)
from tests.unit.service_fakes import add, make_service, settle

MEGABYTE = 1_000_000
WINDOW = 8192


class NoteTool(Tool):
    """A tool whose schema refuses long text (the model sends a megabyte anyway)."""

    name = "note"
    description = "Write a short note."
    parameters = {"type": "object",
                  "properties": {"text": {"type": "string", "maxLength": 200}},
                  "required": ["text"]}

    def execute(self, actor: Actor, **params: Any) -> dict[str, Any]:
        return {"success": True}


def _estimate() -> TokenCounter:
    """The four-characters-per-token estimate (what runs where tiktoken cannot load)."""
    def no_tiktoken(name: str) -> Any:
        raise RuntimeError("no tiktoken here")
    return TokenCounter(loader=no_tiktoken)


def _count(message: dict[str, Any]) -> int:
    return _estimate().count_message(message)


def _history_bytes(messages: list[dict[str, Any]]) -> int:
    return len(json.dumps(messages))


# -- clipping before the history ------------------------------------------------------


def test_clip_text_keeps_small_text_and_marks_a_cut() -> None:
    assert clip_text("hello", 512) == "hello"
    clipped = clip_text("é" * 10_000, 1000)
    assert len(clipped.encode("utf-8")) <= 1000
    assert "[CLIPPED: the text was 20000 bytes" in clipped
    assert clipped.startswith("é" * 100)


def test_clipped_arguments_stay_a_json_object_within_the_bound() -> None:
    assert clip_arguments('{"a":1}', 512) is None
    args = json.dumps({"text": '"\\' * 100_000})  # escaping makes the preview grow
    clipped = clip_arguments(args, 1024)
    assert clipped is not None and set(clipped) == {CLIPPED_KEY, "_preview"}
    assert len(json.dumps(clipped).encode("utf-8")) <= 1024
    assert str(len(args)) in clipped[CLIPPED_KEY]


def test_oversized_call_and_text_are_clipped_in_both_history_formats() -> None:
    call_ = ToolCall(id="c1", name="note", arguments={"text": "x" * MEGABYTE})
    native = build_tool_exchange(call_, '{"success":false}', native=True,
                                 assistant_content="y" * MEGABYTE)
    arguments = json.loads(native[0]["tool_calls"][0]["function"]["arguments"])
    assert CLIPPED_KEY in arguments
    assert _history_bytes(list(native)) < 40_000
    fallback = build_tool_exchange(call_, '{"success":false}', native=False)
    assert "[CLIPPED" in fallback[0]["content"] and len(fallback[0]["content"]) < 20_000
    history = ConversationHistory()
    history.add_assistant("z" * MEGABYTE)
    assert len(history.messages[0]["content"]) <= 16 * 1024


def test_a_megabyte_argument_enters_the_history_clipped() -> None:
    """The call refused by the schema is answered, and what stays is bounded and marked."""
    llm = ScriptedLLM([answer(call("note", {"text": "x" * MEGABYTE}, "c1")), text("sorry")],
                      context_window=WINDOW)
    events: list[dict[str, Any]] = []
    ctx = make_ctx(llm, registry=ToolRegistry([NoteTool]), events=events)
    d = execute_react_loop(ctx)
    assert d.result.termination_reason == TerminationReason.COMPLETED
    messages = ctx.history.messages
    check_history_valid(messages)
    assert _history_bytes(messages) < 40_000
    assert "[CLIPPED" in messages[0]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(messages[1]["content"])["success"] is False
    # the second request already fits: the model was asked again, not stopped
    assert len(llm.requests) == 2
    tool_call = next(e for e in events if e["type"] == "tool_call")
    assert CLIPPED_KEY in tool_call["arguments"]
    assert len(json.dumps(tool_call)) < 4096


def test_a_megabyte_argument_does_not_stop_the_later_ticks() -> None:
    """Issue: the argument stayed in the history and every later tick ended
    ``critical_tokens`` with 0 iterations."""
    replies = [answer(call("note", {"text": "x" * MEGABYTE}, "c1")), text("sorry")]
    replies += [text(f"hello {i}") for i in range(3)]
    llm = ScriptedLLM(replies, context_window=WINDOW)
    clock, service, _ = make_service(llm=llm, loop=False,
                                     registry=ToolRegistry([NoteTool, SayTool]))
    ada = add(service, clock, name="ada")
    for i in range(4):
        service.send("ada", f"message {i}")
        settle(clock)
        assert ada.last_tick["status"] == RAN
        assert ada.last_tick["reason"] != "critical_tokens", ada.last_tick
        assert ada.last_tick["iterations"] >= 1
    assert llm.script == []


# -- compaction inside the preserve window ------------------------------------------------


def _huge_history() -> list[dict[str, Any]]:
    """Four messages at about 130% of an 8,192-token window."""
    return [{"role": "user", "content": "[EVENTS] bob says: tell me a story"},
            {"role": "assistant", "content": "Once upon a time " + "and then " * 4700},
            {"role": "user", "content": "[EVENTS] bob says: go on"},
            {"role": "assistant", "content": "ok"}]


def test_fit_clips_the_few_huge_messages_into_the_budget() -> None:
    messages = _huge_history()
    assert sum(_count(m) for m in messages) > 1.3 * WINDOW * 0.8
    fit = fit_messages(messages, 3000, _count)
    assert sum(_count(m) for m in fit.messages) <= 3000
    assert fit.clipped == 1 and fit.dropped == 0 and len(fit.messages) == 4
    assert "[CLIPPED" in fit.messages[1]["content"]
    assert fit.messages[3] == messages[3]
    assert fit_messages(messages, 100_000, _count).messages == tuple(messages)


def test_fit_drops_the_oldest_when_clipping_is_not_enough_and_keeps_pairs() -> None:
    history = ConversationHistory()
    for i in range(30):
        history.add_user("hello " * 400)
        call_ = ToolCall(id=f"c{i}", name="note", arguments={"text": "x" * 5000})
        history.add_tool_exchange(call_, json.dumps({"success": True, "n": "y" * 5000}),
                                  native=True)
    fit = fit_messages(history.messages, 600, _count)
    assert fit.dropped > 0 and fit.messages[0]["content"].startswith(TRUNCATION_PREFIX)
    assert fit.messages[1]["role"] != "tool"
    check_history_valid(list(fit.messages[1:]))
    assert sum(_count(m) for m in fit.messages) <= 600


def test_fit_keeps_a_clipped_fallback_call_answerable() -> None:
    history = ConversationHistory()
    call_ = ToolCall(id="c1", name="note", arguments={"text": "x" * 3000})
    history.add_tool_exchange(call_, json.dumps({"success": True, "n": "y" * 3000}),
                              native=False)
    fit = fit_messages(history.messages, 200, _count)
    assert fit.clipped == 2
    assert ConversationHistory(list(fit.messages)).unanswered_tool_calls() == []
    assert ConversationHistory.from_list(list(fit.messages)).messages == list(fit.messages)


def test_compaction_clips_inside_the_preserve_window() -> None:
    """Four messages never reach the 20-message preserve window: clipping frees them."""
    result: list[Any] = []
    budget = HistoryBudget(2000, _count)
    compact_messages(_huge_history(), None, budget=budget).addCallback(result.append)
    assert result[0].method == "clipping" and result[0].clipped == 1
    assert sum(_count(m) for m in result[0].messages) <= 2000
    result.clear()
    compact_messages(_huge_history(), None).addCallback(result.append)
    assert result[0].method == "none"  # without a budget: only what is old goes


def _service_with_huge_history(store: MemoryStore, clock: task.Clock) -> Any:
    llm = ScriptedLLM([text(f"hello {i}") for i in range(4)], context_window=WINDOW)
    return make_service(clock, llm=llm, loop=False, store=store,
                        registry=ToolRegistry([SayTool]))


def test_a_few_huge_messages_stop_no_tick_even_after_a_restart() -> None:
    """Issue: a 4-message history at 130% of the window never compacted (below the
    20-message minimum); every tick ended ``critical_tokens``, surviving restarts."""
    clock = task.Clock()
    store = MemoryStore(clock=clock)
    _, service, _ = _service_with_huge_history(store, clock)
    ada = add(service, clock, name="ada")
    ada.history.replace(_huge_history())
    service.save_state("ada")
    settle(clock)
    service.stopService()
    settle(clock)
    _, service, _ = _service_with_huge_history(store, clock)
    ada = add(service, clock, name="ada")
    assert len(ada.history) == 4  # the restart brought the huge history back
    events: list[dict[str, Any]] = []
    service.add_observer(events.append)
    service.send("ada", "are you there?")
    settle(clock)
    assert ada.last_tick["status"] == RAN
    assert ada.last_tick["reason"] == "completed" and ada.last_tick["iterations"] == 1
    assert ada.counters["compactions"] == 1
    assert "[CLIPPED" in ada.history.messages[1]["content"]
    assert ada.meter.last is not None and ada.meter.last.percent < 80
    compaction = next(e for e in events if e["type"] == "compaction")
    assert compaction["method"] == "clipping" and compaction["clipped"] == 1


# -- what the loop's events tell ----------------------------------------------------------


class FakeProfile:
    label = "local"


def test_each_model_request_is_an_event_with_its_latency_and_tokens() -> None:
    from ai_tools.errors import LLMError

    clock = task.Clock()

    def slow_answer(messages: Any, tools: Any) -> Any:
        clock.advance(0.25)
        return answer(call("note", {"text": "hi"}, "c1"),
                      usage={"prompt_tokens": 120, "completion_tokens": 7, "total_tokens": 127})

    llm = ScriptedLLM([slow_answer, LLMError("HTTP 500: the server broke")],
                      context_window=WINDOW)
    llm.profile = FakeProfile()  # type: ignore[attr-defined]
    events: list[dict[str, Any]] = []
    ctx = make_ctx(llm, registry=ToolRegistry([NoteTool]), events=events, clock=clock)
    result = execute_react_loop(ctx).result
    assert result.termination_reason == TerminationReason.LLM_ERROR
    requests = [e for e in events if e["type"] == "model_request"]
    fields = {"type", "assistant", "iteration", "profile", "model", "latency_ms",
              "prompt_tokens", "completion_tokens", "status", "error", "attempts",
              "response_model", "finish_reason", "queued_ms"}
    assert [set(e) for e in requests] == [fields, fields]
    assert requests[0] | {} == {"type": "model_request", "assistant": "ada", "iteration": 1,
                               "profile": "local", "model": "scripted", "latency_ms": 250.0,
                               "prompt_tokens": 120, "completion_tokens": 7, "status": "ok",
                               "error": None, "attempts": 1, "response_model": None,
                               "finish_reason": "tool_calls", "queued_ms": 0.0}
    assert requests[1]["status"] == "llm_error" and requests[1]["iteration"] == 2
    assert requests[1]["error"] == "HTTP 500: the server broke"
    assert requests[1]["prompt_tokens"] is None
    assert requests[1]["attempts"] == 0  # (the scripted error says it sent nothing)


def test_tool_results_and_errors_reach_the_events_clipped() -> None:
    class Verbose(Tool):
        name = "verbose"
        description = "Talks a lot."

        def execute(self, actor: Actor, **params: Any) -> dict[str, Any]:
            return {"success": False, "error": "e" * 10_000, "text": "t" * 100_000}

    llm = ScriptedLLM([answer(call("verbose", {}, "c1")), text("done")], context_window=WINDOW)
    events: list[dict[str, Any]] = []
    ctx = make_ctx(llm, registry=ToolRegistry([Verbose, NoteTool]), events=events)
    execute_react_loop(ctx)
    result = next(e for e in events if e["type"] == "tool_result")
    assert result["result"].startswith('{"success": false') and "[CLIPPED" in result["result"]
    assert result["error"].startswith("eee") and len(result["error"]) <= 2048
    assert len(json.dumps(result)) < 8192


def test_fit_keeps_the_newest_message_whatever_the_budget() -> None:
    fit = fit_messages([{"role": "user", "content": "x" * 100_000}], 10, _count)
    assert len(fit.messages) == 1 and fit.dropped == 0 and fit.clipped == 1
    assert len(fit.messages[0]["content"]) <= 512


def test_the_summary_request_fits_a_small_window() -> None:
    """A 2,000-token model is not sent a 48,000-character transcript to summarise."""
    llm = ScriptedLLM([text("they talked")], context_window=2000)
    history = [m for i in range(40) for m in ({"role": "user", "content": f"{i} " + "w" * 1500},
                                               {"role": "assistant", "content": "ok"})]
    result: list[Any] = []
    budget = HistoryBudget(500, _count, window=2000)
    compact_messages(history, llm, budget=budget).addCallback(result.append)
    assert result[0].method == "summary"
    assert len(llm.requests[0]["messages"][1]["content"]) <= 4000
