"""The ReAct loop: ask the model, run the tools it calls, repeat until done.

:func:`execute_react_loop` runs one tick's loop for one assistant (spec 004 §2):

1. continuation check (token usage, iteration cap);
2. build the messages — the system prompt is regenerated every iteration with
   the remaining tool budget and any token advisory;
3. call the model (streamed or not; a stop cancels the request in flight);
4. parse the tool calls (native or fallback; ``noop`` ends the loop);
5. gate each call against the context's allowed categories and names;
6. execute it through the execution engine;
7. inject the token advisory into its result;
8. check termination (TERMINAL / DANGEROUS tools, critical tokens...).

The result is a :class:`LoopResult` — the structure of spec 004 §5 plus the
termination reason, exit-tool signals, all text produced (kept on every
failure), token usage and duration.  See ``docs/react-loop.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from ai_tools.advisory import DEFAULT_THRESHOLDS, AdvisoryThresholds
from ai_tools.interfaces import ILLMClient
from ai_tools.tools.base import Actor, ToolCategory, ToolRegistry

__all__ = [
    "COMPLETED",
    "CONSECUTIVE_ERRORS",
    "CRITICAL_TOKENS",
    "DANGEROUS_TOOL",
    "LLM_ERROR",
    "LLM_UNAVAILABLE",
    "MAX_ITERATIONS",
    "NOOP",
    "PARSE_ERROR",
    "REPEATED_LINE_LOOP",
    "STOPPED_BY_USER",
    "TERMINAL_TOOL",
    "TERMINATION_REASONS",
    "TOOL_BUDGET_EXHAUSTED",
    "ExitTool",
    "GatePolicy",
    "LoopConfig",
    "LoopContext",
    "LoopControl",
    "LoopProgress",
    "LoopResult",
    "execute_react_loop",
]

log = Logger()

# -- termination reasons (DESIGN §3) ------------------------------------------

TERMINAL_TOOL = "terminal_tool"
"""A TERMINAL tool (say, page...) ran: the loop waits for the player's answer."""
DANGEROUS_TOOL = "dangerous_tool"
"""A DANGEROUS tool ran: one state-changing action per tick."""
NOOP = "noop"
"""The model called ``noop``: it explicitly has nothing (more) to do."""
COMPLETED = "completed"
"""The model answered with plain text and no tool call: it is done talking."""
MAX_ITERATIONS = "max_iterations"
CRITICAL_TOKENS = "critical_tokens"
LLM_ERROR = "llm_error"
PARSE_ERROR = "parse_error"
STOPPED_BY_USER = "stopped_by_user"
CONSECUTIVE_ERRORS = "consecutive_errors"
TOOL_BUDGET_EXHAUSTED = "tool_budget_exhausted"
REPEATED_LINE_LOOP = "repeated_line_loop"
LLM_UNAVAILABLE = "llm_unavailable"

TERMINATION_REASONS = frozenset({
    TERMINAL_TOOL, DANGEROUS_TOOL, NOOP, COMPLETED, MAX_ITERATIONS, CRITICAL_TOKENS,
    LLM_ERROR, PARSE_ERROR, STOPPED_BY_USER, CONSECUTIVE_ERRORS, TOOL_BUDGET_EXHAUSTED,
    REPEATED_LINE_LOOP, LLM_UNAVAILABLE,
})

FAILURE_REASONS = frozenset({
    LLM_ERROR, PARSE_ERROR, CONSECUTIVE_ERRORS, TOOL_BUDGET_EXHAUSTED,
    REPEATED_LINE_LOOP, LLM_UNAVAILABLE,
})
"""Reasons that mean the loop failed (as opposed to ending normally or being stopped)."""


# -- configuration ------------------------------------------------------------


def _check_max_iterations(instance: Any, attribute: Any, value: int) -> None:
    if not isinstance(value, int) or not 1 <= value <= 10:
        raise ValueError(f"max_iterations must be an integer from 1 to 10, got {value!r}")


def _check_non_negative_or_none(instance: Any, attribute: Any, value: int | None) -> None:
    if value is not None and (not isinstance(value, int) or value < 0):
        raise ValueError(f"{attribute.name} must be a non-negative integer or None, "
                         f"got {value!r}")


def _check_positive(instance: Any, attribute: Any, value: int) -> None:
    if not isinstance(value, int) or value < 1:
        raise ValueError(f"{attribute.name} must be a positive integer, got {value!r}")


@attrs.frozen
class ExitTool:
    """A one-way signal tool (spec 003): offered to the model, never executed.

    When the model calls it, the call is recorded as a signal
    ``{"tool_name", "arguments", "emitted_at"}`` and published to observers; it
    is not charged to the tool budget and does not enter the history.
    """

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = attrs.field(
        factory=lambda: {"type": "object", "properties": {}}
    )

    def schema(self) -> dict[str, Any]:
        """The OpenAI-compatible function schema."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": dict(self.parameters),
            },
        }


@attrs.frozen
class GatePolicy:
    """Which tools the current context allows (spec 001 + 004).

    ``None`` for a field means "no restriction by that criterion".  A blocked
    call is not dispatched; the model sees a ``blocked_by_tool_mode`` result
    listing the allowed tools.
    """

    allowed_categories: frozenset[ToolCategory] | None = None
    allowed_names: frozenset[str] | None = None

    def allows(self, name: str, category: ToolCategory) -> bool:
        """Whether a tool with this name and category may run."""
        if self.allowed_categories is not None and category not in self.allowed_categories:
            return False
        return self.allowed_names is None or name in self.allowed_names


@attrs.frozen
class LoopConfig:
    """How one loop runs. Every field has the default of DESIGN §3."""

    max_iterations: int = attrs.field(default=5, validator=_check_max_iterations)
    """Iterations (model calls) per tick, 1 to 10."""
    tool_budget: int | None = attrs.field(default=None,
                                          validator=_check_non_negative_or_none)
    """Normal tool calls allowed in this loop (None: unlimited). Exit tools are free."""
    exit_tools: tuple[ExitTool, ...] = attrs.field(default=(), converter=tuple)
    consecutive_error_cap: int = attrs.field(default=5, validator=_check_positive)
    """Failed tool calls in a row that end the loop with ``consecutive_errors``."""
    native_tools: bool = True
    """Native tool calling (``tools=`` field); False: fallback JSON-in-text mode."""
    stream: bool | None = None
    """Stream the model's answer; None: the client's own default."""
    thresholds: AdvisoryThresholds = DEFAULT_THRESHOLDS
    pattern_mode: str = attrs.field(
        default="react_loop",
        validator=attrs.validators.in_(("react_loop", "single_action")),
    )
    """``single_action`` runs exactly one iteration (the legacy single-action tick)."""
    context_window: int | None = None
    """Override of the model's context window in tokens (None: the client's)."""
    noop_tool: str = "noop"
    """Name of the tool that means "nothing to do" (ends the loop with ``noop``)."""

    @property
    def effective_max_iterations(self) -> int:
        """1 in single-action mode, else ``max_iterations``."""
        return 1 if self.pattern_mode == "single_action" else self.max_iterations

    @property
    def exit_tool_names(self) -> frozenset[str]:
        """Names of the exit tools."""
        return frozenset(t.name for t in self.exit_tools)


# -- inputs -------------------------------------------------------------------


@attrs.define(eq=False)
class LoopControl:
    """Stop switch of a running loop, held by whoever may kill it.

    :meth:`stop` marks the loop stopped and cancels the model request or tool
    call in flight; the loop then ends with ``stopped_by_user`` and the killed
    call gets no history entry.
    """

    stopped: bool = False
    reason: str = ""
    _in_flight: defer.Deferred[Any] | None = None

    def stop(self, reason: str = "stopped by user") -> None:
        """Request the stop and cancel whatever the loop is waiting on."""
        self.stopped = True
        self.reason = reason
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


@attrs.frozen
class LoopProgress:
    """What the loop has done so far; handed to the checkpoint after each iteration."""

    iteration: int
    results: tuple[dict[str, Any], ...]
    signals: tuple[dict[str, Any], ...]
    text: str
    tool_budget_remaining: int | None


SystemPromptProvider = Callable[[], "str | defer.Deferred[str]"]
"""Returns the persona / base system prompt (a value or a Deferred)."""


@attrs.define(eq=False)
class LoopContext:
    """Everything one loop run needs, supplied by the service (or a test).

    ``history`` is the assistant's conversation history (mutated in place as
    the loop goes; in ``reflection`` mode the loop works on a copy so the
    history is not polluted).  ``pending_events`` are moved into the history
    as one user message before the first model call, and the list is emptied
    in place, so a checkpoint persists both changes together.
    """

    assistant_name: str
    actor: Actor
    registry: ToolRegistry
    llm: ILLMClient
    history: Any
    """The assistant's ``ai_tools.history.ConversationHistory``."""
    clock: IReactorTime
    cache: Any = None
    """The service's ``ai_tools.cache.ToolCache`` (None: no caching)."""
    cache_namespace: str = ""
    gate: GatePolicy = GatePolicy()
    system_prompt: str | SystemPromptProvider = ""
    """The persona text, or a callable returning it (value or Deferred)."""
    pending_events: list[dict[str, Any]] = attrs.field(factory=list)
    mode: str = "awake"
    """``awake`` or ``sleep`` (selects the prompt variant)."""
    reflection: bool = False
    """Reflection run: reflection prompt, history left untouched."""
    on_event: Callable[[dict[str, Any]], None] | None = None
    """Observer of loop events (iteration, tool_call, signal, termination)."""
    stop_check: Callable[[], bool] | None = None
    """Extra stop condition polled between steps (e.g. an emergency stop flag)."""
    control: LoopControl = attrs.field(factory=LoopControl)
    checkpoint: Callable[[LoopProgress], Any] | None = None
    """Called after every iteration; a returned Deferred is waited for before the
    next model call, so the service can persist the state first."""
    execute_tool: Callable[[Any], Any] | None = None
    """Override of the execution engine (tests, benchmarks); None: the engine."""
    token_counter: Callable[[Sequence[Mapping[str, Any]]], int] | None = None
    """Counts the tokens of a message list; None: the model layer's counter."""


# -- result -------------------------------------------------------------------


@attrs.frozen
class LoopResult:
    """What a loop run did (spec 004 §5 plus reason, signals, text, usage, duration)."""

    iterations: int
    results: tuple[dict[str, Any], ...]
    termination_reason: str
    success: bool
    """At least one tool call succeeded (spec 004 §5)."""
    success_count: int
    pattern_mode: str
    max_allowed_iterations: int
    signals: tuple[dict[str, Any], ...] = ()
    text: str = ""
    """All text the model produced during the loop, kept on every failure."""
    usage: Mapping[str, Any] = attrs.field(factory=dict)
    duration_ms: float = 0.0
    error: str | None = None
    """Detail of a failure reason (None when the loop ended normally)."""
    tool_budget_remaining: int | None = None

    @property
    def failed(self) -> bool:
        """Whether the termination reason is a failure."""
        return self.termination_reason in FAILURE_REASONS

    def as_dict(self) -> dict[str, Any]:
        """JSON form (spec 004 §5 keys first)."""
        return {
            "iterations": self.iterations,
            "results": [dict(r) for r in self.results],
            "termination_reason": self.termination_reason,
            "success": self.success,
            "success_count": self.success_count,
            "pattern_mode": self.pattern_mode,
            "max_allowed_iterations": self.max_allowed_iterations,
            "signals": [dict(s) for s in self.signals],
            "text": self.text,
            "usage": dict(self.usage),
            "duration_ms": self.duration_ms,
            "error": self.error,
            "tool_budget_remaining": self.tool_budget_remaining,
        }


def execute_react_loop(
    ctx: LoopContext, config: LoopConfig | None = None
) -> defer.Deferred[LoopResult]:
    """Run one ReAct loop for ``ctx``; fires with a :class:`LoopResult`, never fails.

    Cancelling the returned Deferred is a kill, like ``ctx.control.stop()``:
    the loop ends with ``stopped_by_user``.
    """
    raise NotImplementedError("execute_react_loop is being implemented")
