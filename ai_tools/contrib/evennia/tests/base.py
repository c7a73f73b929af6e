"""Shared fixtures: Evennia's test objects plus an assistant NPC, a scripted model, a clock.

Evennia's base class creates two accounts, two rooms joined by an exit, two
objects and two characters: ``char1`` (puppeted by a Developer account) and
``char2`` (no permissions).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Iterator
from types import SimpleNamespace
from typing import Any
from unittest import mock

import evennia
from evennia.utils import create
from evennia.utils.test_resources import BaseEvenniaTest
from twisted.internet import defer, task
from zope.interface import implementer

from ai_tools.contrib.evennia.hearing import LISTENERS, AssistantCharacter
from ai_tools.contrib.evennia.scripts import AssistantScript
from ai_tools.contrib.evennia.world import EvenniaWorld
from ai_tools.interfaces import ILLMClient
from ai_tools.llm.events import ChatResponse


def result_of(d: defer.Deferred[Any]) -> Any:
    """The result of an already-fired Deferred (raises its failure; fails if unfired)."""
    results: list[Any] = []
    d.addBoth(results.append)
    assert results, "the Deferred has not fired"
    outcome = results[0]
    if hasattr(outcome, "raiseException"):
        outcome.raiseException()
    return outcome


def settle(clock: task.Clock, d: defer.Deferred[Any], steps: int = 200) -> Any:
    """Advance ``clock`` in small steps until ``d`` fires; return its result."""
    results: list[Any] = []
    d.addBoth(results.append)
    for _ in range(steps):
        if results:
            break
        clock.advance(0.05)
    assert results, "the Deferred did not fire"
    outcome = results[0]
    if hasattr(outcome, "raiseException"):
        outcome.raiseException()
    return outcome


def say(text: str) -> ChatResponse:
    """A model answer that calls the ``say`` tool."""
    return call("say", {"message": text})


def call(tool: str, arguments: dict[str, Any], call_id: str = "call_1") -> ChatResponse:
    """A model answer calling one tool natively."""
    return ChatResponse.from_message(
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": tool, "arguments": json.dumps(arguments)},
                }
            ],
        },
        finish_reason="tool_calls",
    )


@implementer(ILLMClient)
class ScriptedLLM:
    """A model client answering from a list (then ``default``), recording every request."""

    model = "scripted"
    context_window = 32_000

    def __init__(self, answers: Iterable[ChatResponse] = (), default: str = "ok") -> None:
        self.answers = list(answers)
        self.default = default
        self.requests: list[dict[str, Any]] = []
        self.closed = 0

    def complete(
        self,
        messages: Any,
        tools: Any = None,
        tool_choice: Any = None,
        stream: Any = None,
        on_event: Any = None,
    ) -> defer.Deferred[ChatResponse]:
        self.requests.append({"messages": [dict(m) for m in messages], "tools": tools})
        if self.answers:
            return defer.succeed(self.answers.pop(0))
        return defer.succeed(ChatResponse(content=self.default))

    def close(self) -> defer.Deferred[None]:
        self.closed += 1
        return defer.succeed(None)


class SlowLLM(ScriptedLLM):
    """A scripted model whose answers to questions mentioning ``slow_word`` never come.

    Such a call stays in flight until it is cancelled (``cancelled`` counts
    those), like a model call an ``evennia reload`` cuts off.
    """

    def __init__(self, answers: Iterable[ChatResponse] = (), slow_word: str = "lantern") -> None:
        super().__init__(answers)
        self.slow_word = slow_word
        self.cancelled = 0

    def complete(self, messages: Any, *args: Any, **kwargs: Any) -> defer.Deferred[ChatResponse]:
        last = str(messages[-1].get("content", "")) if messages else ""
        if self.slow_word not in last:
            return super().complete(messages, *args, **kwargs)
        self.requests.append({"messages": [dict(m) for m in messages], "tools": None})

        def cancelled(_: defer.Deferred[ChatResponse]) -> None:
            self.cancelled += 1

        return defer.Deferred(cancelled)


@contextlib.contextmanager
def portal_link(connected: bool) -> Iterator[SimpleNamespace]:
    """The Server's AMP link to the Portal, up or down (flip ``.connected`` inside)."""
    transport = SimpleNamespace(connected=connected, disconnecting=False)
    server = SimpleNamespace(amp_protocol=SimpleNamespace(transport=transport))
    with mock.patch.object(evennia, "EVENNIA_SERVER_SERVICE", server):
        yield transport


class ContribTestBase(BaseEvenniaTest):
    """Evennia's default test objects plus an assistant NPC (``npc``, key Ada) in room1."""

    def setUp(self) -> None:
        super().setUp()
        self.world = EvenniaWorld()
        self.npc = create.create_object(
            AssistantCharacter, key="Ada", location=self.room1, home=self.room1
        )
        self.id1 = self.char1.dbref
        self.id2 = self.char2.dbref
        self.npc_id = self.npc.dbref

    def tearDown(self) -> None:
        LISTENERS.clear()
        super().tearDown()

    def attach_script(self, key: str = "ada", character: Any = None) -> AssistantScript:
        """Give ``character`` (default the NPC) an enabled assistant script called ``key``."""
        script = create.create_script(AssistantScript, obj=character or self.npc, autostart=False)
        script.bind(key)
        script.db.enabled = True
        return script
