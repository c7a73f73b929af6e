"""The prompt and tools a loop sends are what it counts, and always leave room to call.

The first iteration's context check counts the system prompt and the tool
schemas that will be sent; when they alone would cross the stop threshold, the
loop offers fewer tools (TERMINAL first, then the smallest) and still
calls the model; a persona that alone fills the window is an error of the
tick, never a silent ``ran``.
"""

from __future__ import annotations

import json
from typing import Any

from ai_tools.llm.tokens import TokenCounter
from ai_tools.loop import ContextMeter, LoopConfig, TerminationReason, execute_react_loop
from ai_tools.loop.request import PROMPT_SHARE
from ai_tools.service.tick import RAN
from ai_tools.tools.base import Actor, Tool
from ai_tools.tools.registry import ToolRegistry
from tests.unit.react_fakes import LookTool, SayTool, ScriptedLLM, make_ctx, text
from tests.unit.service_fakes import LogCapture, add, make_service, settle

WINDOW = 8192


def _estimate() -> TokenCounter:
    def no_tiktoken(name: str) -> Any:
        raise RuntimeError("no tiktoken here")
    return TokenCounter(loader=no_tiktoken)


def _big_tool(index: int) -> type[Tool]:
    """A tool whose description alone is about 1,000 tokens."""

    class Big(Tool):
        name = f"big{index}"
        description = f"Tool {index}. " + "Explains at length what it does. " * 120
        parameters = {"type": "object", "properties": {"x": {"type": "string"}}}

        def execute(self, actor: Actor, **params: Any) -> dict[str, Any]:
            return {"success": True}

    return Big


def _sent_tokens(request: dict[str, Any]) -> int:
    """Tokens of the system prompt and tools of a request as sent, by the estimate."""
    counter = _estimate()
    system = request["messages"][0]["content"]
    tools = json.dumps(request["tools"], ensure_ascii=False) if request["tools"] else ""
    return counter.count_text(f"{system}\n{tools}")


def test_the_first_iteration_counts_the_prompt_and_tools_it_sends() -> None:
    """Issue: the first check counted before the system prompt was built (0.3% shown
    while 89% was sent)."""
    llm = ScriptedLLM([text("hello")], context_window=WINDOW)
    events: list[dict[str, Any]] = []
    registry = ToolRegistry([SayTool, _big_tool(1), _big_tool(2), _big_tool(3)])
    ctx = make_ctx(llm, registry=registry, events=events, meter=ContextMeter(_estimate()),
                   pending_events=[{"type": "say", "from": "bob", "text": "hi"}])
    result = execute_react_loop(ctx).result
    assert result.termination_reason == TerminationReason.COMPLETED
    first = next(e for e in events if e["type"] == "iteration")
    shown = first["usage_percent"] * WINDOW / 100
    sent = _sent_tokens(llm.requests[0])
    assert sent > 0.3 * WINDOW
    assert sent * 0.95 <= shown <= sent * 1.2, (shown, sent)


def test_tools_are_trimmed_when_they_alone_cross_the_stop_threshold() -> None:
    """Ten tools of ~1,000 tokens in an 8,192 window: the model is still called."""
    registry = ToolRegistry([LookTool, *[_big_tool(i) for i in range(10)], SayTool])
    llm = ScriptedLLM([text("hello"), text("again")], context_window=WINDOW)
    with LogCapture() as logs:
        for _ in range(2):
            ctx = make_ctx(llm, registry=registry, meter=ContextMeter(_estimate()),
                           pending_events=[{"type": "say", "from": "bob", "text": "hi"}])
            result = execute_react_loop(ctx).result
            assert result.termination_reason == TerminationReason.COMPLETED
            assert result.iterations == 1
    assert len(llm.requests) == 2
    names = [t["function"]["name"] for t in llm.requests[0]["tools"]]
    assert names[:2] == ["say", "look"]  # TERMINAL first, then the smallest
    assert names[-1] == "noop" and "big9" not in names
    assert _sent_tokens(llm.requests[0]) <= WINDOW * 0.8 * PROMPT_SHARE * 1.05
    trims = [e for e in logs.events if "left out" in str(e.get("log_format"))]
    assert len(trims) == 1  # once, not once per loop
    assert "big9" in trims[0]["left_out"]


def test_the_tick_measures_the_trimmed_prompt_and_does_not_compact_for_it() -> None:
    registry = ToolRegistry([*[_big_tool(i) for i in range(10)], SayTool])
    llm = ScriptedLLM([text(f"hello {i}") for i in range(3)], context_window=WINDOW)
    clock, service, _ = make_service(llm=llm, loop=False, registry=registry)
    ada = add(service, clock, name="ada")
    for i in range(3):
        service.send("ada", f"message {i}")
        settle(clock)
        assert ada.last_tick["status"] == RAN and ada.last_tick["reason"] == "completed"
    assert "compactions" not in ada.counters
    assert ada.meter.last is not None and ada.meter.last.percent < 80


def test_a_persona_that_alone_fills_the_window_is_a_tick_error() -> None:
    llm = ScriptedLLM([], context_window=WINDOW)
    clock, service, _ = make_service(llm=llm, loop=False, registry=ToolRegistry([SayTool]))
    ada = add(service, clock, name="ada", persona="You are Ada. " + "Very long. " * 4000)
    ada.history.add_user("[EVENTS] bob says: hi")
    ada.history.add_assistant("hello " * 200)
    service.send("ada", "hello")
    settle(clock)
    assert len(ada.history) == 2 and "[CLIPPED" not in ada.history.messages[1]["content"]
    assert ada.last_tick["status"] == RAN and ada.last_tick["reason"] == "critical_tokens"
    assert ada.last_tick["iterations"] == 0 and llm.requests == []
    assert any("alone take" in e and "8192-token context window" in e
               for e in ada.last_tick["errors"]), ada.last_tick["errors"]
    assert len(ada.pending_events) == 1  # what bob said waits for a usable assistant


def test_a_plan_that_fits_is_sent_whole() -> None:
    registry = ToolRegistry([LookTool, SayTool])
    llm = ScriptedLLM([text("hello")], context_window=WINDOW)
    ctx = make_ctx(llm, registry=registry, pending_events=[{"type": "say", "text": "hi"}])
    assert execute_react_loop(ctx, LoopConfig()).result.iterations == 1
    assert [t["function"]["name"] for t in llm.requests[0]["tools"]] == ["look", "say", "noop"]
