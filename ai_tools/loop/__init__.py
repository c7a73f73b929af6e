"""The ReAct loop layer: ask the model, run the tools it calls, repeat until done.

Modules, in the order a loop uses them: :mod:`.config` (:class:`LoopConfig`,
exit tools, the gate), :mod:`.context` (what a loop runs with, its stop
switch), :mod:`.usage` (the one context-usage measure), :mod:`.request` (the
tools and prompt head every request carries), :mod:`.events` (pending events
delivered, taken or given back), :mod:`.state` (one run's state), :mod:`.run`
(the loop, step by step), :mod:`.calls` (the tool calls of one answer),
:mod:`.result` (:class:`LoopResult`); and :mod:`.advisory` (token levels and the
continuation check), :mod:`.prompts` (the system prompt), :mod:`.compaction`
(history compaction).  The termination reasons are the execution layer's
:class:`~ai_tools.execution.reasons.TerminationReason`.  See ``docs/react-loop.md``.
"""

from ai_tools.execution.reasons import TerminationReason
from ai_tools.loop.config import ExitTool, GatePolicy, LoopConfig
from ai_tools.loop.context import LoopContext, LoopControl, LoopProgress
from ai_tools.loop.request import measure_context
from ai_tools.loop.result import LoopResult
from ai_tools.loop.run import execute_react_loop
from ai_tools.loop.usage import ContextMeter, ContextUsage, context_window

__all__ = [
    "ContextMeter",
    "ContextUsage",
    "ExitTool",
    "GatePolicy",
    "LoopConfig",
    "LoopContext",
    "LoopControl",
    "LoopProgress",
    "LoopResult",
    "TerminationReason",
    "context_window",
    "execute_react_loop",
    "measure_context",
]
