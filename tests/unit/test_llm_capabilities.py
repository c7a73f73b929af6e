"""Optional capabilities of a model client are interfaces the client declares.

The loop gives its ``on_request`` observer only to an ``IAttemptObservingLLMClient``
and follows the profile of an ``IProfiledLLMClient``; an object that merely has such
an attribute, without declaring the interface, is a plain ``ILLMClient``.
"""

from __future__ import annotations

from typing import Any

from twisted.internet import defer
from twisted.internet.task import Clock
from zope.interface import implementer
from zope.interface.verify import verifyObject

from ai_tools.interfaces import IAttemptObservingLLMClient, ILLMClient, IProfiledLLMClient
from ai_tools.llm.client import OpenAIChatClient
from ai_tools.llm.profile import ModelProfile
from ai_tools.loop import LoopConfig, LoopResult, execute_react_loop
from ai_tools.loop.config import use_native_tools
from tests.unit.react_fakes import ScriptedLLM, make_ctx, text

FALLBACK = ModelProfile(base_url="http://model.test/v1", model="m", tool_calling="fallback")


def test_the_openai_client_declares_its_capabilities() -> None:
    """The client and the per-assistant model over it provide both optional interfaces."""
    client = OpenAIChatClient(FALLBACK, reactor=Clock())
    model = client.for_assistant("ada")
    for llm in (client, model):
        assert verifyObject(ILLMClient, llm)
        assert verifyObject(IProfiledLLMClient, llm)
        assert verifyObject(IAttemptObservingLLMClient, llm)
    assert model.profile is FALLBACK


class UndeclaredProfile(ScriptedLLM):
    """Has a profile attribute, declares nothing more than ILLMClient."""

    profile = FALLBACK


@implementer(IProfiledLLMClient)
class DeclaredProfile(UndeclaredProfile):
    """The same client, declaring the capability."""


def test_native_tools_follow_a_declared_profile_only() -> None:
    """``tool_calling`` of a declared profile decides; an undeclared one is not read."""
    assert use_native_tools(None, DeclaredProfile([])) is False
    assert use_native_tools(None, UndeclaredProfile([])) is True
    assert use_native_tools(None, ScriptedLLM([])) is True
    assert use_native_tools(True, DeclaredProfile([])) is True


@implementer(IAttemptObservingLLMClient)
class ObservingLLM(ScriptedLLM):
    """A scripted client that takes ``on_attempt`` and keeps what it was given."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.observers: list[Any] = []

    def complete(self, messages: Any, tools: Any = None, tool_choice: Any = None,
                 stream: Any = None, on_event: Any = None, *,
                 on_attempt: Any = None) -> defer.Deferred[Any]:
        self.observers.append(on_attempt)
        return super().complete(messages, tools, tool_choice, stream, on_event)


def observer(attempt: Any) -> None:
    """An on_request observer (never called by the scripted clients)."""


def run_once(llm: ScriptedLLM) -> LoopResult:
    d = execute_react_loop(make_ctx(llm, on_request=observer), LoopConfig(max_iterations=1))
    assert d.called
    result = d.result
    assert isinstance(result, LoopResult)
    return result


def test_on_request_goes_to_declaring_clients_only() -> None:
    """A declaring client gets the observer; a plain one is called without it (it would
    raise TypeError on the unknown keyword)."""
    observing = ObservingLLM([text("hi")])
    run_once(observing)
    assert observing.observers == [observer]
    plain = ScriptedLLM([text("hi")])
    result = run_once(plain)
    assert not result.failed and result.error is None
    assert result.text == "hi"
    assert len(plain.requests) == 1
