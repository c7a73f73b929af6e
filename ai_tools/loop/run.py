"""The ReAct loop: ask the model, run the tools it calls, repeat until done.

:func:`execute_react_loop` runs one tick's loop for one assistant.  Each
iteration of :func:`_run` is the spec's steps, one function each:

1. continuation check (stop requests, token usage, iteration cap);
2. build the messages — what the assistant heard since the last model call
   joins the history first (:mod:`ai_tools.loop.events`); the status (step,
   remaining tool budget, any token advisory) is regenerated every iteration,
   at the end of the system prompt or, with ``status_at_end``, in a system
   message after the history;
3. call the model (streamed or not; a stop cancels the request in flight);
4. parse the tool calls (native or fallback; exit tools become signals);
5. to 8. run them in order (:func:`ai_tools.loop.calls.run_calls`): gate and
   execute through the engine, the token advisory, the termination rules;

then the checkpoint (the service persists the iteration).  The result is a
:class:`~ai_tools.loop.result.LoopResult`.  See ``docs/react-loop.md``.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, cast

from twisted.internet import defer
from twisted.python.failure import Failure

from ai_tools.errors import LLMError
from ai_tools.execution.reasons import TerminationReason
from ai_tools.interfaces import IAttemptObservingLLMClient
from ai_tools.llm.events import ChatResponse, ToolCall
from ai_tools.llm.parsing import ParsedCalls, parse_tool_calls
from ai_tools.log_gate import GatedLogger
from ai_tools.loop.advisory import (
    AdvisoryLevel,
    LoopContinuation,
    advise_message,
    check_loop_continuation,
)
from ai_tools.loop.calls import run_calls
from ai_tools.loop.config import LoopConfig
from ai_tools.loop.context import LoopContext
from ai_tools.loop.prompts import system_prompt_status
from ai_tools.loop.request import RequestPlan
from ai_tools.loop.result import LoopResult
from ai_tools.loop.state import LoopRun

__all__ = ["execute_react_loop"]

log = GatedLogger()

_Steps = Generator[defer.Deferred[Any], Any, Any]
"""A step that may wait: a plain generator the loop runs with ``yield from``."""


def execute_react_loop(
    ctx: LoopContext, config: LoopConfig | None = None
) -> defer.Deferred[LoopResult]:
    """Run one ReAct loop for ``ctx``; fires with a :class:`LoopResult`, never fails.

    Cancelling the returned Deferred is a kill, like ``ctx.control.stop()``:
    the request or tool in flight is cancelled and the loop ends with
    ``stopped_by_user``.
    """
    config = config or LoopConfig()
    try:
        run = LoopRun.start(ctx, config)
    except Exception as e:
        log.failure("ReAct loop of {assistant} could not start", assistant=ctx.assistant_name)
        return defer.succeed(LoopResult(
            iterations=0, results=(), termination_reason=TerminationReason.INTERNAL_ERROR,
            success=False, success_count=0, pattern_mode=config.pattern_mode,
            max_allowed_iterations=config.effective_max_iterations,
            error=f"{type(e).__name__}: {e}"))
    d: defer.Deferred[LoopResult] = _run(run)
    return d


@defer.inlineCallbacks
def _run(run: LoopRun) -> _Steps:
    tally, control = run.tally, run.ctx.control
    try:
        while tally.reason is None:
            persona = _persona(run)
            if isinstance(persona, defer.Deferred):
                persona = yield persona
            plan = run.plan_for(str(persona or ""))
            continuation = _check_continuation(run)                       # 1
            if continuation is None:
                break
            run.deliver_heard()                      # what was heard meanwhile joins
            messages = _build_messages(run, plan, continuation)           # 2
            response = yield from _call_model(run, plan, messages)        # 3
            if response is None:
                break
            calls, content = _parse_answer(run, plan, response)           # 4
            if calls:
                yield from run_calls(run, calls, content)                  # 5-8
            if tally.reason is not None and tally.reason.stopped:
                break  # no checkpoint after a stop: whoever stopped it saves
            saved = _checkpoint(run)
            if saved is not None:
                yield saved
    except defer.CancelledError:
        control.stop("cancelled")
        tally.end(control.termination, control.reason)
    except Exception as e:
        log.failure("ReAct loop of {assistant} failed", assistant=run.ctx.assistant_name)
        tally.end(TerminationReason.INTERNAL_ERROR, f"{type(e).__name__}: {e}")
    return _finish(run)


def _persona(run: LoopRun) -> Any:
    """The persona text: the context's, or what its provider answers (asked every
    iteration; a Deferred of it when the provider answers later)."""
    persona = run.ctx.system_prompt
    return persona() if callable(persona) else persona


def _check_continuation(run: LoopRun) -> LoopContinuation | None:
    """Step 1: whether another iteration may start; None when the loop ends here."""
    ctx, tally = run.ctx, run.tally
    if ctx.stop_requested():
        tally.end(ctx.control.termination, ctx.control.reason)
        return None
    pct = run.usage_percent()
    continuation = check_loop_continuation(pct, tally.iteration, run.max_iterations,
                                           run.config.thresholds)
    if not continuation.should_continue:
        if continuation.reason == "max_iterations":
            tally.end(TerminationReason.MAX_ITERATIONS)
        else:
            tally.end(TerminationReason.CRITICAL_TOKENS, _critical_message(run, continuation))
        return None
    tally.iteration += 1
    if run.listening():
        run.emit("iteration", max_iterations=run.max_iterations, usage_percent=round(pct, 1),
                 continuation=continuation.reason, tool_budget_remaining=tally.budget)
    return continuation


def _critical_message(run: LoopRun, continuation: LoopContinuation) -> str:
    """Why the context is full: the history (compaction frees it), or the prompt alone."""
    usage = run.meter.last
    if usage is None or usage.prompt_tokens * 100.0 < usage.window * run.config.thresholds.stop:
        return continuation.message
    tools = len(run.plan.schemas) if run.plan is not None else 0
    return (f"{continuation.message} The system prompt and its {tools} tool(s) alone take "
            f"{usage.prompt_tokens} tokens of the {usage.window}-token context window: "
            "shorten the persona or give the assistant a model with a larger window.")


def _build_messages(run: LoopRun, plan: RequestPlan, continuation: LoopContinuation
                    ) -> list[dict[str, object]]:
    """Step 2: the regenerated system prompt, then the history (fresh results advised)."""
    tally, advisory = run.tally, continuation.advisory
    status = system_prompt_status(tally.iteration - 1, run.max_iterations, tally.budget,
                                  advisory)
    messages = run.history.messages
    if tally.fresh_results and advisory.level is not AdvisoryLevel.NORMAL:
        fresh = {id(m) for m in tally.fresh_results}
        messages = [advise_message(m, advisory) if id(m) in fresh else m for m in messages]
    tally.fresh_results = []
    if run.nudge is not None:
        index, text = run.nudge
        messages.insert(index, {"role": "user", "content": text})
    if run.config.status_at_end:  # every request begins with the previous one
        messages.insert(0, {"role": "system", "content": plan.head})
        messages.append({"role": "system", "content": status})
    else:
        messages.insert(0, {"role": "system", "content": f"{plan.head}\n\n{status}"})
    return messages


def _call_model(run: LoopRun, plan: RequestPlan, messages: list[dict[str, object]]) -> _Steps:
    """Step 3: the model's answer, or None when the loop ends here (kill, model error)."""
    tally, control = run.tally, run.ctx.control
    llm = run.ctx.llm
    tally.deltas = []
    started = run.ctx.clock.seconds()
    try:
        on_attempt = run.ctx.on_request
        if on_attempt is not None and IAttemptObservingLLMClient.providedBy(llm):
            observing = cast(IAttemptObservingLLMClient, llm)
            asked = observing.complete(messages, tools=plan.request_tools,
                                       stream=run.config.stream, on_event=run.on_llm_event,
                                       on_attempt=on_attempt)
        else:
            asked = llm.complete(messages, tools=plan.request_tools, stream=run.config.stream,
                                 on_event=run.on_llm_event)
    except Exception:
        asked = defer.fail()
    try:
        response = yield control.track(asked if isinstance(asked, defer.Deferred)
                                       else defer.succeed(asked))
    except defer.CancelledError:
        run.model_requested(started, "cancelled")
        tally.add_text("".join(tally.deltas))
        control.stop("cancelled")
        tally.end(control.termination, control.reason)
        return None
    except LLMError as e:
        reason = _llm_reason(e)
        run.model_requested(started, str(reason), str(e) or type(e).__name__,
                            attempts=e.attempts, queued=e.queued)
        tally.usage["requests"] += e.attempts  # failed HTTP requests count too
        tally.add_text(e.partial_text or "".join(tally.deltas))
        tally.end(reason, str(e) or type(e).__name__)
        return None
    finally:
        control.untrack()
    return _take_answer(run, response, started)


def _llm_reason(error: LLMError) -> TerminationReason:
    try:
        return TerminationReason(error.reason)
    except ValueError:
        return TerminationReason.LLM_ERROR


def _take_answer(run: LoopRun, response: object, started: float) -> ChatResponse | None:
    """The answer arrived: count it; the events it saw are taken.  None if unusable.

    (A stop asked for meanwhile is seen before the answer's first call runs.)
    """
    tally = run.tally
    if not isinstance(response, ChatResponse):
        error = f"the model client returned {type(response).__name__}"
        run.model_requested(started, str(TerminationReason.LLM_ERROR), error)
        tally.add_text("".join(tally.deltas))
        tally.end(TerminationReason.LLM_ERROR, error)
        return None
    run.model_requested(started, "ok", usage=response.usage, attempts=response.attempts,
                        response=response, queued=response.queued)
    tally.add_usage(response.usage, response.attempts)
    tally.finish_reason = response.finish_reason
    if run.delivery is not None:
        run.delivery.take()
    return response


def _parse_answer(run: LoopRun, plan: RequestPlan, response: ChatResponse
                  ) -> tuple[list[ToolCall], str | None]:
    """Step 4: the normal calls to run and the answer's text; exit calls become signals."""
    tally = run.tally
    parsed = parse_tool_calls(response, plan.normal_names, plan.exit_names,
                              fallback=not plan.native)
    problem = _unusable(parsed)
    if problem is not None:
        tally.add_text(parsed.visible_text)
        tally.end(TerminationReason.PARSE_ERROR, problem)
        return [], None
    if parsed.unknown:  # answered by the engine; parsed again so their directives leave the text
        known = plan.normal_names | {c.name for c in parsed.unknown}
        parsed = parse_tool_calls(response, known, plan.exit_names, fallback=not plan.native)
    for warning in parsed.warnings:
        log.warn("Tool call of {assistant}: {warning}", assistant=run.ctx.assistant_name,
                 warning=warning)
    tally.add_text(parsed.visible_text)
    for call in parsed.exit:
        _record_signal(run, call)
    calls = [c for c in parsed.calls if c.name not in plan.exit_names]
    content = parsed.visible_text or None
    if not calls:
        if content:
            run.add_answer(content)
        tally.end(TerminationReason.COMPLETED)
    return calls, content


def _unusable(parsed: ParsedCalls) -> str | None:
    """Why the answer cannot be used at all (``parse_error``), or None.

    Unknown tool names alone are not a parse error: the execution engine
    answers them with the list of valid tools and the model may correct
    itself.  Cut-off or malformed calls, calls without a name and arguments
    that are not a JSON object are.
    """
    if parsed.error is None:
        return None
    malformed = (bool(parsed.invalid) or not parsed.unknown
                 or any(not c.name.strip() for c in parsed.unknown))
    return parsed.error.detail if malformed else None


def _record_signal(run: LoopRun, call: ToolCall) -> None:
    """An exit tool call: recorded (monotonic time) and published, never executed nor charged."""
    arguments: dict[str, object] = (dict(call.arguments) if call.arguments_error is None
                                 else {"_raw": call.raw_arguments})
    signal = {"tool_name": call.name, "arguments": arguments,
              "emitted_at": run.ctx.monotonic()}
    run.tally.signals.append(signal)
    run.emit("signal", **signal)


def _checkpoint(run: LoopRun) -> defer.Deferred[Any] | None:
    """Hand the service the iteration's progress; a Deferred it answers is waited for.

    The service persists the iteration there, before the next model call.  A
    failing checkpoint is logged and the loop goes on.
    """
    checkpoint = run.ctx.checkpoint
    if checkpoint is None:
        return None
    try:
        saved = checkpoint(run.tally.progress())
    except Exception:
        _checkpoint_failed(Failure(), run)
        return None
    if isinstance(saved, defer.Deferred):
        return saved.addErrback(_checkpoint_failed, run)
    return None


def _checkpoint_failed(failure: Failure, run: LoopRun) -> Failure | None:
    if failure.check(defer.CancelledError):
        return failure  # the loop is being cancelled: not the checkpoint's failure
    log.failure("Checkpoint of {assistant} failed after iteration {iteration}; the loop "
                "goes on", failure, assistant=run.ctx.assistant_name,
                iteration=run.tally.iteration)
    return None


def _finish(run: LoopRun) -> LoopResult:
    """Give back events no answer saw, make the result, publish and log the end."""
    tally, config = run.tally, run.config
    returned = run.delivery.give_back() if run.delivery is not None else 0
    success_count = sum(1 for r in tally.results if r.get("success"))
    usage = dict(tally.usage)
    usage["context_percent"] = round(usage["context_percent"], 1)
    result = LoopResult(
        iterations=tally.iteration, results=tuple(tally.results),
        termination_reason=tally.reason or TerminationReason.MAX_ITERATIONS,
        success=success_count > 0, success_count=success_count,
        pattern_mode=config.pattern_mode, max_allowed_iterations=run.max_iterations,
        signals=tuple(tally.signals), text="\n".join(tally.texts), usage=usage,
        duration_ms=round((run.ctx.clock.seconds() - run.started) * 1000.0, 3),
        error=tally.error, tool_budget_remaining=tally.budget,
        finish_reason=tally.finish_reason, events_returned=returned,
    )
    run.emit("termination", reason=str(result.termination_reason), error=result.error,
             success=result.success, iterations=result.iterations,
             signals=len(result.signals), duration_ms=result.duration_ms,
             events_returned=returned)
    _log_end(run, result)
    return result


_NAMED_TOOLS = 8
"""Tool names the loop's end line lists before it only counts the rest."""


def _log_end(run: LoopRun, result: LoopResult) -> None:
    """The loop's one info line: how it ended and the tool calls it made.

    Each call's own lines (the decision, the completion with its duration) are
    debug: a service at ``info`` builds none of them (``ai_tools.log_gate``),
    and ``log_level = "debug"`` shows them.
    """
    calls = result.results
    names = [str(entry.get("tool")) for entry in calls[:_NAMED_TOOLS]]
    if len(calls) > _NAMED_TOOLS:
        names.append(f"+{len(calls) - _NAMED_TOOLS}")
    log.info("ReAct loop of {assistant} ended: {reason} after {iterations} iteration(s), "
             "{calls} tool call(s) ({failed} failed){tools}",
             assistant=run.ctx.assistant_name, reason=str(result.termination_reason),
             iterations=result.iterations, calls=len(calls),
             failed=len(calls) - result.success_count,
             tools=f": {' '.join(names)}" if names else "", error=result.error,
             events_returned=result.events_returned, duration_ms=result.duration_ms)
