"""An in-process scripted model, small tools and helpers for the ReAct loop tests."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from twisted.internet import defer, task
from zope.interface import implementer

from ai_tools.execution.history import ConversationHistory
from ai_tools.interfaces import ILLMClient
from ai_tools.llm.events import ChatResponse, StreamDone, TextDelta
from ai_tools.loop import ContextMeter, LoopContext
from ai_tools.tools.base import Actor, Tool, ToolCategory
from ai_tools.tools.registry import ToolRegistry


def call(name: str, arguments: Any = None, call_id: str | None = None) -> dict[str, Any]:
    """A native ``tool_calls`` entry (arguments as JSON text unless given as text)."""
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
    return {"id": call_id or f"id_{name}", "type": "function",
            "function": {"name": name, "arguments": raw}}


def answer(*calls: dict[str, Any], content: str | None = None,
           usage: dict[str, Any] | None = None) -> ChatResponse:
    """A model answer with native tool calls (and optional text)."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = list(calls)
    return ChatResponse.from_message(message, finish_reason="tool_calls" if calls else "stop",
                                     usage=usage)


def text(content: str) -> ChatResponse:
    """A plain-text model answer."""
    return answer(content=content)


class Pending:
    """A script entry: the request hangs (after streaming ``deltas``) until cancelled."""

    def __init__(self, deltas: Iterable[str] = ()) -> None:
        self.deltas = list(deltas)
        self.deferred: defer.Deferred[Any] | None = None
        self.cancelled = False

    def start(self) -> defer.Deferred[Any]:
        def cancel(d: defer.Deferred[Any]) -> None:
            self.cancelled = True

        self.deferred = defer.Deferred(cancel)
        return self.deferred


class Streamed:
    """A script entry: ``response`` delivered as text deltas then the final answer."""

    def __init__(self, response: ChatResponse, deltas: Iterable[str]) -> None:
        self.response = response
        self.deltas = list(deltas)


@implementer(ILLMClient)
class ScriptedLLM:
    """An ILLMClient answering from a script, one entry per request.

    An entry is a ChatResponse, an exception (the request fails with it), a
    :class:`Pending`, a :class:`Streamed`, or a callable
    ``(messages, tools) -> entry``.  The requests are kept for assertions.
    """

    model = "scripted"

    def __init__(self, script: Iterable[Any], context_window: int = 100_000) -> None:
        self.script = list(script)
        self.context_window = context_window
        self.requests: list[dict[str, Any]] = []

    def complete(self, messages: Any, tools: Any = None, tool_choice: Any = None,
                 stream: Any = None, on_event: Any = None) -> defer.Deferred[Any]:
        self.requests.append({"messages": [dict(m) for m in messages], "tools": tools,
                              "stream": stream})
        if not self.script:
            return defer.fail(AssertionError("the model script is exhausted"))
        entry = self.script.pop(0)
        if callable(entry) and not isinstance(entry, type):
            entry = entry(messages, tools)
        if isinstance(entry, Pending):
            for delta in entry.deltas:
                if on_event is not None:
                    on_event(TextDelta(delta))
            return entry.start()
        if isinstance(entry, Streamed):
            for delta in entry.deltas:
                if on_event is not None:
                    on_event(TextDelta(delta))
            if on_event is not None:
                on_event(StreamDone())
            return defer.succeed(entry.response)
        if isinstance(entry, BaseException):
            return defer.fail(entry)
        return defer.succeed(entry)

    def close(self) -> defer.Deferred[None]:
        return defer.succeed(None)

    def system_prompts(self) -> list[str]:
        """The system message of every request."""
        return [r["messages"][0]["content"] for r in self.requests]


class LookTool(Tool):
    """SAFE_CHAIN: succeeds and counts its calls."""

    name = "look"
    description = "Look around."
    parameters = {"type": "object", "properties": {"at": {"type": "string"}}}

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[dict[str, Any]] = []

    def execute(self, actor: Actor, **params: Any) -> dict[str, Any]:
        self.calls.append(params)
        return {"success": True, "seen": params.get("at", "room")}


class SayTool(LookTool):
    """TERMINAL: speaks."""

    name = "say"
    description = "Say something."
    category = ToolCategory.TERMINAL
    parameters = {"type": "object", "properties": {"text": {"type": "string"}},
                  "required": ["text"]}

    def execute(self, actor: Actor, **params: Any) -> dict[str, Any]:
        self.calls.append(params)
        return {"success": True, "said": params["text"]}


class DigTool(LookTool):
    """DANGEROUS: changes the world; fails when told to."""

    name = "dig"
    description = "Dig an exit."
    category = ToolCategory.DANGEROUS

    def execute(self, actor: Actor, **params: Any) -> dict[str, Any]:
        self.calls.append(params)
        if params.get("at") == "fail":
            return {"success": False, "error": "the rock is too hard", "retryable": False}
        return {"success": True, "dug": True}


class BrokenTool(LookTool):
    """SAFE_CHAIN that always fails without retry."""

    name = "broken"
    description = "Always fails."

    def execute(self, actor: Actor, **params: Any) -> dict[str, Any]:
        self.calls.append(params)
        return {"success": False, "error": "it is broken", "retryable": False}


class SlowTool(LookTool):
    """SAFE_CHAIN whose result never comes until cancelled."""

    name = "slow"
    description = "Takes forever."
    timeout = 3600

    def __init__(self) -> None:
        super().__init__()
        self.pending: list[defer.Deferred[Any]] = []
        self.cancelled = 0

    def execute(self, actor: Actor, **params: Any) -> defer.Deferred[Any]:
        self.calls.append(params)

        def cancel(d: defer.Deferred[Any]) -> None:
            self.cancelled += 1

        d: defer.Deferred[Any] = defer.Deferred(cancel)
        self.pending.append(d)
        return d


def make_registry() -> ToolRegistry:
    """A registry with look, say, dig, broken and slow."""
    return ToolRegistry([LookTool, SayTool, DigTool, BrokenTool, SlowTool])


def make_ctx(llm: ScriptedLLM, *, registry: ToolRegistry | None = None,
             history: ConversationHistory | None = None,
             clock: task.Clock | None = None, events: list[dict[str, Any]] | None = None,
             **kwargs: Any) -> LoopContext:
    """A LoopContext over ``llm`` with the fake tools; observer events go to ``events``."""
    observed = events if events is not None else []
    return LoopContext(
        assistant_name="ada",
        actor=Actor("char:ada"),
        registry=registry or make_registry(),
        llm=llm,
        history=history if history is not None else ConversationHistory(),
        clock=clock or task.Clock(),
        on_event=observed.append,
        **kwargs,
    )


def check_history_valid(messages: list[dict[str, Any]]) -> None:
    """Every native tool call answered exactly once, no orphan answer."""
    seen_answers: set[str] = set()
    pending: set[str] = set()
    for m in messages:
        if m["role"] == "tool":
            call_id = m["tool_call_id"]
            assert call_id in pending, f"orphaned or duplicate answer {call_id}"
            pending.discard(call_id)
            assert call_id not in seen_answers
            seen_answers.add(call_id)
            continue
        assert not pending, f"unanswered calls {pending}"
        if m["role"] == "assistant":
            pending = {c["id"] for c in m.get("tool_calls") or ()}
    assert not pending, f"unanswered calls {pending}"


Observer = Callable[[dict[str, Any]], None]


class FakeCounter:
    """A token counter for the context measure: ``prompt`` tokens for the prompt text,
    ``per_message(message)`` for each history message."""

    def __init__(self, prompt: int = 0,
                 per_message: Callable[[dict[str, Any]], int] = lambda m: 0) -> None:
        self.prompt = prompt
        self.per_message = per_message

    def count_text(self, text: str) -> int:
        return self.prompt

    def count_message(self, message: dict[str, Any]) -> int:
        return self.per_message(message)


def fake_meter(prompt: int = 0,
               per_message: Callable[[dict[str, Any]], int] = lambda m: 0) -> ContextMeter:
    """A ContextMeter counting as :class:`FakeCounter` says."""
    counter: Any = FakeCounter(prompt, per_message)
    return ContextMeter(counter=counter)
