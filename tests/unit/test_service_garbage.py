"""A finished tick leaves nothing of ours in a reference cycle.

With a thousand assistants, whatever a finished tick (its loop, the loop's
context, the checkpoint callbacks, the model calls) leaves in a reference
cycle is freed only by the garbage collector, after surviving into its older
generations.  These tests run real ticks (the real loop, a model answering
after a delay) with the collector off, then ask it (``DEBUG_SAVEALL``) what it
would have had to free: none of it may be ours.
"""

from __future__ import annotations

from typing import Any

from twisted.internet import defer, task
from zope.interface import implementer

from ai_tools.interfaces import ILLMClient
from ai_tools.llm.events import ChatResponse
from ai_tools.tools.base import Actor, Tool
from ai_tools.tools.registry import ToolRegistry
from tests.unit.garbage import cyclic_garbage
from tests.unit.service_fakes import add, make_service, settle


class Look(Tool):
    name = "look"
    description = "Look around."
    parameters = {"type": "object", "properties": {}}

    def execute(self, actor: Actor, **params: Any) -> dict[str, Any]:
        return {"success": True, "seen": "a quiet plaza"}


@implementer(ILLMClient)
class SlowToolModel:
    """Asks for ``look`` (answering 50 ms later) ``tool_turns`` times, then says it is done."""

    model = "slow"
    context_window = 100_000

    def __init__(self, clock: task.Clock, tool_turns: int) -> None:
        self.clock = clock
        self.tool_turns = tool_turns
        self.requests = 0

    def complete(self, messages: Any, tools: Any = None, tool_choice: Any = None,
                 stream: Any = None, on_event: Any = None, **kw: Any) -> defer.Deferred[Any]:
        self.requests += 1
        answered = sum(1 for m in messages if m.get("role") == "tool")
        if answered < self.tool_turns:
            message = {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"c{self.requests}", "type": "function",
                 "function": {"name": "look", "arguments": "{}"}}]}
        else:
            message = {"role": "assistant", "content": "All quiet."}
        return task.deferLater(self.clock, 0.05, ChatResponse.from_message, message)

    def close(self) -> defer.Deferred[None]:
        return defer.succeed(None)


def ours(garbage: list[Any]) -> list[str]:
    return sorted({f"{type(o).__module__}.{type(o).__qualname__}" for o in garbage
                   if type(o).__module__.startswith("ai_tools.")})


def _run_ticks(names: list[str], clock: task.Clock, service: Any) -> list[dict[str, Any]]:
    ended: list[dict[str, Any]] = []

    def observe(event: dict[str, Any]) -> None:
        if event["type"] == "tick" and event["status"] == "ran":
            ended.append({"reason": event["reason"], "errors": event["errors"]})

    remove = service.add_observer(observe)
    for name in names:
        service.get(name).history.clear()  # a fresh conversation each round
        service.send(name, {"type": "say", "from": "bob", "text": "what do you see?"})
    for _ in range(200):
        if len(ended) == len(names):
            break
        clock.advance(0.01)
        settle(clock)
    remove()
    return ended


def test_finished_ticks_leave_no_cycle_of_ours() -> None:
    """Ticks running a 4-iteration loop each: tick, loop and calls are freed at once."""
    clock = task.Clock()
    llm = SlowToolModel(clock, tool_turns=3)
    clock, service, _ = make_service(clock, loop=False, llm=llm,  # type: ignore[arg-type]
                                     registry=ToolRegistry([Look]))
    names = [add(service, clock, name=f"a{i}").name for i in range(3)]
    assert len(_run_ticks(names, clock, service)) == 3  # warm caches, first-time objects
    with cyclic_garbage() as garbage:
        ended = _run_ticks(names, clock, service)
    assert ended == [{"reason": "completed", "errors": []}] * 3
    assert llm.requests == 24
    assert ours(garbage) == []


def test_the_check_can_fail() -> None:
    """A tick object caught in a cycle would be reported."""
    from ai_tools.service.tick import _Tick

    clock, service, _ = make_service()
    assistant = add(service, clock, name="ada")
    with cyclic_garbage() as garbage:
        tick = _Tick(assistant, service, 1, 0.0)
        tick.errors.append(tick)  # type: ignore[arg-type]
        del tick
    assert ours(garbage) == ["ai_tools.service.tick._Tick"]
