"""Executing one tool call, deferred all the way (spec 000 §1, spec 001, DESIGN §3).

:func:`execute_tool_call` takes what a model asked for and returns a Deferred
that always fires with a :class:`ToolCallOutcome` — it never fails:

1. defensive parsing (:func:`parse_tool_call`): native, fallback and
   top-level-parameter shapes; a malformed call aborts with ``parse_error``;
2. the decision log, with the model's reasoning as a structured field;
3. the stop check: a pending stop request aborts with ``stopped_by_user``;
4. registry lookup: an unknown tool gives the model an error listing the valid names;
5. the gate: a tool the context does not allow is not dispatched; the model sees
   ``blocked_by_tool_mode`` and the allowed tools;
6. parameter validation: the model sees the errors it must fix;
7. the cache (tick / session / persistent scope, TTL);
8. dispatch: ``tool.execute(actor, **params)`` (a value, a Deferred or a
   coroutine) with ``addTimeout`` fresh per attempt, retrying retryable
   failures with exponential backoff through ``task.deferLater``;
9. post-execution: result validation, JSON check and truncation, counters,
   cache store or invalidation, the completion log, and the history entry.

History: the assistant message carrying the call and the tool's answer are
appended together at the end, in one operation.  A call that is killed, stopped
or that restarts the context writes nothing, so every tool call id in the
history always has exactly one answer.  In reflection mode nothing is written
(the outcome still carries the two messages).

Kill: cancelling the returned Deferred cancels whatever the call is waiting on
(the tool's Deferred — a tool doing I/O sees ``CancelledError`` — a backoff
delay, or a persistent cache read) and fires the Deferred with an ``abort`` /
``stopped_by_user`` outcome.  A timeout is different: the model is told
``{"success": false, "error": "timed out after Ns"}`` and may try something else.
"""

from __future__ import annotations

import itertools
import json
import os
import random
from collections.abc import Callable, Mapping
from types import CoroutineType
from typing import Any, Final, Literal, Protocol

import attrs
from twisted.internet import defer, task
from twisted.python.failure import Failure

from ai_tools.errors import AIToolsError
from ai_tools.event_logger import EventLogger
from ai_tools.execution.cache import ToolCache, cache_key, canonical_json
from ai_tools.execution.history import ConversationHistory, ToolCall, build_tool_exchange
from ai_tools.execution.results import (
    DEFAULT_MAX_RESULT_BYTES,
    MIN_MAX_RESULT_BYTES,
    plain_content,
    shape_result,
)
from ai_tools.retry import DEFAULT_RETRY_POLICY, RetryPolicy, is_retryable_error
from ai_tools.tools.base import Actor, Tool, ToolCategory
from ai_tools.tools.registry import ToolRegistry
from ai_tools.tools.validation import validate_tool_result

__all__ = [
    "ABORT",
    "ABORT_STATUSES",
    "BLOCKED_BY_TOOL_MODE",
    "CONTEXT_RESTART",
    "DEFAULT_MAX_RESULT_BYTES",
    "HISTORY",
    "HISTORY_STATUSES",
    "INTERNAL_ERROR",
    "INVALID_PARAMETERS",
    "INVALID_RESULT",
    "PARSE_ERROR",
    "RESTART",
    "RESTART_KEY",
    "SKIPPED",
    "STOPPED_BY_USER",
    "SUCCESS",
    "TIMED_OUT",
    "TOOL_ERROR",
    "UNKNOWN_TOOL",
    "ExecutionContext",
    "ExecutionState",
    "ToolCallOutcome",
    "ToolCallParseError",
    "ToolGate",
    "execute_tool_call",
    "new_tool_call_id",
    "parse_tool_call",
    "prepare_tool_call",
    "run_tool_call",
    "skip_tool_call",
]

log = EventLogger()

# -- outcome kinds and statuses ------------------------------------------------

HISTORY: Final = "history"
"""The call was answered; its exchange is in the history (unless reflection mode)."""
ABORT: Final = "abort"
"""A fatal condition: the loop must stop with ``status`` as its reason. Nothing written."""
RESTART: Final = "restart"
"""The tool enriched the context: the loop restarts the iteration. Nothing written."""

SUCCESS = "success"
TOOL_ERROR = "tool_error"
"""The tool raised, or returned ``{"success": false}`` (after any retries)."""
TIMED_OUT = "timed_out"
"""Every attempt timed out (or the last one did, after retryable failures)."""
UNKNOWN_TOOL = "unknown_tool"
BLOCKED_BY_TOOL_MODE = "blocked_by_tool_mode"
INVALID_PARAMETERS = "invalid_parameters"
INVALID_RESULT = "invalid_result"
"""The tool returned something other than a JSON-serialisable dict."""
SKIPPED = "skipped"
"""Not run because an earlier call of the same response ended the loop."""
HISTORY_STATUSES = frozenset({SUCCESS, TOOL_ERROR, TIMED_OUT, UNKNOWN_TOOL,
                              BLOCKED_BY_TOOL_MODE, INVALID_PARAMETERS, INVALID_RESULT, SKIPPED})

PARSE_ERROR = "parse_error"
STOPPED_BY_USER = "stopped_by_user"
INTERNAL_ERROR = "internal_error"
"""A bug in the engine itself (logged with its traceback); never expected."""
ABORT_STATUSES = frozenset({PARSE_ERROR, STOPPED_BY_USER, INTERNAL_ERROR})

CONTEXT_RESTART = "context_restart"

RESTART_KEY = "_restart_context"
"""A successful result with this key set true asks for a :data:`RESTART` outcome."""

_DANGEROUS = ToolCategory.DANGEROUS
_MAX_NAME_LENGTH = 200
_MAX_ID_LENGTH = 256


# -- context -------------------------------------------------------------------


class ToolGate(Protocol):
    """Which tools a context allows (the loop's ``GatePolicy`` is one)."""

    def allows(self, name: str, category: ToolCategory) -> bool:
        """Whether a tool with this name and category may run."""


@attrs.define(eq=False)
class ExecutionState:
    """An assistant's execution counters and the call it is running or ran last.

    Owned by the assistant (persisted with it), shared by every context built
    for it.  ``activity_since_wake`` counts successful calls; the service
    resets it when the assistant wakes.
    """

    activity_since_wake: int = 0
    calls: int = 0
    """Calls dispatched or answered from the cache."""
    retries: int = 0
    cache_hits: int = 0
    timeouts: int = 0
    """Attempts that timed out."""
    errors: int = 0
    """Calls answered with ``success: false`` (unknown, blocked, invalid, failed)."""
    current_tool_call: dict[str, Any] | None = None
    """``{"id", "tool", "parameters", "status", "started_at"}`` (+ ``success``,
    ``duration_ms`` when done) of the call in flight or the last one."""

    def counters(self) -> dict[str, int]:
        """The counters as a dict (status pages, persistence)."""
        return {
            "activity_since_wake": self.activity_since_wake,
            "calls": self.calls,
            "retries": self.retries,
            "cache_hits": self.cache_hits,
            "timeouts": self.timeouts,
            "errors": self.errors,
        }


def _never() -> bool:
    return False


def _check_max_result_bytes(instance: Any, attribute: Any, value: int) -> None:
    if not isinstance(value, int) or value < MIN_MAX_RESULT_BYTES:
        raise ValueError(f"max_result_bytes must be an integer >= {MIN_MAX_RESULT_BYTES}, "
                         f"got {value!r}")


@attrs.frozen
class ExecutionContext:
    """Everything one tool call needs; cheap to build once per loop iteration.

    ``clock`` drives timeouts, backoff and durations (the reactor, or a
    ``task.Clock`` in tests); ``rand`` is the jitter source.  ``gate`` None
    allows every tool.  ``native_tools`` selects the history format.
    ``stop_requested`` is polled before dispatch and when the tool returns.
    """

    registry: ToolRegistry
    actor: Actor
    history: ConversationHistory
    clock: Any
    """An ``IReactorTime``: the reactor, or ``task.Clock`` in tests."""
    cache: ToolCache | None = None
    cache_namespace: str = attrs.field(
        default=attrs.Factory(lambda self: self.actor.owner, takes_self=True)
    )
    state: ExecutionState = attrs.field(factory=ExecutionState)
    retry_policy: RetryPolicy = DEFAULT_RETRY_POLICY
    rand: Callable[[], float] = random.random
    gate: ToolGate | None = None
    reflection_mode: bool = False
    native_tools: bool = True
    stop_requested: Callable[[], bool] = _never
    max_result_bytes: int = attrs.field(default=DEFAULT_MAX_RESULT_BYTES,
                                        validator=_check_max_result_bytes)

    def allowed_tool_names(self) -> list[str]:
        """Names of the registered tools the gate allows, sorted."""
        tools = self.registry.get_all_tools()
        gate = self.gate
        if gate is None:
            return [t.name for t in tools]
        return [t.name for t in tools if gate.allows(t.name, t.category)]


# -- outcome -------------------------------------------------------------------

OutcomeKind = Literal["history", "abort", "restart"]


@attrs.frozen
class ToolCallOutcome:
    """How one tool call ended (spec 001's discriminated union).

    ``kind`` is :data:`HISTORY`, :data:`ABORT` or :data:`RESTART`; ``status``
    says why (for ``abort`` it is the loop's termination reason).  ``result``
    is what the model sees (for ``abort``, an error dict for the logs).
    ``history_entries`` are the two messages recording the call (empty unless
    ``kind`` is ``history``); ``recorded`` says whether they were appended to
    the history (False in reflection mode).
    """

    kind: OutcomeKind
    status: str
    result: dict[str, Any]
    call: ToolCall | None = None
    category: ToolCategory | None = None
    attempts: int = 0
    duration_ms: float = 0.0
    from_cache: bool = False
    history_entries: tuple[dict[str, Any], ...] = ()
    recorded: bool = False

    @property
    def tool_name(self) -> str | None:
        """The called tool's name (None when the call could not be parsed)."""
        return self.call.name if self.call is not None else None

    @property
    def tool_call_id(self) -> str | None:
        """The call's id (generated when the model gave none)."""
        return self.call.id if self.call is not None else None

    @property
    def success(self) -> bool:
        """Whether the tool ran (or was answered from the cache) and succeeded."""
        return self.kind != ABORT and self.result.get("success") is not False

    @property
    def dispatched(self) -> bool:
        """Whether the tool's ``execute`` ran at least once, or the cache answered for it."""
        return self.attempts > 0 or self.from_cache

    @property
    def ends_loop(self) -> str | None:
        """The termination reason this call imposes on the loop, or None.

        ``"dangerous_tool"`` once a DANGEROUS tool was dispatched (the world
        may have changed, success or not); ``"terminal_tool"`` when a TERMINAL
        tool succeeded.  Calls refused before dispatch (unknown, blocked,
        invalid) let the model correct itself.  Abort outcomes end the loop
        with ``status``.
        """
        if self.kind != HISTORY or not self.dispatched:
            return None
        if self.category is ToolCategory.DANGEROUS:
            return "dangerous_tool"
        if self.category is ToolCategory.TERMINAL and self.success:
            return "terminal_tool"
        return None

    def as_dict(self) -> dict[str, Any]:
        """A JSON-serialisable summary (the loop's ``results`` entries)."""
        return {
            "tool": self.tool_name,
            "tool_call_id": self.tool_call_id,
            "kind": self.kind,
            "status": self.status,
            "success": self.success,
            "attempts": self.attempts,
            "duration_ms": self.duration_ms,
            "from_cache": self.from_cache,
            "result": self.result,
        }


# -- parsing -------------------------------------------------------------------


class ToolCallParseError(AIToolsError):
    """A tool call the engine cannot make sense of (the loop aborts with ``parse_error``)."""


_ID_PREFIX = f"call_{os.urandom(4).hex()}"
_ID_COUNTER = itertools.count(1)


def new_tool_call_id() -> str:
    """A fresh tool call id, unique in this process (for calls that came without one)."""
    return f"{_ID_PREFIX}{next(_ID_COUNTER):06d}"


_NATIVE_KEYS = frozenset({"id", "type", "function"})
_FALLBACK_KEYS = frozenset({"tool", "parameters", "arguments", "reasoning", "id"})


def _decode_arguments(value: Any, where: str) -> dict[str, Any]:
    """Arguments as a dict: None/"" → {}, JSON text decoded (twice if double-encoded)."""
    if type(value) is dict:
        return value
    if value is None:
        return {}
    for _ in range(2):
        if not isinstance(value, str):
            break
        text = value.strip()
        if not text:
            return {}
        try:
            value = json.loads(text)
        except ValueError as e:
            raise ToolCallParseError(f"{where} is not valid JSON ({e})") from None
    if isinstance(value, Mapping):
        return dict(value)
    raise ToolCallParseError(
        f"{where} must be a JSON object of parameters, got {type(value).__name__}"
    )


def _call_id(raw: Any) -> str:
    if type(raw) is str:
        text = raw.strip()
    elif type(raw) is int:
        text = str(raw)
    else:
        return new_tool_call_id()
    if not text or len(text) > _MAX_ID_LENGTH:
        return new_tool_call_id()
    return text


def parse_tool_call(tool_call: Any) -> ToolCall:
    """Make a :class:`~ai_tools.execution.history.ToolCall` of whatever the model sent.

    Accepted shapes: native ``{"id", "type": "function", "function": {"name",
    "arguments"}}`` (arguments a JSON string or an object); fallback ``{"tool"
    or "name", "parameters" or "arguments", "reasoning", "id"?}``; fallback with
    the parameters at top level (moved under ``parameters``, with a warning);
    the JSON text of any of these.  A missing id is generated.  Raises
    :class:`ToolCallParseError` with a message saying what is wrong.
    """
    if type(tool_call) is not dict:
        if isinstance(tool_call, str | bytes):
            try:
                tool_call = json.loads(tool_call)
            except ValueError:
                raise ToolCallParseError("the tool call is text that is not JSON") from None
        if not isinstance(tool_call, Mapping):
            raise ToolCallParseError(
                f"a tool call must be an object, got {type(tool_call).__name__}"
            )
    function = tool_call.get("function")
    if function is not None:
        if type(function) is not dict and not isinstance(function, Mapping):
            raise ToolCallParseError("'function' must be an object with 'name' and 'arguments'")
        name = function.get("name")
        raw_args = function.get("arguments", function.get("parameters"))
        arguments = _decode_arguments(raw_args, "'function.arguments'")
        reasoning = tool_call.get("reasoning", "")
    else:
        name_key = "tool" if "tool" in tool_call else "name"
        name = tool_call.get(name_key)
        args_key = "parameters" if "parameters" in tool_call else "arguments"
        arguments = _decode_arguments(tool_call.get(args_key), f"'{args_key}'")
        reasoning = tool_call.get("reasoning", "")
        if not arguments:
            meta = _FALLBACK_KEYS | {name_key}
            extra = {k: v for k, v in tool_call.items() if k not in meta}
            if extra:
                log.warn(
                    "Tool call {tool!r} put its parameters at top level; moved them under "
                    "'parameters': {keys}", tool=name, keys=sorted(map(str, extra)),
                )
                arguments = extra
    return prepare_tool_call(tool_call.get("id"), name, arguments, reasoning)


def prepare_tool_call(call_id: Any, name: Any, arguments: dict[str, Any],
                      reasoning: Any = "") -> ToolCall:
    """The :class:`~ai_tools.execution.history.ToolCall` of a call already taken apart.

    The checks and normalisation of :func:`parse_tool_call` (it ends here), for
    a caller that decoded the model's call itself (the loop's parser): the same
    as parsing ``{"id": call_id, "type": "function", "function": {"name": name,
    "arguments": arguments}, "reasoning": reasoning}`` without building that
    dict and taking it apart again.  ``arguments`` is kept as it is (pass a
    copy).  Raises :class:`ToolCallParseError` like :func:`parse_tool_call`.
    """
    if not isinstance(name, str) or not (name := name.strip()):
        raise ToolCallParseError("the tool call names no tool (a non-empty string is needed)")
    if not name.isprintable():
        raise ToolCallParseError("the tool name contains control or unprintable characters")
    if len(name) > _MAX_NAME_LENGTH:
        raise ToolCallParseError(f"tool name is too long ({len(name)} characters)")
    for key in arguments:
        if type(key) is not str:
            raise ToolCallParseError("parameter names must be strings")
    try:
        arguments_json = canonical_json(arguments)
    except (TypeError, ValueError, RecursionError) as e:
        raise ToolCallParseError(
            f"the parameters are not plain JSON ({type(e).__name__})"
        ) from None
    if not isinstance(reasoning, str):
        reasoning = "" if reasoning is None else json.dumps(reasoning, default=repr)
    # (positional: id, name, arguments, reasoning, arguments_json)
    if type(call_id) is str and 0 < len(text := call_id.strip()) <= _MAX_ID_LENGTH:
        call_id = text  # (what _call_id gives for a usable text id)
    else:
        call_id = _call_id(call_id)
    return ToolCall(call_id, name, arguments, reasoning, arguments_json)


# -- dispatch helpers ----------------------------------------------------------

_BASE_VALIDATE = Tool.validate_parameters
_BASE_CUSTOM_VALIDATION = Tool.custom_validation
_PLAIN_VALIDATION: dict[type, bool] = {}
"""Per tool class: whether it validates with ``Tool``'s own ``validate_parameters``,
``custom_validation`` and ``parameter_validator``."""


def _plain_validation(tool: Tool) -> bool:
    """Whether ``tool`` validates exactly as ``Tool`` does (its class and the instance)."""
    cls = type(tool)
    plain = _PLAIN_VALIDATION.get(cls)
    if plain is None:
        plain = _PLAIN_VALIDATION[cls] = (
            cls.validate_parameters is _BASE_VALIDATE
            and cls.custom_validation is _BASE_CUSTOM_VALIDATION
            and cls.parameter_validator is Tool.parameter_validator
        )
    if not plain:
        return False
    own = getattr(tool, "__dict__", None)
    return own is None or ("validate_parameters" not in own and "custom_validation" not in own)


def _describe_failure(failure: Failure) -> str:
    value = failure.value
    message = str(value)
    if isinstance(value, AIToolsError) and message:
        return message
    name = type(value).__name__
    return f"{name}: {message}" if message else name


# -- the call ------------------------------------------------------------------


class _ToolCallRun:
    """The state of one :func:`execute_tool_call` while it is in flight."""

    __slots__ = ("assistant_content", "attempts", "call", "ctx", "finished", "key", "killed",
                 "outcome", "outcome_d", "params", "raw", "raw_key", "started", "tool",
                 "waiting")

    def __init__(self, context: ExecutionContext, tool_call: Any,
                 assistant_content: str | None) -> None:
        self.ctx = context
        self.raw = tool_call
        self.assistant_content = assistant_content
        self.started = context.clock.seconds()
        # Made when start() returns unfinished; until then the outcome is kept here.
        self.outcome_d: defer.Deferred[ToolCallOutcome] | None = None
        self.outcome: ToolCallOutcome | None = None
        self.waiting: defer.Deferred[Any] | None = None
        self.finished = False
        self.killed = False
        self.call: ToolCall | None = None
        self.tool: Tool | None = None
        self.params: dict[str, Any] = {}
        self.raw_key: str | None = None
        self.key: str | None = None
        self.attempts = 0

    # ---- plumbing

    def start(self) -> defer.Deferred[ToolCallOutcome]:
        """Run the call; the Deferred fires with its outcome (already, if it ended at once)."""
        outcome = self.run()
        if isinstance(outcome, ToolCallOutcome):
            return defer.succeed(outcome)
        return outcome

    def run(self) -> ToolCallOutcome | defer.Deferred[ToolCallOutcome]:
        """Run the call: its outcome if it ended at once, else a Deferred of it.

        Until this returns nothing can cancel the call (no Deferred exists yet),
        so a call that ends synchronously needs none.
        """
        try:
            self._begin()
        except Exception:
            self._internal_error(Failure())
        outcome = self.outcome
        if outcome is not None:
            return outcome
        d = self.outcome_d = defer.Deferred(self._cancel)
        return d

    def _deliver(self, outcome: ToolCallOutcome) -> None:
        """Hand the outcome to whoever waits: the Deferred, or ``run()`` still running."""
        d = self.outcome_d
        if d is None:
            self.outcome = outcome
        else:
            d.callback(outcome)

    def _wait(self, d: defer.Deferred[Any], callback: Callable[[Any], None],
              errback: Callable[[Failure], None]) -> None:
        """Wait on ``d`` (cancellable by a kill); ``d`` may have fired already."""
        self.waiting = d
        d.addCallbacks(self._resume, self._resume_failed,
                       callbackArgs=(callback,), errbackArgs=(errback,))

    def _resume(self, value: Any, callback: Callable[[Any], None]) -> None:
        self.waiting = None
        if self.killed:
            return
        try:
            callback(value)
        except Exception:
            self._internal_error(Failure())

    def _resume_failed(self, failure: Failure, errback: Callable[[Failure], None]) -> None:
        self.waiting = None
        if self.killed:
            return
        try:
            errback(failure)
        except Exception:
            self._internal_error(Failure())

    def _cancel(self, d: defer.Deferred[ToolCallOutcome]) -> None:
        """The caller cancelled: a kill.  Cancel what we wait on; answer stopped_by_user."""
        if self.finished:
            return
        self.killed = True
        waiting, self.waiting = self.waiting, None
        if waiting is not None:
            try:
                waiting.cancel()
            except Exception:
                log.failure("Cancelling tool call {tool} raised", tool=self._name())
        log.info("Tool call {tool} killed after {ms}ms", tool=self._name(),
                 ms=round(self._elapsed_ms()))
        self._abort(STOPPED_BY_USER, "the call was killed")

    def _elapsed_ms(self) -> float:
        return (self.ctx.clock.seconds() - self.started) * 1000.0

    def _name(self) -> str | None:
        return self.call.name if self.call is not None else None

    def _finish(self, outcome: ToolCallOutcome) -> None:
        if self.finished:
            return
        self.finished = True
        self._deliver(outcome)

    def _abort(self, status: str, error: str) -> None:
        current = self.ctx.state.current_tool_call
        if (current is not None and current.get("status") == "running"
                and current.get("id") == self.call_id()):
            current["status"] = status
        self._finish(ToolCallOutcome(
            kind=ABORT, status=status, result={"success": False, "error": error},
            call=self.call, category=self.tool.category if self.tool else None,
            attempts=self.attempts, duration_ms=self._elapsed_ms(),
        ))

    def call_id(self) -> str | None:
        return self.call.id if self.call is not None else None

    def _internal_error(self, failure: Failure) -> None:
        log.failure("Internal error while executing tool call {tool}", failure,
                    tool=self._name())
        self._abort(INTERNAL_ERROR, f"internal error: {_describe_failure(failure)}")

    # ---- steps 1-7

    def _begin(self) -> None:
        ctx = self.ctx
        try:
            raw = self.raw
            call = raw if type(raw) is ToolCall else parse_tool_call(raw)
        except ToolCallParseError as e:
            log.warn("Malformed tool call: {error}", error=str(e))
            self._abort(PARSE_ERROR, f"malformed tool call: {e}")
            return
        if ctx.native_tools and ctx.history.has_tool_call_id(call.id):
            fresh = new_tool_call_id()
            log.warn("Tool call id {old!r} is already in the history; using {new!r}",
                     old=call.id, new=fresh)
            call = attrs.evolve(call, id=fresh)
        self.call = call
        log.info("Assistant decision: {tool} - {reasoning}", tool=call.name,
                 reasoning=call.reasoning, tool_call_id=call.id, arguments=call.arguments,
                 assistant=ctx.cache_namespace)
        if ctx.stop_requested():
            self._abort(STOPPED_BY_USER, "a stop was requested before the call ran")
            return
        tool = ctx.registry.get_tool(call.name)
        if tool is None:
            valid = ctx.allowed_tool_names()
            self._answer(UNKNOWN_TOOL, {
                "success": False,
                "error": f"Unknown tool '{call.name}'. Valid tools: {', '.join(valid)}",
                "valid_tools": valid,
            })
            return
        self.tool = tool
        gate = ctx.gate
        if gate is not None and not gate.allows(tool.name, tool.category):
            self._answer(BLOCKED_BY_TOOL_MODE, {
                "success": False,
                "status": BLOCKED_BY_TOOL_MODE,
                "error": f"Tool '{tool.name}' is not available in the current mode.",
                "allowed_tools": ctx.allowed_tool_names(),
            })
            return
        if tool.cacheable and ctx.cache is not None:
            # The model's own arguments are a key too: a repeated call is answered
            # without validating again (validation is a pure function of them).
            self.raw_key = f"{tool.name}:{call.arguments_json}"
            self._lookup(self.raw_key, self._on_raw_lookup)
            return
        # (what ``if self._validate(): self._dispatch()`` does, one call less for
        # arguments valid as they are)
        arguments = call.arguments
        if type(arguments) is dict and _plain_validation(tool):
            try:
                accepted = tool.parameter_validator.accepts_as_is(arguments)
            except Exception:  # the general path reports it
                accepted = False
            if accepted:
                self.params = dict(arguments)
                self._dispatch()
                return
        if self._validate_general():
            self._dispatch()

    def _validate(self) -> bool:
        """Validate the arguments into ``self.params``; answer the model and say False if bad."""
        tool = self.tool
        call = self.call
        assert tool is not None and call is not None
        arguments = call.arguments
        if type(arguments) is dict and _plain_validation(tool):
            # What Tool.validate_parameters answers for arguments valid as they are
            # (a valid result with a copy of them), without building that result.
            try:
                accepted = tool.parameter_validator.accepts_as_is(arguments)
            except Exception:  # the general path below reports it
                accepted = False
            if accepted:
                self.params = dict(arguments)
                return True
        return self._validate_general()

    def _validate_general(self) -> bool:
        """:meth:`_validate` through ``tool.validate_parameters`` (no shortcut)."""
        tool = self.tool
        call = self.call
        assert tool is not None and call is not None
        try:
            validation = tool.validate_parameters(dict(call.arguments))
        except Exception:
            log.failure("Validating the parameters of {tool} raised", tool=tool.name)
            self._answer(INVALID_PARAMETERS, {
                "success": False,
                "error": f"Parameter validation failed for '{tool.name}' (internal error).",
            })
            return False
        if not validation.valid:
            self._answer(INVALID_PARAMETERS, {
                "success": False, "error": validation.format_for_llm(tool.name),
            })
            return False
        self.params = validation.cleaned_params
        return True

    # ---- step 7: the cache

    def _lookup(self, key: str, then: Callable[[dict[str, Any] | None], None]) -> None:
        ctx = self.ctx
        cache = ctx.cache
        scope = self.tool.cache_scope  # type: ignore[union-attr]
        assert cache is not None
        if cache.is_local(scope):
            then(cache.get_now(ctx.cache_namespace, scope, key))
            return
        self._wait(cache.get(ctx.cache_namespace, scope, key), then, self._on_cache_failure)

    def _on_raw_lookup(self, cached: dict[str, Any] | None) -> None:
        if cached is not None:
            self.params = dict(self.call.arguments)  # type: ignore[union-attr]
            self._answer_from_cache(cached)
            return
        if not self._validate():
            return
        try:
            self.key = cache_key(self.tool.name, self.params)  # type: ignore[union-attr]
        except (TypeError, ValueError):  # coercion made something that is not JSON
            self.key = self.raw_key = None
        if self.key is None or self.key == self.raw_key:
            self._dispatch()
            return
        self._lookup(self.key, self._on_lookup)

    def _on_lookup(self, cached: dict[str, Any] | None) -> None:
        if cached is None:
            self._dispatch()
        else:
            self._answer_from_cache(cached)

    def _on_cache_failure(self, failure: Failure) -> None:
        log.failure("Cache lookup for {tool} failed; running the tool", failure,
                    tool=self._name())
        if self.key is None and not self._validate():  # the lookup by raw arguments failed
            return
        self._dispatch()

    def _answer_from_cache(self, cached: dict[str, Any]) -> None:
        state = self.ctx.state
        state.calls += 1
        state.cache_hits += 1
        self._record_current("running")
        self._complete(cached, from_cache=True)

    # ---- step 8

    def _dispatch(self) -> None:
        ctx = self.ctx
        tool = self.tool
        assert tool is not None
        if ctx.stop_requested():
            self._abort(STOPPED_BY_USER, "a stop was requested before the call ran")
            return
        self.attempts += 1
        if self.attempts == 1:
            state = ctx.state
            state.calls += 1
            call = self.call
            assert call is not None
            state.current_tool_call = {  # (what _record_current("running") does)
                "id": call.id, "tool": call.name, "parameters": self.params,
                "status": "running", "started_at": self.started,
            }
        else:
            ctx.state.retries += 1
        # maybeDeferred, without a Deferred for the common synchronous tool.
        try:
            result = tool.execute(ctx.actor, **self.params)
        except Exception:
            if not self.killed:  # a tool may stop its own assistant while it runs
                self._on_failure(Failure())
            return
        if self.killed:
            return
        if type(result) is dict:  # the common synchronous tool
            # (what _on_result does, one call less, for a valid result that is no
            # failure: one validate_tool_result keeps, with nothing to retry)
            success = result.get("success")
            if ((success is True or "success" not in result)
                    and ((error := result.get("error")) is None or type(error) is str)):
                self._complete(result)
            else:
                self._on_result(result)
            return
        if isinstance(result, defer.Deferred):
            d: defer.Deferred[Any] = result
        elif type(result) is CoroutineType:
            d = defer.Deferred.fromCoroutine(result)
        else:
            self._on_result(result)
            return
        timeout = tool.timeout
        if timeout and timeout > 0 and not d.called:
            d.addTimeout(timeout, ctx.clock)
        self._wait(d, self._on_result, self._on_failure)

    def _retry_or(self, error: str, give_up: Callable[[], None]) -> None:
        """Back off then dispatch again if attempts remain; else ``give_up()``."""
        policy = self.ctx.retry_policy
        if self.attempts >= policy.max_attempts:
            give_up()
            return
        delay = policy.delay(self.attempts, self.ctx.rand)
        log.info("Retrying {tool} in {delay:.2f}s (attempt {attempt} of {max_attempts} "
                 "failed: {error})", tool=self._name(), delay=delay, attempt=self.attempts,
                 max_attempts=policy.max_attempts, error=error)
        wait = task.deferLater(self.ctx.clock, delay, lambda: None)
        self._wait(wait, lambda _: self._dispatch(), self._internal_error)

    def _on_result(self, value: Any) -> None:
        tool = self.tool
        assert tool is not None
        if (type(value) is dict and type(value.get("success", False)) is bool
                and ((error := value.get("error")) is None or type(error) is str)):
            result = value  # a valid result: what validate_tool_result gives back
        else:
            result = validate_tool_result(value, tool.name)
        if result is not value:  # not a dict, or a malformed one: replaced by an error
            self._complete(result, status=INVALID_RESULT)
            return
        if result.get("success") is False and is_retryable_error(result):
            self._retry_or(str(result.get("error", "")), lambda: self._complete(result))
            return
        self._complete(result)

    def _on_failure(self, failure: Failure) -> None:
        tool = self.tool
        assert tool is not None
        if failure.check(defer.TimeoutError):
            self.ctx.state.timeouts += 1
            error = f"timed out after {tool.timeout:g}s"
            status = TIMED_OUT
        else:
            error = _describe_failure(failure)
            status = TOOL_ERROR
            if not isinstance(failure.value, AIToolsError):
                log.failure("Tool {tool} raised (attempt {attempt})", failure,
                            tool=tool.name, attempt=self.attempts)
        result = {"success": False, "error": error}
        if is_retryable_error(failure):
            self._retry_or(error, lambda: self._complete(result, status=status))
            return
        self._complete(result, status=status)

    # ---- step 9

    def _complete(self, result: dict[str, Any], status: str | None = None,
                  from_cache: bool = False) -> None:
        ctx = self.ctx
        tool = self.tool
        assert tool is not None
        if ctx.stop_requested():
            self._abort(STOPPED_BY_USER, "a stop was requested while the tool ran")
            return
        success = result.get("success") is not False
        if success and not from_cache and result.get(RESTART_KEY):
            self._finish_restart(result)
            return
        if not success and self.attempts > 1:
            result = dict(result)
            result["error"] = f"{result.get('error', 'failed')} (gave up after " \
                              f"{self.attempts} attempts)"
            result["attempts"] = self.attempts
            result["retries"] = self.attempts - 1
        if status is None:
            status = SUCCESS if success else TOOL_ERROR
        content = plain_content(result, ctx.max_result_bytes)
        if content is None:  # not JSON, or too big: shaped
            shaped = shape_result(result, tool.name, ctx.max_result_bytes)
            result, content = shaped.result, shaped.content
            if shaped.not_serialisable:
                status, success = INVALID_RESULT, False
        if success:
            ctx.state.activity_since_wake += 1
            if ctx.cache is not None:
                if tool.category is _DANGEROUS:
                    ctx.cache.invalidate(ctx.cache_namespace)
                if tool.cacheable and not from_cache and self.key is not None:
                    self._store(result)
        call = self.call
        assert call is not None
        duration_ms = (ctx.clock.seconds() - self.started) * 1000.0
        call_id = call.id
        log.info("Function call completed: {name} ({ms}ms)", name=tool.name,
                 ms=round(duration_ms), success=success, status=status,
                 attempts=self.attempts, from_cache=from_cache, tool_call_id=call_id,
                 assistant=ctx.cache_namespace)
        current = ctx.state.current_tool_call
        if current is not None and current.get("id") == call_id:
            current["status"] = status
            current["success"] = success
            current["duration_ms"] = duration_ms
        if ctx.reflection_mode or self.finished:
            self._record(status, result, content, from_cache, duration_ms)
            return
        # (what _record does for a call recorded in the history, one call less)
        if result.get("success") is False:
            ctx.state.errors += 1
        entries = ctx.history.add_tool_exchange(
            call, content, native=ctx.native_tools, assistant_content=self.assistant_content)
        self.finished = True
        outcome = ToolCallOutcome(
            HISTORY, status, result, call, tool.category, self.attempts,
            duration_ms, from_cache, entries, True,
        )
        d = self.outcome_d
        if d is None:
            self.outcome = outcome
        else:
            d.callback(outcome)

    def _store(self, result: dict[str, Any]) -> None:
        """Cache a success under the validated key and the model's own arguments."""
        ctx = self.ctx
        cache = ctx.cache
        tool = self.tool
        assert cache is not None and tool is not None and self.key is not None
        keys = [self.key] if self.raw_key in (None, self.key) else [self.key, self.raw_key]
        for key in keys:
            if cache.is_local(tool.cache_scope):
                cache.put_now(ctx.cache_namespace, tool.cache_scope, key, result, tool.cache_ttl)
            else:
                cache.put(ctx.cache_namespace, tool.cache_scope, key, result, tool.cache_ttl)

    def _finish_restart(self, result: dict[str, Any]) -> None:
        ctx = self.ctx
        ctx.state.activity_since_wake += 1
        log.info("Function call {name} asked for a context restart", name=self._name())
        self._finish(ToolCallOutcome(
            kind=RESTART, status=CONTEXT_RESTART, result=result, call=self.call,
            category=self.tool.category if self.tool else None, attempts=self.attempts,
            duration_ms=self._elapsed_ms(),
        ))

    def _answer(self, status: str, result: dict[str, Any]) -> None:
        """Answer a call refused before dispatch (unknown, blocked, invalid)."""
        log.info("Function call refused: {name} ({status})", name=self._name(), status=status,
                 tool_call_id=self.call_id(), assistant=self.ctx.cache_namespace)
        shaped = shape_result(result, self._name() or "", self.ctx.max_result_bytes)
        self._record(status, shaped.result, shaped.content, False, self._elapsed_ms())

    def _record(self, status: str, result: dict[str, Any], content: str,
                from_cache: bool, duration_ms: float) -> None:
        ctx = self.ctx
        call = self.call
        assert call is not None
        if self.finished:  # killed meanwhile: a killed call writes nothing
            return
        if result.get("success") is False:
            ctx.state.errors += 1
        if ctx.reflection_mode:
            entries = build_tool_exchange(call, content, native=ctx.native_tools,
                                          assistant_content=self.assistant_content)
        else:
            entries = ctx.history.add_tool_exchange(
                call, content, native=ctx.native_tools,
                assistant_content=self.assistant_content,
            )
        self.finished = True  # (what _finish does; checked above)
        tool = self.tool
        # (positional: kind, status, result, call, category, attempts, duration_ms,
        # from_cache, history_entries, recorded)
        outcome = ToolCallOutcome(
            HISTORY, status, result, call, tool.category if tool else None, self.attempts,
            duration_ms, from_cache, entries, not ctx.reflection_mode,
        )
        d = self.outcome_d  # (what _deliver does)
        if d is None:
            self.outcome = outcome
        else:
            d.callback(outcome)

    def _record_current(self, status: str) -> None:
        call = self.call
        assert call is not None
        self.ctx.state.current_tool_call = {
            "id": call.id, "tool": call.name, "parameters": self.params,
            "status": status, "started_at": self.started,
        }


def execute_tool_call(
    context: ExecutionContext,
    tool_call: Any,
    *,
    assistant_content: str | None = None,
) -> defer.Deferred[ToolCallOutcome]:
    """Run one tool call; the Deferred fires with a :class:`ToolCallOutcome`, never fails.

    ``tool_call`` is whatever the model produced (see :func:`parse_tool_call`), or a
    :class:`~ai_tools.execution.history.ToolCall` made by :func:`prepare_tool_call`.
    ``assistant_content`` is text the model wrote along with the call; it is
    recorded in the assistant message.  Cancelling the Deferred kills the call
    (see the module docstring).
    """
    return _ToolCallRun(context, tool_call, assistant_content).start()


def run_tool_call(
    context: ExecutionContext,
    tool_call: Any,
    *,
    assistant_content: str | None = None,
) -> ToolCallOutcome | defer.Deferred[ToolCallOutcome]:
    """:func:`execute_tool_call`, with the outcome itself when the call ended at once.

    A synchronous tool (or a refused call) needs no Deferred: the loop runs
    every such call through here.  Otherwise the Deferred is the one
    :func:`execute_tool_call` would return (cancelling it kills the call).
    """
    return _ToolCallRun(context, tool_call, assistant_content).run()


def skip_tool_call(context: ExecutionContext, tool_call: Any, reason: str) -> ToolCallOutcome:
    """Answer a call that will not run because an earlier one ended the loop.

    Every call of a model response must have an answer: the loop gives the
    remaining ones this synthetic ``skipped`` result.  An unparseable call gets
    a ``parse_error`` abort outcome and writes nothing.
    """
    try:
        call = parse_tool_call(tool_call)
    except ToolCallParseError as e:
        return ToolCallOutcome(kind=ABORT, status=PARSE_ERROR,
                               result={"success": False, "error": f"malformed tool call: {e}"})
    if context.native_tools and context.history.has_tool_call_id(call.id):
        call = attrs.evolve(call, id=new_tool_call_id())
    tool = context.registry.get_tool(call.name)
    result = {"success": False, "status": SKIPPED,
              "error": f"Not executed: {reason}. Call it again if it is still needed."}
    content = json.dumps(result)
    if context.reflection_mode:
        entries = build_tool_exchange(call, content, native=context.native_tools)
    else:
        entries = context.history.add_tool_exchange(call, content, native=context.native_tools)
    return ToolCallOutcome(kind=HISTORY, status=SKIPPED, result=result, call=call,
                           category=tool.category if tool else None, history_entries=entries,
                           recorded=not context.reflection_mode)
