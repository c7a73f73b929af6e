"""Tests for the ReAct loop (ai_tools.loop.run) with an in-process scripted model."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from twisted.internet import defer, task

from ai_tools.errors import LLMError, LLMUnavailable, RepeatedLineLoop
from ai_tools.execution.history import ConversationHistory
from ai_tools.llm.events import ChatResponse
from ai_tools.loop import (
    ExitTool,
    GatePolicy,
    LoopConfig,
    LoopContext,
    LoopProgress,
    LoopResult,
    TerminationReason,
    execute_react_loop,
)
from ai_tools.tools.base import ToolCategory
from tests.unit.react_fakes import (
    Pending,
    ScriptedLLM,
    Streamed,
    answer,
    call,
    check_history_valid,
    fake_meter,
    make_ctx,
    make_registry,
    text,
)


def run(ctx: LoopContext, config: LoopConfig | None = None) -> LoopResult:
    """Run a loop that completes synchronously and return its result."""
    d = execute_react_loop(ctx, config)
    assert d.called, "the loop did not finish"
    result = d.result
    assert isinstance(result, LoopResult)
    check_history_valid(ctx.history.messages)
    return result


def tool_messages(ctx: LoopContext) -> list[dict[str, Any]]:
    return [m for m in ctx.history.messages if m["role"] == "tool"]


# -- configuration ---------------------------------------------------------------


@pytest.mark.parametrize("bad", [0, 11, -1, 2.5, "3"])
def test_max_iterations_must_be_1_to_10(bad: Any) -> None:
    """LoopConfig refuses iteration caps outside 1..10."""
    with pytest.raises(ValueError, match="max_iterations"):
        LoopConfig(max_iterations=bad)


def test_config_validation() -> None:
    """Budgets, error caps and pattern modes are checked."""
    with pytest.raises(ValueError):
        LoopConfig(tool_budget=-1)
    with pytest.raises(ValueError):
        LoopConfig(consecutive_error_cap=0)
    with pytest.raises(ValueError):
        LoopConfig(pattern_mode="chaos")
    assert LoopConfig().max_iterations == 5
    assert LoopConfig().consecutive_error_cap == 5
    assert LoopConfig(pattern_mode="single_action").effective_max_iterations == 1


def test_every_design_reason_exists() -> None:
    """The termination reasons of DESIGN §3 are all defined."""
    design = {"terminal_tool", "dangerous_tool", "noop", "max_iterations", "critical_tokens",
              "llm_error", "parse_error", "stopped_by_user", "consecutive_errors",
              "tool_budget_exhausted", "repeated_line_loop", "llm_unavailable"}
    assert design <= {str(r) for r in TerminationReason}


# -- termination reasons ------------------------------------------------------------


def test_plain_text_completes() -> None:
    """A text answer with no tool call ends the loop with ``completed``."""
    llm = ScriptedLLM([text("Nothing to do.")])
    ctx = make_ctx(llm)
    result = run(ctx)
    assert result.termination_reason == TerminationReason.COMPLETED
    assert result.text == "Nothing to do."
    assert (result.iterations, result.success, result.success_count) == (1, False, 0)
    assert ctx.history.messages[-1] == {"role": "assistant", "content": "Nothing to do."}
    assert result.as_dict()["pattern_mode"] == "react_loop"


def test_noop_ends_the_loop_without_running_or_recording() -> None:
    """``noop`` ends the loop with ``noop``; it is neither executed nor put in history."""
    llm = ScriptedLLM([answer(call("noop", {"reason": "idle"}), content="All quiet.")])
    ctx = make_ctx(llm)
    result = run(ctx)
    assert result.termination_reason == TerminationReason.NOOP
    assert result.results == ()
    assert ctx.history.messages[-1] == {"role": "assistant", "content": "All quiet."}
    assert not any(m.get("tool_calls") for m in ctx.history.messages)
    # noop is offered even when no noop tool is registered
    names = [t["function"]["name"] for t in llm.requests[0]["tools"]]
    assert "noop" in names


def test_terminal_tool_ends_the_loop() -> None:
    """SAFE_CHAIN continues; a successful TERMINAL tool ends with ``terminal_tool``."""
    llm = ScriptedLLM([answer(call("look", {}, "c1")),
                       answer(call("say", {"text": "hi"}, "c2"))])
    ctx = make_ctx(llm)
    result = run(ctx)
    assert result.termination_reason == TerminationReason.TERMINAL_TOOL
    assert [r["tool"] for r in result.results] == ["look", "say"]
    assert (result.iterations, result.success, result.success_count) == (2, True, 2)
    assert result.error is None and not result.failed


def test_failed_terminal_tool_lets_the_model_retry() -> None:
    """A TERMINAL call refused by validation does not end the loop."""
    llm = ScriptedLLM([answer(call("say", {}, "c1")),
                       answer(call("say", {"text": "hi"}, "c2"))])
    ctx = make_ctx(llm)
    result = run(ctx)
    assert result.termination_reason == TerminationReason.TERMINAL_TOOL
    assert [r["success"] for r in result.results] == [False, True]


@pytest.mark.parametrize("at", ["north", "fail"])
def test_dangerous_tool_ends_the_loop_success_or_not(at: str) -> None:
    """A dispatched DANGEROUS tool ends the loop even when it fails."""
    llm = ScriptedLLM([answer(call("dig", {"at": at}))])
    result = run(make_ctx(llm))
    assert result.termination_reason == TerminationReason.DANGEROUS_TOOL
    assert result.success == (at == "north")


def test_max_iterations() -> None:
    """A model that keeps looking stops at the iteration cap."""
    llm = ScriptedLLM([answer(call("look", {"at": str(i)}, f"c{i}")) for i in range(3)])
    ctx = make_ctx(llm)
    result = run(ctx, LoopConfig(max_iterations=3))
    assert result.termination_reason == TerminationReason.MAX_ITERATIONS
    assert (result.iterations, result.max_allowed_iterations) == (3, 3)
    assert len(llm.requests) == 3


def test_single_action_runs_one_iteration() -> None:
    """Single-action mode is a loop of one iteration."""
    llm = ScriptedLLM([answer(call("look"))])
    result = run(make_ctx(llm), LoopConfig(pattern_mode="single_action", max_iterations=9))
    assert result.termination_reason == TerminationReason.MAX_ITERATIONS
    assert (result.iterations, result.pattern_mode, result.max_allowed_iterations) == (
        1, "single_action", 1)


def test_critical_tokens_before_the_first_call() -> None:
    """A history already at 80% stops the loop before any model call."""
    llm = ScriptedLLM([])
    ctx = make_ctx(llm, meter=fake_meter(prompt=850))
    result = run(ctx, LoopConfig(context_window=1000))
    assert result.termination_reason == TerminationReason.CRITICAL_TOKENS
    assert result.iterations == 0 and llm.requests == []
    assert result.usage["context_percent"] == 85.0


def test_critical_tokens_after_a_tool_grows_the_history() -> None:
    """Usage crossing 80% after a tool result stops the loop before the next call."""
    llm = ScriptedLLM([answer(call("look", {}, "c1")), answer(call("look", {}, "c2"))])

    # the prompt and each message: 100 tokens (6 of them: 60%; 2 more: 80%)
    ctx = make_ctx(llm, meter=fake_meter(prompt=100, per_message=lambda m: 100))
    ctx.history.add_user("hi")
    ctx.history.add_user("there")
    ctx.history.add_user("you")
    ctx.history.add_user("!")
    ctx.history.add_user("?")
    result = run(ctx, LoopConfig(context_window=1000))
    assert result.termination_reason == TerminationReason.CRITICAL_TOKENS
    assert result.iterations == 1 and len(llm.requests) == 1


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (LLMError("server exploded", partial_text="Half an ans"), TerminationReason.LLM_ERROR),
        (LLMUnavailable("circuit open"), TerminationReason.LLM_UNAVAILABLE),
        (RepeatedLineLoop("same line 20 times", partial_text="la la la"),
         TerminationReason.REPEATED_LINE_LOOP),
    ],
)
def test_model_failures(error: LLMError, reason: str) -> None:
    """Model errors end the loop with their reason; partial text is preserved."""
    llm = ScriptedLLM([answer(call("look"), content="Let me look."), error])
    result = run(make_ctx(llm))
    assert result.termination_reason == reason
    assert result.failed
    assert result.error == str(error)
    assert result.text.startswith("Let me look.")
    assert error.partial_text in result.text
    assert result.success_count == 1


def test_partial_stream_text_kept_when_the_error_has_none() -> None:
    """Streamed deltas survive an error that carries no partial text."""

    class StreamThenFail(Pending):
        def start(self) -> defer.Deferred[Any]:
            return defer.fail(LLMError("connection lost"))

    llm = ScriptedLLM([StreamThenFail(["Hel", "lo"])])
    result = run(make_ctx(llm))
    assert (result.termination_reason, result.text) == (TerminationReason.LLM_ERROR, "Hello")


def test_unexpected_client_exception_is_llm_error() -> None:
    """A client raising something that is not an LLMError does not kill the loop."""
    llm = ScriptedLLM([RuntimeError("bug in client")])
    result = run(make_ctx(llm))
    assert result.termination_reason == TerminationReason.INTERNAL_ERROR
    assert "bug in client" in (result.error or "")


def test_client_returning_garbage_is_llm_error() -> None:
    """A client that returns something other than a ChatResponse ends with llm_error."""
    llm = ScriptedLLM([lambda m, t: {"not": "a response"}])
    result = run(make_ctx(llm))
    assert result.termination_reason == TerminationReason.LLM_ERROR


@pytest.mark.parametrize(
    "response",
    [
        answer(call("look", "{not json", "c1"), content="Looking"),
        answer(call("look", "[1, 2]", "c1"), content="Looking"),
        ChatResponse.from_message({"role": "assistant", "content": "Looking",
                                   "tool_calls": [{"id": "x", "function": {}}]}),
    ],
)
def test_parse_error_keeps_the_text(response: ChatResponse) -> None:
    """Malformed calls end with ``parse_error``, nothing executed, output preserved."""
    llm = ScriptedLLM([response])
    ctx = make_ctx(llm)
    result = run(ctx)
    assert result.termination_reason == TerminationReason.PARSE_ERROR
    assert result.error
    assert "Looking" in result.text
    assert result.results == ()
    assert ctx.registry.get_tool("look").calls == []  # type: ignore[union-attr]


def test_unknown_tool_is_answered_and_the_loop_goes_on() -> None:
    """An unknown name gets an error listing valid tools; the model may correct itself."""
    llm = ScriptedLLM([answer(call("fly", {}, "c1")), answer(call("say", {"text": "x"}, "c2"))])
    ctx = make_ctx(llm)
    result = run(ctx)
    assert result.termination_reason == TerminationReason.TERMINAL_TOOL
    first = json.loads(tool_messages(ctx)[0]["content"])
    assert first["success"] is False and "look" in first["error"]


def test_consecutive_errors_cap() -> None:
    """N failed calls in a row end the loop with ``consecutive_errors``."""
    llm = ScriptedLLM([answer(call("broken", {}, f"c{i}")) for i in range(5)])
    ctx = make_ctx(llm)
    result = run(ctx, LoopConfig(consecutive_error_cap=3, max_iterations=10))
    assert result.termination_reason == TerminationReason.CONSECUTIVE_ERRORS
    assert result.iterations == 3


def test_consecutive_errors_reset_by_a_success() -> None:
    """A success in between resets the error count."""
    script = [answer(call("broken", {}, "a")), answer(call("look", {}, "b")),
              answer(call("broken", {}, "c")), text("done")]
    result = run(make_ctx(ScriptedLLM(script)), LoopConfig(consecutive_error_cap=2))
    assert result.termination_reason == TerminationReason.COMPLETED


def test_consecutive_errors_within_one_answer_skip_the_rest() -> None:
    """Hitting the cap mid-answer answers the remaining calls with "skipped"."""
    llm = ScriptedLLM([answer(call("broken", {}, "a"), call("broken", {}, "b"),
                              call("look", {}, "c"))])
    ctx = make_ctx(llm)
    result = run(ctx, LoopConfig(consecutive_error_cap=2))
    assert result.termination_reason == TerminationReason.CONSECUTIVE_ERRORS
    assert [r.get("skipped", False) for r in result.results] == [False, False, True]
    assert ctx.registry.get_tool("look").calls == []  # type: ignore[union-attr]


# -- tool budget and several calls per answer ---------------------------------------


def test_budget_exhausted_mid_batch() -> None:
    """With budget 2 and 3 calls in one answer: 2 run, the 3rd is skipped, loop fails."""
    llm = ScriptedLLM([answer(call("look", {"at": "a"}, "c1"), call("look", {"at": "b"}, "c2"),
                              call("look", {"at": "c"}, "c3"), content="Looking thrice")])
    ctx = make_ctx(llm)
    result = run(ctx, LoopConfig(tool_budget=2))
    assert result.termination_reason == TerminationReason.TOOL_BUDGET_EXHAUSTED
    assert result.failed and result.tool_budget_remaining == 0
    assert ctx.registry.get_tool("look").calls == [{"at": "a"}, {"at": "b"}]  # type: ignore
    answers = [json.loads(m["content"]) for m in tool_messages(ctx)]
    assert [a.get("status") for a in answers] == [None, None, "skipped"]
    assert result.text == "Looking thrice"
    assert result.success_count == 2


def test_budget_zero_skips_everything() -> None:
    """A zero budget answers every call "skipped"; nothing runs."""
    llm = ScriptedLLM([answer(call("look", {}, "c1"), content="hm")])
    ctx = make_ctx(llm)
    result = run(ctx, LoopConfig(tool_budget=0))
    assert result.termination_reason == TerminationReason.TOOL_BUDGET_EXHAUSTED
    assert ctx.history.messages[-3] == {"role": "assistant", "content": "hm"}


def test_refused_calls_are_not_charged() -> None:
    """Unknown or invalid calls do not consume the budget."""
    llm = ScriptedLLM([answer(call("fly", {}, "a"), call("say", {}, "b")), text("ok")])
    result = run(make_ctx(llm), LoopConfig(tool_budget=1))
    assert result.termination_reason == TerminationReason.COMPLETED
    assert result.tool_budget_remaining == 1


def test_calls_after_a_terminal_one_are_skipped() -> None:
    """Several calls run in order; after the TERMINAL one the rest get "skipped"."""
    llm = ScriptedLLM([answer(call("look", {}, "c1"), call("say", {"text": "hi"}, "c2"),
                              call("look", {"at": "x"}, "c3"))])
    ctx = make_ctx(llm)
    result = run(ctx)
    assert result.termination_reason == TerminationReason.TERMINAL_TOOL
    assert [r["tool"] for r in result.results] == ["look", "say", "look"]
    assert result.results[2]["skipped"]
    assert ctx.registry.get_tool("look").calls == [{}]  # type: ignore[union-attr]
    ids = [m["tool_call_id"] for m in tool_messages(ctx)]
    assert ids == ["c1", "c2", "c3"]


def test_noop_after_calls_skips_later_ones() -> None:
    """Calls before noop run; calls after it are skipped."""
    llm = ScriptedLLM([answer(call("look", {}, "c1"), call("noop", {}, "n"),
                              call("look", {}, "c3"))])
    ctx = make_ctx(llm)
    result = run(ctx)
    assert result.termination_reason == TerminationReason.NOOP
    assert [r.get("skipped", False) for r in result.results] == [False, True]


def test_reused_call_ids_are_made_unique() -> None:
    """Servers that reuse ids (``call_0`` every turn) still give a valid history."""
    llm = ScriptedLLM([answer(call("look", {}, "call_0")), answer(call("look", {}, "call_0")),
                       text("done")])
    ctx = make_ctx(llm)
    result = run(ctx)
    assert result.termination_reason == TerminationReason.COMPLETED
    ids = [m["tool_call_id"] for m in tool_messages(ctx)]
    assert len(set(ids)) == 2


# -- exit tools --------------------------------------------------------------------


def test_exit_tools_are_signals_only() -> None:
    """Exit calls: offered, recorded with emitted_at (monotonic), never run, free, not in
    history."""
    clock = task.Clock()
    clock.advance(1e9)  # wall-clock time, which signals do not use
    monotonic = iter([41.0, 42.0])
    events: list[dict[str, Any]] = []
    llm = ScriptedLLM([
        answer(call("flag_for_review", {"why": "odd"}, "e1"), call("look", {}, "c1")),
        answer(call("flag_for_review", {"why": "again"}, "e2"), content="Done."),
    ])
    ctx = make_ctx(llm, clock=clock, events=events, monotonic=lambda: next(monotonic))
    config = LoopConfig(exit_tools=[ExitTool("flag_for_review", "Flag this conversation.",
                                             {"type": "object"})], tool_budget=1)
    result = run(ctx, config)
    assert result.termination_reason == TerminationReason.COMPLETED
    assert list(result.signals) == [
        {"tool_name": "flag_for_review", "arguments": {"why": "odd"}, "emitted_at": 41.0},
        {"tool_name": "flag_for_review", "arguments": {"why": "again"}, "emitted_at": 42.0},
    ]
    assert result.tool_budget_remaining == 0  # only look was charged
    assert [r["tool"] for r in result.results] == ["look"]
    history_text = json.dumps(ctx.history.messages)
    assert "flag_for_review" not in history_text and "e1" not in history_text
    offered = [t["function"]["name"] for t in llm.requests[0]["tools"]]
    assert "flag_for_review" in offered
    assert [e["tool_name"] for e in events if e["type"] == "signal"] == ["flag_for_review"] * 2
    assert result.as_dict()["signals"][0]["arguments"] == {"why": "odd"}


def test_exit_tool_with_bad_arguments_is_kept_best_effort() -> None:
    """A signal whose arguments are not JSON is still recorded (raw)."""
    llm = ScriptedLLM([answer(call("alert", "{oops", "e1"))])
    result = run(make_ctx(llm), LoopConfig(exit_tools=[ExitTool("alert")]))
    assert result.termination_reason == TerminationReason.COMPLETED
    assert result.signals[0]["arguments"] == {"_raw": "{oops"}


def test_exit_tool_shadows_a_registered_tool() -> None:
    """An exit tool with a registered tool's name is not executed."""
    llm = ScriptedLLM([answer(call("look", {}, "c1"))])
    ctx = make_ctx(llm)
    result = run(ctx, LoopConfig(exit_tools=[ExitTool("look")]))
    assert result.signals[0]["tool_name"] == "look"
    assert ctx.registry.get_tool("look").calls == []  # type: ignore[union-attr]


# -- messages: system prompt, events, advisory ---------------------------------------


def test_system_prompt_regenerated_with_budget_and_step() -> None:
    """Every request starts with a fresh system message showing budget and step."""
    persona_calls = []

    def persona() -> str:
        persona_calls.append(1)
        return f"You are Ada (version {len(persona_calls)})."

    llm = ScriptedLLM([answer(call("look", {}, "c1")), answer(call("look", {}, "c2")),
                       text("done")])
    ctx = make_ctx(llm, system_prompt=persona)
    run(ctx, LoopConfig(tool_budget=3))
    prompts = llm.system_prompts()
    assert "Tool calls remaining this turn: 3." in prompts[0]
    assert "Tool calls remaining this turn: 2." in prompts[1]
    assert "Tool calls remaining this turn: 1." in prompts[2]
    assert "Step 1 of at most 5" in prompts[0] and "Step 3 of at most 5" in prompts[2]
    assert "version 1" in prompts[0] and "version 3" in prompts[2]
    assert all(r["messages"][0]["role"] == "system" for r in llm.requests)
    assert sum(m["role"] == "system" for m in llm.requests[2]["messages"]) == 1
    assert not any(m["role"] == "system" for m in ctx.history.messages)


def test_status_at_end_keeps_every_request_a_continuation_of_the_previous_one() -> None:
    """With ``status_at_end`` the system prompt is the same in every request and the
    status is a system message after the history: each request begins with the whole
    previous request but its status, which is what prompt caches reuse."""
    llm = ScriptedLLM([answer(call("look", {}, "c1")), answer(call("look", {}, "c2")),
                       text("done")])
    ctx = make_ctx(llm, system_prompt="You are Ada.")
    run(ctx, LoopConfig(tool_budget=3, status_at_end=True))
    requests = [r["messages"] for r in llm.requests]
    head = {"role": "system", "content": requests[0][0]["content"]}
    assert [m[0] for m in requests] == [head] * 3
    assert "Step" not in requests[0][0]["content"]
    for messages, step, left in zip(requests, (1, 2, 3), (3, 2, 1), strict=True):
        assert messages[-1]["role"] == "system"
        assert f"Step {step} of at most 5" in messages[-1]["content"]
        assert f"Tool calls remaining this turn: {left}." in messages[-1]["content"]
    for before, after in itertools.pairwise(requests):
        assert after[:len(before) - 1] == before[:-1]  # all but the status, unchanged
    assert not any(m["role"] == "system" for m in ctx.history.messages)


def test_persona_provider_may_return_a_deferred() -> None:
    """The system prompt provider may answer asynchronously."""
    llm = ScriptedLLM([text("ok")])
    ctx = make_ctx(llm, system_prompt=lambda: defer.succeed("You are Deferred Ada."))
    run(ctx)
    assert llm.system_prompts()[0].startswith("You are Deferred Ada.")


def test_pending_events_move_into_history() -> None:
    """Pending events become one user message and the list is emptied in place."""
    events = [{"type": "say", "from": "Bob", "text": "Hello Ada"}]
    llm = ScriptedLLM([answer(call("say", {"text": "Hi Bob"}))])
    ctx = make_ctx(llm, pending_events=events)
    run(ctx)
    assert events == []
    first = ctx.history.messages[0]
    assert first["role"] == "user" and "Bob (say): Hello Ada" in first["content"]
    assert "[TICK]" not in json.dumps(llm.requests[0]["messages"])


def test_tick_nudge_is_transient() -> None:
    """Without events the request ends with a tick message that is never stored."""
    llm = ScriptedLLM([answer(call("look", {}, "c1")), text("fine")])
    ctx = make_ctx(llm)
    run(ctx)
    assert llm.requests[0]["messages"][-1]["content"].startswith("[TICK]")
    assert llm.requests[1]["messages"][1]["content"].startswith("[TICK]")
    assert "[TICK]" not in json.dumps(ctx.history.messages)


@pytest.mark.parametrize(
    ("tokens", "level"), [(300, None), (550, "moderate"), (720, "high"), (790, "high")]
)
def test_advisory_reaches_the_model_at_each_level(tokens: int, level: str | None) -> None:
    """The next request shows the advisory in the system prompt and the fresh result."""
    llm = ScriptedLLM([answer(call("look", {}, "c1")), text("ok")])
    ctx = make_ctx(llm, meter=fake_meter(prompt=tokens))
    result = run(ctx, LoopConfig(context_window=1000))
    second = llm.requests[1]["messages"]
    tool_msg = next(m for m in second if m["role"] == "tool")
    advisory = json.loads(tool_msg["content"]).get("_token_advisory")
    recorded = result.results[0]["result"].get("_token_advisory")
    if level is None:
        assert advisory is None and recorded is None
        assert "Context advisory" not in second[0]["content"]
    else:
        assert advisory["level"] == level and recorded["level"] == level
        assert f"Context advisory ({level})" in second[0]["content"]
    # never stored in the history
    assert "_token_advisory" not in json.dumps(ctx.history.messages)


def test_critical_advisory_in_results() -> None:
    """A result recorded at >=80% carries the CRITICAL advisory, then the loop stops."""
    llm = ScriptedLLM([answer(call("look", {}, "c1"))])

    ctx = make_ctx(llm, meter=fake_meter(
        prompt=100, per_message=lambda m: 800 if m["role"] == "tool" else 0))
    result = run(ctx, LoopConfig(context_window=1000))
    assert result.results[0]["result"]["_token_advisory"]["level"] == "critical"
    assert result.termination_reason == TerminationReason.CRITICAL_TOKENS


def test_fallback_mode_round_trip() -> None:
    """Fallback mode: JSON call in text, result as a [TOOL RESULT] user message."""
    llm = ScriptedLLM([
        text('I will look.\n{"tool": "look", "arguments": {"at": "sky"}, "reasoning": "why"}'),
        text("The sky is blue."),
    ])
    ctx = make_ctx(llm)
    result = run(ctx, LoopConfig(native_tools=False))
    assert result.termination_reason == TerminationReason.COMPLETED
    assert result.text == "I will look.\nThe sky is blue."
    assert llm.requests[0]["tools"] is None
    assert '"tool": "<tool name>"' in llm.system_prompts()[0]
    msgs = ctx.history.messages
    assert msgs[0]["role"] == "assistant" and '"look"' in msgs[0]["content"]
    assert msgs[1]["role"] == "user" and msgs[1]["content"].startswith("[TOOL RESULT: look]")
    assert ctx.registry.get_tool("look").calls == [{"at": "sky"}]  # type: ignore[union-attr]


def test_fallback_cut_off_call_is_a_parse_error() -> None:
    """A truncated JSON call in fallback mode ends with parse_error, text preserved."""
    llm = ScriptedLLM([text('Let me see {"tool": "look", "arguments": {"at": "sk')])
    result = run(make_ctx(llm), LoopConfig(native_tools=False))
    assert result.termination_reason == TerminationReason.PARSE_ERROR
    assert result.text.startswith("Let me see")


def test_fallback_unknown_tool_is_answered() -> None:
    """A fallback call to an unknown tool is answered; its directive leaves the text."""
    llm = ScriptedLLM([text('Hmm {"tool": "fly", "arguments": {}}'), text("ok")])
    ctx = make_ctx(llm)
    result = run(ctx, LoopConfig(native_tools=False))
    assert result.termination_reason == TerminationReason.COMPLETED
    assert result.text == "Hmm\nok"
    assert "Unknown tool" in ctx.history.messages[1]["content"]


# -- gate ------------------------------------------------------------------------------


def test_gate_limits_offer_and_blocks_calls() -> None:
    """Tools outside the gate are not offered; a call to one is answered blocked."""
    llm = ScriptedLLM([answer(call("dig", {}, "c1")), text("ok")])
    ctx = make_ctx(llm, gate=GatePolicy(allowed_categories=frozenset(
        {ToolCategory.SAFE_CHAIN, ToolCategory.TERMINAL})))
    result = run(ctx)
    offered = {t["function"]["name"] for t in llm.requests[0]["tools"]}
    assert "dig" not in offered and "look" in offered
    blocked = json.loads(tool_messages(ctx)[0]["content"])
    assert blocked["status"] == "blocked_by_tool_mode"
    assert "look" in blocked["allowed_tools"]
    assert ctx.registry.get_tool("dig").calls == []  # type: ignore[union-attr]
    assert result.termination_reason == TerminationReason.COMPLETED


def test_gate_by_name() -> None:
    """A name allowlist works the same way."""
    gate = GatePolicy(allowed_names=frozenset({"look"}))
    assert gate.allows("look", ToolCategory.DANGEROUS)
    assert not gate.allows("say", ToolCategory.TERMINAL)


# -- stop and kill -------------------------------------------------------------------


def test_kill_mid_stream_cancels_the_request() -> None:
    """stop() during a streamed answer cancels it; streamed text is kept."""
    pending = Pending(["Once upon", " a time"])
    llm = ScriptedLLM([pending])
    ctx = make_ctx(llm)
    d = execute_react_loop(ctx)
    assert not d.called
    ctx.control.stop("operator kill")
    result = d.result
    assert pending.cancelled
    assert result.termination_reason == TerminationReason.STOPPED_BY_USER
    assert result.text == "Once upon a time"
    assert result.error == "operator kill"
    assert ctx.history.messages == []


def test_cancelling_the_loop_deferred_is_a_kill() -> None:
    """Cancelling the returned Deferred ends the loop with stopped_by_user, not a failure."""
    pending = Pending(["abc"])
    ctx = make_ctx(ScriptedLLM([pending]))
    d = execute_react_loop(ctx)
    d.cancel()
    result = d.result
    assert isinstance(result, LoopResult)
    assert result.termination_reason == TerminationReason.STOPPED_BY_USER
    assert pending.cancelled and result.text == "abc"


def test_kill_mid_tool() -> None:
    """stop() while a tool runs cancels it; the killed call has no history entry."""
    llm = ScriptedLLM([answer(call("look", {}, "c0")),
                       answer(call("slow", {}, "c1"), call("look", {}, "c2"))])
    ctx = make_ctx(llm)
    d = execute_react_loop(ctx)
    slow = ctx.registry.get_tool("slow")
    assert not d.called and slow.pending  # type: ignore[union-attr]
    ctx.control.stop()
    result = d.result
    assert slow.cancelled == 1  # type: ignore[union-attr]
    assert result.termination_reason == TerminationReason.STOPPED_BY_USER
    history = json.dumps(ctx.history.messages)
    assert '"c1"' not in history
    check_history_valid(ctx.history.messages)
    assert [r["tool"] for r in result.results] == ["look", "look"]
    assert result.results[1]["skipped"]


def test_stop_check_is_polled() -> None:
    """An external stop flag (emergency stop) ends the loop between steps."""
    flag = {"stop": False}
    llm = ScriptedLLM([answer(call("look", {}, "c1")), text("never")])
    ctx = make_ctx(llm, stop_check=lambda: flag["stop"],
                   checkpoint=lambda progress: flag.update(stop=True))
    result = run(ctx)
    assert result.termination_reason == TerminationReason.STOPPED_BY_USER
    assert len(llm.requests) == 1


def test_stop_after_answer_arrives_discards_it() -> None:
    """A stop that lands while the answer arrives: nothing from it is executed."""
    ctx_holder: dict[str, Any] = {}

    def respond(messages: Any, tools: Any) -> ChatResponse:
        ctx_holder["ctx"].control.stop()
        return answer(call("look", {}, "c1"), content="about to look")

    llm = ScriptedLLM([respond])
    ctx = make_ctx(llm)
    ctx_holder["ctx"] = ctx
    result = run(ctx)
    assert result.termination_reason == TerminationReason.STOPPED_BY_USER
    assert result.text == "about to look"
    assert ctx.registry.get_tool("look").calls == []  # type: ignore[union-attr]


# -- checkpoint, observers, reflection ------------------------------------------------


def test_checkpoint_awaited_before_next_model_call() -> None:
    """The loop waits for the checkpoint Deferred before asking the model again."""
    saved: list[LoopProgress] = []
    gates: list[defer.Deferred[None]] = []

    def checkpoint(progress: LoopProgress) -> defer.Deferred[None]:
        saved.append(progress)
        gates.append(defer.Deferred())
        return gates[-1]

    llm = ScriptedLLM([answer(call("look", {}, "c1")), text("done")])
    ctx = make_ctx(llm, checkpoint=checkpoint)
    d = execute_react_loop(ctx)
    assert len(llm.requests) == 1 and len(saved) == 1 and not d.called
    assert saved[0].iteration == 1 and saved[0].results[0]["tool"] == "look"
    gates[0].callback(None)
    assert len(llm.requests) == 2
    gates[1].callback(None)
    assert d.result.termination_reason == TerminationReason.COMPLETED


def test_checkpoint_failure_does_not_stop_the_loop() -> None:
    """A failing checkpoint is logged and the loop goes on."""
    llm = ScriptedLLM([answer(call("look", {}, "c1")), text("done")])
    ctx = make_ctx(llm, checkpoint=lambda p: defer.fail(OSError("disk full")))
    result = run(ctx)
    assert result.termination_reason == TerminationReason.COMPLETED


def test_observer_events_and_failures() -> None:
    """Observers see iteration, model_request, tool_call, tool_result, termination; their
    errors are swallowed."""
    seen: list[str] = []

    def observer(event: dict[str, Any]) -> None:
        seen.append(event["type"])
        raise RuntimeError("observer bug")

    llm = ScriptedLLM([Streamed(answer(call("look", {}, "c1"), content="hi"), ["h", "i"]),
                       text("bye")])
    ctx = make_ctx(llm)
    ctx.on_event = observer
    result = run(ctx)
    assert result.termination_reason == TerminationReason.COMPLETED
    assert seen == ["iteration", "text_delta", "text_delta", "model_request", "tool_call",
                    "tool_result", "iteration", "model_request", "termination"]


def test_an_unobserved_loop_builds_no_event() -> None:
    """``observed`` is asked before each event: while it says no, nothing is built."""
    seen: list[str] = []
    watching = [False]
    asked: list[bool] = []

    def observed() -> bool:
        asked.append(watching[0])
        return watching[0]

    def observer(event: dict[str, Any]) -> None:
        seen.append(event["type"])
        watching[0] = event["type"] != "tool_result"  # stop watching after the first call

    llm = ScriptedLLM([answer(call("look", {}, "c1")), answer(call("look", {}, "c2")),
                       text("bye")])
    ctx = make_ctx(llm)
    ctx.on_event, ctx.observed = observer, observed
    run(ctx)
    assert seen == [] and asked and not any(asked)
    watching[0] = True  # a console subscribes: the next loop is seen until the observer leaves
    llm = ScriptedLLM([answer(call("look", {}, "c3")), answer(call("look", {}, "c4")),
                       text("bye")])
    ctx = make_ctx(llm)
    ctx.on_event, ctx.observed = observer, observed
    result = run(ctx)
    assert result.termination_reason == TerminationReason.COMPLETED
    assert seen == ["iteration", "model_request", "tool_call", "tool_result"]


def test_reflection_leaves_history_and_events_alone() -> None:
    """A reflection run uses the reflection prompt and changes nothing it was given."""
    history = ConversationHistory()
    history.add_user("earlier")
    history.add_assistant("reply")
    before = history.to_list()
    events = [{"text": "not for reflection"}]
    llm = ScriptedLLM([answer(call("look", {}, "c1")), text("I learned things")])
    ctx = make_ctx(llm, history=history, reflection=True, pending_events=events)
    result = run(ctx)
    assert result.termination_reason == TerminationReason.COMPLETED
    assert history.to_list() == before
    assert events == [{"text": "not for reflection"}]
    assert "reflection turn" in llm.system_prompts()[0]
    # the model still sees its own tool result within the reflection run
    assert any(m["role"] == "tool" for m in llm.requests[1]["messages"])


def test_sleep_prompt_variant() -> None:
    """Sleep mode selects the maintenance prompt."""
    llm = ScriptedLLM([text("zzz")])
    run(make_ctx(llm, mode="sleep"))
    assert "You are asleep" in llm.system_prompts()[0]


def test_usage_accumulates() -> None:
    """Reported token usage is summed over the loop's requests."""
    u = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    llm = ScriptedLLM([answer(call("look", {}, "c1"), usage=u), answer(content="x", usage=u)])
    clock = task.Clock()
    result = run(make_ctx(llm, clock=clock))
    assert result.usage["total_tokens"] == 30 and result.usage["requests"] == 2
    assert result.duration_ms == 0.0


def test_internal_error_in_history_is_contained() -> None:
    """A collaborator bug ends the loop with internal_error, never an errback."""

    class BadHistory(ConversationHistory):
        def add_assistant(self, content: str) -> None:
            raise RuntimeError("history bug")

    llm = ScriptedLLM([text("hello")])
    ctx = make_ctx(llm, history=BadHistory())
    d = execute_react_loop(ctx)
    result = d.result
    assert result.termination_reason == TerminationReason.INTERNAL_ERROR
    assert result.text == "hello"


def test_context_restart_goes_to_the_next_iteration() -> None:
    """A tool asking for a context restart is charged, not recorded, and the loop goes on."""
    from ai_tools.tools.base import Tool

    class Refresh(Tool):
        name = "refresh"
        description = "Reload the context."

        def execute(self, actor: Any, **params: Any) -> dict[str, Any]:
            return {"success": True, "_restart_context": True}

    registry = make_registry()
    registry.register(Refresh)
    llm = ScriptedLLM([answer(call("refresh", {}, "r1"), call("look", {}, "c2")),
                       text("fresh")])
    ctx = make_ctx(llm, registry=registry)
    result = run(ctx, LoopConfig(tool_budget=5))
    assert result.termination_reason == TerminationReason.COMPLETED
    assert result.results[0]["kind"] == "restart"
    assert result.results[1]["skipped"]
    assert result.tool_budget_remaining == 4
    assert '"r1"' not in json.dumps(ctx.history.messages)


# -- property: whatever the model does, the loop ends cleanly -------------------------

_CALL_NAMES = ["look", "say", "dig", "broken", "fly", "noop", "alert"]


@st.composite
def model_answers(draw: st.DrawFn) -> list[Any]:
    """A script of answers: calls (valid, unknown, bad args), text, errors."""
    script: list[Any] = []
    for i in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["calls", "calls", "calls", "text", "error", "bad"]))
        if kind == "text":
            script.append(text(draw(st.text(max_size=20))))
        elif kind == "error":
            script.append(draw(st.sampled_from(
                [LLMError("x", "part"), LLMUnavailable("open"), RepeatedLineLoop("r")])))
        elif kind == "bad":
            script.append(answer(call("look", "{bad", f"b{i}")))
        else:
            names = draw(st.lists(st.sampled_from(_CALL_NAMES), min_size=1, max_size=4))
            ids = draw(st.sampled_from(["unique", "reused"]))
            script.append(answer(*(
                call(n, {"text": "t"} if n == "say" else {},
                     f"c{i}_{k}" if ids == "unique" else f"call_{k}")
                for k, n in enumerate(names)), content=draw(st.sampled_from([None, "hm"]))))
    return script


@given(model_answers(), st.integers(1, 10), st.none() | st.integers(0, 6),
       st.integers(1, 5), st.booleans())
def test_any_script_ends_with_a_valid_history(
    script: list[Any], max_iterations: int, budget: int | None, cap: int, native: bool
) -> None:
    """The loop always returns a result with a known reason and a valid history."""
    llm = ScriptedLLM(script + [text("end")] * 12)
    ctx = make_ctx(llm)
    config = LoopConfig(max_iterations=max_iterations, tool_budget=budget,
                        consecutive_error_cap=cap, native_tools=native,
                        exit_tools=[ExitTool("alert")])
    result = run(ctx, config)
    assert result.termination_reason in set(TerminationReason)
    assert result.iterations <= max_iterations
    assert ctx.history.unanswered_tool_calls() == []
    if budget is not None:
        assert 0 <= (result.tool_budget_remaining or 0) <= budget
        dispatched = sum(1 for r in result.results
                         if r["attempts"] or r["from_cache"])
        assert dispatched <= budget
    assert all(s["tool_name"] == "alert" for s in result.signals)
    assert "alert" not in json.dumps(ctx.history.messages)


def test_tool_timeout_on_the_clock_is_told_to_the_model() -> None:
    """A tool that never answers times out on the injected clock; the loop goes on."""
    from ai_tools.retry import RetryPolicy

    clock = task.Clock()
    llm = ScriptedLLM([answer(call("slow", {}, "s1")), text("gave up waiting")])
    ctx = make_ctx(llm, clock=clock,
                   execution_options={"retry_policy": RetryPolicy(max_attempts=1)})
    d = execute_react_loop(ctx)
    assert not d.called
    clock.advance(3600)  # SlowTool.timeout
    result = d.result
    assert result.termination_reason == TerminationReason.COMPLETED
    assert result.results[0]["status"] == "timed_out"
    assert "timed out" in result.results[0]["result"]["error"]
    assert result.duration_ms == 3_600_000.0
    assert result.results[0]["duration_ms"] == 3_600_000.0
    check_history_valid(ctx.history.messages)


# -- no reference cycles; a stop seen while a tool runs ---------------------------------


def test_a_finished_loop_leaves_no_reference_cycle() -> None:
    """Everything a loop built is freed when the caller lets go of it, without the
    garbage collector (a cycle would keep every loop's objects until a collection)."""
    import gc
    import weakref

    llm = ScriptedLLM([answer(call("look", {"at": "x"}, "c1")),
                       answer(call("broken", {}, "c2")), text("done")])
    ctx = make_ctx(llm, pending_events=[{"type": "say", "text": "hi"}])
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        d = execute_react_loop(ctx, LoopConfig(max_iterations=5))
        result = d.result
        assert isinstance(result, LoopResult) and result.iterations == 3
        alive = weakref.ref(ctx.control)
        history = weakref.ref(ctx.history)
        del ctx, d, result
        assert alive() is None
        assert history() is None
    finally:
        if enabled:
            gc.enable()


@pytest.mark.parametrize("with_check", [False, True])
def test_a_stop_while_a_tool_runs_is_seen_by_the_engine(with_check: bool) -> None:
    """The engine's stop check (the control's flag, or the context's own check too)
    sees a stop asked for while a synchronous tool runs: the call writes nothing."""
    from ai_tools.tools.base import Actor, Tool
    from ai_tools.tools.registry import ToolRegistry

    holder: dict[str, Any] = {}

    class Stopper(Tool):
        name = "stopper"
        description = "Stops its own loop."
        parameters = {"type": "object", "properties": {}}

        def execute(self, actor: Actor, **params: Any) -> dict[str, Any]:
            if with_check:
                holder["flag"] = True
            else:
                holder["ctx"].control.stop("enough")
            return {"success": True}

    llm = ScriptedLLM([answer(call("stopper", {}, "c1")), text("never")])
    options: dict[str, Any] = {"stop_check": lambda: holder.get("flag", False)} \
        if with_check else {}
    ctx = make_ctx(llm, registry=ToolRegistry([Stopper]), **options)
    holder["ctx"] = ctx
    result = execute_react_loop(ctx, LoopConfig()).result
    assert result.termination_reason == TerminationReason.STOPPED_BY_USER
    assert not [m for m in ctx.history.messages if m["role"] == "tool"]
    assert len(llm.requests) == 1


# -- one assistant message per answer -----------------------------------------------


def test_several_calls_are_one_assistant_message_then_their_results() -> None:
    """An answer with three calls is recorded as the model said it: one assistant
    message with the three calls (and the answer's text), then the three results."""
    llm = ScriptedLLM([answer(call("look", {}, "c1"), call("look", {"at": "x"}, "c2"),
                              call("fly", {}, "c3"), content="Let me see."),
                       text("done")])
    ctx = make_ctx(llm)
    result = run(ctx)
    assert result.termination_reason == TerminationReason.COMPLETED
    msgs = ctx.history.messages
    assert [m["role"] for m in msgs] == ["assistant", "tool", "tool", "tool", "assistant"]
    assert msgs[0]["content"] == "Let me see."
    assert [c["id"] for c in msgs[0]["tool_calls"]] == ["c1", "c2", "c3"]
    assert [c["function"]["arguments"] for c in msgs[0]["tool_calls"]] == \
        ["{}", '{"at":"x"}', "{}"]
    assert [m["tool_call_id"] for m in msgs[1:4]] == ["c1", "c2", "c3"]
    assert msgs[:4] == llm.requests[1]["messages"][-4:]  # what the next request sends


def test_skipped_calls_join_the_answer_message() -> None:
    """Calls skipped after a TERMINAL one are in the same assistant message."""
    llm = ScriptedLLM([answer(call("look", {}, "c1"), call("say", {"text": "hi"}, "c2"),
                              call("look", {"at": "x"}, "c3"))])
    ctx = make_ctx(llm)
    run(ctx)
    msgs = ctx.history.messages
    assert [m["role"] for m in msgs] == ["assistant", "tool", "tool", "tool"]
    assert [c["id"] for c in msgs[0]["tool_calls"]] == ["c1", "c2", "c3"]


def test_fallback_several_calls_are_one_message_then_their_results() -> None:
    """Fallback mode: the calls as one JSON array after the text, then one result each."""
    llm = ScriptedLLM([
        text('I will look twice.\n[{"tool": "look", "arguments": {"at": "sky"}},'
             ' {"tool": "look", "arguments": {"at": "sea"}}]'),
        text("Blue both."),
    ])
    ctx = make_ctx(llm)
    result = run(ctx, LoopConfig(native_tools=False))
    assert result.termination_reason == TerminationReason.COMPLETED
    msgs = ctx.history.messages
    assert [m["role"] for m in msgs] == ["assistant", "user", "user", "assistant"]
    first, _, body = msgs[0]["content"].partition("\n")
    assert first == "I will look twice."
    assert [c["parameters"] for c in json.loads(body)] == [{"at": "sky"}, {"at": "sea"}]
    assert all(m["content"].startswith("[TOOL RESULT: look]") for m in msgs[1:3])
    assert ConversationHistory.from_list(msgs).messages == msgs  # nothing to repair


def test_the_context_measure_counts_calls_joining_an_answer() -> None:
    """The measure counts the grown assistant message (not only the new result)."""
    llm = ScriptedLLM([answer(call("look", {}, "c1"), call("look", {"at": "x"}, "c2")),
                       text("done")])
    meter = fake_meter(per_message=lambda m: 10 * len(m.get("tool_calls") or ()) + 1)
    ctx = make_ctx(llm, meter=meter)
    run(ctx)
    assert meter.history_tokens(ctx.history) == \
        sum(10 * len(m.get("tool_calls") or ()) + 1 for m in ctx.history.messages)


def test_progress_is_the_moment_it_was_handed_over() -> None:
    """A checkpoint that keeps its progress and reads it later reads that moment's."""
    kept: list[LoopProgress] = []
    llm = ScriptedLLM([answer(call("look", {}, "c1"), content="first"),
                       answer(call("look", {}, "c2"), content="second"), text("done")])
    result = run(make_ctx(llm, checkpoint=kept.append))
    assert [p.iteration for p in kept] == [1, 2, 3]
    assert [len(p.results) for p in kept] == [1, 2, 2] and len(result.results) == 2
    assert kept[0].results[0]["tool_call_id"] == "c1" and kept[0].text == "first"
    assert kept[1].text == "first\nsecond" and kept[1].signals == ()
    assert kept[2].text == result.text
    assert LoopProgress(3, (), (), "plain", None).text == "plain"
