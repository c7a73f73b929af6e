"""Instructions per heard message, for ``valgrind --tool=cachegrind --cache-sim=no``.

``python -m benchmarks.hearing_instructions BLOCKS`` runs one warm-up block and then
BLOCKS blocks of 200 messages, each the path of one player message through an
:class:`~ai_tools.service.service.AssistantService`: the world calls the hearing
listener, the assistant queues the event and brings its tick forward, the tick runs
(a loop runner that answers at once, so the loop itself is not what is counted), and
the state writes are made (a ``MemoryStore``).  Run it under cachegrind with 0 and
with 3 blocks: the difference of the ``I refs`` totals over 600 is the instructions
of one message.  ``docs/service.md`` has the figures and the commands.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable

from twisted.internet import defer, task
from zope.interface import implementer

from ai_tools.interfaces import ILLMClient
from ai_tools.llm.events import ChatResponse
from ai_tools.loop import LoopConfig, LoopContext, LoopResult
from ai_tools.service.service import AssistantService
from ai_tools.store.memory import MemoryStore
from ai_tools.tools.registry import ToolRegistry

BLOCK = 200
"""Messages per block."""


@implementer(ILLMClient)
class _Model:
    """Never asked: the loop runner answers."""

    model = "bench"
    context_window = 100_000

    def complete(self, *args: object, **kw: object) -> defer.Deferred[ChatResponse]:
        return defer.succeed(ChatResponse(content="ok"))

    def close(self) -> None:
        return None


class _World:
    """Listeners only: what the service subscribes a character to."""

    def __init__(self) -> None:
        self.listeners: dict[str, list[Callable[[object], None]]] = {}

    def subscribe(self, char_id: str, listener: Callable[[object], None]) -> Callable[[], None]:
        self.listeners.setdefault(char_id, []).append(listener)
        return lambda: self.listeners[char_id].remove(listener)

    def say(self, char_id: str, message: object) -> None:
        for listener in self.listeners.get(char_id, ()):
            listener(message)


def _answer(ctx: LoopContext, config: LoopConfig) -> defer.Deferred[LoopResult]:
    """A loop that takes the pending events and ends at once."""
    if ctx.pending_events:
        ctx.history.add_user("events")
        del ctx.pending_events[:]
    return defer.succeed(LoopResult(
        iterations=1, termination_reason="terminal_tool", results=(), success=True,
        success_count=1, pattern_mode="react_loop", max_allowed_iterations=5,
        usage={"requests": 1}))


def heard_block() -> tuple[Callable[[], None], AssistantService]:
    """A started service hearing one assistant's character; ``run()`` is one block."""
    clock = task.Clock()
    world = _World()
    service = AssistantService(llm=_Model(), store=MemoryStore(clock=clock),
                               registry=ToolRegistry([]), world=world,
                               clock=clock, loop_runner=_answer)
    service.startService()
    clock.advance(0)
    service.add_assistant({"name": "ada", "character_id": "char:ada", "max_history": 50})
    clock.advance(0)
    message = {"kind": "say", "sender_id": "char:bob", "sender_key": "Bob",
               "text": "hi there", "seq": 1}

    def run() -> None:
        for _ in range(BLOCK):
            world.say("char:ada", message)
            clock.advance(0)  # the tick brought forward
            clock.advance(0)  # the writes grouped after it
            clock.advance(1.0)  # the timer's wake-up

    return run, service


def main(argv: list[str]) -> int:
    blocks = int(argv[0])
    run, service = heard_block()
    run()  # warm-up: imports, the first writes
    gc.collect()
    gc.freeze()
    for _ in range(blocks):
        run()
    loops = service.counters("ada")["loops"]
    assert loops == BLOCK * (blocks + 1), loops  # every message answered by its own tick
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
