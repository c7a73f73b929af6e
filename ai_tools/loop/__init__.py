"""The ReAct loop layer: ask the model, run the tools it calls, repeat until done.

Modules: :mod:`.run` (the loop), :mod:`.advisory` (token levels and the
continuation check), :mod:`.prompts` (the system prompt), :mod:`.compaction`
(history compaction).  See ``docs/react-loop.md``.
"""

from ai_tools.loop.run import (
    ExitTool,
    GatePolicy,
    LoopConfig,
    LoopContext,
    LoopControl,
    LoopResult,
    execute_react_loop,
)

__all__ = [
    "ExitTool",
    "GatePolicy",
    "LoopConfig",
    "LoopContext",
    "LoopControl",
    "LoopResult",
    "execute_react_loop",
]
