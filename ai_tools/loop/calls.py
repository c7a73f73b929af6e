"""Steps 5 to 8 of an iteration: the tool calls of one model answer, in order.

For each call: refuse it before it runs when the turn is over (``noop``, a
stop, the tool budget), else hand it to the execution engine (which gates,
validates, caches, runs and records it — step 5 and 6), record the result with
the token advisory of the moment (step 7), and apply the termination rules of
its outcome (step 8: TERMINAL / DANGEROUS tools, an abort, a context restart,
the consecutive-error cap).  When a call ends the turn, every call after it is
answered with a synthetic "skipped" result, so each call the model made has
exactly one answer in the history.

:func:`run_calls` is a plain generator the loop runs with ``yield from``: a
synchronous tool's outcome comes back at once, and only a call still running
is waited for (tracked, so a stop cancels it).
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

from twisted.internet import defer

from ai_tools.execution.engine import run_tool_call, skip_tool_call
from ai_tools.execution.outcome import OutcomeKind, ToolCallOutcome
from ai_tools.execution.reasons import TerminationReason
from ai_tools.execution.results import CLIPPED_KEY, clip_arguments, clip_text
from ai_tools.history_format import FALLBACK_RESULT_PREFIX
from ai_tools.llm.events import ToolCall
from ai_tools.loop.advisory import inject_token_advisory
from ai_tools.loop.state import EVENT_TEXT_BYTES, LoopRun

__all__ = ["run_calls"]


def run_calls(run: LoopRun, calls: Sequence[ToolCall], content: str | None
              ) -> Generator[defer.Deferred[Any], Any, None]:
    """Run ``calls`` in order; ``content`` is the answer's text (recorded with the first).

    Sets ``run.tally.reason`` when a call ends the loop.  The calls recorded
    share one assistant message, as the model said them (``same_answer``).
    """
    recorded = False
    for index, call in enumerate(calls):
        why = _turn_over(run, call)
        if why is not None:
            _skip(run, calls[index:] if call.name != run.config.noop_tool
                  else calls[index + 1:], why, content, recorded)
            return
        if run.listening():
            run.emit("tool_call", tool=call.name, tool_call_id=call.id,
                     arguments=_event_arguments(call), category=_category(run, call.name))
        answer = run_tool_call(run.execution, call, assistant_content=content,
                               same_answer=recorded)
        if isinstance(answer, defer.Deferred):
            answer = yield from _wait(run, answer)
        if answer.kind == OutcomeKind.HISTORY:
            content = None  # the exchange carried the answer's text
            recorded = True
        why = _take_outcome(run, answer)
        if why is not None:
            _skip(run, calls[index + 1:], why, content, recorded)
            return
    if content:
        run.add_answer(content)


def _event_arguments(call: ToolCall) -> dict[str, object]:
    """The call's arguments for the ``tool_call`` event, clipped like a history entry."""
    try:
        clipped = clip_arguments(call.arguments_json, EVENT_TEXT_BYTES)
    except (TypeError, ValueError, RecursionError):  # not plain JSON: the engine refuses it
        return {CLIPPED_KEY: "[arguments that are not plain JSON]"}
    return dict(call.arguments) if clipped is None else clipped


def _event_result(outcome: ToolCallOutcome) -> str | None:
    """The result's JSON text as the model reads it, clipped, for the ``tool_result`` event."""
    if not outcome.history_entries:
        return None
    content = outcome.history_entries[1].get("content")
    if not isinstance(content, str):
        return None
    if content.startswith(FALLBACK_RESULT_PREFIX):  # "[TOOL RESULT: name]\n{...}"
        content = content.partition("\n")[2]
    return clip_text(content, EVENT_TEXT_BYTES)


def _category(run: LoopRun, name: str) -> str | None:
    return run.plan.categories.get(name) if run.plan is not None else None


def _wait(run: LoopRun, answer: defer.Deferred[ToolCallOutcome]
          ) -> Generator[defer.Deferred[Any], Any, ToolCallOutcome]:
    """Wait for a call still running (a stop cancels it: the engine answers ``abort``)."""
    control = run.ctx.control
    try:
        outcome: ToolCallOutcome = yield control.track(answer)
    finally:
        control.untrack()
    return outcome


def _turn_over(run: LoopRun, call: ToolCall) -> str | None:
    """Why ``call`` must not run (the turn is over), or None; ends the loop if so."""
    tally = run.tally
    if call.name == run.config.noop_tool:
        tally.end(TerminationReason.NOOP)
        return "the turn ended (noop)"
    if run.ctx.stop_requested():
        control = run.ctx.control
        tally.end(control.termination, control.reason)
        return "the turn was stopped"
    if tally.budget is not None and tally.budget <= 0:
        tally.end(TerminationReason.TOOL_BUDGET_EXHAUSTED, "tool budget exhausted")
        return "the tool budget is exhausted"
    return None


def _take_outcome(run: LoopRun, outcome: ToolCallOutcome) -> str | None:
    """Record an outcome and apply its rules; why the other calls must not run, or None."""
    tally = run.tally
    if outcome.kind == OutcomeKind.ABORT:  # the aborted call left no history entry
        reason = outcome.ends_loop
        assert reason is not None
        if reason is TerminationReason.STOPPED_BY_USER:  # killed, or a stop seen in flight
            control = run.ctx.control
            control.stop(str(outcome.result.get("error") or "stopped"))  # (the first stop wins)
            tally.end(control.termination, control.reason)
            return "the turn was stopped"
        tally.end(reason, str(outcome.result.get("error") or ""))
        return "an earlier call failed"
    if tally.budget is not None and outcome.dispatched:
        tally.budget -= 1
    _record(run, outcome)
    if outcome.kind == OutcomeKind.RESTART:
        tally.consecutive_errors = 0
        return "the context was refreshed; ask again if needed"
    tally.consecutive_errors = 0 if outcome.success else tally.consecutive_errors + 1
    ends = outcome.ends_loop
    if ends is not None:
        tally.end(ends)
        return f"an earlier call ended the turn ({ends})"
    if tally.consecutive_errors >= run.config.consecutive_error_cap:
        tally.end(TerminationReason.CONSECUTIVE_ERRORS,
                  f"{tally.consecutive_errors} failed tool calls in a row")
        return "too many failed calls in a row"
    return None


def _record(run: LoopRun, outcome: ToolCallOutcome, skipped: bool = False) -> None:
    """Step 7: the result entry, with the token advisory of this moment, and its event.

    The advisory is what the model reads in the next request (it is added to
    what is sent, not stored in the history, so it never goes stale).
    """
    if outcome.kind == OutcomeKind.HISTORY and outcome.history_entries:
        run.tally.fresh_results.append(outcome.history_entries[1])
    entry = outcome.as_dict()
    entry["result"] = inject_token_advisory(outcome.result, run.usage_percent(),
                                            run.config.thresholds)
    entry["iteration"] = run.tally.iteration
    if skipped:
        entry["skipped"] = True
    run.tally.results.append(entry)
    if run.listening():
        error = outcome.result.get("error")
        run.emit("tool_result", tool=entry["tool"], tool_call_id=entry["tool_call_id"],
                 status=outcome.status, success=entry["success"], skipped=skipped,
                 duration_ms=outcome.duration_ms, from_cache=outcome.from_cache,
                 attempts=outcome.attempts, result=_event_result(outcome),
                 error=clip_text(error, EVENT_TEXT_BYTES) if isinstance(error, str) else None)


def _skip(run: LoopRun, calls: Sequence[ToolCall], why: str, content: str | None,
          recorded: bool) -> None:
    """Answer every remaining call "skipped" (each call gets one answer); the answer's text
    goes first.  ``recorded``: an earlier call of the answer is recorded; these join it."""
    if content:
        run.add_answer(content)
    for call in calls:
        outcome = skip_tool_call(run.execution, call, why, same_answer=recorded)
        if outcome.kind == OutcomeKind.HISTORY:
            _record(run, outcome, skipped=True)
            recorded = True
