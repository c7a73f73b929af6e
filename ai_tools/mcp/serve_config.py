"""``[mcp.serve]``: whether the game is an MCP server, and as which character it acts.

The standalone service reads the table from its TOML file; the Evennia host
builds the same :class:`McpServeConfig` from the game's settings.  The other
keys of ``[mcp]`` (``[mcp.servers.NAME]``: MCP servers the assistants use)
are read elsewhere.

::

    [mcp.serve]
    character = "c_guide"        # every MCP session acts as this character
    name = "mcp"                 # the name its events and history go under
    allow_dangerous = false      # DANGEROUS tools (destructive) are offered only if true
    tools = ["look", "say"]      # optional: only these tools
    categories = ["safe_chain"]  # optional: only these categories
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import attrs

from ai_tools.errors import ConfigError
from ai_tools.tools.base import ToolCategory

__all__ = ["McpServeConfig", "parse_serve_table"]

_NAME = re.compile(r"^[A-Za-z0-9_.:\-]{1,64}$")

_KEYS = ("enabled", "character", "name", "allow_dangerous", "tools", "categories",
         "max_sessions", "session_idle", "request_timeout", "history_limit")


@attrs.frozen
class McpServeConfig:
    """How the game serves MCP (see the module docstring for the keys)."""

    character: str
    name: str = "mcp"
    allow_dangerous: bool = False
    tools: frozenset[str] | None = None
    categories: frozenset[ToolCategory] | None = None
    max_sessions: int = 16
    session_idle: float = 3600.0
    request_timeout: float = 300.0
    history_limit: int = 200
    """Messages of the MCP history kept (the newest; two per call)."""

    def allowed_categories(self) -> frozenset[ToolCategory]:
        """The categories offered: those configured (or all), DANGEROUS only if allowed."""
        chosen = self.categories if self.categories is not None else frozenset(ToolCategory)
        if not self.allow_dangerous:
            chosen = chosen - {ToolCategory.DANGEROUS}
        return frozenset(chosen)


def _strings(value: object, key: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{key} must be a list of names, not {value!r}")
    return list(value)


def _positive(table: Mapping[str, Any], key: str, where: str, default: float,
              integer: bool = False) -> Any:
    value = table.get(key, default)
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or value <= 0:
        kind = "a positive integer" if integer else "a positive number"
        raise ConfigError(f"{where}.{key} must be {kind}, not {value!r}")
    return value


def _categories(value: object, where: str) -> frozenset[ToolCategory]:
    names = _strings(value, f"{where}.categories")
    try:
        return frozenset(ToolCategory(n) for n in names)
    except ValueError:
        known = ", ".join(c.value for c in ToolCategory)
        raise ConfigError(f"{where}.categories: the categories are {known}, not "
                          f"{names!r}") from None


def parse_serve_table(mcp: object, where: str = "mcp.serve") -> McpServeConfig | None:
    """The ``serve`` table of ``[mcp]`` checked (None: absent, or ``enabled = false``)."""
    if mcp is None:
        return None
    if not isinstance(mcp, Mapping):
        raise ConfigError(f"{where.rpartition('.')[0] or 'mcp'} must be a table")
    table = mcp.get("serve")
    if table is None:
        return None
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where} must be a table")
    unknown = sorted(set(table) - set(_KEYS))
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r}; known: {', '.join(_KEYS)}")
    enabled = table.get("enabled", True)
    if not isinstance(enabled, bool):
        raise ConfigError(f"{where}.enabled must be true or false")
    character = table.get("character")
    if not isinstance(character, str) or not character.strip():
        raise ConfigError(f"{where}.character must name the character MCP sessions act as")
    name = table.get("name", "mcp")
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(f"{where}.name must be 1-64 letters, digits, '_', '.', ':' or '-'")
    allow = table.get("allow_dangerous", False)
    if not isinstance(allow, bool):
        raise ConfigError(f"{where}.allow_dangerous must be true or false")
    tools = table.get("tools")
    categories = table.get("categories")
    config = McpServeConfig(
        character=character.strip(), name=name, allow_dangerous=allow,
        tools=None if tools is None else frozenset(_strings(tools, f"{where}.tools")),
        categories=None if categories is None else _categories(categories, where),
        max_sessions=_positive(table, "max_sessions", where, 16, integer=True),
        session_idle=float(_positive(table, "session_idle", where, 3600.0)),
        request_timeout=float(_positive(table, "request_timeout", where, 300.0)),
        history_limit=_positive(table, "history_limit", where, 200, integer=True))
    return config if enabled else None
