"""Fakes for the service tests: a model client, a loop runner, a store that fails on demand."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet import defer, task
from twisted.logger import LogLevel, globalLogPublisher
from zope.interface import implementer

from ai_tools.interfaces import ILLMClient
from ai_tools.llm.events import ChatResponse
from ai_tools.loop import LoopConfig, LoopContext, LoopProgress, LoopResult
from ai_tools.service.service import AssistantService
from ai_tools.store.memory import MemoryStore
from ai_tools.tools.registry import ToolRegistry


@implementer(ILLMClient)
class FakeLLM:
    """Answers every request with ``reply`` (text) unless given a script."""

    model = "fake"

    def __init__(self, reply: str = "ok", context_window: int = 10_000) -> None:
        self.reply = reply
        self.context_window = context_window
        self.requests: list[Any] = []
        self.closed = 0
        self.fail_with: Exception | None = None

    def complete(self, messages: Any, tools: Any = None, tool_choice: Any = None,
                 stream: Any = None, on_event: Any = None) -> defer.Deferred[Any]:
        self.requests.append(list(messages))
        if self.fail_with is not None:
            return defer.fail(self.fail_with)
        return defer.succeed(ChatResponse(content=self.reply))

    def close(self) -> defer.Deferred[None]:
        self.closed += 1
        return defer.succeed(None)


def loop_result(reason: str = "completed", iterations: int = 1, **kw: Any) -> LoopResult:
    """A LoopResult with sensible defaults."""
    kw.setdefault("results", ())
    kw.setdefault("success", False)
    kw.setdefault("success_count", 0)
    kw.setdefault("pattern_mode", "react_loop")
    kw.setdefault("max_allowed_iterations", 5)
    kw.setdefault("usage", {"requests": iterations})
    return LoopResult(iterations=iterations, termination_reason=reason, **kw)


class FakeLoop:
    """A loop runner: consumes pending events like the real loop, checkpoints, returns.

    ``behaviour(ctx, config)`` may be set to return a LoopResult or a Deferred
    (e.g. one that never fires until cancelled) instead of the default run.
    """

    def __init__(self) -> None:
        self.calls: list[tuple[LoopContext, LoopConfig]] = []
        self.behaviour: Callable[[LoopContext, LoopConfig], Any] | None = None
        self.iterations = 1
        self.pending: list[defer.Deferred[Any]] = []

    def __call__(self, ctx: LoopContext, config: LoopConfig) -> defer.Deferred[LoopResult]:
        self.calls.append((ctx, config))
        if self.behaviour is not None:
            return defer.maybeDeferred(self.behaviour, ctx, config)
        return self.default(ctx, config)

    @defer.inlineCallbacks
    def default(self, ctx: LoopContext, config: LoopConfig) -> Any:
        history = ctx.history.copy() if ctx.reflection else ctx.history
        if ctx.pending_events:
            history.add_user(f"events: {len(ctx.pending_events)}")
            del ctx.pending_events[:]
        for i in range(1, self.iterations + 1):
            if ctx.control.stopped:
                return loop_result("stopped_by_user", i - 1)
            history.add_assistant(f"iteration {i}")
            if ctx.checkpoint is not None:
                yield defer.maybeDeferred(ctx.checkpoint, LoopProgress(i, (), (), "", None))
        return loop_result("completed", self.iterations,
                           max_allowed_iterations=config.max_iterations,
                           pattern_mode=config.pattern_mode)

    def hang(self) -> None:
        """Make every loop wait until stopped (control.stop) or cancelled."""

        def behaviour(ctx: LoopContext, config: LoopConfig) -> defer.Deferred[Any]:
            d: defer.Deferred[Any] = defer.Deferred(
                lambda _: None)  # cancel -> CancelledError, turned into a result below
            self.pending.append(d)
            ctx.control.track(d)

            def stopped(failure: Any) -> LoopResult:
                failure.trap(defer.CancelledError)
                return loop_result("stopped_by_user", 0, error=ctx.control.reason or "cancelled")

            d.addErrback(stopped)
            return d

        self.behaviour = behaviour


class FlakyStore(MemoryStore):
    """A MemoryStore whose writes fail while ``failing`` is set (nothing is written)."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.failing = False
        self.writes = 0

    def save_many(self, states: Any) -> defer.Deferred[None]:
        self.writes += 1
        if self.failing:
            return defer.fail(OSError("disk I/O error"))
        return super().save_many(states)

    def save_assistant(self, name: str, state: Any) -> defer.Deferred[None]:
        return self.save_many({name: state})


def make_service(
    clock: task.Clock | None = None,
    *,
    loop: FakeLoop | None = None,
    llm: Any = None,
    registry: ToolRegistry | None = None,
    **kw: Any,
) -> tuple[task.Clock, AssistantService, FakeLoop | None]:
    """A started service on a task.Clock with a fake loop (or the real one if loop=False)."""
    clock = clock or task.Clock()
    fake = FakeLoop() if loop is None else loop
    kw.setdefault("store", MemoryStore(clock=clock))
    service = AssistantService(
        llm=llm or FakeLLM(), registry=registry or ToolRegistry(), clock=clock,
        loop_runner=fake if fake else None, **kw,
    )
    service.startService()
    return clock, service, fake


def settle(clock: task.Clock, turns: int = 5) -> None:
    """Run the reactor turns the state writer and scheduler use (callLater(0))."""
    for _ in range(turns):
        clock.advance(0)


def add(service: AssistantService, clock: task.Clock, **config: Any) -> Any:
    """Add an assistant (with a character) and return it."""
    config.setdefault("character_id", f"char:{config['name']}")
    d = service.add_assistant(config)
    settle(clock)
    return d.result if not hasattr(d.result, "raiseException") else d.result.raiseException()


class LogCapture:
    """Collects log events at warn level and above (or from ``level``)."""

    def __init__(self, level: LogLevel = LogLevel.warn) -> None:
        self.events: list[dict[str, Any]] = []
        self.level = level

    def __call__(self, event: dict[str, Any]) -> None:
        level = event.get("log_level")
        if level is not None and level >= self.level:
            self.events.append(event)

    def __enter__(self) -> LogCapture:
        globalLogPublisher.addObserver(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        globalLogPublisher.removeObserver(self)

    def from_namespace(self, prefix: str) -> list[dict[str, Any]]:
        return [e for e in self.events if str(e.get("log_namespace", "")).startswith(prefix)]
