"""Test doubles for the default-tool tests: an assistant runtime and a model.

The world and the store are the real ones (SandboxWorld, MemoryStore); only
the assistant runtime — owned by the service — and the model are doubled here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
from twisted.internet import defer, task
from twisted.python.failure import Failure
from zope.interface import implementer

from ai_tools.interfaces import IAssistantRuntime
from ai_tools.store.memory import MemoryStore
from ai_tools.tools.base import Actor, Tool
from ai_tools.world.sandbox import SandboxWorld
from ai_tools.world.shared import SharedWorld


@attrs.frozen
class FakeResponse:
    """The part of a ChatResponse the tools read."""

    content: str


@attrs.define(eq=False)
class FakeLLM:
    """Answers every completion with the next scripted text, recording the prompts."""

    answers: list[str] = attrs.field(factory=list)
    prompts: list[list[dict[str, Any]]] = attrs.field(factory=list)
    model: str = "fake"
    context_window: int = 8192

    def complete(self, messages: list[dict[str, Any]], tools: Any = None, **_: Any
                 ) -> defer.Deferred[FakeResponse]:
        self.prompts.append(list(messages))
        return defer.succeed(FakeResponse(self.answers.pop(0)))

    def close(self) -> defer.Deferred[None]:
        return defer.succeed(None)


@implementer(IAssistantRuntime)
@attrs.define(eq=False)
class FakeAssistant:
    """An IAssistantRuntime recording what tools asked of it."""

    name: str = "ada"
    mode: str = "awake"
    llm: Any = attrs.field(factory=FakeLLM)
    execution_config: dict[str, Any] = attrs.field(factory=dict)
    system_prompt: str = "You are Ada."
    events: list[dict[str, Any]] = attrs.field(factory=list)
    mode_changes: list[tuple[str, str]] = attrs.field(factory=list)
    subagents: dict[str, dict[str, Any]] = attrs.field(factory=dict)

    def set_mode(self, mode: str, reason: str = "") -> None:
        self.mode_changes.append((mode, reason))
        self.mode = mode

    def queue_event(self, event: dict[str, Any]) -> None:
        self.events.append(event)

    def set_system_prompt(self, text: str) -> None:
        self.system_prompt = text

    def status(self) -> dict[str, Any]:
        return {"mode": self.mode, "ticks": 3, "tool_budget_remaining": 7}

    def start_subagent(self, task: str, tool_names: list[str], budget: int) -> str:
        task_id = f"sub-{len(self.subagents) + 1}"
        self.subagents[task_id] = {
            "task": task, "tools": list(tool_names), "budget": budget, "status": "running",
        }
        return task_id

    def subagent_status(self, task_id: str) -> dict[str, Any] | None:
        return self.subagents.get(task_id)


def fired(d: Any) -> Any:
    """The result of an already-fired Deferred (raises its failure)."""
    if not isinstance(d, defer.Deferred):
        return d
    box: list[Any] = []
    d.addBoth(box.append)
    assert box, "the Deferred has not fired"
    if isinstance(box[0], Failure):
        box[0].raiseException()
    return box[0]


def run_tool(tool: Tool, actor: Actor, **params: Any) -> dict[str, Any]:
    """Validate ``params`` as the engine would, then execute; the result dict."""
    checked = tool.validate_parameters(params)
    assert checked.valid, checked.format_for_llm(tool.name)
    result = fired(tool.execute(actor, **checked.cleaned_params))
    assert isinstance(result, dict)
    return result


def refusals(tool: Tool, **params: Any) -> list[str]:
    """The parameter names validation complains about (empty when valid)."""
    checked = tool.validate_parameters(params)
    return [str(e["param"]) for e in checked.errors]


EXAMPLE_WORLD = Path(__file__).resolve().parents[2] / "examples" / "world.toml"


def sandbox(clock: Any = None, kind: str = "sandbox") -> SandboxWorld:
    """The example world (examples/world.toml), in memory: every call answers at once.

    Mason (``char:mason``, Builder) is in the workshop; Pip (``char:pip``,
    Player, owner of the soup slate) and Bob are in the inn; Alice is in the plaza.
    ``kind="shared"`` gives the shared world (ai_tools.world.shared) on a memory
    store instead: the same world, each change a transaction step of the store.
    """
    clock = clock or task.Clock()
    if kind == "shared":
        return fired(SharedWorld.load(MemoryStore(clock=clock), seed=EXAMPLE_WORLD, clock=clock))
    return SandboxWorld.from_file(EXAMPLE_WORLD, clock=clock)


WORLD_KINDS = ("sandbox", "shared")
"""The worlds the tool tests run on (``@pytest.fixture(params=WORLD_KINDS)``)."""


def world_actor(world: SandboxWorld, character_id: str = "char:mason", **kwargs: Any) -> Actor:
    """An actor for ``character_id`` in ``world`` with a memory store and a fake assistant."""
    kwargs.setdefault("store", MemoryStore(clock=task.Clock()))
    kwargs.setdefault("assistant", FakeAssistant(name=character_id.split(":")[-1]))
    return Actor(character_id=character_id, world=world, **kwargs)
