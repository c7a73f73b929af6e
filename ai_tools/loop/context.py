"""What a loop runs with: :class:`LoopContext`, its stop switch, its progress record."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime

from ai_tools.execution.cache import ToolCache
from ai_tools.execution.engine import ExecutionState
from ai_tools.execution.history import ConversationHistory
from ai_tools.execution.reasons import TerminationReason
from ai_tools.interfaces import ILLMClient
from ai_tools.llm.events import AttemptCallback
from ai_tools.loop.config import GatePolicy
from ai_tools.loop.events import EventDelivery
from ai_tools.loop.usage import ContextMeter
from ai_tools.tools.base import Actor
from ai_tools.tools.registry import ToolRegistry

__all__ = ["LoopContext", "LoopControl", "LoopProgress", "SystemPromptProvider"]


@attrs.define(eq=False)
class LoopControl:
    """Stop switch of a running loop, held by whoever may kill it.

    :meth:`stop` marks the loop stopped and cancels the model request or tool
    call in flight; the loop then ends with the reason given to it
    (``stopped_by_user`` for an operator, ``shutdown`` for a service stop) and
    the killed call gets no history entry.  The first stop wins.
    """

    stopped: bool = False
    reason: str = ""
    """Why, in words (the loop result's ``error``)."""
    termination: TerminationReason = TerminationReason.STOPPED_BY_USER
    """The termination reason the loop ends with."""
    delivery: EventDelivery | None = None
    """The pending events the loop delivered (None: none): whoever writes the state
    while the loop runs asks it what to save (:meth:`EventDelivery.saved`)."""
    _in_flight: defer.Deferred[Any] | None = None

    def stop(self, reason: str = "stopped by user",
             termination: TerminationReason = TerminationReason.STOPPED_BY_USER) -> None:
        """Request the stop and cancel whatever the loop is waiting on."""
        if not self.stopped:
            self.stopped = True
            self.reason = reason
            self.termination = termination
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is not None and not in_flight.called:
            in_flight.cancel()

    def track(self, d: defer.Deferred[Any]) -> defer.Deferred[Any]:
        """Remember ``d`` as the operation in flight (so :meth:`stop` can cancel it)."""
        self._in_flight = d
        return d

    def untrack(self) -> None:
        """Nothing is in flight any more."""
        self._in_flight = None


class LoopProgress:
    """What the loop has done so far; handed to the checkpoint after each iteration.

    ``results``, ``signals`` and ``text`` are what the loop had at that moment,
    made when first read: a checkpoint that persists its assistant without
    looking (the service's) copies nothing.  (The loop's lists only grow, so
    their first items at hand-over are the moment's.)
    """

    __slots__ = ("_results", "_signals", "_texts", "iteration", "tool_budget_remaining")

    def __init__(self, iteration: int, results: Sequence[dict[str, object]],
                 signals: Sequence[dict[str, object]], text: str | Sequence[str],
                 tool_budget_remaining: int | None) -> None:
        self.iteration = iteration
        self.tool_budget_remaining = tool_budget_remaining
        self._results = (results, len(results))
        self._signals = (signals, len(signals))
        self._texts = (text, 1 if isinstance(text, str) else len(text))

    @property
    def results(self) -> tuple[dict[str, object], ...]:
        """The tool call records so far (``LoopResult.results``)."""
        items, count = self._results
        return tuple(items[:count])

    @property
    def signals(self) -> tuple[dict[str, object], ...]:
        """The exit-tool signals so far."""
        items, count = self._signals
        return tuple(items[:count])

    @property
    def text(self) -> str:
        """The model's text so far, its parts joined by new lines."""
        text, count = self._texts
        return text if isinstance(text, str) else "\n".join(text[:count])

    def __repr__(self) -> str:
        return (f"LoopProgress(iteration={self.iteration}, results={len(self.results)}, "
                f"tool_budget_remaining={self.tool_budget_remaining})")


SystemPromptProvider = Callable[[], "str | defer.Deferred[str]"]
"""Returns the persona / base system prompt (a value or a Deferred)."""


@attrs.define(eq=False)
class LoopContext:
    """Everything one loop run needs, supplied by the service (or a test).

    ``history`` is the assistant's conversation history (mutated in place as
    the loop goes; in ``reflection`` mode the loop works on a copy so the
    history is not polluted).  ``pending_events`` are delivered into the
    history as one user message before the first model call and the list is
    emptied in place; if the loop ends before a model answer saw them, they
    are taken back out of the history and put back at the front of the list,
    so a checkpoint or a final save persists either state whole.
    """

    assistant_name: str
    actor: Actor
    registry: ToolRegistry
    llm: ILLMClient
    history: ConversationHistory
    clock: IReactorTime
    """An ``IReactorTime``: the reactor, or ``task.Clock`` in tests."""
    cache: ToolCache | None = None
    """The service's ``ai_tools.execution.cache.ToolCache`` (None: no caching)."""
    cache_namespace: str = ""
    gate: GatePolicy = attrs.field(factory=GatePolicy)
    system_prompt: str | SystemPromptProvider = ""
    """The persona text, or a callable returning it (value or Deferred)."""
    pending_events: list[dict[str, object]] = attrs.field(factory=list)
    mode: str = "awake"
    """``awake`` or ``sleep`` (selects the prompt variant)."""
    reflection: bool = False
    """Reflection run: reflection prompt, history left untouched."""
    on_event: Callable[[dict[str, object]], None] | None = None
    """Observer of loop events (iteration, model_request, tool_call, tool_result,
    text_delta, signal, termination): where tracing, a console or an event stream
    attaches.  None: no event is built."""
    on_request: AttemptCallback | None = None
    """Observer of each HTTP attempt of the loop's model requests, which may add headers
    to it (tracing: the W3C ``traceparent``); given only to model clients that take it
    (:class:`~ai_tools.interfaces.IAttemptObservingLLMClient`).  None, the default:
    nothing is asked."""
    observed: Callable[[], bool] | None = None
    """Whether ``on_event`` has anyone behind it now, asked before each event is
    built (None: always).  A service hands every loop its fan-out of observers and
    says here whether any is subscribed, so an unwatched loop builds no event."""
    stop_check: Callable[[], bool] | None = None
    """Extra stop condition polled between steps (e.g. an emergency stop flag)."""
    control: LoopControl = attrs.field(factory=LoopControl)
    checkpoint: Callable[[LoopProgress], Any] | None = None
    """Called after every iteration; a returned Deferred is waited for before the
    next model call, so the service can persist the state first."""
    execution_state: ExecutionState | None = None
    """The assistant's execution counters (owned and persisted by the service)."""
    execution_options: Mapping[str, Any] = attrs.field(factory=dict)  # ExecutionContext's
    """Extra ``ExecutionContext`` fields: ``retry_policy``, ``rand``, ``max_result_bytes``."""
    meter: ContextMeter | None = None
    """Measures the context usage (None: a meter of the model layer's counter, made
    for this loop); the service passes each assistant's own, kept across ticks."""
    monotonic: Callable[[], float] = time.monotonic
    """The monotonic clock exit-tool signals are stamped with (``emitted_at``)."""

    def stop_requested(self) -> bool:
        """Whether a kill or stop was asked for (``stop_check`` included)."""
        control = self.control
        if control.stopped:
            return True
        if self.stop_check is not None and self.stop_check():
            control.stop("stop requested")
            return True
        return False
