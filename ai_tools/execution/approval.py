"""Approval of a tool call by an operator before it runs: the policy and the outcome.

A dangerous call (one that changes the world for good) may have to wait for
an operator's yes or no.  Who needs approval is a setting, ``"never"`` or
``"operator"``: an assistant's ``approval`` covers its DANGEROUS tools, its
``tool_approval`` table names single tools (any category), and a tool class
may say it with its ``approval`` attribute (the assistant's table wins, then
the tool's own word, then the assistant's setting for DANGEROUS tools).

The engine asks an :data:`ApprovalHook` before the first attempt of a call:
None means run it, a Deferred means wait for its :class:`ApprovalDecision`
(the service's board, :mod:`ai_tools.service.approvals`, bounds that wait and
takes the operator's answer).  A refused or unanswered call does not run; the
model is told why in the call's result (:func:`refusal_result`).  Cancelling
the wait (a kill, a stop) cancels the request.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs
from twisted.internet import defer

from ai_tools.errors import ConfigError
from ai_tools.json_types import JSONMapping
from ai_tools.llm.events import ToolCall
from ai_tools.tools.base import Tool, ToolCategory

__all__ = ["APPROVAL_MODES", "NEVER", "OPERATOR", "ApprovalDecision", "ApprovalHook",
           "check_approval_mode", "check_tool_approval", "needs_approval", "refusal_result"]

NEVER = "never"
OPERATOR = "operator"
APPROVAL_MODES = (NEVER, OPERATOR)
"""The values of an approval setting."""

ApprovalHook = Callable[[Tool, ToolCall, JSONMapping], "defer.Deferred[Any] | None"]
"""Asked before a call's first attempt: None (run it) or a Deferred of an
:class:`ApprovalDecision`."""


@attrs.frozen
class ApprovalDecision:
    """An operator's answer (or the lack of one) about one call."""

    approved: bool
    by: str = ""
    """Who answered: ``api``, ``console``, ``manhole``, ``world:<character>``, ``service``."""
    reason: str = ""
    timed_out: bool = False


def check_approval_mode(value: object, where: str) -> str:
    """``value`` if it is an approval mode, else a ConfigError naming ``where``."""
    if value not in APPROVAL_MODES:
        raise ConfigError(f"{where} must be one of {', '.join(map(repr, APPROVAL_MODES))}, "
                          f"got {value!r}")
    return str(value)


def check_tool_approval(value: object, where: str) -> dict[str, str]:
    """A ``{tool name: mode}`` table checked (ConfigError naming ``where``)."""
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where} must be a table of tool name = \"never\" | \"operator\"")
    table: dict[str, str] = {}
    for name, mode in value.items():
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{where}: tool names must be non-empty strings")
        table[name] = check_approval_mode(mode, f"{where}.{name}")
    return table


def needs_approval(tool: Tool, approval: str, tool_approval: Mapping[str, str]) -> bool:
    """Whether a call of ``tool`` waits for an operator (the rule of the module docstring)."""
    mode = tool_approval.get(tool.name) or getattr(tool, "approval", None)
    if mode is None:
        mode = approval if tool.category is ToolCategory.DANGEROUS else NEVER
    return mode == OPERATOR


def refusal_result(decision: ApprovalDecision) -> dict[str, object]:
    """What the model reads about a call that was not approved (it did not run)."""
    why = f": {decision.reason}" if decision.reason else ""
    if decision.timed_out:
        return {"success": False, "status": "approval_timed_out", "retryable": False,
                "error": f"No operator approved this call in time{why}. It did not run; "
                         "do something else, or ask again later."}
    by = f" ({decision.by})" if decision.by else ""
    return {"success": False, "status": "approval_refused", "retryable": False,
            "error": f"An operator refused this call{by}{why}. It did not run; "
                     "do not repeat it unchanged."}
