"""How one tool call ended: the discriminated outcome the loop acts on.

:class:`ToolCallOutcome` says whether the call's exchange went into the history
(``history``), whether the loop must stop (``abort``, with the termination
reason as ``status``) or restart the iteration (``restart``), and — in one
place, :attr:`ToolCallOutcome.ends_loop` — whether the call ends the loop.
"""

from __future__ import annotations

import enum

import attrs

from ai_tools.execution.reasons import TerminationReason
from ai_tools.llm.events import ToolCall
from ai_tools.tools.base import ToolCategory

__all__ = ["RESTART_KEY", "CallStatus", "OutcomeKind", "ToolCallOutcome"]


class OutcomeKind(enum.StrEnum):
    """The three kinds of outcome."""

    HISTORY = "history"
    """The call was answered; its exchange is in the history (unless reflection mode)."""
    ABORT = "abort"
    """A fatal condition: the loop must stop with ``status`` as its reason. Nothing written."""
    RESTART = "restart"
    """The tool enriched the context: the loop restarts the iteration. Nothing written."""


class CallStatus(enum.StrEnum):
    """Why a ``history`` outcome ended as it did (``restart`` has its own status)."""

    SUCCESS = "success"
    TOOL_ERROR = "tool_error"
    """The tool raised, or returned ``{"success": false}`` (after any retries)."""
    TIMED_OUT = "timed_out"
    """Every attempt timed out (or the last one did, after retryable failures)."""
    UNKNOWN_TOOL = "unknown_tool"
    BLOCKED_BY_TOOL_MODE = "blocked_by_tool_mode"
    NO_CHARACTER = "no_character"
    """The tool acts as a character (``requires_character``) and none is attached."""
    INVALID_PARAMETERS = "invalid_parameters"
    INVALID_RESULT = "invalid_result"
    """The tool returned something other than a JSON-serialisable dict."""
    SKIPPED = "skipped"
    """Not run because an earlier call of the same answer ended the loop."""
    CONTEXT_RESTART = "context_restart"
    """(``restart`` outcomes) the tool asked for the iteration to restart."""
    APPROVAL_REFUSED = "approval_refused"
    """The call needed an operator's approval and was refused (it did not run)."""
    APPROVAL_TIMED_OUT = "approval_timed_out"
    """The call needed an operator's approval and none came in time (it did not run)."""


RESTART_KEY = "_restart_context"
"""A successful result with this key set true asks for a ``restart`` outcome."""


@attrs.frozen
class ToolCallOutcome:
    """How one tool call ended (a discriminated union: ``kind`` says which fields hold).

    ``status`` says why: a :class:`CallStatus`, or for ``abort`` the loop's
    :class:`~ai_tools.execution.reasons.TerminationReason`.  ``result`` is what
    the model sees (for ``abort``, an error dict for the logs).
    ``history_entries`` are the two messages recording the call (empty unless
    ``kind`` is ``history``); ``recorded`` says whether they were appended to
    the history (False in reflection mode).
    """

    kind: OutcomeKind
    status: str
    result: dict[str, object]
    call: ToolCall | None = None
    category: ToolCategory | None = None
    attempts: int = 0
    duration_ms: float = 0.0
    from_cache: bool = False
    history_entries: tuple[dict[str, object], ...] = ()
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
        """Whether the call was answered (run, or from the cache) without a failure."""
        return self.kind != OutcomeKind.ABORT and self.result.get("success") is not False

    @property
    def dispatched(self) -> bool:
        """Whether the tool's ``execute`` ran at least once, or the cache answered for it.

        A dispatched call costs one unit of the loop's tool budget.
        """
        return self.attempts > 0 or self.from_cache

    @property
    def ends_loop(self) -> TerminationReason | None:
        """The termination reason this call imposes on the loop, or None.

        ``dangerous_tool`` once a DANGEROUS tool was dispatched (the world may
        have changed, success or not); ``terminal_tool`` when a TERMINAL tool
        succeeded — a failed one reached nobody, so the model may try again.
        Calls refused before dispatch (unknown, blocked, invalid) let the model
        correct itself.  An ``abort`` ends the loop with its ``status``;
        a ``restart`` goes on with the next iteration.
        """
        if self.kind == OutcomeKind.ABORT:
            return TerminationReason(self.status)
        if self.kind != OutcomeKind.HISTORY or not self.dispatched:
            return None
        if self.category is ToolCategory.DANGEROUS:
            return TerminationReason.DANGEROUS_TOOL
        if self.category is ToolCategory.TERMINAL and self.success:
            return TerminationReason.TERMINAL_TOOL
        return None

    def as_dict(self) -> dict[str, object]:
        """A JSON-serialisable summary (the start of the loop's ``results`` entries)."""
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
            "category": self.category,
        }
