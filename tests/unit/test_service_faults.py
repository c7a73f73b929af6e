"""Fault tests: a tool that always raises, a model that answers garbage, a store that fails.

In every case the assistant keeps ticking, its guard is released, the errors of a
tick are logged once (by ``ai_tools.service.tick``) with the assistant, tick number and
mode, and nothing half-written reaches the store.
"""

from __future__ import annotations

import json
from typing import Any

from twisted.internet import defer
from zope.interface import implementer

from ai_tools.errors import LLMProtocolError
from ai_tools.interfaces import ILLMClient
from ai_tools.llm.events import ChatResponse
from ai_tools.loop import LoopConfig, LoopContext
from ai_tools.service.tick import ERROR, RAN
from ai_tools.tools.base import Actor, Tool
from ai_tools.tools.registry import ToolRegistry
from tests.unit.react_fakes import LookTool, answer, call, text
from tests.unit.service_fakes import (
    FakeLLM,
    FlakyStore,
    LogCapture,
    add,
    make_service,
    settle,
)


class ExplodingTool(Tool):
    """Raises every time it runs."""

    name = "explode"
    description = "Always raises."
    parameters = {"type": "object", "properties": {}}

    def execute(self, actor: Actor, **params: Any) -> Any:
        raise RuntimeError("kaboom")


@implementer(ILLMClient)
class ToolThenTextLLM:
    """Calls ``tool`` once per turn, then answers in text after seeing the result."""

    model = "scripted"
    context_window = 100_000

    def __init__(self, tool: str) -> None:
        self.tool = tool
        self.requests = 0

    def complete(self, messages: Any, tools: Any = None, tool_choice: Any = None,
                 stream: Any = None, on_event: Any = None) -> defer.Deferred[Any]:
        self.requests += 1
        if messages[-1].get("role") == "tool":
            return defer.succeed(text("That did not work."))
        return defer.succeed(answer(call(self.tool, {}, f"c{self.requests}")))

    def close(self) -> defer.Deferred[None]:
        return defer.succeed(None)


@implementer(ILLMClient)
class GarbageLLM:
    """A model whose answers are unusable: protocol errors and non-responses."""

    model = "scripted"
    context_window = 100_000

    def __init__(self) -> None:
        self.requests = 0

    def complete(self, messages: Any, **kw: Any) -> defer.Deferred[Any]:
        self.requests += 1
        if self.requests % 2:
            return defer.fail(LLMProtocolError("the server answered with malformed JSON: "
                                               "'<html>oops'"))
        return defer.succeed({"not": "a ChatResponse"})

    def close(self) -> defer.Deferred[None]:
        return defer.succeed(None)


def tick_logs(logs: LogCapture) -> list[dict[str, Any]]:
    return logs.from_namespace("ai_tools.service.tick")


def test_a_tool_that_raises_on_every_tick() -> None:
    llm = ToolThenTextLLM("explode")
    registry = ToolRegistry([ExplodingTool])
    clock, service, _ = make_service(llm=llm, registry=registry, loop=False)
    ada = add(service, clock, name="ada")
    with LogCapture() as logs:
        for _ in range(3):
            service.send("ada", "do it")
            settle(clock)
            assert not ada.ticking
            assert ada.last_tick["status"] == RAN
            assert any("tool explode tool_error" in e for e in ada.last_tick["errors"])
    entries = tick_logs(logs)
    assert len(entries) == 3  # once per tick
    assert [e["tick"] for e in entries] == [1, 2, 3]
    assert all(e["assistant"] == "ada" and e["mode"] == "awake" for e in entries)
    assert "kaboom" in entries[0]["errors"]
    assert ada.history.unanswered_tool_calls() == []
    assert ada.tick_number == 3


def test_a_model_that_answers_garbage() -> None:
    llm = GarbageLLM()
    clock, service, _ = make_service(llm=llm, registry=ToolRegistry([LookTool]), loop=False)
    ada = add(service, clock, name="ada")
    with LogCapture() as logs:
        for i in range(4):
            service.send("ada", f"message {i}")
            settle(clock)
            assert not ada.ticking
            assert ada.last_tick["reason"] == "llm_error"
    entries = [e for e in tick_logs(logs) if "errors" in e]  # the tick's error lines
    assert len(entries) == 4
    assert "malformed JSON" in entries[0]["errors"]
    assert "ChatResponse" in entries[1]["errors"] or "dict" in entries[1]["errors"]
    # the events were not lost: no answer saw them, so they are all pending, in order
    assert [e["text"] for e in ada.pending_events] == [f"message {i}" for i in range(4)]
    assert not [m for m in ada.history.messages if m["role"] == "user"]
    assert ada.counters["tick_errors"] == 4
    assert ada.failed_deliveries == 4 and ada.unavailable_said


def test_a_store_write_that_fails() -> None:
    """The loop stops before its next model call; the store keeps the last good state."""
    llm = ToolThenTextLLM("look")
    store = FlakyStore()
    clock, service, _ = make_service(llm=llm, registry=ToolRegistry([LookTool]), loop=False,
                                     store=store)
    ada = add(service, clock, name="ada")
    service.send("ada", "first")
    settle(clock)
    good = json.dumps(store.load_assistant("ada").result, sort_keys=True)
    requests_before = llm.requests
    store.failing = True
    with LogCapture() as logs:
        service.send("ada", "second").addErrback(lambda f: None)
        settle(clock)
    assert not ada.ticking
    assert llm.requests == requests_before + 1  # no model call after the failed checkpoint
    assert ada.last_tick["reason"] == "stopped_by_user"
    assert any("state could not be saved" in e for e in ada.last_tick["errors"])
    assert len(tick_logs(logs)) == 1
    assert len([e for e in logs.events if "save" in e.get("log_format", "")]) <= 1
    # nothing half-written: the stored state is the last good one, byte for byte
    assert json.dumps(store.load_assistant("ada").result, sort_keys=True) == good
    # the store recovers: the next tick saves everything, history valid
    store.failing = False
    service.send("ada", "third")
    settle(clock)
    saved = store.load_assistant("ada").result
    contents = json.dumps(saved["history"])
    assert "second" in contents and "third" in contents
    assert ada.history.unanswered_tool_calls() == []
    assert ada.counters["store_errors"] >= 1


def test_a_loop_runner_bug_is_contained() -> None:
    clock, service, loop = make_service()
    assert loop is not None

    def broken(ctx: LoopContext, config: LoopConfig) -> Any:
        raise KeyError("bug in the loop")

    loop.behaviour = broken
    ada = add(service, clock, name="ada")
    with LogCapture() as logs:
        service.send("ada", "hi")
        settle(clock)
    assert ada.last_tick["status"] == ERROR
    assert not ada.ticking
    failures = [e for e in tick_logs(logs) if e.get("log_failure") is not None]
    assert len(failures) == 1 and failures[0]["assistant"] == "ada"
    assert len(tick_logs(logs)) == 1
    loop.behaviour = None
    service.send("ada", "again")
    settle(clock)
    assert ada.last_tick["status"] == RAN
    assert service.scheduler.started


def test_a_tick_never_reaches_the_looping_call() -> None:
    """Whatever a tick does, the scheduler's timer keeps running."""
    clock, service, loop = make_service()
    assert loop is not None

    def broken(ctx: LoopContext, config: LoopConfig) -> Any:
        return defer.fail(RuntimeError("async bug"))

    loop.behaviour = broken
    add(service, clock, name="ada", autonomous=True)
    with LogCapture():
        for _ in range(30):
            clock.advance(1)
    assert service.scheduler.started
    assert service.get("ada").tick_number >= 5


def test_garbage_from_fake_llm_in_assessment_is_advisory() -> None:
    """A model failing the (optional) assessment does not fail the tick."""
    llm = FakeLLM()
    llm.fail_with = RuntimeError("down")
    clock, service, loop = make_service(llm=llm)
    ada = add(service, clock, name="ada", execution_config={"use_llm_assessment": True})
    service.send("ada", "hi")
    settle(clock)
    assert ada.last_tick["status"] == RAN and ada.last_tick["errors"] == []
    assert loop is not None and len(loop.calls) == 1


def test_chat_response_type_check() -> None:
    assert isinstance(text("x"), ChatResponse)
