"""Executing one tool call, deferred all the way: every step, and its one outcome.

:func:`run_tool_call` takes what a model asked for and returns its
:class:`~ai_tools.execution.outcome.ToolCallOutcome` — at once when the call
ended at once (a synchronous tool, a refused call: no Deferred is made), else
a Deferred of it.  :func:`execute_tool_call` always returns a Deferred.  Neither
ever fails.  The steps, each one method of :class:`_ToolCallRun`:

1. defensive parsing (:func:`~ai_tools.execution.calls.parse_tool_call`); a
   malformed call aborts with ``parse_error``;
2. the decision log, with the model's reasoning as a structured field;
3. registry lookup: an unknown tool gives the model an error listing the valid names;
4. the gate: a tool the context does not allow is not dispatched; the model sees
   ``blocked_by_tool_mode`` and the allowed tools; a tool that acts as a
   character (``requires_character``) is refused when none is attached;
5. parameter validation: the model sees the errors it must fix, and the warnings
   (parameters dropped) come with the result;
6. the cache (tick / session / persistent scope, TTL), by the validated parameters;
7. dispatch: ``tool.execute(actor, **params)`` (a value, a Deferred or a
   coroutine) with ``addTimeout`` fresh per attempt, retrying retryable
   failures with exponential backoff through ``task.deferLater``; a pending
   stop request aborts with ``stopped_by_user`` before any attempt runs; a call
   that needs an operator's approval (:mod:`~ai_tools.execution.approval`) waits
   for it before its first attempt — refused or unanswered, it does not run and
   the model is told why;
8. post-execution: the stop check again, result validation, JSON shaping and
   truncation, counters, cache store or invalidation, the completion log, and
   the history entry.

History: the assistant message carrying the call and the tool's answer are
appended together at the end, in one operation; the later calls of the same
model answer join that one assistant message (``same_answer``), their answers
following.  A call that is killed, stopped
or that restarts the context writes nothing, so every tool call id in the
history always has exactly one answer.  In reflection mode nothing is written
(the outcome still carries the two messages).

Kill: cancelling the Deferred cancels whatever the call is waiting on (the
tool's Deferred — a tool doing I/O sees ``CancelledError`` — a backoff delay,
or a persistent cache read) and fires the Deferred with an ``abort`` /
``stopped_by_user`` outcome.  A timeout is different: the model is told
``{"success": false, "error": "timed out after Ns"}`` and may try something else.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from types import CoroutineType
from typing import Any, Protocol, cast

import attrs
from twisted.internet import defer, task
from twisted.internet.interfaces import IReactorTime
from twisted.logger import LogLevel
from twisted.python.failure import Failure

from ai_tools.errors import AIToolsError
from ai_tools.execution.approval import ApprovalDecision, ApprovalHook, refusal_result
from ai_tools.execution.cache import ToolCache, cache_key
from ai_tools.execution.calls import ToolCallParseError, new_tool_call_id, parse_tool_call
from ai_tools.execution.history import ConversationHistory, build_tool_exchange
from ai_tools.execution.outcome import RESTART_KEY, CallStatus, OutcomeKind, ToolCallOutcome
from ai_tools.execution.reasons import TerminationReason
from ai_tools.execution.results import DEFAULT_MAX_RESULT_BYTES, MIN_MAX_RESULT_BYTES, shape_result
from ai_tools.json_encoding import model_json
from ai_tools.llm.events import ToolCall
from ai_tools.log_gate import GatedLogger
from ai_tools.retry import DEFAULT_RETRY_POLICY, RetryPolicy, is_retryable_error
from ai_tools.tools.base import Actor, Tool, ToolCategory
from ai_tools.tools.registry import ToolRegistry
from ai_tools.tools.validation import validate_tool_result

__all__ = [
    "PARAMETER_WARNINGS_KEY",
    "ExecutionContext",
    "ExecutionState",
    "ToolGate",
    "execute_tool_call",
    "run_tool_call",
    "skip_tool_call",
]

log = GatedLogger()

PARAMETER_WARNINGS_KEY = "_parameter_warnings"
"""Added to a result whose call had parameters dropped or changed by validation."""

_HISTORY, _ABORT, _RESTART = OutcomeKind.HISTORY, OutcomeKind.ABORT, OutcomeKind.RESTART
_STOPPED = TerminationReason.STOPPED_BY_USER
_DEBUG = LogLevel.debug


class ToolGate(Protocol):
    """Which tools a context allows (the loop's ``GatePolicy`` is one)."""

    def allows(self, name: str, category: ToolCategory) -> bool:
        """Whether a tool with this name and category may run."""


@attrs.define(eq=False)
class ExecutionState:
    """An assistant's execution counters and the call it is running or ran last.

    Owned by the assistant (persisted with it), shared by every context built
    for it.  ``activity_since_wake`` counts successful calls that ran a tool (a
    cache hit ran nothing); the service resets it when the assistant wakes.
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
    current_tool_call: dict[str, object] | None = None
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


def _check_max_result_bytes(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if not isinstance(value, int) or value < MIN_MAX_RESULT_BYTES:
        raise ValueError(f"max_result_bytes must be an integer >= {MIN_MAX_RESULT_BYTES}, "
                         f"got {value!r}")


@attrs.frozen
class ExecutionContext:
    """Everything one tool call needs; built once per loop.

    ``clock`` drives timeouts, backoff and durations (the reactor, or a
    ``task.Clock`` in tests); ``rand`` is the jitter source.  ``gate`` None
    allows every tool.  ``native_tools`` selects the history format.
    ``stop_requested`` is polled before each attempt and when the tool returns.
    """

    registry: ToolRegistry
    actor: Actor
    history: ConversationHistory
    clock: IReactorTime
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
    approval: ApprovalHook | None = None
    """Asked before a call's first attempt whether it waits for an operator's yes
    (:mod:`ai_tools.execution.approval`); None: no call does."""

    def allows(self, tool: Tool) -> bool:
        """Whether the gate lets ``tool`` run."""
        return self.gate is None or self.gate.allows(tool.name, tool.category)

    def allowed_tool_names(self) -> list[str]:
        """Names of the registered tools the gate allows, sorted."""
        return [t.name for t in self.registry.get_all_tools() if self.allows(t)]


def _describe_failure(failure: Failure) -> str:
    value = failure.value
    message = str(value)
    if isinstance(value, AIToolsError) and message:
        return message
    name = type(value).__name__
    return f"{name}: {message}" if message else name


class _ToolCallRun:
    """The state of one tool call while it is in flight; one method per step."""

    __slots__ = ("approved", "assistant_content", "attempts", "call", "ctx", "finished", "key",
                 "killed", "logged", "outcome", "outcome_d", "params", "raw", "same_answer",
                 "started", "tool", "waiting", "warnings")

    def __init__(self, context: ExecutionContext, tool_call: object,
                 assistant_content: str | None, same_answer: bool = False) -> None:
        self.ctx = context
        self.raw = tool_call
        self.assistant_content = assistant_content
        self.same_answer = same_answer
        self.started = context.clock.seconds()
        # Made when run() returns unfinished; until then the outcome is kept here.
        self.outcome_d: defer.Deferred[ToolCallOutcome] | None = None
        self.outcome: ToolCallOutcome | None = None
        self.waiting: defer.Deferred[Any] | None = None
        self.finished = False
        self.killed = False
        self.call: ToolCall | None = None
        self.tool: Tool | None = None
        self.params: dict[str, object] = {}
        self.warnings: list[str] = []
        self.key: str | None = None
        self.attempts = 0
        self.approved = False
        self.logged = False
        """Whether this call's debug lines are kept (the log gate is asked once a call)."""

    # ---- plumbing

    def run(self) -> ToolCallOutcome | defer.Deferred[ToolCallOutcome]:
        """Run the call: its outcome if it ended at once, else a Deferred of it.

        Until this returns nothing can cancel the call (no Deferred exists yet),
        so a call that ends synchronously needs none.
        """
        try:
            self._begin()
        except Exception:
            self._internal_error(Failure())
        if self.outcome is not None:
            return self.outcome
        d = self.outcome_d = defer.Deferred(self._cancel)
        return d

    def _deliver(self, outcome: ToolCallOutcome) -> None:
        """Hand the outcome over once: to the Deferred, or to ``run()`` still running."""
        if self.finished:  # killed meanwhile: the abort outcome went out already
            return
        self.finished = True
        if self.outcome_d is None:
            self.outcome = outcome
        else:
            self.outcome_d.callback(outcome)

    def _wait(self, d: defer.Deferred[Any], callback: Callable[[Any], None],
              errback: Callable[[Failure], None]) -> None:
        """Wait on ``d`` (cancellable by a kill); ``d`` may have fired already."""
        self.waiting = d
        d.addCallbacks(self._resume, self._resume, callbackArgs=(callback,),
                       errbackArgs=(errback,))

    def _resume(self, value: object, step: Callable[[Any], None]) -> None:
        self.waiting = None
        if self.killed:
            return
        try:
            step(value)
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
        self._abort(_STOPPED, "the call was killed")

    def _elapsed_ms(self) -> float:
        return (self.ctx.clock.seconds() - self.started) * 1000.0

    def _name(self) -> str | None:
        return self.call.name if self.call is not None else None

    def _abort(self, reason: TerminationReason, error: str) -> None:
        self._update_current(reason)
        self._deliver(ToolCallOutcome(
            kind=_ABORT, status=reason, result={"success": False, "error": error},
            call=self.call, category=self.tool.category if self.tool else None,
            attempts=self.attempts, duration_ms=self._elapsed_ms(),
        ))

    def _internal_error(self, failure: Failure) -> None:
        log.failure("Internal error while executing tool call {tool}", failure,
                    tool=self._name())
        self._abort(TerminationReason.INTERNAL_ERROR,
                    f"internal error: {_describe_failure(failure)}")

    # ---- steps 1-5

    def _parse(self) -> bool:
        """Step 1: the call, checked; a fresh id if the model reused one (native)."""
        try:
            call = parse_tool_call(self.raw)
        except ToolCallParseError as e:
            log.warn("Malformed tool call: {error}", error=str(e))
            self._abort(TerminationReason.PARSE_ERROR, f"malformed tool call: {e}")
            return False
        ctx = self.ctx
        if ctx.native_tools and ctx.history.has_tool_call_id(call.id):
            fresh = new_tool_call_id()
            log.warn("Tool call id {old!r} is already in the history; using {new!r}",
                     old=call.id, new=fresh)
            call = attrs.evolve(call, id=fresh)
        self.call = call
        return True

    def _begin(self) -> None:
        ctx = self.ctx
        if not self._parse():
            return
        call = self.call
        assert call is not None
        self.logged = log.wants(_DEBUG)  # (the service logs at info: no event is built)
        if self.logged:
            log.debug("Assistant decision: {tool} - {reasoning}", tool=call.name,
                      reasoning=call.reasoning or "", tool_call_id=call.id,
                      arguments=call.arguments, assistant=ctx.cache_namespace)
        tool = self.tool = ctx.registry.get_tool(call.name)
        if tool is None:
            valid = ctx.allowed_tool_names()
            self._refuse(CallStatus.UNKNOWN_TOOL, {
                "error": f"Unknown tool '{call.name}'. Valid tools: {', '.join(valid)}",
                "valid_tools": valid})
        elif not ctx.allows(tool):
            self._refuse(CallStatus.BLOCKED_BY_TOOL_MODE, {
                "status": CallStatus.BLOCKED_BY_TOOL_MODE,
                "error": f"Tool '{tool.name}' is not available in the current mode.",
                "allowed_tools": ctx.allowed_tool_names()})
        elif tool.requires_character and not ctx.actor.character_id:
            self._refuse(CallStatus.NO_CHARACTER, {
                "status": CallStatus.NO_CHARACTER, "retryable": False,
                "error": f"Tool '{tool.name}' acts as a character and none is attached."})
        elif self._validate(tool, call):
            self._lookup_or_dispatch(tool)

    def _validate(self, tool: Tool, call: ToolCall) -> bool:
        """Step 5: the validated ``params`` (and warnings for the model), or a refusal."""
        try:
            validation = tool.validate_parameters(dict(call.arguments))
        except Exception:
            log.failure("Validating the parameters of {tool} raised", tool=tool.name)
            self._refuse(CallStatus.INVALID_PARAMETERS, {
                "error": f"Parameter validation failed for '{tool.name}' (internal error)."})
            return False
        if not validation.valid:
            self._refuse(CallStatus.INVALID_PARAMETERS,
                         {"error": validation.format_for_llm(tool.name)})
            return False
        self.params = validation.cleaned_params
        if validation.warnings:
            self.warnings = [f"{w['param']}: {w['message']}" for w in validation.warnings]
        return True

    # ---- step 6: the cache

    def _lookup_or_dispatch(self, tool: Tool) -> None:
        cache = self.ctx.cache
        if not tool.cacheable or cache is None:
            self._dispatch()
            return
        try:
            self.key = cache_key(tool.name, self.params)
        except (TypeError, ValueError):  # coercion made something that is not JSON
            self._dispatch()
            return
        namespace, scope = self.ctx.cache_namespace, tool.cache_scope
        if cache.is_local(scope):  # a memory scope answers at once: no Deferred
            self._on_lookup(cache.get_now(namespace, scope, self.key))
        else:
            self._wait(cache.get(namespace, scope, self.key), self._on_lookup,
                       self._on_cache_failure)

    def _on_lookup(self, cached: dict[str, object] | None) -> None:
        if cached is None:
            self._dispatch()
            return
        state = self.ctx.state
        state.calls += 1
        state.cache_hits += 1
        self._record_current("running")
        self._complete(cached, from_cache=True)

    def _on_cache_failure(self, failure: Failure) -> None:
        log.failure("Cache lookup for {tool} failed; running the tool", failure,
                    tool=self._name())
        self._dispatch()

    # ---- step 7

    def _dispatch(self) -> None:
        ctx = self.ctx
        tool = self.tool
        assert tool is not None
        if ctx.stop_requested():
            self._abort(_STOPPED, "a stop was requested before the call ran")
            return
        if ctx.approval is not None and not self.approved and self._awaits_approval(tool):
            return
        self.attempts += 1
        if self.attempts == 1:
            ctx.state.calls += 1
            self._record_current("running")
        else:
            ctx.state.retries += 1
        ctx.actor.call_id = self._call_id()  # keys the call's world effect (Actor.effect_key)
        # maybeDeferred, without a Deferred for the common synchronous tool.
        try:
            result = tool.execute(ctx.actor, **self.params)
        except Exception:
            if not self.killed:  # a tool may stop its own assistant while it runs
                self._on_failure(Failure())
            return
        if self.killed:
            return
        if isinstance(result, CoroutineType):
            result = defer.Deferred.fromCoroutine(result)
        if not isinstance(result, defer.Deferred):
            self._on_result(result)
            return
        if tool.timeout and tool.timeout > 0 and not result.called:
            result.addTimeout(tool.timeout, ctx.clock)
        self._wait(result, self._on_result, self._on_failure)

    def _awaits_approval(self, tool: Tool) -> bool:
        """Before the first attempt: wait for an operator's answer if the call needs one."""
        assert self.ctx.approval is not None and self.call is not None
        self.approved = True  # asked once per call (retries do not ask again)
        waiting = self.ctx.approval(tool, self.call, self.params)
        if waiting is None:
            return False
        log.info("Tool call {tool} waits for an operator's approval", tool=tool.name,
                 tool_call_id=self.call.id, assistant=self.ctx.cache_namespace)
        self._record_current("awaiting_approval")
        self._wait(waiting, self._on_decision, self._internal_error)
        return True

    def _on_decision(self, decision: ApprovalDecision) -> None:
        if decision.approved:
            log.info("Tool call {tool} approved by {by}", tool=self._name(), by=decision.by)
            self._dispatch()
        else:
            result = refusal_result(decision)
            status = CallStatus(cast(str, result["status"]))
            self._update_current(status, False, self._elapsed_ms())
            self._refuse(status, result)

    def _retry_or(self, error: str, give_up: Callable[[], None]) -> None:
        """Back off then dispatch again if attempts remain; else ``give_up()``."""
        policy = self.ctx.retry_policy
        tool = self.tool
        max_attempts = policy.max_attempts
        if tool is not None and tool.max_attempts is not None:
            max_attempts = tool.max_attempts  # the tool's own, e.g. @tool(retries=...)
        if self.attempts >= max_attempts:
            give_up()
            return
        delay = policy.delay(self.attempts, self.ctx.rand)
        log.info("Retrying {tool} in {delay:.2f}s (attempt {attempt} of {max_attempts} "
                 "failed: {error})", tool=self._name(), delay=delay, attempt=self.attempts,
                 max_attempts=max_attempts, error=error)
        wait = task.deferLater(self.ctx.clock, delay, lambda: None)
        self._wait(wait, lambda _: self._dispatch(), self._internal_error)

    def _on_result(self, value: object) -> None:
        """What the tool returned: validated, retried if a retryable failure."""
        tool = self.tool
        assert tool is not None
        result = validate_tool_result(value, tool.name)
        if result is not value:  # not a dict, or a malformed one: replaced by an error
            self._complete(result, status=CallStatus.INVALID_RESULT)
        elif result.get("success") is False and is_retryable_error(result):
            self._retry_or(str(result.get("error", "")), lambda: self._complete(result))
        else:
            self._complete(result)

    def _on_failure(self, failure: Failure) -> None:
        tool = self.tool
        assert tool is not None
        if failure.check(defer.TimeoutError):
            self.ctx.state.timeouts += 1
            error, status = f"timed out after {tool.timeout:g}s", CallStatus.TIMED_OUT
        else:
            error, status = _describe_failure(failure), CallStatus.TOOL_ERROR
            if not isinstance(failure.value, AIToolsError):
                log.failure("Tool {tool} raised (attempt {attempt})", failure,
                            tool=tool.name, attempt=self.attempts)
        result = {"success": False, "error": error}
        if is_retryable_error(failure):
            self._retry_or(error, lambda: self._complete(result, status=status))
            return
        self._complete(result, status=status)

    # ---- step 8

    def _complete(self, result: dict[str, object], status: CallStatus | None = None,
                  from_cache: bool = False) -> None:
        """Post-execution: restart, retry notes, shaping, cache, log, then the record."""
        if self.ctx.stop_requested():
            self._abort(_STOPPED, "a stop was requested while the tool ran")
            return
        success = result.get("success") is not False
        if success and not from_cache and result.get(RESTART_KEY):
            self._finish_restart(result)
            return
        if not success and self.attempts > 1:
            result = {**result, "attempts": self.attempts, "retries": self.attempts - 1,
                      "error": f"{result.get('error', 'failed')} (gave up after "
                               f"{self.attempts} attempts)"}
        if status is None:
            status = CallStatus.SUCCESS if success else CallStatus.TOOL_ERROR
        tool, call = self.tool, self.call
        assert tool is not None and call is not None
        # Shaped first: a success the model is told is invalid is neither cached nor counted.
        shaped = shape_result({**result, PARAMETER_WARNINGS_KEY: self.warnings}
                              if self.warnings else result,  # what validation dropped
                              tool.name, self.ctx.max_result_bytes)
        if shaped.not_serialisable:
            status, success = CallStatus.INVALID_RESULT, False
        if success and not from_cache:
            self._after_success(tool, result)
        duration_ms = self._elapsed_ms()
        if self.logged:
            log.debug("Function call completed: {name} ({ms}ms)", name=tool.name,
                      ms=round(duration_ms), success=success, status=status,
                      attempts=self.attempts, from_cache=from_cache, tool_call_id=call.id,
                      assistant=self.ctx.cache_namespace)
        self._update_current(status, success, duration_ms)
        self._record(status, shaped.result, shaped.content, from_cache, duration_ms)

    def _after_success(self, tool: Tool, result: dict[str, object]) -> None:
        """A tool ran and succeeded: activity counted, cache stored or invalidated."""
        ctx = self.ctx
        ctx.state.activity_since_wake += 1
        cache = ctx.cache
        if cache is None:
            return
        if tool.category is ToolCategory.DANGEROUS:
            cache.invalidate(ctx.cache_namespace)
        if tool.cacheable and self.key is not None:
            cache.put(ctx.cache_namespace, tool.cache_scope, self.key, result, tool.cache_ttl)

    def _finish_restart(self, result: dict[str, object]) -> None:
        self.ctx.state.activity_since_wake += 1
        log.info("Function call {name} asked for a context restart", name=self._name())
        self._update_current(CallStatus.CONTEXT_RESTART, True, self._elapsed_ms())
        self._deliver(ToolCallOutcome(
            kind=_RESTART, status=CallStatus.CONTEXT_RESTART, result=result, call=self.call,
            category=self.tool.category if self.tool else None, attempts=self.attempts,
            duration_ms=self._elapsed_ms(),
        ))

    def _refuse(self, status: CallStatus, result: dict[str, object]) -> None:
        """Answer a call refused before dispatch (unknown, blocked, no character, invalid)."""
        log.info("Function call refused: {name} ({status})", name=self._name(), status=status,
                 tool_call_id=self._call_id(), assistant=self.ctx.cache_namespace)
        shaped = shape_result({"success": False, **result}, self._name() or "",
                              self.ctx.max_result_bytes)
        self._record(status, shaped.result, shaped.content, False, self._elapsed_ms())

    def _record(self, status: str, result: dict[str, object], content: str,
                from_cache: bool, duration_ms: float) -> None:
        """The history entry (two messages, one operation) and the ``history`` outcome."""
        ctx = self.ctx
        call = self.call
        assert call is not None
        if self.finished:  # killed meanwhile: a killed call writes nothing
            return
        if result.get("success") is False:
            ctx.state.errors += 1
        if ctx.reflection_mode:
            entries = build_tool_exchange(call, content, native=ctx.native_tools,
                                          assistant_content=self.assistant_content,
                                          max_bytes=ctx.max_result_bytes)
        else:
            entries = ctx.history.add_tool_exchange(
                call, content, native=ctx.native_tools, assistant_content=self.assistant_content,
                max_bytes=ctx.max_result_bytes, same_answer=self.same_answer)
        tool = self.tool
        self._deliver(ToolCallOutcome(
            kind=_HISTORY, status=status, result=result, call=call,
            category=tool.category if tool else None, attempts=self.attempts,
            duration_ms=duration_ms, from_cache=from_cache, history_entries=entries,
            recorded=not ctx.reflection_mode,
        ))

    def skip(self, reason: str) -> ToolCallOutcome:
        """Answer the call with a synthetic ``skipped`` result (it will not run)."""
        if self._parse():
            self.tool = self.ctx.registry.get_tool(self.call.name)  # type: ignore[union-attr]
            result = {"success": False, "status": CallStatus.SKIPPED,
                      "error": f"Not executed: {reason}. Call it again if it is still needed."}
            self._record(CallStatus.SKIPPED, result, model_json(result), False, 0.0)
        assert self.outcome is not None
        return self.outcome

    # ---- the assistant's current call (status pages)

    def _call_id(self) -> str | None:
        return self.call.id if self.call is not None else None

    def _record_current(self, status: str) -> None:
        call = self.call
        assert call is not None
        self.ctx.state.current_tool_call = {
            "id": call.id, "tool": call.name, "parameters": self.params,
            "status": status, "started_at": self.started,
        }

    def _update_current(self, status: str, success: bool | None = None,
                        duration_ms: float | None = None) -> None:
        current = self.ctx.state.current_tool_call
        if current is None or current.get("id") != self._call_id():
            return
        current["status"] = status
        if success is not None:
            current["success"] = success
            current["duration_ms"] = duration_ms


def run_tool_call(
    context: ExecutionContext,
    tool_call: object,
    *,
    assistant_content: str | None = None,
    same_answer: bool = False,
) -> ToolCallOutcome | defer.Deferred[ToolCallOutcome]:
    """Run one tool call: its outcome at once if it ended at once, else a Deferred of it.

    ``tool_call`` is whatever the model produced (see
    :func:`~ai_tools.execution.calls.parse_tool_call`), usually an
    :class:`~ai_tools.llm.events.ToolCall`.  ``assistant_content`` is text the
    model wrote along with the call; it is recorded in the assistant message.
    ``same_answer``: an earlier call of the same model answer was recorded last;
    this one joins its assistant message (one message for all the calls of an
    answer, see :meth:`ConversationHistory.add_tool_exchange`).
    A synchronous tool (or a refused call) needs no Deferred; otherwise
    cancelling the Deferred kills the call (see the module docstring).  Never
    fails.
    """
    return _ToolCallRun(context, tool_call, assistant_content, same_answer).run()


def execute_tool_call(
    context: ExecutionContext,
    tool_call: object,
    *,
    assistant_content: str | None = None,
) -> defer.Deferred[ToolCallOutcome]:
    """:func:`run_tool_call`, always as a Deferred (fired already if the call ended at once)."""
    outcome = run_tool_call(context, tool_call, assistant_content=assistant_content)
    if isinstance(outcome, ToolCallOutcome):
        return defer.succeed(outcome)
    return outcome


def skip_tool_call(context: ExecutionContext, tool_call: object, reason: str,
                   same_answer: bool = False) -> ToolCallOutcome:
    """Answer a call that will not run because an earlier one ended the loop.

    Every call of a model response must have an answer: the loop gives the
    remaining ones this synthetic ``skipped`` result.  An unparseable call gets
    a ``parse_error`` abort outcome and writes nothing.  ``same_answer`` as for
    :func:`run_tool_call`.
    """
    return _ToolCallRun(context, tool_call, None, same_answer).skip(reason)
