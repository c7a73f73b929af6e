"""One tick of one assistant: its steps, in order.

:func:`at_tick` runs, in order:

1. **early exits** — already ticking, disabled, emergency-stopped, no
   character: the tick returns at once with status ``skipped``;
2. **tick-cache reset** — the assistant's ``tick``-scope cache entries go;
3. **emergency compaction** — awake and the context is ≥ 80% full: the history
   is compacted before anything else;
4. **sleep tick** — asleep: wake at once for an event addressed to it,
   otherwise maintenance (compaction from 70%, one maintenance loop per sleep
   for memory consolidation), then wake if the schedule has ended; the tick
   ends there;
5. **reflection** — every ``reflection_interval`` ticks that ran a loop, a
   reflection loop on a copy of the history (nothing it says is kept);
6. **idle exit** — nothing pending and not ``autonomous``: no model call;
7. **execution-pattern selection** — context type from the pending events,
   optional model assessment, the three layers of :mod:`ai_tools.service.patterns`;
8. **the loop** — a ReAct loop or a single action, its state persisted after
   every iteration (the loop waits for the write before its next model call);
9. **undelivered events** — when the loop ended before a model answer saw the
   pending events, they are pending again (the loop gave them back); after
   ``unavailable_after`` real failed attempts (a refusal by an open circuit
   breaker is none) the assistant says ``unavailable_line`` once, in the world.

The context usage the tick checks is the loop's own measure
(:mod:`ai_tools.loop.usage`), taken with the assistant's meter.

A tick never raises: whatever happens ends in a :class:`TickResult`, the
errors met are logged once, at the end, with the assistant, tick number,
mode and pattern, and the guard is released in every case.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import attrs
from twisted.internet import defer
from twisted.logger import Logger, LogLevel
from twisted.python.failure import Failure

from ai_tools.execution.reasons import TerminationReason
from ai_tools.interfaces import IRefusingLLMClient, IStore, IWorld
from ai_tools.json_types import JSONObject
from ai_tools.loop.compaction import HistoryBudget, compact_history, needs_compaction
from ai_tools.loop.config import GatePolicy, LoopConfig
from ai_tools.loop.context import LoopContext, LoopControl
from ai_tools.loop.prompts import format_events
from ai_tools.loop.request import measure_context
from ai_tools.loop.result import LoopResult
from ai_tools.loop.usage import ContextUsage
from ai_tools.service.assistant import AWAKE, SLEEP, assistant_model
from ai_tools.service.episodes import EPISODES, episode_record
from ai_tools.service.hearing import sender_of
from ai_tools.service.patterns import (
    ExecutionPattern,
    assess_task,
    determine_context_type,
    select_execution_pattern,
    select_gate,
    wants_assessment,
)
from ai_tools.telemetry.conventions import CONTEXT_TYPE, REFLECTION, TICK
from ai_tools.telemetry.setup import trace_loop
from ai_tools.tools.base import Actor, ToolCategory

if TYPE_CHECKING:
    from opentelemetry.trace import SpanContext

    from ai_tools.service.assistant import Assistant, AssistantHost

__all__ = [
    "CANCELLED",
    "ERROR",
    "IDLE",
    "RAN",
    "SKIPPED",
    "SLEEPING",
    "WOKE",
    "TickResult",
    "at_tick",
]

log = Logger()

SKIPPED = "skipped"
"""An early exit (``reason``: already_ticking, disabled, emergency_stopped, no_character)."""
IDLE = "idle"
"""Awake with nothing to do: no model call."""
RAN = "ran"
"""A loop ran (``reason``: its termination reason)."""
SLEEPING = "sleeping"
"""A sleep tick; the assistant stays asleep."""
WOKE = "woke"
"""A sleep tick that woke the assistant (``reason``: addressed or schedule)."""
CANCELLED = "cancelled"
"""The tick was cancelled (service stopping, or killed outside a loop)."""
ERROR = "error"
"""An unexpected error ended the tick (logged with its traceback)."""

QUIET_CATEGORIES = frozenset({ToolCategory.SAFE_CHAIN, ToolCategory.ASYNC_REQUIRED})
"""What sleep maintenance and reflection may use unless configured otherwise."""

_MAX_TICK_ERRORS = 10
_STORE_ERROR = "state could not be saved"
_TOOL_FAILURES = frozenset({"tool_error", "timed_out"})

SLEEP_CONTEXT = "sleep"
REFLECTION_CONTEXT = "reflection"


@attrs.frozen
class TickResult:
    """What one tick did."""

    assistant: str
    tick: int
    status: str
    reason: str = ""
    mode: str = AWAKE
    loop: LoopResult | None = None
    pattern: ExecutionPattern | None = None
    reflection: LoopResult | None = None
    maintenance: LoopResult | None = None
    compaction: str | None = None
    """``summary`` / ``truncation`` when the history was compacted this tick."""
    errors: tuple[str, ...] = ()
    started_at: float = 0.0
    duration_ms: float = 0.0

    @property
    def ok(self) -> bool:
        """No error met during the tick."""
        return not self.errors and self.status != ERROR

    def as_dict(self) -> dict[str, object]:
        """JSON form (status pages, the HTTP API)."""
        return {
            "assistant": self.assistant,
            "tick": self.tick,
            "status": self.status,
            "reason": self.reason,
            "mode": self.mode,
            "loop": None if self.loop is None else self.loop.as_dict(),
            "pattern": None if self.pattern is None else self.pattern.as_dict(),
            "reflection": None if self.reflection is None else self.reflection.as_dict(),
            "maintenance": None if self.maintenance is None else self.maintenance.as_dict(),
            "compaction": self.compaction,
            "errors": list(self.errors),
            "started_at": self.started_at,
            "duration_ms": self.duration_ms,
        }

    def summary(self) -> JSONObject:
        """The short form kept in the assistant's state as ``last_tick``."""
        return {
            "tick": self.tick,
            "status": self.status,
            "reason": self.reason,
            "mode": self.mode,
            "iterations": self.loop.iterations if self.loop is not None else 0,
            "errors": list(self.errors),
            "started_at": self.started_at,
            "duration_ms": self.duration_ms,
        }


@attrs.define(eq=False)
class _Tick:
    """Bookkeeping of the tick in flight."""

    assistant: Assistant
    host: AssistantHost
    number: int
    started_at: float
    pattern: ExecutionPattern | None = None
    loop: LoopResult | None = None
    reflection: LoopResult | None = None
    maintenance: LoopResult | None = None
    compaction: str | None = None
    errors: list[str] = attrs.field(factory=list)
    log_level: LogLevel = LogLevel.info
    """The level the tick's errors are logged at: the worst of them (:meth:`error`)."""
    traced: list[SpanContext] = attrs.field(factory=list)
    """The ``invoke_agent`` spans of its loops so far (tracing on): a later loop links them."""

    def error(self, message: str, level: LogLevel = LogLevel.error) -> None:
        """Record an error of this tick (logged once when the tick ends, at the worst
        level recorded): ``warn`` for a tool failure the model was told about, ``info``
        for a model call the open circuit breaker refused (the outage is logged by the
        breaker; a line per tick would only repeat it), ``error`` for the rest."""
        if level > self.log_level:  # (LogLevel constants are ordered by severity)
            self.log_level = level
        if message not in self.errors and len(self.errors) < _MAX_TICK_ERRORS:
            self.errors.append(message)

    def result(self, status: str, reason: str = "") -> TickResult:
        now = self.host.clock.seconds()
        return TickResult(
            assistant=self.assistant.name, tick=self.number, status=status, reason=reason,
            mode=self.assistant.mode, loop=self.loop, pattern=self.pattern,
            reflection=self.reflection, maintenance=self.maintenance,
            compaction=self.compaction, errors=tuple(self.errors),
            started_at=self.started_at,
            duration_ms=round((now - self.started_at) * 1000.0, 3),
        )


def _skipped(assistant: Assistant, host: AssistantHost, reason: str) -> TickResult:
    now = host.clock.seconds()
    return TickResult(assistant=assistant.name, tick=assistant.tick_number, status=SKIPPED,
                      reason=reason, mode=assistant.mode, started_at=now)


def _early_exit(assistant: Assistant) -> str | None:
    if assistant.ticking:
        return "already_ticking"
    if not assistant.enabled:
        return "disabled"
    if assistant.emergency_stopped:
        return "emergency_stopped"
    if not assistant.config.character_id:
        return "no_character"
    return None


def at_tick(assistant: Assistant, host: AssistantHost) -> defer.Deferred[TickResult]:
    """Run one tick of ``assistant``; fires with a :class:`TickResult`, never fails.

    Cancelling the Deferred stops the loop in flight (a kill) or the step
    running outside a loop; the tick then ends with ``cancelled`` or with the
    loop's ``stopped_by_user``.
    """
    reason = _early_exit(assistant)
    if reason is not None:
        return defer.succeed(_skipped(assistant, host, reason))
    assistant.ticking = True  # the guard; released below in every case
    try:
        assistant.tick_number += 1
        assistant.count("ticks")
        now = host.clock.seconds()
        cache = host.cache
        if cache is not None:
            cache.clear_tick(assistant.name)
        if _is_idle(assistant, host):
            # The common case for a quiet assistant: no Deferred machinery at all.
            assistant.count("idle_ticks")
            _release(assistant)
            return defer.succeed(TickResult(
                assistant=assistant.name, tick=assistant.tick_number, status=IDLE,
                mode=assistant.mode, started_at=now))
        if _model_refused(assistant, host):
            _release(assistant)
            return defer.succeed(_skipped(assistant, host, "model_unavailable"))
        tick = _Tick(assistant, host, assistant.tick_number, now)
        d = _run(tick)
    except Exception:
        _release(assistant)
        failure = Failure()
        log.failure("Tick of {assistant} failed before it started", failure,
                    assistant=assistant.name)
        return defer.succeed(_skipped(assistant, host, "error"))
    assistant.current_tick = d

    d.addBoth(_tick_ended, tick)
    return d


def _model_refused(assistant: Assistant, host: AssistantHost) -> bool:
    """Whether a breaker (the assistant's or its model server's) would refuse the model
    call now: the tick is then skipped, its events left pending, with no loop, no model
    request and no line of log.  Only the change is told: one ``model_state`` event
    (``unavailable`` with the reason, later ``available``) and one log line each way."""
    llm = assistant_model(host, assistant.name, assistant.config.model)
    refusal = llm.refusal() if IRefusingLLMClient.providedBy(llm) else None
    if (refusal is not None) == assistant.model_refused:
        return assistant.model_refused
    assistant.model_refused = refusal is not None
    state = "unavailable" if refusal is not None else "available"
    log.info("Assistant {assistant}: model {state}{why}", assistant=assistant.name,
             state=state, why=f" ({refusal}); its ticks wait" if refusal is not None else "")
    host.publish(assistant.name, {"type": "model_state", "state": state,
                                  "error": None if refusal is None else str(refusal)})
    return assistant.model_refused


def _tick_ended(result: TickResult | Failure, tick: _Tick) -> TickResult:
    """Release the guard; a failure (``_run`` catches everything) becomes an ERROR result."""
    _release(tick.assistant)
    if isinstance(result, Failure):  # belt and braces
        log.failure("Tick {tick} of {assistant} failed", result,
                    assistant=tick.assistant.name, tick=tick.number)
        return tick.result(ERROR, result.getErrorMessage())
    return result


def _release(assistant: Assistant) -> None:
    assistant.ticking = False
    assistant.control = None
    assistant.current_tick = None


def _usage(assistant: Assistant, host: AssistantHost, mode: str) -> ContextUsage:
    """The context usage of the loop this tick would run in ``mode``."""
    context_type = (SLEEP_CONTEXT if mode == SLEEP
                    else determine_context_type(assistant.pending_events))
    ctx = _loop_context(assistant, host, context_type, mode=mode)
    config = _loop_config(assistant, None)
    return measure_context(ctx, config, assistant.meter, assistant.persona)


def _reflection_due(assistant: Assistant) -> bool:
    interval = assistant.config.reflection_interval
    return interval > 0 and assistant.ticks_since_reflection >= interval


def _is_idle(assistant: Assistant, host: AssistantHost) -> bool:
    """Awake, nothing pending, not autonomous, nothing to maintain."""
    if assistant.mode != AWAKE or assistant.pending_events or assistant.config.autonomous:
        return False
    if _reflection_due(assistant):
        return False
    if not len(assistant.history):
        return True
    return not needs_compaction(_usage(assistant, host, AWAKE).percent, AWAKE,
                                assistant.config.compaction)


@defer.inlineCallbacks
def _run(tick: _Tick) -> Any:
    """The tick after the early exits (steps 3-8); always returns a TickResult."""
    assistant = tick.assistant
    try:
        # 3. emergency compaction
        if assistant.mode == AWAKE:
            yield _maybe_compact(tick, AWAKE)
        # 4. sleep tick
        if assistant.mode == SLEEP:
            status, reason = yield _sleep_tick(tick)
            return _finish(tick, status, reason)
        # 5. reflection
        if _reflection_due(assistant):
            tick.reflection = yield _run_loop(tick, REFLECTION_CONTEXT, reflection=True)
            assistant.ticks_since_reflection = 0
            assistant.count("reflections")
        # 6. nothing to do
        if not assistant.pending_events and not assistant.config.autonomous:
            assistant.count("idle_ticks")
            return _finish(tick, IDLE, "reflected" if tick.reflection else "")
        # 7. execution pattern
        context_type = determine_context_type(assistant.pending_events)
        tick.pattern = yield _select_pattern(tick, context_type)
        # 8. the loop (or a single action)
        events = list(assistant.pending_events)
        history_start = len(assistant.history)
        tick.loop = yield _run_loop(tick, context_type, pattern=tick.pattern)
        # 9. events no model answer saw are pending again
        yield _after_delivery(tick, events, tick.loop)
        yield _record_episode(tick, events, history_start)
        assistant.ticks_since_reflection += 1
        _trim_history(assistant)
        return _finish(tick, RAN, tick.loop.termination_reason)
    except defer.CancelledError:
        return _finish(tick, CANCELLED, "cancelled")
    except Exception as exc:
        assistant.count("tick_errors")
        log.failure(
            "Tick {tick} of {assistant} failed (mode {mode}, pattern {pattern})",
            assistant=assistant.name, tick=tick.number, mode=assistant.mode,
            pattern=tick.pattern.mode if tick.pattern else None,
        )
        tick.error(f"{type(exc).__name__}: {exc}")
        return _finish(tick, ERROR, type(exc).__name__, logged=True)


def _finish(tick: _Tick, status: str, reason: str, logged: bool = False) -> TickResult:
    """Build the result, record it, log the tick's errors once, persist."""
    assistant, host = tick.assistant, tick.host
    result = tick.result(status, reason)
    assistant.last_tick = result.summary()
    if result.errors and not logged:
        assistant.count("tick_errors")
        log.emit(
            tick.log_level,
            "Tick {tick} of {assistant} ({mode}, {pattern}) ended {status}/{reason} with "
            "errors: {errors}",
            assistant=assistant.name, tick=tick.number, mode=assistant.mode,
            pattern=tick.pattern.mode if tick.pattern else None, status=status,
            reason=reason, errors="; ".join(result.errors),
        )
    host.publish(assistant.name, {
        "type": "tick", "tick": tick.number, "status": status, "reason": reason,
        "mode": assistant.mode, "errors": list(result.errors),
        "duration_ms": result.duration_ms,
    })
    # What changed since the loop's last checkpoint is bookkeeping (counters,
    # last_tick): written lazily, usually together with the next save.  Mode
    # changes, flags and events are saved at once where they happen.
    host.writer.save_soon(assistant.name)
    return result


def _maybe_compact(tick: _Tick, mode: str) -> defer.Deferred[None] | None:
    """Compact the history if it is full enough for ``mode``; None when nothing to do."""
    assistant, host = tick.assistant, tick.host
    if not len(assistant.history):
        return None
    usage = _usage(assistant, host, mode)
    if not needs_compaction(usage.percent, mode, assistant.config.compaction):
        return None
    return _compact(tick, usage)


def _history_budget(assistant: Assistant, usage: ContextUsage) -> HistoryBudget | None:
    """What the history may take for the context to be at the compaction target.

    Counted as the assistant's meter counts, with the prompt of ``usage``.  None
    when the prompt alone takes that much: clipping the history would not help
    (the loop says why it cannot run), so compaction only does its usual work.
    """
    target = assistant.config.compaction.target_percent
    tokens = int(usage.window * target / 100.0) - usage.prompt_tokens
    if tokens <= 0:
        return None
    return HistoryBudget(tokens, assistant.meter.counter.count_message, usage.window)


@defer.inlineCallbacks
def _compact(tick: _Tick, usage: ContextUsage) -> Any:
    assistant, host = tick.assistant, tick.host
    config = assistant.config.compaction
    llm = assistant_model(host, assistant.name, assistant.config.model)
    try:
        result = yield compact_history(assistant.history, llm, config,
                                       budget=_history_budget(assistant, usage))
    except defer.CancelledError:
        raise
    except Exception as exc:
        tick.error(f"compaction failed: {exc}")
        return None
    if result.method != "none":
        tick.compaction = result.method
        assistant.count("compactions")
        host.publish(assistant.name, {"type": "compaction", "tick": tick.number,
                                      "method": result.method, "removed": result.removed,
                                      "clipped": result.clipped, "error": result.error})
        if result.error:
            tick.error(f"compaction fell back to truncation: {result.error}")
        yield _checkpoint(tick, None)
    return None


@defer.inlineCallbacks
def _sleep_tick(tick: _Tick) -> Any:
    """Maintenance while asleep; returns (status, reason)."""
    assistant, host = tick.assistant, tick.host
    if assistant.has_addressed_event():
        assistant.set_mode(AWAKE, "addressed")
        return WOKE, "addressed"
    yield _maybe_compact(tick, SLEEP)
    if assistant.config.sleep_maintenance and not assistant.sleep_maintenance_done:
        tick.maintenance = yield _run_loop(tick, SLEEP_CONTEXT, mode=SLEEP)
        assistant.sleep_maintenance_done = True
        assistant.count("maintenance_loops")
    if assistant.has_addressed_event():  # arrived during maintenance
        assistant.set_mode(AWAKE, "addressed")
        return WOKE, "addressed"
    until = assistant.sleep_until
    if until is None or host.clock.seconds() >= until:
        assistant.set_mode(AWAKE, "schedule")
        return WOKE, "schedule"
    return SLEEPING, ""


def _select_pattern(tick: _Tick, context_type: str) -> Any:
    """The execution pattern, or a Deferred of it when the model assesses the task first."""
    config = tick.assistant.execution_config
    if wants_assessment(config, context_type):
        return _assess_and_select(tick, context_type)
    return select_execution_pattern(config, context_type)


@defer.inlineCallbacks
def _assess_and_select(tick: _Tick, context_type: str) -> Any:
    assistant, host = tick.assistant, tick.host
    config = assistant.execution_config
    llm = assistant_model(host, assistant.name, assistant.config.model)
    assessment = yield assess_task(llm, assistant.persona,
                                   format_events(assistant.pending_events))
    assistant.count("assessments")
    return select_execution_pattern(config, context_type, assessment=assessment)


def _gate(assistant: Assistant, context_type: str) -> GatePolicy:
    gate = select_gate(assistant.execution_config, context_type)
    if context_type in (SLEEP_CONTEXT, REFLECTION_CONTEXT) and gate.allowed_categories is None:
        gate = GatePolicy(allowed_categories=QUIET_CATEGORIES, allowed_names=gate.allowed_names)
    return gate


def _loop_config(assistant: Assistant, pattern: ExecutionPattern | None) -> LoopConfig:
    """The loop's config from the assistant's and the execution pattern (None: defaults)."""
    config = assistant.config
    by_pattern: dict[str, Any] = {} if pattern is None else {
        "max_iterations": pattern.max_iterations, "pattern_mode": pattern.mode}
    return LoopConfig(
        tool_budget=config.tool_budget,
        exit_tools=config.exit_tools,  # type: ignore[arg-type]  # converter=tuple
        consecutive_error_cap=config.consecutive_error_cap,
        native_tools=config.native_tools,
        stream=config.stream,
        context_window=config.context_window,
        status_at_end=_status_at_end(assistant),
        **by_pattern,
    )


def _status_at_end(assistant: Assistant) -> bool:
    """The assistant's ``status_at_end``, else its model server's default."""
    chosen = assistant.config.status_at_end
    if chosen is not None:
        return chosen
    return bool(getattr(assistant.llm, "status_at_end_default", False))


def _loop_context(assistant: Assistant, host: AssistantHost, context_type: str, *,
                  mode: str = AWAKE, reflection: bool = False) -> LoopContext:
    """What a loop of this assistant runs with (the tick adds its control and checkpoint)."""
    quiet = reflection or mode == SLEEP
    return LoopContext(
        assistant_name=assistant.name,
        actor=Actor(assistant.config.character_id, world=host.world, store=host.store,
                    assistant=assistant),
        registry=host.registry_for(assistant),  # fixed for the loop (MCP servers' tools too)
        llm=assistant_model(host, assistant.name, assistant.config.model),
        history=assistant.history,
        clock=host.clock,
        cache=host.cache,
        cache_namespace=assistant.name,
        gate=_gate(assistant, context_type),
        system_prompt=assistant.persona,
        # Maintenance and reflection never consume the events waiting for the awake loop.
        pending_events=[] if quiet else assistant.pending_events,
        mode=mode,
        reflection=reflection,
        stop_check=functools.partial(_emergency_stopped, assistant),
        execution_state=assistant.execution_state,
        # A reflection works on a copy of the history: its counts would not be kept.
        meter=None if reflection else assistant.meter,
        execution_options={"approval": host.approvals.hook(assistant)},
    )


def _checkpoint(tick: _Tick, control: LoopControl | None) -> defer.Deferred[None]:
    """Make the assistant's state durable; on failure, stop the loop.

    An iteration's state must be on disk before the next model call; if it
    cannot be written, the loop must not go on as if it were.  (Plain
    callbacks, no generator: this runs after every iteration of every loop.)
    """
    try:
        d = tick.host.save_state(tick.assistant.name)
    except Exception:
        d = defer.fail()
    return d.addErrback(_checkpoint_failed, tick, control)


def _checkpoint_after(tick: _Tick, control: LoopControl,
                      progress: object) -> defer.Deferred[None]:
    """The loop's checkpoint (after every iteration): the progress is in the assistant."""
    return _checkpoint(tick, control)


def _emergency_stopped(assistant: Assistant) -> bool:
    return assistant.emergency_stopped


def _checkpoint_failed(failure: Failure, tick: _Tick, control: LoopControl | None) -> Any:
    if failure.check(defer.CancelledError):
        return failure  # the tick is being cancelled: not a store error
    failure.trap(Exception)
    tick.assistant.count("store_errors")
    message = f"{_STORE_ERROR}: {failure.value}"
    tick.error(message)
    if control is not None:
        control.stop(message)
    return None


@defer.inlineCallbacks
def _run_loop(
    tick: _Tick,
    context_type: str,
    *,
    pattern: ExecutionPattern | None = None,
    mode: str = AWAKE,
    reflection: bool = False,
) -> Any:
    """Build the loop context for this tick and run the loop; returns its LoopResult."""
    assistant, host = tick.assistant, tick.host
    if pattern is None:
        pattern = select_execution_pattern(assistant.execution_config, context_type)
    control = LoopControl()
    assistant.control = control
    ctx = _loop_context(assistant, host, context_type, mode=mode, reflection=reflection)
    ctx.control = control
    ctx.on_event = functools.partial(host.publish, assistant.name)
    ctx.observed = functools.partial(host.observed, assistant.name)
    tracer = trace_loop(ctx, host.telemetry, attributes={
        TICK: tick.number, CONTEXT_TYPE: context_type, REFLECTION: reflection},
        links=tick.traced)
    assistant.tracer = tracer
    if tracer is not None:
        tick.traced.append(tracer.root.get_span_context())
    if not reflection:
        ctx.checkpoint = functools.partial(_checkpoint_after, tick, control)
    try:
        result = yield host.run_loop(ctx, _loop_config(assistant, pattern))
    finally:
        assistant.control = assistant.tracer = None
        if tracer is not None:
            tracer.abandon("the loop ended without a termination event")
    assistant.count("loops")
    assistant.count("iterations", result.iterations)
    assistant.count("model_requests", int(result.usage.get("requests", result.iterations)))
    if result.signals:
        assistant.count("signals", len(result.signals))
    for entry in result.results:
        if entry.get("status") in _TOOL_FAILURES:
            outcome = entry.get("result")
            detail = outcome.get("error", "") if isinstance(outcome, dict) else ""
            tick.error(f"tool {entry.get('tool')} {entry.get('status')}: {detail}",
                       LogLevel.warn)
    if result.failed or _ran_nothing(result):
        refused = result.termination_reason is TerminationReason.LLM_UNAVAILABLE
        tick.error(f"{result.termination_reason}: {result.error or ''}".rstrip(": "),
                   LogLevel.info if refused else LogLevel.error)
    return result


def _ran_nothing(result: LoopResult) -> bool:
    """A loop stopped by a full context before its first model call: never a silent ``ran``."""
    return (result.iterations == 0
            and result.termination_reason is TerminationReason.CRITICAL_TOKENS)


def _after_delivery(tick: _Tick, delivered: list[dict[str, object]], result: LoopResult
                    ) -> defer.Deferred[None] | None:
    """Step 9: follow what became of the pending events the loop delivered.

    Answered: the failure count starts again.  Given back (no model answer
    saw them; the loop put them back in front of the pending list): the cap
    applies again, and a real failed attempt is counted — not a stop, a
    shutdown, nor a refusal by an open circuit breaker, where the model was
    never asked.  At ``unavailable_after`` failed attempts the assistant says
    its ``unavailable_line`` once; the events stay pending until a model
    answer sees them.
    """
    assistant = tick.assistant
    if not delivered:
        return None
    if not result.events_returned:
        assistant.failed_deliveries = 0
        assistant.unavailable_said = False
        return _say_gave_up(tick, result, delivered) if _unanswered(result) else None
    assistant.cap_pending_events()
    reason = result.termination_reason
    if not reason.failed or reason is TerminationReason.LLM_UNAVAILABLE:
        return None
    assistant.failed_deliveries += 1
    assistant.count("failed_deliveries")
    limit = assistant.config.unavailable_after
    if not limit or assistant.failed_deliveries < limit or assistant.unavailable_said:
        return None
    assistant.unavailable_said = True
    return _say_unavailable(tick)


def _unanswered(result: LoopResult) -> bool:
    """Whether a loop that took the events ended without answering them in the world:
    failed (or at its iteration limit) with no terminal tool call that succeeded."""
    reason = result.termination_reason
    if not (reason.failed or reason is TerminationReason.MAX_ITERATIONS):
        return False
    return not any(entry.get("success") and entry.get("category") == ToolCategory.TERMINAL
                   for entry in result.results)


def _say_gave_up(tick: _Tick, result: LoopResult, events: list[dict[str, object]]
                 ) -> defer.Deferred[None] | None:
    """Say ``gave_up_line`` in the world: the players' messages were taken by a loop that
    ended without an answer, so they hear that rather than nothing — in the room, and
    paged back to whoever paged (they may be anywhere)."""
    assistant = tick.assistant
    text = assistant.config.gave_up_line
    if not text:
        return None
    log.info("{assistant} took its pending events but its loop ended {reason} without an "
             "answer in the world; saying so", assistant=assistant.name,
             reason=str(result.termination_reason))
    tick.host.publish(assistant.name, {"type": "gave_up", "text": text,
                                       "reason": str(result.termination_reason)})
    pagers = list(dict.fromkeys(str(sender) for e in events
                                if e.get("type") == "page" and (sender := sender_of(e))))
    said = [_page(tick, pager, text) for pager in pagers]
    if any(e.get("type") != "page" for e in events):  # (said in the room, or no page)
        said.append(_say(tick, text))
    waiting = [d for d in said if d is not None]
    return defer.gatherResults(waiting, consumeErrors=True).addCallback(_discard)


def _say_unavailable(tick: _Tick) -> defer.Deferred[None] | None:
    """Say ``unavailable_line`` in the world, as the assistant's character."""
    assistant, host = tick.assistant, tick.host
    text = assistant.config.unavailable_line
    log.warn("{assistant} could not answer its pending events ({attempts} failed attempts); "
             "saying so in the world", assistant=assistant.name,
             attempts=assistant.failed_deliveries)
    host.publish(assistant.name, {"type": "unavailable", "text": text,
                                  "failed_attempts": assistant.failed_deliveries})
    return _say(tick, text)


def _say(tick: _Tick, text: str) -> defer.Deferred[None] | None:
    """Say ``text`` in the assistant's character's room (a failure is logged, not raised)."""
    assistant, host = tick.assistant, tick.host
    world: IWorld | None = host.world
    if world is None:
        return None
    d = defer.maybeDeferred(world.message_location, assistant.config.character_id, text,
                            kind="say")
    return d.addCallbacks(_discard, _say_failed, errbackArgs=(tick,))


def _page(tick: _Tick, target_id: str, text: str) -> defer.Deferred[None] | None:
    """Page ``text`` to ``target_id`` as the assistant's character (a failure is logged)."""
    world: IWorld | None = tick.host.world
    if world is None:
        return None
    d = defer.maybeDeferred(world.message_character, tick.assistant.config.character_id,
                            target_id, text, kind="page")
    return d.addCallbacks(_discard, _say_failed, errbackArgs=(tick,))


def _say_failed(failure: Failure, tick: _Tick) -> Failure | None:
    if failure.check(defer.CancelledError):
        return failure
    log.failure("{assistant} could not say its line in the world", failure,
                assistant=tick.assistant.name)
    tick.error(f"line not said in the world: {failure.getErrorMessage()}")
    return None


def _record_episode(
    tick: _Tick, events: list[dict[str, object]], history_start: int
) -> defer.Deferred[None] | None:
    """Write this tick's conversation as an episode; a failed write is logged, never fatal."""
    assistant, host = tick.assistant, tick.host
    if host.store is None or tick.loop is None:
        return None
    terminal = set(host.registry.get_tool_names_by_category(ToolCategory.TERMINAL))
    episode = episode_record(assistant.name, events, assistant.history.since(history_start),
                             terminal, tick.loop.termination_reason)
    if episode is None:
        return None
    content, metadata = episode
    metadata["tick"] = tick.number
    try:
        records: IStore = host.store
        d = records.add_record(assistant.name, EPISODES, content, metadata)
    except Exception:
        d = defer.fail()
    return d.addCallbacks(_discard, _episode_failed, errbackArgs=(tick,))


def _discard(_: object) -> None:
    return None


def _episode_failed(failure: Failure, tick: _Tick) -> Failure | None:
    if failure.check(defer.CancelledError):
        return failure  # the tick is being cancelled: not a failed write
    failure.trap(Exception)
    log.failure("Could not record the episode of {assistant}'s tick {tick}", failure,
                assistant=tick.assistant.name, tick=tick.number)
    exc = failure.value
    tick.error(f"episode not recorded: {type(exc).__name__}: {exc}")
    return None


def _trim_history(assistant: Assistant) -> None:
    """Keep at most ``max_history`` messages (truncation never splits a tool call)."""
    from ai_tools.loop.compaction import CompactionConfig, truncate_messages

    limit = assistant.config.max_history
    if len(assistant.history) <= limit:
        return
    result = truncate_messages(assistant.history.messages,
                               CompactionConfig(preserve_window=max(1, limit - 1)))
    if result.method != "none":
        assistant.history.replace(result.messages)
        assistant.count("history_truncations")
