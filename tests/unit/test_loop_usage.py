"""The one context-usage measure: prompt head + tool schemas + history, counted incrementally."""

from __future__ import annotations

from typing import Any

import pytest

from ai_tools.execution.history import ConversationHistory
from ai_tools.llm.events import ToolCall
from ai_tools.llm.tokens import DEFAULT_CONTEXT_WINDOW, default_counter
from ai_tools.loop import (
    ContextMeter,
    ExitTool,
    GatePolicy,
    LoopConfig,
    context_window,
    execute_react_loop,
    measure_context,
)
from ai_tools.loop.prompts import PromptInputs, system_prompt_head
from ai_tools.loop.request import plan_request
from ai_tools.tools.base import ToolCategory
from tests.unit.react_fakes import LookTool, ScriptedLLM, answer, call, make_ctx, text


class CountingCounter:
    """The default counter, remembering what it was asked to count."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.messages: list[Any] = []

    def count_text(self, text: str) -> int:
        self.texts.append(text)
        return default_counter().count_text(text)

    def count_message(self, message: Any) -> int:
        self.messages.append(message)
        return default_counter().count_message(message)


def full_count(history: ConversationHistory) -> int:
    return sum(default_counter().count_message(m) for m in history.messages)


def test_history_counts_follow_growth_replacement_and_shrinking() -> None:
    """Appends are counted incrementally; a replaced or shorter history is counted again,
    and the figure is always the full count."""
    history = ConversationHistory()
    meter = ContextMeter()
    assert meter.history_tokens(history) == 0
    for i in range(3):
        history.add_user("hello there " * i)
        history.add_tool_exchange(ToolCall(id=f"c{i}", name="look", arguments={"at": "x"}),
                                  '{"success": true}', native=True)
        assert meter.history_tokens(history) == full_count(history)
    history.replace([{"role": "user", "content": "a much longer summary " * 20}])
    assert meter.history_tokens(history) == full_count(history)
    history.replace([{"role": "user", "content": "same length, other text " * 20}])
    assert meter.history_tokens(history) == full_count(history)
    history.replace([])
    assert meter.history_tokens(history) == 0
    history.add_user("again")
    assert meter.history_tokens(history) == full_count(history)
    other = ConversationHistory([{"role": "user", "content": "another history"}])
    assert meter.history_tokens(other) == full_count(other)


def test_only_new_messages_and_new_prompts_are_counted() -> None:
    counter = CountingCounter()
    meter = ContextMeter(counter=counter)  # type: ignore[arg-type]
    history = ConversationHistory()
    history.add_user("hello")
    first = meter.measure(("p", 1), lambda: "prompt text", history, 1000)
    again = meter.measure(("p", 1), lambda: "prompt text", history, 1000)
    assert first == again and counter.texts == ["prompt text"]
    assert counter.messages == [{"role": "user", "content": "hello"}]
    history.add_user("more")
    meter.measure(("p", 2), lambda: "another prompt", history, 1000)
    assert counter.texts == ["prompt text", "another prompt"]
    assert counter.messages[1:] == [{"role": "user", "content": "more"}]


def test_a_taken_back_message_is_noticed() -> None:
    """A message removed from the end (events given back) is not counted any more."""
    history = ConversationHistory()
    meter = ContextMeter()
    history.add_user("kept")
    events = history.add_user("[EVENTS] given back later " * 10)
    meter.history_tokens(history)
    assert history.take_back(events)
    assert meter.history_tokens(history) == full_count(history)


@pytest.mark.parametrize(("configured", "client", "window"), [
    (1000, 5000, 1000), (None, 5000, 5000), (None, None, DEFAULT_CONTEXT_WINDOW),
    (None, 0, DEFAULT_CONTEXT_WINDOW), (None, True, DEFAULT_CONTEXT_WINDOW),
    (None, "big", DEFAULT_CONTEXT_WINDOW),
])
def test_one_context_window_rule(configured: Any, client: Any, window: int) -> None:
    """Configured, else the client's, else the model layer's default: for every measure."""
    class Client:
        context_window = client

    assert context_window(configured, Client()) == window


def test_plans_are_kept_by_their_inputs() -> None:
    """The same inputs give the same plan; any input that shows in the prompt head or
    the request's tools gives another, whose head is the one rendered for its inputs."""
    llm = ScriptedLLM([])
    base = make_ctx(llm)
    registry = base.registry

    def ctx_(**options: Any) -> Any:
        return make_ctx(llm, registry=registry, **options)

    persona = "You are Ada."
    plan = plan_request(base, LoopConfig(), persona)
    assert plan_request(ctx_(), LoopConfig(), persona) is plan
    variants = [
        (ctx_(), LoopConfig(), "You are Bob."),
        (ctx_(mode="sleep"), LoopConfig(), persona),
        (ctx_(reflection=True), LoopConfig(), persona),
        (ctx_(gate=GatePolicy(allowed_categories=frozenset({ToolCategory.SAFE_CHAIN}))),
         LoopConfig(), persona),
        (ctx_(), LoopConfig(exit_tools=[ExitTool("page", "Page a player.")]), persona),
        (ctx_(), LoopConfig(native_tools=False), persona),
        (ctx_(), LoopConfig(noop_tool="pass"), persona),
    ]
    heads = {plan.head}
    for ctx, config, text_ in variants:
        other = plan_request(ctx, config, text_)
        assert other is not plan
        assert other.head == system_prompt_head(PromptInputs(
            assistant_name="ada", persona=text_, mode=ctx.mode, reflection=ctx.reflection,
            tool_schemas=other.schemas, tool_categories=other.categories,
            exit_tool_schemas=[t.schema() for t in config.exit_tools],
            native_tools=other.native, noop_tool=config.noop_tool))
        heads.add(other.head)
    assert len(heads) == len(variants) + 1
    registry.unregister("look")
    assert plan_request(base, LoopConfig(), persona) is not plan
    registry.register(LookTool)


def test_the_tick_and_the_loop_measure_the_same() -> None:
    """What measure_context gives before a loop is what the loop's continuation check
    reads before its first model call (so compaction and critical_tokens agree)."""
    llm = ScriptedLLM([answer(call("look", {}, "c1")), text("done")], context_window=2000)
    history = ConversationHistory()
    history.add_user("hello " * 50)
    events: list[dict[str, Any]] = []
    ctx = make_ctx(llm, history=history, system_prompt="You are Ada.", events=events)
    config = LoopConfig()
    before = measure_context(ctx, config, ContextMeter(), "You are Ada.")
    execute_react_loop(ctx, config)
    first = next(e for e in events if e["type"] == "iteration")
    assert first["usage_percent"] == round(before.percent, 1)
    assert before.window == 2000 and before.tokens > full_count(history)
