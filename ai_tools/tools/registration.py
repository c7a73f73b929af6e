"""Checks a tool class must pass before a registry accepts it (provisional)."""

from __future__ import annotations

from typing import Any

from ai_tools.errors import ToolRegistrationError


def check_tool_class(tool_class: Any, existing: dict[str, Any]) -> None:
    """Raise ToolRegistrationError if ``tool_class`` cannot be registered."""
    name = getattr(tool_class, "name", "")
    if not isinstance(name, str) or not name:
        raise ToolRegistrationError(f"{tool_class!r}: a tool needs a non-empty string name")
    if name in existing:
        raise ToolRegistrationError(f"tool {name!r} is already registered")
