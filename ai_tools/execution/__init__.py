"""The execution layer: one tool call, deferred all the way.

Parse, gate, validate, cache, run (timeout, retries), record — see
``docs/execution.md``.  Modules: :mod:`.engine` (the call), :mod:`.cache`
(scoped result cache), :mod:`.history` (conversation history and its formats),
:mod:`.results` (shaping a tool's result for history).
"""

from ai_tools.execution.engine import (
    ExecutionContext,
    ExecutionState,
    ToolCallOutcome,
    execute_tool_call,
)

__all__ = ["ExecutionContext", "ExecutionState", "ToolCallOutcome", "execute_tool_call"]
