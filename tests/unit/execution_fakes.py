"""Tools, a store and helpers shared by the execution-engine tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from twisted.internet import defer, task
from twisted.logger import globalLogPublisher
from zope.interface import implementer

from ai_tools.execution.cache import ToolCache
from ai_tools.execution.engine import ExecutionContext, execute_tool_call
from ai_tools.execution.history import ConversationHistory
from ai_tools.execution.outcome import ToolCallOutcome
from ai_tools.interfaces import IStore
from ai_tools.tools.base import Actor, Tool, ToolCategory
from ai_tools.tools.registry import ToolRegistry


class EchoTool(Tool):
    """Sync SAFE tool: echoes its parameters; counts calls."""

    name = "echo"
    description = "Echo the text."
    parameters = {
        "type": "object",
        "properties": {
            "text": {"type": "string"},
            "tags": {"type": "array"},
            "count": {"type": "integer"},
        },
        "required": ["text"],
    }
    calls: list[dict[str, Any]]

    def __init__(self) -> None:
        super().__init__()
        self.calls = []

    def execute(self, actor: Actor, **params: Any) -> dict[str, Any]:
        self.calls.append(params)
        return {"success": True, "echo": params["text"], "actor": actor.character_id}


class LookTool(EchoTool):
    """Cacheable tick-scoped SAFE tool."""

    name = "look"
    cacheable = True
    cache_scope = "tick"


class RecallTool(EchoTool):
    """Cacheable session-scoped tool with a TTL."""

    name = "recall"
    cacheable = True
    cache_scope = "session"
    cache_ttl = 60.0


class ArchiveTool(EchoTool):
    """Cacheable persistent-scoped tool."""

    name = "archive"
    cacheable = True
    cache_scope = "persistent"
    cache_ttl = 3600.0


class SayTool(EchoTool):
    """TERMINAL tool."""

    name = "say"
    category = ToolCategory.TERMINAL


class DigTool(EchoTool):
    """DANGEROUS tool; fails when the text is "fail"."""

    name = "dig"
    category = ToolCategory.DANGEROUS

    def execute(self, actor: Actor, **params: Any) -> dict[str, Any]:
        self.calls.append(params)
        if params["text"] == "fail":
            return {"success": False, "error": "the ground is too hard"}
        return {"success": True}


class PendingTool(Tool):
    """Returns a Deferred the test fires or lets hang; records cancellations."""

    name = "pending"
    description = "Wait for the test."
    timeout = 30
    category = ToolCategory.ASYNC_REQUIRED

    def __init__(self) -> None:
        super().__init__()
        self.deferreds: list[defer.Deferred[Any]] = []
        self.cancelled = 0

    def execute(self, actor: Actor, **params: Any) -> defer.Deferred[Any]:
        def cancel(d: defer.Deferred[Any]) -> None:
            self.cancelled += 1

        d: defer.Deferred[Any] = defer.Deferred(cancel)
        self.deferreds.append(d)
        return d


class ScriptedTool(Tool):
    """Plays a script: each attempt returns or raises the next item."""

    name = "scripted"
    description = "Scripted outcomes."

    def __init__(self) -> None:
        super().__init__()
        self.script: list[Any] = []
        self.attempt_times: list[float] = []
        self.clock: task.Clock | None = None

    def execute(self, actor: Actor, **params: Any) -> Any:
        if self.clock is not None:
            self.attempt_times.append(self.clock.seconds())
        item = self.script.pop(0) if self.script else {"success": True}
        if isinstance(item, BaseException):
            raise item
        return item


class AsyncTool(Tool):
    """An ``async def`` tool awaiting a Deferred from the test."""

    name = "async_tool"
    description = "Async."

    def __init__(self) -> None:
        super().__init__()
        self.waiting: defer.Deferred[Any] | None = None
        self.saw_cancel = False

    async def execute(self, actor: Actor, **params: Any) -> dict[str, Any]:
        self.waiting = defer.Deferred()
        try:
            value = await self.waiting
        except defer.CancelledError:
            self.saw_cancel = True
            raise
        return {"success": True, "value": value}


ALL_TOOLS: tuple[type[Tool], ...] = (
    EchoTool, LookTool, RecallTool, ArchiveTool, SayTool, DigTool, PendingTool, ScriptedTool,
    AsyncTool,
)


@implementer(IStore)
class FakeCacheStore:
    """The cache part of IStore, in memory (answers at once, or on demand)."""

    def __init__(self) -> None:
        self.entries: dict[tuple[str, str], tuple[Any, float | None]] = {}
        self.hold = False
        self.pending: list[defer.Deferred[Any]] = []
        self.fail_reads = False

    def cache_get(self, namespace: str, key: str, now: float) -> defer.Deferred[Any]:
        if self.fail_reads:
            return defer.fail(OSError("disk on fire"))
        found = self.entries.get((namespace, key))
        value = None
        if found is not None and (found[1] is None or found[1] > now):
            value = found[0]
        if self.hold:
            d: defer.Deferred[Any] = defer.Deferred()
            self.pending.append(d)
            return d
        return defer.succeed(value)

    def cache_put(self, namespace: str, key: str, value: Any,
                  expires_at: float | None) -> defer.Deferred[None]:
        self.entries[(namespace, key)] = (value, expires_at)
        return defer.succeed(None)

    def cache_invalidate(self, namespace: str) -> defer.Deferred[None]:
        for k in [k for k in self.entries if k[0] == namespace]:
            del self.entries[k]
        return defer.succeed(None)


class Switch:
    """A stop-request flag for ``ExecutionContext.stop_requested``."""

    def __init__(self) -> None:
        self.on = False

    def __call__(self) -> bool:
        return self.on


def make_context(**overrides: Any) -> ExecutionContext:
    """A context with every test tool, a Clock, a fresh history and cache, jitter = 1.0."""
    clock = overrides.pop("clock", None) or task.Clock()
    registry = overrides.pop("registry", None) or ToolRegistry(ALL_TOOLS)
    fields: dict[str, Any] = {
        "registry": registry,
        "actor": Actor("char-1"),
        "history": ConversationHistory(),
        "clock": clock,
        "cache": ToolCache(clock),
        "cache_namespace": "bot",
        "rand": lambda: 1.0,
    }
    fields.update(overrides)
    scripted = registry.get_tool("scripted")
    if isinstance(scripted, ScriptedTool):
        scripted.clock = clock
    return ExecutionContext(**fields)


def run(context: ExecutionContext, tool_call: Any, **kw: Any) -> ToolCallOutcome:
    """Execute a call that completes without time passing; return its outcome."""
    results: list[Any] = []
    execute_tool_call(context, tool_call, **kw).addBoth(results.append)
    assert len(results) == 1, "the call did not complete synchronously"
    assert isinstance(results[0], ToolCallOutcome), results[0]
    return results[0]


def start(context: ExecutionContext, tool_call: Any,
          **kw: Any) -> tuple[defer.Deferred[ToolCallOutcome], list[Any]]:
    """Start a call; return its Deferred and the list its result will land in."""
    results: list[Any] = []
    d = execute_tool_call(context, tool_call, **kw)
    d.addBoth(results.append)
    return d, results


def call(name: str, call_id: str = "call_1", **params: Any) -> dict[str, Any]:
    """A native tool call."""
    import json

    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(params)}}


@contextmanager
def captured_events() -> Iterator[list[dict[str, Any]]]:
    """Collect the log events emitted inside the block."""
    events: list[dict[str, Any]] = []
    globalLogPublisher.addObserver(events.append)
    try:
        yield events
    finally:
        globalLogPublisher.removeObserver(events.append)
