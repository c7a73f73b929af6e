"""The execution layer: one tool call, deferred all the way.

Parse, gate, validate, cache, run (timeout, retries), record — see
``docs/execution.md``.  Modules: :mod:`.engine` (the call, step by step),
:mod:`.calls` (reading a call defensively), :mod:`.outcome` (how a call ended,
and whether it ends the loop), :mod:`.reasons` (why a loop ends: the one
termination-reason enum, shared with the loop), :mod:`.cache` (scoped result
cache), :mod:`.history` (conversation history and its formats),
:mod:`.results` (shaping a tool's result for history).
"""

from ai_tools.execution.calls import ToolCall, ToolCallParseError, parse_tool_call
from ai_tools.execution.engine import (
    ExecutionContext,
    ExecutionState,
    execute_tool_call,
    run_tool_call,
    skip_tool_call,
)
from ai_tools.execution.outcome import CallStatus, OutcomeKind, ToolCallOutcome
from ai_tools.execution.reasons import TerminationReason

__all__ = [
    "CallStatus",
    "ExecutionContext",
    "ExecutionState",
    "OutcomeKind",
    "TerminationReason",
    "ToolCall",
    "ToolCallOutcome",
    "ToolCallParseError",
    "execute_tool_call",
    "parse_tool_call",
    "run_tool_call",
    "skip_tool_call",
]
