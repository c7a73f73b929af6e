"""``make demo`` (``python -m ai_tools.demo``): the tool system on a real reactor.

Registers a few example tools in a fresh registry, shows the function schemas a
model would be offered, then runs calls the way the engine does — validate,
execute through ``maybeDeferred`` with a timeout, check the result — and prints
what the model would see: a good call, a call whose parameters are safely
coerced, a bad call refused with its model-readable errors, and tools that
answer later through a Deferred and through a coroutine.

An interim demo: the service demo replaces it once the assistant service lands.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any, ClassVar

from twisted.internet import defer, task

from ai_tools.tools import Actor, Tool, ToolCategory, ToolRegistry, validate_tool_result

ROOMS = {
    "hall": "A long hall lit by oil lamps. Doors lead north and east.",
    "garden": "A walled garden; a fountain murmurs in the middle.",
}


class DescribeRoom(Tool):
    """Read-only: describe one of the demo rooms."""

    name = "describe_room"
    description = "Describe a room of the house."
    category = ToolCategory.SAFE_CHAIN
    cacheable = True
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "room": {"type": "string", "enum": sorted(ROOMS), "description": "Which room."},
            "detail": {"type": "string", "enum": ["brief", "full"], "description": "How much."},
        },
        "required": ["room"],
    }

    def execute(self, actor: Actor, **params: Any) -> dict[str, Any]:
        text = ROOMS[params["room"]]
        if params.get("detail", "brief") == "brief":
            text = text.split(".")[0] + "."
        return {"success": True, "room": params["room"], "description": text}


class SetLamp(Tool):
    """Changes the world: set the hall lamp."""

    name = "set_lamp"
    description = "Switch the hall lamp on or off; set its brightness (0-100) and color."
    category = ToolCategory.DANGEROUS
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "on": {"type": "boolean"},
            "brightness": {"type": "integer", "minimum": 0, "maximum": 100},
            "color": {"type": "string", "enum": ["warm", "cold"]},
        },
        "required": ["on"],
    }

    def execute(self, actor: Actor, **params: Any) -> dict[str, Any]:
        lamp = {"on": params["on"], "brightness": params.get("brightness", 50),
                "color": params.get("color", "warm")}
        return {"success": True, "lamp": lamp}


class WaitForBell(Tool):
    """Answers later through a Deferred (e.g. a network or database call)."""

    name = "wait_for_bell"
    description = "Wait for the door bell, at most `seconds` seconds."
    category = ToolCategory.ASYNC_REQUIRED
    timeout = 5
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"seconds": {"type": "number", "exclusiveMinimum": 0, "maximum": 2}},
        "required": ["seconds"],
    }
    clock: Any = None

    def execute(self, actor: Actor, **params: Any) -> defer.Deferred[dict[str, Any]]:
        assert self.clock is not None, "the demo sets the clock after registering"
        seconds = params["seconds"]
        return task.deferLater(self.clock, seconds, lambda: {"success": True, "rang": True,
                                                             "waited": seconds})


class Announce(Tool):
    """An ``async def`` tool that ends the loop (TERMINAL)."""

    name = "announce"
    description = "Announce something to everyone in the house."
    category = ToolCategory.TERMINAL
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"text": {"type": "string", "minLength": 1, "maxLength": 200}},
        "required": ["text"],
    }
    clock: Any = None

    async def execute(self, actor: Actor, **params: Any) -> dict[str, Any]:
        assert self.clock is not None, "the demo sets the clock after registering"
        await task.deferLater(self.clock, 0.05, lambda: None)
        return {"success": True, "announced": params["text"], "by": actor.owner}


DEMO_TOOLS: tuple[type[Tool], ...] = (DescribeRoom, SetLamp, WaitForBell, Announce)

DEMO_CALLS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("a good call", "describe_room", {"room": "garden", "detail": "full"}),
    ("safe coercion: \"true\" -> true, \"75\" -> 75", "set_lamp",
     {"on": "true", "brightness": "75"}),
    ("a bad call, refused before it runs", "set_lamp",
     {"brightness": "very", "colour": "warm"}),
    ("a tool answering through a Deferred", "wait_for_bell", {"seconds": 0.2}),
    ("an async def tool", "announce", {"text": "Dinner is served."}),
)


def build_registry(clock: Any) -> ToolRegistry:
    """A fresh registry holding the demo tools, their clocks set to ``clock``."""
    registry = ToolRegistry(DEMO_TOOLS)
    for name in ("wait_for_bell", "announce"):
        tool = registry.get_tool(name)
        assert isinstance(tool, WaitForBell | Announce)
        tool.clock = clock
    return registry


def _execute(tool: Tool, actor: Actor, params: dict[str, Any]) -> Any:
    result = tool.execute(actor, **params)
    if inspect.iscoroutine(result):
        return defer.Deferred.fromCoroutine(result)
    return result


def call_tool(registry: ToolRegistry, clock: Any, actor: Actor, name: str,
              params: Any) -> defer.Deferred[dict[str, Any]]:
    """Validate and run one call; fires with the result dict the model would see."""
    tool = registry.get_tool(name)
    if tool is None:
        return defer.succeed({"success": False, "error": f"Unknown tool '{name}'"})
    validation = tool.validate_parameters(params)
    if not validation.valid:
        return defer.succeed({"success": False, "error": validation.format_for_llm(name)})
    d: defer.Deferred[Any] = defer.maybeDeferred(_execute, tool, actor, validation.cleaned_params)
    d.addTimeout(tool.timeout, clock)
    d.addCallback(validate_tool_result, name)
    return d


@defer.inlineCallbacks
def run_demo(clock: Any, write: Callable[[str], None]) -> Any:
    """Print the demo through ``write``; fires with the exit code (0)."""
    registry = build_registry(clock)
    write("ai_tools demo: the tool system (validation, coercion, Deferred and async tools)")
    write("")
    write("Tools offered to the model:")
    for tool in registry.get_all_tools():
        required = tool.parameters.get("required", [])
        write(f"  {tool.name:<14} {tool.category.value:<15} required: "
              f"{', '.join(required) or '-'}")
    write(f"  ({len(registry.get_tool_schemas())} OpenAI-compatible function schemas)")
    actor = Actor("char:butler")
    for number, (title, name, params) in enumerate(DEMO_CALLS, start=1):
        write("")
        write(f"{number}. {title}")
        write(f"   call:   {name}({json.dumps(params)})")
        started = clock.seconds()
        result = yield call_tool(registry, clock, actor, name, params)
        elapsed = clock.seconds() - started
        if result.get("success"):
            write(f"   result: {json.dumps(result)}  ({elapsed:.2f}s)")
        else:
            write("   the model sees:")
            for line in str(result.get("error", "")).splitlines():
                write(f"     {line}")
    write("")
    write("Done.")
    return 0


def main(reactor: Any) -> defer.Deferred[Any]:
    """``task.react`` entry point."""
    return run_demo(reactor, print)


if __name__ == "__main__":
    task.react(main)
