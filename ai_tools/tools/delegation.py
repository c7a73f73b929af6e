"""Delegation domain: handing a task to a budgeted sub-agent and checking on it.

The assistant runtime runs the sub-agent (its own ReAct loop with a restricted
tool set and a tool-call budget) in the background; its result comes back to
the assistant as a pending event.  Execution config keys:
``sub_agents_enabled`` (default true) and ``sub_agent_budget`` (the most tool
calls one sub-agent may make, default :data:`DEFAULT_SUB_AGENT_BUDGET`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from ai_tools.json_types import JSONObject
from ai_tools.tools import outcomes
from ai_tools.tools.base import Actor, ToolCategory
from ai_tools.tools.library_tool import LibraryTool, call

DEFAULT_SUB_AGENT_BUDGET = 10
MAX_SUB_AGENT_BUDGET = 50
NOT_DELEGABLE = frozenset({"delegate_task", "update_system_prompt", "go_to_sleep"})
"""Tools a sub-agent never gets: no recursive delegation, no changing its parent."""


def delegation_settings(config: Mapping[str, Any] | None) -> tuple[bool, int]:
    """(enabled, budget cap) from an execution config, defaults filled in."""
    config = config or {}
    enabled = bool(config.get("sub_agents_enabled", True))
    try:
        budget = int(config.get("sub_agent_budget", DEFAULT_SUB_AGENT_BUDGET))
    except (TypeError, ValueError):
        budget = DEFAULT_SUB_AGENT_BUDGET
    return enabled, max(1, min(MAX_SUB_AGENT_BUDGET, budget))


class DelegateTaskTool(LibraryTool):
    """Start a sub-agent on a task with a restricted tool set and a budget."""

    name = "delegate_task"
    description = (
        "Hand a complete task to a background helper with the tools it may use; "
        "the result comes later as an event."
    )
    category = ToolCategory.ASYNC_REQUIRED
    needs_world = False
    needs_assistant = True
    requires_character = False
    parameters: ClassVar[JSONObject] = {
        "type": "object",
        "properties": {
            "task": {
                "type": "string",
                "minLength": 10,
                "maxLength": 4000,
                "pattern": "\\w",
            },
            "tools": {
                "type": "array",
                "items": {"type": "string", "pattern": "^[a-z][a-z0-9_]{0,63}$"},
                "minItems": 1,
                "maxItems": 30,
                "uniqueItems": True,
            },
            "budget": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_SUB_AGENT_BUDGET,
                "description": "Most tool calls it may make.",
            },
        },
        "required": ["task", "tools"],
        "additionalProperties": False,
    }
    example: ClassVar[JSONObject] = {
        "task": "Find every object tagged 'market' and list their names and locations.",
        "tools": ["search_by_tag", "get_attributes"],
        "budget": 5,
    }

    async def run(
        self, actor: Actor, task: str, tools: list[str], budget: int | None = None, **_: object
    ) -> JSONObject:
        assistant = self.assistant(actor)
        enabled, cap = delegation_settings(getattr(assistant, "execution_config", None))
        if not enabled:
            return outcomes.refuse(
                "delegation is disabled for this assistant (execution config "
                "sub_agents_enabled is false); do the task yourself",
                outcomes.DISABLED,
            )
        refused = sorted(NOT_DELEGABLE.intersection(tools))
        if refused:
            return outcomes.invalid(
                f"a helper cannot be given {', '.join(refused)}", not_delegable=refused
            )
        granted = min(budget or cap, cap)
        task_id = await call(assistant.start_subagent, task.strip(), list(tools), granted)
        return outcomes.succeed(
            task_id=str(task_id),
            status="started",
            budget=granted,
            tools=list(tools),
            message="the result will arrive as an event; check with get_delegation_status",
        )


class GetDelegationStatusTool(LibraryTool):
    """Report on a delegated task."""

    name = "get_delegation_status"
    description = "Check a delegated task and its result."
    category = ToolCategory.SAFE_CHAIN
    needs_world = False
    needs_assistant = True
    requires_character = False
    parameters: ClassVar[JSONObject] = {
        "type": "object",
        "properties": {
            "task_id": {
                "type": "string",
                "minLength": 1,
                "maxLength": 100,
            }
        },
        "required": ["task_id"],
        "additionalProperties": False,
    }
    example: ClassVar[JSONObject] = {"task_id": "sub-1"}

    async def run(self, actor: Actor, task_id: str, **_: object) -> JSONObject:
        status = await call(self.assistant(actor).subagent_status, task_id)
        if status is None:
            return outcomes.not_found(f"no delegated task {task_id!r}")
        return outcomes.succeed(task_id=task_id, **{k: v for k, v in dict(status).items()
                                                   if k not in ("success", "task_id")})


TOOLS = (DelegateTaskTool, GetDelegationStatusTool)
