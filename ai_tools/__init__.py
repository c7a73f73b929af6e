"""ai_tools: a Twisted-native engine for LLM-driven assistants that act through tools.

The documented public names are importable from here::

    from ai_tools import AssistantService, AssistantConfig, Tool, ToolCategory

Start with :class:`~ai_tools.service.service.AssistantService` (host many
assistants on one reactor), :func:`~ai_tools.tools.function_tool.tool` (a typed
function as a tool), :mod:`ai_tools.tools` (tools and registries) and
:mod:`ai_tools.testing` (a scripted OpenAI-compatible model server for tests).
The names are resolved on first use, so importing one layer does not import the
layers above it.  Where each is defined:

- the service: :class:`~ai_tools.service.service.AssistantService`,
  :class:`~ai_tools.service.assistant.AssistantConfig`,
  :class:`~ai_tools.service.tick.TickResult`;
- tools: :func:`~ai_tools.tools.function_tool.tool`, :class:`~ai_tools.tools.base.Tool`,
  :class:`~ai_tools.tools.base.ToolCategory`, :class:`~ai_tools.tools.base.Actor`,
  :class:`~ai_tools.tools.registry.ToolRegistry`;
- the ReAct loop: :func:`~ai_tools.loop.run.execute_react_loop`,
  :class:`~ai_tools.loop.config.LoopConfig`, :class:`~ai_tools.loop.config.ExitTool`,
  :class:`~ai_tools.loop.config.GatePolicy`, :class:`~ai_tools.loop.context.LoopContext`,
  :class:`~ai_tools.loop.context.LoopControl`, :class:`~ai_tools.loop.result.LoopResult`;
- one tool call: :func:`~ai_tools.execution.engine.execute_tool_call`,
  :class:`~ai_tools.execution.engine.ExecutionContext`,
  :class:`~ai_tools.execution.outcome.ToolCallOutcome`,
  :class:`~ai_tools.execution.reasons.TerminationReason`,
  :class:`~ai_tools.llm.events.ToolCall`;
- the model client: :class:`~ai_tools.llm.client.OpenAIChatClient`,
  :class:`~ai_tools.llm.profile.ModelProfile`.

The contracts a host implements are in :mod:`ai_tools.interfaces`, the errors
in :mod:`ai_tools.errors`.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_PUBLIC = {
    "AssistantService": "ai_tools.service.service",
    "AssistantConfig": "ai_tools.service.assistant",
    "TickResult": "ai_tools.service.tick",
    "ExitTool": "ai_tools.loop.config",
    "GatePolicy": "ai_tools.loop.config",
    "LoopConfig": "ai_tools.loop.config",
    "LoopContext": "ai_tools.loop.context",
    "LoopControl": "ai_tools.loop.context",
    "LoopResult": "ai_tools.loop.result",
    "execute_react_loop": "ai_tools.loop.run",
    "TerminationReason": "ai_tools.execution.reasons",
    "ExecutionContext": "ai_tools.execution.engine",
    "ToolCall": "ai_tools.llm.events",
    "ToolCallOutcome": "ai_tools.execution.outcome",
    "execute_tool_call": "ai_tools.execution.engine",
    "Actor": "ai_tools.tools.base",
    "Tool": "ai_tools.tools.base",
    "ToolCategory": "ai_tools.tools.base",
    "ToolRegistry": "ai_tools.tools.registry",
    "tool": "ai_tools.tools.function_tool",
    "OpenAIChatClient": "ai_tools.llm.client",
    "ModelProfile": "ai_tools.llm.profile",
}

__all__ = [  # the names of _PUBLIC, written out for readers and tools (a test keeps them equal)
    "Actor",
    "AssistantConfig",
    "AssistantService",
    "ExecutionContext",
    "ExitTool",
    "GatePolicy",
    "LoopConfig",
    "LoopContext",
    "LoopControl",
    "LoopResult",
    "ModelProfile",
    "OpenAIChatClient",
    "TerminationReason",
    "TickResult",
    "Tool",
    "ToolCall",
    "ToolCallOutcome",
    "ToolCategory",
    "ToolRegistry",
    "__version__",
    "execute_react_loop",
    "execute_tool_call",
    "tool",
]


def __getattr__(name: str) -> Any:
    """Resolve a public name from the module that defines it (PEP 562)."""
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'ai_tools' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(__all__)
