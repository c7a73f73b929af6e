"""What a loop run did: :class:`LoopResult`."""

from __future__ import annotations

import attrs

from ai_tools.execution.reasons import TerminationReason
from ai_tools.json_types import JSONMapping

__all__ = ["LoopResult"]


@attrs.frozen
class LoopResult:
    """What a loop run did: its iterations and results, why it ended, signals, text, usage,
    duration."""

    iterations: int
    results: tuple[dict[str, object], ...]
    termination_reason: TerminationReason = attrs.field(converter=TerminationReason)
    success: bool
    """At least one tool call succeeded."""
    success_count: int
    pattern_mode: str
    max_allowed_iterations: int
    signals: tuple[dict[str, object], ...] = ()
    text: str = ""
    """All text the model produced during the loop, kept on every failure."""
    usage: JSONMapping = attrs.field(factory=dict)
    duration_ms: float = 0.0
    error: str | None = None
    """Detail of a failure or stop reason (None when the loop ended normally)."""
    tool_budget_remaining: int | None = None
    finish_reason: str | None = None
    """The ``finish_reason`` of the last model answer (``stop``, ``tool_calls``,
    ``length``...; None when no answer arrived)."""
    events_returned: int = 0
    """Pending events put back because no model answer saw them (see ``LoopContext``)."""

    @property
    def failed(self) -> bool:
        """Whether the termination reason is a failure."""
        return self.termination_reason.failed

    def as_dict(self) -> dict[str, object]:
        """JSON form (iterations, results, termination reason, success first)."""
        return {
            "iterations": self.iterations,
            "results": [dict(r) for r in self.results],
            "termination_reason": str(self.termination_reason),
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
            "finish_reason": self.finish_reason,
            "events_returned": self.events_returned,
        }
