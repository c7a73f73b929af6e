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

import functools
import json
import weakref
from collections.abc import Callable, Generator, Mapping, Sequence
from typing import Any

import attrs
from twisted.internet import defer
from twisted.python.failure import Failure

from ai_tools.errors import LLMError
from ai_tools.event_logger import EventLogger
from ai_tools.execution import engine as execution
from ai_tools.interfaces import ILLMClient
from ai_tools.llm.events import ChatResponse, TextDelta, ToolCall
from ai_tools.llm.parsing import ParsedCalls, parse_tool_calls, plain_native_calls
from ai_tools.llm.tokens import (
    CHARS_PER_TOKEN,
    TokenCounter,
    default_counter,
    estimate_native_exchange,
)
from ai_tools.loop.advisory import (
    DEFAULT_THRESHOLDS,
    AdvisoryLevel,
    AdvisoryThresholds,
    TokenAdvisory,
    check_loop_continuation,
    inject_token_advisory,
    usage_percentage,
)
from ai_tools.loop.prompts import (
    PromptInputs,
    format_events,
    system_prompt_head,
    system_prompt_status,
    tick_message,
)
from ai_tools.tools.base import Actor, ToolCategory
from ai_tools.tools.registry import ToolRegistry

__all__ = [
    "COMPLETED",
    "CONSECUTIVE_ERRORS",
    "CRITICAL_TOKENS",
    "DANGEROUS_TOOL",
    "FAILURE_REASONS",
    "INTERNAL_ERROR",
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

log = EventLogger()

_ToolCallRun = execution._ToolCallRun
_USAGE_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens")
"""The engine's run of one call (``run_tool_call`` is ``_ToolCallRun(...).run()``)."""

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
INTERNAL_ERROR = "internal_error"
"""A bug in the loop or in a collaborator (logged with its traceback)."""

TERMINATION_REASONS = frozenset({
    TERMINAL_TOOL, DANGEROUS_TOOL, NOOP, COMPLETED, MAX_ITERATIONS, CRITICAL_TOKENS,
    LLM_ERROR, PARSE_ERROR, STOPPED_BY_USER, CONSECUTIVE_ERRORS, TOOL_BUDGET_EXHAUSTED,
    REPEATED_LINE_LOOP, LLM_UNAVAILABLE, INTERNAL_ERROR,
})

FAILURE_REASONS = frozenset({
    LLM_ERROR, PARSE_ERROR, CONSECUTIVE_ERRORS, TOOL_BUDGET_EXHAUSTED,
    REPEATED_LINE_LOOP, LLM_UNAVAILABLE, INTERNAL_ERROR,
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
    native_tools: bool | None = None
    """Native tool calling (``tools=`` field) or False: fallback JSON-in-text mode.
    None follows the model client's profile (``tool_calling``), native if it has none."""
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
    """The assistant's ``ai_tools.execution.history.ConversationHistory``."""
    clock: Any
    """An ``IReactorTime``: the reactor, or ``task.Clock`` in tests."""
    cache: Any = None
    """The service's ``ai_tools.execution.cache.ToolCache`` (None: no caching)."""
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
    execution_state: execution.ExecutionState | None = None
    """The assistant's execution counters (owned and persisted by the service)."""
    execution_options: Mapping[str, Any] = attrs.field(factory=dict)
    """Extra ``ExecutionContext`` fields: ``retry_policy``, ``rand``, ``max_result_bytes``."""
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


# -- the loop -------------------------------------------------------------------

_SYSTEM_DELTA_CHARS = 400
"""System prompt changes up to this size are estimated, not counted again."""

_NOOP_DESCRIPTION = "Signal that you are done and there is nothing (more) to do right now."

_ABORT_REASONS = {
    execution.PARSE_ERROR: PARSE_ERROR,
    execution.STOPPED_BY_USER: STOPPED_BY_USER,
    execution.INTERNAL_ERROR: INTERNAL_ERROR,
}


def _with_advisory(message: Mapping[str, Any], advisory: TokenAdvisory) -> dict[str, Any]:
    """A copy of a tool-result message whose JSON result carries ``_token_advisory``."""
    content = message.get("content")
    if not isinstance(content, str):
        return dict(message)
    head, sep, body = "", "", content
    if message.get("role") == "user":  # fallback format: "[TOOL RESULT: name]\n{json}"
        head, sep, body = content.partition("\n")
    try:
        result = json.loads(body)
    except ValueError:
        return dict(message)
    if not isinstance(result, dict):
        return dict(message)
    result["_token_advisory"] = advisory.as_dict()
    text = json.dumps(result, ensure_ascii=False, default=str)
    return {**message, "content": f"{head}{sep}{text}" if sep else text}


def _advised(result: Mapping[str, Any], pct: float, thresholds: AdvisoryThresholds
             ) -> dict[str, Any]:
    """``inject_token_advisory(result, pct, thresholds)``; below MODERATE without its call."""
    if pct < thresholds.moderate:  # (NaN goes on to inject_token_advisory)
        out = dict(result)
        out.pop("_token_advisory", None)
        return out
    return inject_token_advisory(result, pct, thresholds)


def _validate_calls(parsed: ParsedCalls) -> str | None:
    """Why the answer cannot be used at all (``parse_error``), or None.

    Unknown tool names alone are not a parse error: the execution engine
    answers them with the list of valid tools and the model may correct
    itself (spec 004 §2 step 5).  Cut-off or malformed calls, calls without a
    name and arguments that are not a JSON object are.
    """
    if parsed.error is None:
        return None
    malformed = (bool(parsed.invalid) or not parsed.unknown
                 or any(not c.name.strip() for c in parsed.unknown))
    return parsed.error.detail if malformed else None


def _native_tools(config: LoopConfig, llm: Any) -> bool:
    """Native tool calling unless the config or the client's profile says fallback."""
    if config.native_tools is not None:
        return config.native_tools
    profile = getattr(llm, "profile", None)
    return getattr(profile, "tool_calling", "native") != "fallback"


def _ask_model(llm: Any, messages: list[dict[str, Any]],
               tools: list[dict[str, Any]] | None, stream: bool | None,
               on_event: Callable[[Any], None]) -> defer.Deferred[Any]:
    """``llm.complete(...)`` as a Deferred, whatever the client returns or raises.

    ``defer.maybeDeferred`` with the usual case (the client returns a Deferred) first.
    """
    try:
        answer = llm.complete(messages, tools=tools, stream=stream, on_event=on_event)
    except BaseException:
        return defer.fail(Failure(captureVars=defer.Deferred.debug))
    if type(answer) is defer.Deferred:
        return answer
    return _ask_model_later(answer)


def _ask_model_later(answer: Any) -> defer.Deferred[Any]:
    """What ``defer.maybeDeferred`` makes of what ``llm.complete`` returned."""
    return defer.maybeDeferred(lambda: answer)


def _raw_call(call: ToolCall) -> dict[str, Any]:
    """The call in the native shape the execution engine parses (arguments decoded)."""
    raw: dict[str, Any] = {"id": call.id, "type": "function",
                           "function": {"name": call.name, "arguments": dict(call.arguments)}}
    if call.reasoning:
        raw["reasoning"] = call.reasoning
    return raw


_SCHEMAS: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()


def _schema_text(value: Any) -> str:
    """The JSON text a schema (or list of them) is counted by."""
    return json.dumps(value, ensure_ascii=False, default=str)


_SCHEMA_TEXTS: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def _tool_schema_text(tool: Any) -> str:
    """:func:`_schema_text` of a tool's function schema, once per tool instance."""
    text = _SCHEMA_TEXTS.get(tool)
    if text is None:
        text = _SCHEMA_TEXTS[tool] = _schema_text(_tool_schema(tool))
    return text


_HEADS: dict[tuple[Any, ...], str] = {}
"""Rendered system prompt heads by their inputs (a tick's loop renders the same head
as the last one, unless the persona, mode or tools changed)."""
_HEADS_KEPT = 256


@functools.lru_cache(maxsize=32)
def _noop_schema(name: str) -> dict[str, Any]:
    """The noop tool's function schema, built once per name (shared like the tools' own)."""
    return ExitTool(name, _NOOP_DESCRIPTION).schema()


@functools.lru_cache(maxsize=32)
def _noop_schema_text(name: str) -> str:
    """:func:`_schema_text` of the noop tool's schema (the same for every loop)."""
    return _schema_text(ExitTool(name, _NOOP_DESCRIPTION).schema())


def _tool_schema(tool: Any) -> dict[str, Any]:
    """A tool's function schema, built once per tool instance (tools are immutable)."""
    schema = _SCHEMAS.get(tool)
    if schema is None:
        schema = _SCHEMAS[tool] = tool.schema()
    return schema


def _engine_gate(gate: GatePolicy) -> GatePolicy | None:
    """The gate handed to the engine: None (no check per call) when it allows every tool."""
    if (type(gate) is GatePolicy and gate.allowed_categories is None
            and gate.allowed_names is None):
        return None
    return gate


def _stop_requested(ctx: LoopContext) -> bool:
    """Whether a kill or stop of ``ctx``'s loop was asked for."""
    control = ctx.control
    if control.stopped:
        return True
    check = ctx.stop_check
    if check is not None and check():
        control.stopped = True
        control.reason = control.reason or "stop requested"
        return True
    return False


@attrs.define(eq=False)
class _LoopRun:
    """The state of one loop run; :func:`_run_loop` drives it."""

    ctx: LoopContext
    config: LoopConfig
    history: Any = None
    exec_ctx: Any = None
    started: float = 0.0
    iteration: int = 0
    max_iterations: int = 1
    """``config.effective_max_iterations`` (read once)."""
    results: list[dict[str, Any]] = attrs.field(factory=list)
    signals: list[dict[str, Any]] = attrs.field(factory=list)
    texts: list[str] = attrs.field(factory=list)
    deltas: list[str] = attrs.field(factory=list)
    usage: dict[str, Any] = attrs.field(factory=dict)
    budget: int | None = None
    native: bool = True
    consecutive_errors: int = 0
    reason: str | None = None
    error: str | None = None
    nudge_at: int | None = None
    nudge: str = ""
    system_text: str = ""
    tool_schemas: list[dict[str, Any]] = attrs.field(factory=list)
    normal_names: list[str] = attrs.field(factory=list)
    plain_names: frozenset[str] = frozenset()
    """Normal tool names that are not exit tools (see ``plain_native_calls``)."""
    exit_names: frozenset[str] = frozenset()
    categories: dict[str, str] = attrs.field(factory=dict)
    fresh_results: list[Mapping[str, Any]] = attrs.field(factory=list)
    """Tool-result messages of the last iteration (they get the advisory)."""
    _counter: Any = None
    _fixed_tokens: int = 0
    _system_tokens: int = 0
    _system_counted: str | None = None
    _system_base: tuple[str, int] = ("", 0)
    _history_total: int = 0
    _counted: tuple[int, Any] = (0, None)
    _usage_counted: tuple[str, int | None, float] | None = None
    """(system text, history version, percentage) of the last count."""
    _window: int | None = None
    _history_version: int | None = None
    """History version whose every message ``_history_total`` counts."""
    _estimating: Any = None
    """The counter, once it is known to count by the estimate."""
    _request_tools: list[dict[str, Any]] | None = None
    _schema_texts: list[str] = attrs.field(factory=list)
    """JSON of each of ``tool_schemas`` (kept per tool: counted once per loop)."""
    _prompt_head: tuple[str, str] | None = None

    # -- setup -----------------------------------------------------------------

    def prepare(self) -> None:
        """Choose the history, deliver pending events, select the offered tools."""
        ctx, config = self.ctx, self.config
        self.started = ctx.clock.seconds()
        self.max_iterations = config.effective_max_iterations
        self.budget = config.tool_budget
        self.native = _native_tools(config, ctx.llm)
        # Reflection works on a copy: the model sees its own calls, the history stays clean.
        self.history = ctx.history.copy() if ctx.reflection else ctx.history
        if ctx.pending_events and not ctx.reflection:
            self.history.add_user(format_events(ctx.pending_events))
            ctx.pending_events.clear()
        else:
            last = self.history.since(-1)
            if not last or last[0].get("role") != "user":
                self.nudge_at = len(self.history)
                self.nudge = tick_message(ctx.reflection)
        exit_names = self.exit_names = config.exit_tool_names
        offered = [t for t in ctx.registry.get_all_tools()
                   if t.name not in exit_names and ctx.gate.allows(t.name, t.category)]
        self.categories = {t.name: t.category._value_ for t in offered}
        self.tool_schemas = [_tool_schema(t) for t in offered]
        self._schema_texts = [_tool_schema_text(t) for t in offered]
        if config.noop_tool not in self.categories:
            self.tool_schemas.append(_noop_schema(config.noop_tool))
            self._schema_texts.append(_noop_schema_text(config.noop_tool))
        self.normal_names = [n for n in ctx.registry.list_tools() if n not in exit_names]
        if config.noop_tool not in self.normal_names:
            self.normal_names.append(config.noop_tool)
        self.plain_names = frozenset(self.normal_names) - exit_names
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0,
                      "requests": 0, "context_tokens": 0, "context_percent": 0.0}
        self.exec_ctx = execution.ExecutionContext(
            registry=ctx.registry,
            actor=ctx.actor,
            history=self.history,
            clock=ctx.clock,
            cache=ctx.cache,
            cache_namespace=ctx.cache_namespace or ctx.actor.owner,
            state=ctx.execution_state or execution.ExecutionState(),
            gate=_engine_gate(ctx.gate),
            native_tools=self.native,
            # bound to the context, not to this run: the run holds the execution
            # context, so a method of the run here would make a reference cycle
            # (every loop's objects left for the garbage collector to find).  Without
            # an extra check a stop is the control's flag: read without a Python frame.
            stop_requested=(functools.partial(getattr, ctx.control, "stopped")
                            if ctx.stop_check is None
                            else functools.partial(_stop_requested, ctx)),
            **dict(ctx.execution_options),
        )

    # -- observers and checks --------------------------------------------------

    def emit(self, kind: str, **fields: Any) -> None:
        """Publish one loop event to the observer; its errors are logged, never raised."""
        if self.ctx.on_event is None:
            return
        self.publish({"type": kind, "assistant": self.ctx.assistant_name,
                      "iteration": self.iteration, **fields})

    def publish(self, event: dict[str, Any]) -> None:
        """Hand a built event (``type``, ``assistant``, ``iteration`` first) to the observer.

        What :meth:`emit` does once the event is built; hot paths build it themselves.
        """
        observer = self.ctx.on_event
        if observer is None:
            return
        try:
            observer(event)
        except Exception:
            self.observer_failed(event["type"])

    def observer_failed(self, kind: str) -> None:
        """Log the observer's failure on a ``kind`` event (call it in the ``except``)."""
        log.failure("Loop observer of {assistant} failed on a {kind} event",
                    assistant=self.ctx.assistant_name, kind=kind)

    def stop_requested(self) -> bool:
        """Whether a kill or stop was asked for."""
        return _stop_requested(self.ctx)

    def end(self, reason: str, error: str | None = None) -> None:
        """Set the termination reason (the first one wins)."""
        if self.reason is None:
            self.reason = reason
            self.error = error

    # -- tokens ----------------------------------------------------------------

    def context_window(self) -> int:
        """The context window in tokens (0: unknown); looked up once per loop."""
        window = self._window
        if window is None:
            window = self.config.context_window
            if not window:
                window = getattr(self.ctx.llm, "context_window", None)
                if not isinstance(window, int) or window <= 0:
                    window = 0
            self._window = window
        return window

    def _history_tokens(self) -> int:
        """Tokens of the history, counted incrementally.

        During a loop the history only grows, so only the messages added since
        the last count are counted (without copying the history); anything
        else (a replaced history) is counted again in full.
        """
        counter = self._counter
        n, last = self._counted
        tail = self.history.since(n - 1) if n else None
        if tail and tail[0] is last:
            new = tail[1:]
        else:  # first count, or the history was replaced: count it all
            n, self._history_total, self._counted = 0, 0, (0, None)
            new = self.history.since(0)
        if new:
            for message in new:
                self._history_total += counter.count_message(message)
            self._counted = (n + len(new), new[-1])
        return self._history_total

    def _system_prompt_tokens(self, text: str) -> int:
        """Tokens of the system message.

        The prompt changes every iteration only by a few characters (step,
        budget, advisory): after a full count, small changes are estimated
        from their length instead of counted again.
        """
        base_text, base_tokens = self._system_base
        delta = len(text) - len(base_text)
        if base_text and abs(delta) <= _SYSTEM_DELTA_CHARS:
            return base_tokens + int(delta / CHARS_PER_TOKEN)
        tokens = int(self._counter.count_message({"role": "system", "content": text}))
        self._system_base = (text, tokens)
        return tokens

    def _tools_text(self, tools: list[dict[str, Any]]) -> str:
        """``_schema_text(tools)``, from the JSON kept per tool schema.

        A list's JSON is its items' JSON joined by ", " in brackets, so the
        text is the same as dumping the list.
        """
        known = self._schema_texts
        if len(tools) < len(known):  # not built from tool_schemas: dump it all
            return _schema_text(tools)
        texts = [*known, *(_schema_text(s) for s in tools[len(known):])]
        return f"[{', '.join(texts)}]"

    def usage_pct(self) -> float:
        """Context usage now: the last system prompt plus the history, in percent."""
        if self.ctx.token_counter is not None:
            tokens = int(self.ctx.token_counter(
                [{"role": "system", "content": self.system_text}, *self.history.messages]))
            pct = usage_percentage(tokens, self.context_window())
            self.usage["context_tokens"] = tokens
            self.usage["context_percent"] = pct
            return pct
        if self._counter is None:
            self._counter = default_counter()
            tools = self.request_tools()
            self._fixed_tokens = self._counter.count_text(
                self._tools_text(tools)) if tools else 0
        system_text = self.system_text
        version = getattr(self.history, "version", None)
        counted = self._usage_counted
        if (counted is not None and counted[0] is system_text
                and version is not None and counted[1] == version):
            return counted[2]  # nothing changed since the last count: usage holds it already
        if self._system_counted is not system_text:
            self._system_tokens = self._system_prompt_tokens(system_text)
            self._system_counted = system_text
        if version is not None and version == self._history_version:
            history_tokens = self._history_total  # counted already (see _count_exchange)
        else:
            history_tokens = self._history_tokens()
            self._history_version = version
        tokens = self._fixed_tokens + self._system_tokens + history_tokens
        window = self._window
        if window is None:
            window = self.context_window()
        # (usage_percentage(tokens, window), without the call)
        pct = 100.0 * max(tokens, 0) / window if window > 0 else 0.0
        self._usage_counted = (system_text, version, pct)
        usage = self.usage
        usage["context_tokens"] = tokens
        usage["context_percent"] = pct
        return pct

    def _count_exchange(self, outcome: execution.ToolCallOutcome) -> None:
        """Count the exchange the engine just appended from the lengths of its texts.

        Only for a native exchange counted by the estimate, right after the
        messages counted last (else :meth:`_history_tokens` counts it, as any
        message): the same figure as counting the two messages, see
        :func:`~ai_tools.llm.tokens.estimate_native_exchange`.
        """
        counter = self._counter
        if counter is None or not outcome.recorded or not self.native:
            return
        if counter is not self._estimating:  # first time, or another counter
            if type(counter) is not TokenCounter or counter.exact is not False:
                return
            self._estimating = counter
        n, last = self._counted
        entries = outcome.history_entries
        if len(entries) != 2:
            return
        if n:
            tail = self.history.since(n - 1)
            if (len(tail) != 3 or tail[0] is not last or tail[1] is not entries[0]
                    or tail[2] is not entries[1]):
                return
        else:  # nothing counted (an empty history): the exchange must be all of it
            tail = self.history.since(0)
            if len(tail) != 2 or tail[0] is not entries[0] or tail[1] is not entries[1]:
                return
        call = outcome.call
        assert call is not None
        assistant, answer = entries
        self._history_total += estimate_native_exchange(
            call.id, call.name, call.arguments_json, assistant["content"], answer["content"])
        self._counted = (n + 2, answer)
        # the history ends with these: its every message is counted at this version
        self._history_version = getattr(self.history, "version", None)

    # -- building the request --------------------------------------------------

    def persona(self) -> Any:
        """The persona text, or a Deferred of it when the provider answers later."""
        provider = self.ctx.system_prompt
        if not callable(provider):
            return provider
        try:
            return provider()
        except Exception:
            return defer.fail()

    def prompt_head(self, persona: Any) -> str:
        """The persona, mode and tools part of the system prompt (rendered once per persona)."""
        text = str(persona or "")
        cached = self._prompt_head
        if cached is not None and cached[0] == text:
            return cached[1]
        exit_schemas = [t.schema() for t in self.config.exit_tools]
        # Every input of the head, as text: equal keys render equal heads (across loops).
        key = (self.ctx.assistant_name, text, self.ctx.mode, self.ctx.reflection,
               self.native, self.config.noop_tool, tuple(self._schema_texts),
               tuple(self.categories.items()),
               tuple(_schema_text(s) for s in exit_schemas))
        keep = len(self._schema_texts) == len(self.tool_schemas)  # (built together)
        head = _HEADS.get(key) if keep else None
        if head is None:
            head = system_prompt_head(PromptInputs(
                assistant_name=self.ctx.assistant_name,
                persona=text,
                mode=self.ctx.mode,
                reflection=self.ctx.reflection,
                tool_schemas=self.tool_schemas,
                tool_categories=self.categories,
                exit_tool_schemas=exit_schemas,
                native_tools=self.native,
                noop_tool=self.config.noop_tool,
            ))
            if keep:
                if len(_HEADS) >= _HEADS_KEPT:
                    _HEADS.clear()
                _HEADS[key] = head
        self._prompt_head = (text, head)
        return head

    def build_messages(self, persona: Any, advisory: TokenAdvisory) -> list[dict[str, Any]]:
        """The regenerated system prompt, then the history (fresh results advised)."""
        status = system_prompt_status(self.iteration, self.max_iterations,
                                      self.budget, advisory)
        cached = self._prompt_head  # (prompt_head's own first check, one call less)
        head = (cached[1] if cached is not None and type(persona) is str
                and cached[0] == persona else self.prompt_head(persona))
        self.system_text = f"{head}\n\n{status}"
        messages = self.history.messages
        if self.fresh_results and advisory.level is not AdvisoryLevel.NORMAL:
            fresh = {id(m) for m in self.fresh_results}
            messages = [_with_advisory(m, advisory) if id(m) in fresh else m
                        for m in messages]
        if self.nudge_at is not None:
            messages.insert(self.nudge_at, {"role": "user", "content": self.nudge})
        messages.insert(0, {"role": "system", "content": self.system_text})
        return messages

    def request_tools(self) -> list[dict[str, Any]] | None:
        """The ``tools=`` field: normal tools, noop and exit tools (native mode only)."""
        if not self.native:
            return None
        if self._request_tools is None:
            self._request_tools = [*self.tool_schemas,
                                   *(t.schema() for t in self.config.exit_tools)]
        return self._request_tools

    # -- the model's answer ----------------------------------------------------

    def on_llm_event(self, event: Any) -> None:
        """Keep streamed text (preserved if the call fails) and relay it to observers."""
        if isinstance(event, TextDelta):
            self.deltas.append(event.text)
            self.emit("text_delta", text=event.text)

    def add_text(self, text: str) -> None:
        if text:
            self.texts.append(text)

    def add_usage(self, usage: Mapping[str, Any] | None) -> None:
        totals = self.usage
        totals["requests"] += 1
        if not usage:
            return
        get = usage.get
        for key in _USAGE_KEYS:
            value = get(key)
            if isinstance(value, int):
                totals[key] += value

    def record_signal(self, call: ToolCall) -> None:
        """An exit tool call: recorded and published, never executed nor charged."""
        arguments: dict[str, Any] = dict(call.arguments)
        if call.arguments_error is not None:
            arguments = {"_raw": call.raw_arguments}
        signal = {"tool_name": call.name, "arguments": arguments,
                  "emitted_at": self.ctx.clock.seconds()}
        self.signals.append(signal)
        self.emit("signal", **signal)

    # -- tool calls --------------------------------------------------------------

    def add_result(self, outcome: execution.ToolCallOutcome, *, skipped: bool = False
                   ) -> None:
        """Record an engine outcome in the results and publish it."""
        call = outcome.call
        result = outcome.result
        kind = outcome.kind
        entries = outcome.history_entries
        if kind == execution.HISTORY and len(entries) == 2:
            self._count_exchange(outcome)
            self.fresh_results.append(entries[1])
        category = outcome.category
        # (_advised(result, self.usage_pct(), thresholds), one call less)
        thresholds = self.config.thresholds
        pct = self.usage_pct()
        if pct < thresholds.moderate:  # (NaN goes on to inject_token_advisory)
            advised = dict(result)
            advised.pop("_token_advisory", None)
        else:
            advised = inject_token_advisory(result, pct, thresholds)
        # ``outcome.as_dict()`` and more, built at once (same keys, same order)
        entry = {
            "tool": call.name if call is not None else None,
            "tool_call_id": call.id if call is not None else None,
            "kind": kind,
            "status": outcome.status,
            "success": kind != execution.ABORT and result.get("success") is not False,
            "attempts": outcome.attempts,
            "duration_ms": outcome.duration_ms,
            "from_cache": outcome.from_cache,
            # step 7: the advisory at this point of the loop (the model reads it in the
            # next request; it is not stored in the history, so it never goes stale)
            "result": advised,
            "iteration": self.iteration,
            # (``_value_``: the enum's value without the ``.value`` descriptor)
            "category": category._value_ if category is not None else None,
        }
        if skipped:
            entry["skipped"] = True
        self.results.append(entry)
        observer = self.ctx.on_event
        if observer is not None:  # (what publish() does, one call less)
            try:
                observer({
                    "type": "tool_result", "assistant": self.ctx.assistant_name,
                    "iteration": self.iteration, "tool": entry["tool"],
                    "tool_call_id": entry["tool_call_id"], "status": outcome.status,
                    "success": entry["success"], "skipped": skipped,
                    "duration_ms": outcome.duration_ms, "from_cache": outcome.from_cache,
                })
            except Exception:
                self.observer_failed("tool_result")

    def skip_rest(self, calls: Sequence[ToolCall], content: str | None, why: str
                  ) -> str | None:
        """Give every remaining call a synthetic "skipped" answer (DESIGN §3).

        Returns ``content`` if it is still to be recorded (no call to carry it).
        """
        if not calls:
            return content
        if content:
            self.history.add_assistant(content)
        for call in calls:
            outcome = execution.skip_tool_call(self.exec_ctx, _raw_call(call), why)
            if outcome.kind == execution.HISTORY:
                self.add_result(outcome, skipped=True)
        return None

    def result(self) -> LoopResult:
        success_count = len([r for r in self.results if r.get("success")])
        return LoopResult(
            iterations=self.iteration,
            results=tuple(self.results),
            termination_reason=self.reason or MAX_ITERATIONS,
            success=success_count > 0,
            success_count=success_count,
            pattern_mode=self.config.pattern_mode,
            max_allowed_iterations=self.config.effective_max_iterations,
            signals=tuple(self.signals),
            text="\n".join(self.texts),
            usage={**self.usage,
                   "context_percent": round(self.usage["context_percent"], 1)},
            duration_ms=round((self.ctx.clock.seconds() - self.started) * 1000.0, 3),
            error=self.error,
            tool_budget_remaining=self.budget,
        )


_Pending = tuple[defer.Deferred[Any], int, "str | None"]
"""A call whose outcome the loop must wait for: its Deferred, its index, the text
it carries."""


def _start_calls(run: _LoopRun, calls: Sequence[ToolCall], content: str | None,
                 index: int = 0) -> _Pending | None:
    """Steps 5 to 8 for ``calls[index:]``, in order, while the engine answers at once.

    Returns None once every call is done or the loop must end (``run.reason``
    set; the answer's text recorded either way), or the call to wait for: the
    loop waits, hands its outcome to :func:`_after_call` and, if that says go
    on, starts again from the next call.  A plain function: an answer of
    synchronous tools needs no generator.
    """
    config, ctx = run.config, run.ctx
    control = ctx.control
    while index < len(calls):
        call = calls[index]
        if call.name == config.noop_tool:
            content = run.skip_rest(calls[index + 1:], content, "the turn ended (noop)")
            run.end(NOOP)
            break
        if control.stopped or (ctx.stop_check is not None and _stop_requested(ctx)):
            content = run.skip_rest(calls[index:], content, "the turn was stopped")
            run.end(STOPPED_BY_USER, control.reason)
            break
        if run.budget is not None and run.budget <= 0:
            content = run.skip_rest(calls[index:], content, "the tool budget is exhausted")
            run.end(TOOL_BUDGET_EXHAUSTED, "tool budget exhausted")
            break
        observer = ctx.on_event
        if observer is not None:  # (what run.publish() does, one call less)
            try:
                observer({"type": "tool_call", "assistant": ctx.assistant_name,
                          "iteration": run.iteration, "tool": call.name,
                          "tool_call_id": call.id, "arguments": dict(call.arguments),
                          "category": run.categories.get(call.name)})
            except Exception:
                run.observer_failed("tool_call")
        # What run_tool_call does, one call less: the engine gets the call prepared
        # as it would parse it from _raw_call(call), or that raw dict when preparing
        # fails (the engine then reports the malformed call itself, as always).  The
        # parsed call's own dict is shared: neither the loop nor the engine changes
        # a call's arguments (the tool gets a copy).
        arguments = call.arguments
        try:
            prepared: Any = execution.prepare_tool_call(
                call.id, call.name, arguments if type(arguments) is dict else dict(arguments),
                call.reasoning or "")
        except execution.ToolCallParseError:
            prepared = _raw_call(call)
        answer = _ToolCallRun(run.exec_ctx, prepared, content).run()
        if not isinstance(answer, execution.ToolCallOutcome):  # the tool answers later
            return answer, index, content
        if _after_call(run, calls, index, answer, content):
            return None
        content = None  # the first exchange carried the text
        index += 1
    if content:
        run.history.add_assistant(content)
    return None


def _ends_loop(kind: str, dispatched: bool, category: ToolCategory | None, success: bool
              ) -> str | None:
    """``ToolCallOutcome.ends_loop`` from the figures the loop has at hand already."""
    if kind != execution.HISTORY or not dispatched:
        return None
    if category is ToolCategory.DANGEROUS:
        return DANGEROUS_TOOL
    if category is ToolCategory.TERMINAL and success:
        return TERMINAL_TOOL
    return None


def _after_call(run: _LoopRun, calls: Sequence[ToolCall], index: int,
                outcome: execution.ToolCallOutcome, content: str | None) -> bool:
    """Take the outcome of ``calls[index]``; True when the answer's other calls must
    not run (the loop ends or restarts the iteration; the text is recorded then)."""
    kind = outcome.kind
    if kind == execution.ABORT:
        control = run.ctx.control
        reason = _ABORT_REASONS.get(outcome.status, INTERNAL_ERROR)
        if reason == STOPPED_BY_USER:
            control.stopped = True
        # the aborted call gets no history entry; the rest are answered "skipped"
        content = run.skip_rest(
            calls[index + 1:], content,
            "the turn was stopped" if reason == STOPPED_BY_USER else "an earlier call failed")
        run.end(reason, str(outcome.result.get("error") or control.reason or ""))
        if content:
            run.history.add_assistant(content)
        return True
    dispatched = outcome.attempts > 0 or outcome.from_cache  # (outcome.dispatched)
    if run.budget is not None and dispatched:
        run.budget -= 1
    run.add_result(outcome)
    if kind == execution.RESTART:
        # the tool enriched the context: next iteration, this answer's other calls skipped
        run.consecutive_errors = 0
        run.skip_rest(calls[index + 1:], None, "the context was refreshed; ask again if needed")
        return True
    success = outcome.result.get("success") is not False  # (outcome.success: not an abort)
    run.consecutive_errors = 0 if success else run.consecutive_errors + 1
    # (``_ends_loop(kind, dispatched, outcome.category, success)``, one call less;
    # ``kind`` is HISTORY here: neither an abort nor a restart)
    ends = None
    if dispatched:
        category = outcome.category
        if category is ToolCategory.DANGEROUS:
            ends = DANGEROUS_TOOL
        elif category is ToolCategory.TERMINAL and success:
            ends = TERMINAL_TOOL
    if ends is not None:
        run.skip_rest(calls[index + 1:], None, f"an earlier call ended the turn ({ends})")
        run.end(ends)
        return True
    if run.consecutive_errors >= run.config.consecutive_error_cap:
        run.skip_rest(calls[index + 1:], None, "too many failed calls in a row")
        run.end(CONSECUTIVE_ERRORS, f"{run.consecutive_errors} failed tool calls in a row")
        return True
    return False


def _finish_calls(run: _LoopRun, calls: Sequence[ToolCall], pending: _Pending
                  ) -> Generator[defer.Deferred[Any], Any, None]:
    """Steps 5 to 8 for the rest of an answer's calls, once one answers later.

    Goes on where :func:`_start_calls` stopped: waits for ``pending`` (tracked,
    so a stop cancels it), takes its outcome, then runs the next calls.  A plain
    generator run by the loop's ``yield from``.
    """
    control = run.ctx.control
    while True:
        answer, index, content = pending
        try:
            outcome = yield control.track(answer)
        finally:
            control.untrack()
        if _after_call(run, calls, index, outcome, content):
            return
        next_pending = _start_calls(run, calls, None, index + 1)
        if next_pending is None:
            return
        pending = next_pending


def _checkpoint(run: _LoopRun) -> defer.Deferred[Any] | None:
    """Hand the service the iteration's progress; a Deferred it returns is to wait for.

    The service persists the iteration before the next model call.  A failing
    checkpoint is logged and the loop goes on.
    """
    ctx = run.ctx
    if ctx.checkpoint is None:
        return None
    try:
        saved = ctx.checkpoint(LoopProgress(
            run.iteration, tuple(run.results), tuple(run.signals),
            "\n".join(run.texts), run.budget))
    except Exception:
        _checkpoint_failed(run)
        return None
    if saved is not None and isinstance(saved, defer.Deferred):
        return saved
    return None


def _wait_checkpoint(run: _LoopRun, saved: defer.Deferred[Any]
                     ) -> Generator[defer.Deferred[Any], Any, None]:
    """Wait for the checkpoint's Deferred (a plain generator run by ``yield from``)."""
    try:
        yield saved
    except Exception:
        _checkpoint_failed(run)


def _checkpoint_failed(run: _LoopRun) -> None:
    log.failure("Checkpoint of {assistant} failed after iteration "
                "{iteration}; the loop goes on",
                assistant=run.ctx.assistant_name, iteration=run.iteration)


def _wait_answer(run: _LoopRun, asked: defer.Deferred[Any]
                 ) -> Generator[defer.Deferred[Any], Any, Any]:
    """Wait for the model's answer (step 3); on a kill or a model error, end the loop.

    A plain generator run by the loop's ``yield from``; the request is tracked
    so a stop cancels it.  Sets ``run.reason`` when the loop must end.
    """
    control = run.ctx.control
    try:
        return (yield control.track(asked))
    except defer.CancelledError:
        run.add_text("".join(run.deltas))
        control.stopped = True
        run.end(STOPPED_BY_USER, control.reason or "cancelled")
    except LLMError as e:
        run.add_text(e.partial_text or "".join(run.deltas))
        reason = e.reason if e.reason in TERMINATION_REASONS else LLM_ERROR
        run.end(reason, str(e) or type(e).__name__)
    finally:
        control.untrack()
    return None


@defer.inlineCallbacks
def _run_loop(run: _LoopRun) -> Any:
    ctx, config = run.ctx, run.config
    control = ctx.control
    max_iterations = config.effective_max_iterations
    try:
        run.prepare()
        request_tools = run.request_tools()  # (the same list for every request)
        while run.reason is None:
            # 1. continuation check
            if control.stopped or (ctx.stop_check is not None and _stop_requested(ctx)):
                run.end(STOPPED_BY_USER, control.reason)
                break
            pct = run.usage_pct()
            continuation = check_loop_continuation(
                pct, run.iteration, max_iterations, config.thresholds)
            if not continuation.should_continue:
                if continuation.reason == "max_iterations":
                    run.end(MAX_ITERATIONS)
                else:
                    run.end(CRITICAL_TOKENS, continuation.message)
                break
            # 2. build the messages (system prompt regenerated every iteration)
            persona = ctx.system_prompt
            if type(persona) is not str:
                persona = run.persona()
                if isinstance(persona, defer.Deferred):
                    persona = yield persona
            messages = run.build_messages(persona, continuation.advisory)
            run.fresh_results = []
            run.iteration += 1
            observer = ctx.on_event
            if observer is not None:  # (what run.publish() does, one call less)
                try:
                    observer({"type": "iteration", "assistant": ctx.assistant_name,
                              "iteration": run.iteration, "max_iterations": max_iterations,
                              "usage_percent": round(pct, 1),
                              "continuation": continuation.reason,
                              "tool_budget_remaining": run.budget})
                except Exception:
                    run.observer_failed("iteration")
            # 3. call the model
            run.deltas = []
            # (_ask_model, one call less while the client returns a Deferred)
            llm: Any = ctx.llm  # (an ILLMClient: zope declares it, mypy cannot see it)
            try:
                asked = llm.complete(messages, tools=request_tools, stream=config.stream,
                                     on_event=run.on_llm_event)
            except BaseException:
                asked = defer.fail(Failure(captureVars=defer.Deferred.debug))
            if type(asked) is not defer.Deferred:
                asked = _ask_model_later(asked)
            if asked.called and type(asked.result) is ChatResponse:
                response = asked.result  # answered already: no round through inlineCallbacks
            else:
                response = yield from _wait_answer(run, asked)
                if run.reason is not None:
                    break
            if not isinstance(response, ChatResponse):
                run.add_text("".join(run.deltas))
                run.end(LLM_ERROR, f"the model client returned {type(response).__name__}")
                break
            usage = response.usage  # (run.add_usage(response.usage), one call less)
            totals = run.usage
            totals["requests"] += 1
            if usage:
                for key in _USAGE_KEYS:
                    value = usage.get(key)
                    if isinstance(value, int):
                        totals[key] += value
            if control.stopped or (ctx.stop_check is not None and _stop_requested(ctx)):
                run.add_text(response.content)
                run.end(STOPPED_BY_USER, control.reason)
                break
            # 4. parse the tool calls (noop ends the loop)
            plain = plain_native_calls(response, run.plain_names)
            if plain is not None:  # the usual answer: parse_tool_calls would only pass it on
                text = response.content
                if text:
                    run.texts.append(text)
                pending = _start_calls(run, plain, text or None)
                if pending is not None:
                    yield from _finish_calls(run, plain, pending)
                if run.reason == STOPPED_BY_USER:
                    break
                checkpoint = ctx.checkpoint  # (_checkpoint(run), one call less)
                if checkpoint is None:
                    continue
                try:
                    saved = checkpoint(LoopProgress(
                        run.iteration, tuple(run.results), tuple(run.signals),
                        "\n".join(run.texts), run.budget))
                except Exception:
                    _checkpoint_failed(run)
                    continue
                if saved is not None and isinstance(saved, defer.Deferred):
                    yield from _wait_checkpoint(run, saved)
                continue
            parsed = parse_tool_calls(response, run.normal_names, run.exit_names,
                                      fallback=not run.native)
            problem = _validate_calls(parsed)
            if problem is not None:
                run.add_text(parsed.visible_text)
                run.end(PARSE_ERROR, problem)
                break
            if parsed.unknown:
                # answered by the engine; re-parse so their directives leave the text
                parsed = parse_tool_calls(
                    response, [*run.normal_names, *(c.name for c in parsed.unknown)],
                    run.exit_names, fallback=not run.native)
            for warning in parsed.warnings:
                log.warn("Tool call of {assistant}: {warning}",
                         assistant=ctx.assistant_name, warning=warning)
            run.add_text(parsed.visible_text)
            for call in parsed.exit:
                run.record_signal(call)
            calls = [c for c in parsed.calls if c.name not in run.exit_names]
            content = parsed.visible_text or None
            if not calls:
                if content:
                    run.history.add_assistant(content)
                run.end(COMPLETED)
            else:
                # 5-8. gate, execute, advisory (next request), termination checks
                pending = _start_calls(run, calls, content)
                if pending is not None:
                    yield from _finish_calls(run, calls, pending)
            if run.reason == STOPPED_BY_USER:
                break
            saved = _checkpoint(run)
            if saved is not None:
                yield from _wait_checkpoint(run, saved)
    except defer.CancelledError:
        control.stopped = True
        run.end(STOPPED_BY_USER, control.reason or "cancelled")
    except Exception as e:
        log.failure("ReAct loop of {assistant} failed", assistant=ctx.assistant_name)
        run.end(INTERNAL_ERROR, f"{type(e).__name__}: {e}")
    result = run.result()
    run.emit("termination", reason=result.termination_reason, error=result.error,
             success=result.success, iterations=result.iterations,
             signals=len(result.signals), duration_ms=result.duration_ms)
    log.info("ReAct loop of {assistant} ended: {reason} after {iterations} iteration(s)",
             assistant=ctx.assistant_name, reason=result.termination_reason,
             iterations=result.iterations, error=result.error)
    return result


def execute_react_loop(
    ctx: LoopContext, config: LoopConfig | None = None
) -> defer.Deferred[LoopResult]:
    """Run one ReAct loop for ``ctx``; fires with a :class:`LoopResult`, never fails.

    Cancelling the returned Deferred is a kill, like ``ctx.control.stop()``:
    the request or tool in flight is cancelled and the loop ends with
    ``stopped_by_user``.
    """
    d: defer.Deferred[LoopResult] = _run_loop(_LoopRun(ctx, config or LoopConfig()))
    return d
