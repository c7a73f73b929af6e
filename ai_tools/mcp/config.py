"""``[mcp.servers.NAME]``: the MCP servers whose tools assistants may use.

One table per server, in the service's config file (and, as a dict of the
same tables, in an Evennia game's settings: see the contrib's README)::

    [mcp.servers.memory]                 # a stdio server: a child process of ours
    command = "npx"
    args = ["-y", "@modelcontextprotocol/server-memory"]
    env = { MEMORY_FILE_PATH = "var/memory.json" }

    [mcp.servers.dice]                   # a Streamable HTTP server
    url = "https://dice.example.net/mcp"
    bearer_token_env = "DICE_TOKEN"      # the variable holding the token, never the token
    timeout = 20
    allow_tools = ["roll"]
    prefix = "dice_"

Keys: ``command``/``args``/``env``/``cwd`` (stdio) or ``url``/``headers``/
``bearer_token_env`` (HTTP); ``category`` (``safe_chain``, ``async_required``,
``terminal`` or ``dangerous``; default: by the tool's annotations, see
:mod:`ai_tools.mcp.tools`), ``timeout`` (seconds per call), ``init_timeout``,
``cacheable``/``cache_scope``/``cache_ttl``, ``allow_tools``/``deny_tools``,
``prefix``, ``max_tools``, ``max_message_bytes``, ``max_result_bytes``,
``enabled``.  Mistakes raise :class:`~ai_tools.errors.ConfigError` naming the key.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from typing import Any

import attrs

from ai_tools.errors import ConfigError
from ai_tools.tools.base import CACHE_SCOPES, ToolCategory

__all__ = ["McpServerConfig", "parse_servers"]

_NAME = re.compile(r"[A-Za-z0-9_-]{1,32}")
_PREFIX = re.compile(r"[A-Za-z0-9_-]{0,32}")


@attrs.frozen
class McpServerConfig:
    """One ``[mcp.servers.NAME]`` table, checked."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = attrs.field(factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = attrs.field(factory=dict)
    bearer_token_env: str | None = None
    category: ToolCategory | None = None
    """None: by each tool's annotations."""
    timeout: float = 60.0
    init_timeout: float = 30.0
    cacheable: bool = False
    cache_scope: str = "tick"
    cache_ttl: float | None = None
    allow_tools: frozenset[str] | None = None
    deny_tools: frozenset[str] = frozenset()
    prefix: str = ""
    max_tools: int = 64
    max_message_bytes: int = 4 * 1024 * 1024
    max_result_bytes: int = 64 * 1024
    enabled: bool = True

    @property
    def transport(self) -> str:
        """``stdio`` or ``http``."""
        return "stdio" if self.command is not None else "http"

    def request_headers(self) -> dict[str, str]:
        """The HTTP headers to send: the configured ones and the bearer token, read now."""
        headers = dict(self.headers)
        if self.bearer_token_env:
            token = os.environ.get(self.bearer_token_env, "")
            if not token.strip():
                raise ConfigError(f"mcp.servers.{self.name}.bearer_token_env: the "
                                  f"environment variable {self.bearer_token_env} is not set")
            headers["Authorization"] = f"Bearer {token.strip()}"
        return headers

    def describe(self) -> str:
        """The command or URL, for status pages (never a header or a token)."""
        if self.command is not None:
            return " ".join([self.command, *self.args])
        return str(self.url)


_SIMPLE = {
    "command": str, "cwd": str, "url": str, "bearer_token_env": str, "prefix": str,
    "cache_scope": str, "cacheable": bool, "enabled": bool,
}
_NUMBERS = ("timeout", "init_timeout", "cache_ttl")
_INTEGERS = ("max_tools", "max_message_bytes", "max_result_bytes")
_KNOWN = sorted({*_SIMPLE, *_NUMBERS, *_INTEGERS, "args", "env", "headers", "category",
                 "allow_tools", "deny_tools"})


def _string_list(value: object, key: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{key} must be a list of strings, not {value!r}")
    return tuple(value)


def _string_table(value: object, key: str) -> dict[str, str]:
    if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ConfigError(f"{key} must be a table of strings")
    return dict(value)


def _check_value(name: str, value: object, key: str) -> Any:
    if name in _SIMPLE:
        kind = _SIMPLE[name]
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            raise ConfigError(f"{key} must be {'true or false' if kind is bool else 'a string'}"
                              f", not {value!r}")
        return value
    if name in _NUMBERS:
        if isinstance(value, bool) or not isinstance(value, int | float) \
                or not math.isfinite(value) or value <= 0:
            raise ConfigError(f"{key} must be a positive number of seconds, not {value!r}")
        return float(value)
    if name in _INTEGERS:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{key} must be a positive integer, not {value!r}")
        return value
    if name == "args":
        return _string_list(value, key)
    if name in ("env", "headers"):
        return _string_table(value, key)
    if name in ("allow_tools", "deny_tools"):
        return frozenset(_string_list(value, key))
    try:
        return ToolCategory(value if isinstance(value, str) else "")
    except ValueError:
        raise ConfigError(f"{key} must be one of "
                          f"{', '.join(c.value for c in ToolCategory)}, not {value!r}") from None


def _server(name: str, table: object, where: str) -> McpServerConfig:
    if not _NAME.fullmatch(name):
        raise ConfigError(f"{where}: a server name must be 1-32 letters, digits, '_' or '-', "
                          f"not {name!r}")
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where} must be a table")
    if "token" in table or "bearer_token" in table:
        raise ConfigError(f"{where}: a token is never read from the file; put it in an "
                          f"environment variable and name it in bearer_token_env")
    unknown = sorted(set(table) - set(_KNOWN))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)} "
                          f"(known: {', '.join(_KNOWN)})")
    values = {k: _check_value(k, v, f"{where}.{k}") for k, v in table.items()}
    if ("command" in values) == ("url" in values):
        raise ConfigError(f"{where}: give either command (a stdio server) or url "
                          f"(a Streamable HTTP server)")
    url = values.get("url")
    if url is not None and not url.startswith(("http://", "https://")):
        raise ConfigError(f"{where}.url must start with http:// or https://, not {url!r}")
    if values.get("cache_scope", "tick") not in CACHE_SCOPES:
        raise ConfigError(f"{where}.cache_scope must be one of "
                          f"{', '.join(sorted(CACHE_SCOPES))}")
    if not _PREFIX.fullmatch(values.get("prefix", "")):
        raise ConfigError(f"{where}.prefix may hold only letters, digits, '_' and '-' "
                          f"(at most 32)")
    return McpServerConfig(name=name, **values)


def parse_servers(servers: object, where: str = "mcp.servers") -> tuple[McpServerConfig, ...]:
    """The servers of an ``[mcp.servers]`` table (a mapping of name → table), in order."""
    if servers is None:
        return ()
    if not isinstance(servers, Mapping):
        raise ConfigError(f"{where} must be a table of [{where}.NAME] tables")
    return tuple(_server(str(name), table, f"{where}.{name}")
                 for name, table in servers.items())
