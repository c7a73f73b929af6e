"""Why a ReAct loop ended: the one set of termination reasons of the engine.

The loop ends with one of these; the execution engine names some of them too
(an aborted call says why the loop must stop; a TERMINAL or DANGEROUS call
says it ends the loop), so the enum lives here, below the loop, and both
layers import it from here.  It is a ``enum.StrEnum``: every member *is*
its string, so stored states, JSON results and comparisons with plain
strings (``reason == "noop"``) keep working.
"""

from __future__ import annotations

import enum

__all__ = ["FAILURE_REASONS", "TerminationReason"]


class TerminationReason(enum.StrEnum):
    """How a loop ended (``LoopResult.termination_reason``)."""

    TERMINAL_TOOL = "terminal_tool"
    """A TERMINAL tool (say, page...) succeeded: the loop waits for the player's answer."""
    DANGEROUS_TOOL = "dangerous_tool"
    """A DANGEROUS tool ran (success or not): one world change per tick."""
    NOOP = "noop"
    """The model called ``noop``: it explicitly has nothing (more) to do."""
    COMPLETED = "completed"
    """The model answered with plain text (or only exit-tool signals): it is done."""
    MAX_ITERATIONS = "max_iterations"
    """The iteration cap was reached."""
    CRITICAL_TOKENS = "critical_tokens"
    """The context window is full past the stop threshold (checked before a model call)."""
    STOPPED_BY_USER = "stopped_by_user"
    """An operator stopped or killed the loop (or the context's stop check said so)."""
    SHUTDOWN = "shutdown"
    """The service hosting the assistant stopped (a process stop, an Evennia reload)."""
    LLM_ERROR = "llm_error"
    """The model request failed."""
    LLM_UNAVAILABLE = "llm_unavailable"
    """The model client's circuit breaker is open: no request was made."""
    REPEATED_LINE_LOOP = "repeated_line_loop"
    """The model kept repeating itself and was cut off."""
    PARSE_ERROR = "parse_error"
    """A tool call could not be read (cut-off JSON, no name, arguments not an object)."""
    CONSECUTIVE_ERRORS = "consecutive_errors"
    """Too many failed tool calls in a row."""
    TOOL_BUDGET_EXHAUSTED = "tool_budget_exhausted"
    """The model asked for a tool after the tool budget ran out."""
    INTERNAL_ERROR = "internal_error"
    """A bug in the loop, the engine or a collaborator (logged with its traceback)."""

    @property
    def failed(self) -> bool:
        """Whether this reason means the loop failed (not ended normally nor stopped)."""
        return self in FAILURE_REASONS

    @property
    def stopped(self) -> bool:
        """Whether someone stopped the loop from outside (an operator, a shutdown)."""
        return self is TerminationReason.STOPPED_BY_USER or self is TerminationReason.SHUTDOWN


FAILURE_REASONS = frozenset({
    TerminationReason.LLM_ERROR, TerminationReason.LLM_UNAVAILABLE,
    TerminationReason.REPEATED_LINE_LOOP, TerminationReason.PARSE_ERROR,
    TerminationReason.CONSECUTIVE_ERRORS, TerminationReason.TOOL_BUDGET_EXHAUSTED,
    TerminationReason.INTERNAL_ERROR,
})
"""Reasons that mean the loop failed (as opposed to ending normally or being stopped)."""
