"""One loop run's state: what it runs with (:class:`LoopRun`), what it did (:class:`LoopTally`).

The steps of :mod:`ai_tools.loop.run` and :mod:`ai_tools.loop.calls` are
functions of a :class:`LoopRun`; nothing here decides anything, it only keeps.
"""

from __future__ import annotations

import attrs

from ai_tools.execution.engine import ExecutionContext, ExecutionState
from ai_tools.execution.history import ConversationHistory
from ai_tools.execution.reasons import TerminationReason
from ai_tools.execution.results import clip_text
from ai_tools.json_types import JSONMapping
from ai_tools.llm.events import ChatResponse, TextDelta
from ai_tools.log_gate import GatedLogger
from ai_tools.loop.config import LoopConfig, use_native_tools
from ai_tools.loop.context import LoopContext, LoopProgress
from ai_tools.loop.events import EventDelivery
from ai_tools.loop.prompts import tick_message
from ai_tools.loop.request import RequestPlan, fitted_plan
from ai_tools.loop.usage import ContextMeter, context_window

__all__ = ["EVENT_TEXT_BYTES", "LoopRun", "LoopTally"]

log = GatedLogger()

_USAGE_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens")

EVENT_TEXT_BYTES = 2048
"""Largest text (a tool's result or arguments, an error) a loop event carries, in bytes:
observers (the event stream, a console) see what happened, clipped with a marker."""


def _new_usage() -> dict[str, float]:
    return {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0, "requests": 0,
            "context_tokens": 0, "context_percent": 0.0}


@attrs.define(eq=False)
class LoopTally:
    """What a loop has done so far (the result is made of it)."""

    budget: int | None
    """Normal tool calls still allowed (None: unlimited)."""
    iteration: int = 0
    results: list[dict[str, object]] = attrs.field(factory=list)
    signals: list[dict[str, object]] = attrs.field(factory=list)
    texts: list[str] = attrs.field(factory=list)
    deltas: list[str] = attrs.field(factory=list)
    """Text streamed during the model call in flight (kept if the call fails)."""
    usage: dict[str, float] = attrs.field(factory=_new_usage)
    consecutive_errors: int = 0
    reason: TerminationReason | None = None
    error: str | None = None
    finish_reason: str | None = None
    fresh_results: list[JSONMapping] = attrs.field(factory=list)
    """Tool-result messages of the last iteration (the next request advises them)."""

    def end(self, reason: TerminationReason, error: str | None = None) -> None:
        """Set the termination reason (the first one wins)."""
        if self.reason is None:
            self.reason = reason
            self.error = error

    def add_text(self, text: str | None) -> None:
        """Keep text the model produced (a loop's ``text`` is all of it)."""
        if text:
            self.texts.append(text)

    def add_usage(self, usage: JSONMapping | None, attempts: int = 1) -> None:
        """Add one model answer's token counts, and the HTTP requests it took."""
        totals = self.usage
        totals["requests"] += attempts
        for key in _USAGE_KEYS:
            value = (usage or {}).get(key)
            if isinstance(value, int):
                totals[key] += value

    def progress(self) -> LoopProgress:
        """The record handed to the checkpoint."""
        return LoopProgress(self.iteration, self.results, self.signals, self.texts,
                            self.budget)


@attrs.define(eq=False)
class LoopRun:
    """One loop run: its context and config, what it set up, and its tally.

    Made by :meth:`start`, which takes the history (a copy in reflection mode,
    so the model sees its own calls and the history stays clean), delivers the
    pending events and builds the execution engine's context.
    """

    ctx: LoopContext
    config: LoopConfig
    history: ConversationHistory
    execution: ExecutionContext
    meter: ContextMeter
    window: int
    native: bool
    max_iterations: int
    """Model calls this loop may make (``config.effective_max_iterations``)."""
    started: float
    tally: LoopTally
    delivery: EventDelivery | None = None
    nudge: tuple[int, str] | None = None
    """Where the transient ``[TICK]`` message goes in each request, and its text."""
    plan: RequestPlan | None = None
    model_names: tuple[str | None, str | None] | None = None
    """The model profile's label and the model's name, for ``model_request`` events."""

    @classmethod
    def start(cls, ctx: LoopContext, config: LoopConfig) -> LoopRun:
        """Set a run up (see the class docstring)."""
        history = ctx.history.copy() if ctx.reflection else ctx.history
        native = use_native_tools(config.native_tools, ctx.llm)
        run = cls(
            ctx=ctx, config=config, history=history, native=native,
            execution=ExecutionContext(
                registry=ctx.registry, actor=ctx.actor, history=history, clock=ctx.clock,
                cache=ctx.cache, cache_namespace=ctx.cache_namespace or ctx.actor.owner,
                state=ctx.execution_state or ExecutionState(), gate=ctx.gate,
                native_tools=native,
                # the context's method, not the run's: the run holds this execution
                # context, so a method of the run here would make a reference cycle
                stop_requested=ctx.stop_requested,
                **dict(ctx.execution_options)),
            meter=ctx.meter or ContextMeter(),
            window=context_window(config.context_window, ctx.llm),
            max_iterations=config.effective_max_iterations,
            started=ctx.clock.seconds(),
            tally=LoopTally(budget=config.tool_budget),
        )
        if not ctx.reflection:
            run.delivery = EventDelivery.deliver(ctx.pending_events, history)
        ctx.control.delivery = run.delivery  # (what a state written meanwhile asks)
        last = history.since(-1)
        if run.delivery is None and (not last or last[0].get("role") != "user"):
            run.nudge = (len(history), tick_message(ctx.reflection))
        return run

    def deliver_heard(self) -> int:
        """What the assistant heard since the last model call joins the history before
        the next one (:meth:`EventDelivery.deliver_heard`): a player who speaks while a
        long loop runs waits one model call, not the rest of the loop.  A reflection
        takes none.  Returns how many events joined."""
        ctx = self.ctx
        if ctx.reflection or not ctx.pending_events:
            return 0
        if self.delivery is not None:
            return self.delivery.deliver_heard()
        self.delivery = EventDelivery.deliver(ctx.pending_events, self.history)
        ctx.control.delivery = self.delivery
        self.nudge = None  # not "no new events" any more
        return len(self.delivery.events) if self.delivery is not None else 0

    def plan_for(self, persona: str) -> RequestPlan:
        """The request plan for ``persona`` (the same plan while the persona holds).

        The fitted plan (:func:`~ai_tools.loop.request.fitted_plan`): fewer tools
        when the prompt and tools alone would fill the window past the stop threshold.
        """
        plan = self.plan
        if plan is None or plan.persona != persona:
            plan = self.plan = fitted_plan(self.ctx, self.config, persona, self.meter,
                                           self.window, self.history)
        return plan

    def usage_percent(self) -> float:
        """The context usage now (the one measure, see :mod:`ai_tools.loop.usage`)."""
        plan = self.plan
        assert plan is not None, "the request is planned first (plan_for)"
        usage = self.meter.measure(plan.key, plan.counted_text, self.history, self.window)
        totals = self.tally.usage
        totals["context_tokens"] = usage.tokens
        percent = totals["context_percent"] = usage.percent
        return percent

    def add_answer(self, content: str) -> None:
        """Keep the model's text in the history, clipped to the one entry limit."""
        self.history.add_assistant(content, self.execution.max_result_bytes)

    def listening(self) -> bool:
        """Whether a loop event would reach an observer now (none is built otherwise)."""
        ctx = self.ctx
        if ctx.on_event is None:
            return False
        observed = ctx.observed
        return observed is None or observed()

    def emit(self, kind: str, **fields: object) -> None:
        """Publish one loop event to the observer; its errors are logged, never raised.

        Callers whose fields cost something to make ask :meth:`listening` first.
        """
        if not self.listening():
            return
        observer = self.ctx.on_event
        assert observer is not None
        try:
            observer({"type": kind, "assistant": self.ctx.assistant_name,
                      "iteration": self.tally.iteration, **fields})
        except Exception:
            log.failure("Loop observer of {assistant} failed on a {kind} event",
                        assistant=self.ctx.assistant_name, kind=kind)

    def model_requested(self, started: float, status: str, error: str | None = None,
                        usage: JSONMapping | None = None, attempts: int = 1,
                        response: ChatResponse | None = None, queued: float = 0.0) -> None:
        """Publish one ``model_request`` event: what was asked of whom, how long, what came.

        ``status`` is ``ok``, ``cancelled`` or the termination reason of the
        failure (``llm_error``, ``llm_unavailable``...); the token counts are
        the server's (None when it gave none); ``attempts`` the HTTP requests
        the call took (its retries included; 0 when the breaker refused it);
        ``response_model`` and ``finish_reason`` are the answer's (None without one).
        ``queued`` the seconds it waited in the client's queue for a slot of the
        model server (inside ``latency_ms``, and also given apart as ``queued_ms``).
        """
        if not self.listening():
            return
        if self.model_names is None:
            llm = self.ctx.llm
            self.model_names = (getattr(getattr(llm, "profile", None), "label", None),
                                getattr(llm, "model", None))
        usage = usage or {}
        self.emit("model_request", profile=self.model_names[0], model=self.model_names[1],
                  latency_ms=round((self.ctx.clock.seconds() - started) * 1000.0, 3),
                  prompt_tokens=usage.get("prompt_tokens"),
                  completion_tokens=usage.get("completion_tokens"), status=status,
                  attempts=attempts, queued_ms=round(queued * 1000.0, 3),
                  error=None if error is None else clip_text(error, EVENT_TEXT_BYTES),
                  response_model=(response.model or None) if response is not None else None,
                  finish_reason=response.finish_reason if response is not None else None)

    def on_llm_event(self, event: object) -> None:
        """Keep streamed text (preserved if the call fails) and relay it to observers."""
        if isinstance(event, TextDelta):
            self.tally.deltas.append(event.text)
            self.emit("text_delta", text=event.text)
