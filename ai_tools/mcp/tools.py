"""An MCP server's tools as registry entries: ordinary :class:`~ai_tools.tools.base.Tool`\\ s.

Each tool a server lists becomes a Tool subclass, checked like any other (a
registry registers it), so a call goes through the engine's one path: the
server's ``inputSchema`` validates the parameters (JSON Schema 2020-12, or the
draft its ``$schema`` names), then the gate, the cache, the timeout (its
cancellation sends ``notifications/cancelled``), retries of retryable failures
(the server went away), history.

What a hostile or careless server cannot do: a tool name is sanitised to the
model APIs' rule (and prefixed when it collides with a name taken); a
description is cut at :data:`MAX_DESCRIPTION_CHARS`; a schema larger than
:data:`MAX_SCHEMA_BYTES` or not a valid object schema leaves its tool out (with
a warning); at most ``max_tools`` tools per server.

Category, unless the server's config names one: ``dangerous`` when the tool's
annotations say ``destructiveHint: true`` (and not ``readOnlyHint``),
``safe_chain`` when they say ``readOnlyHint: true``, else ``async_required``
(an external call that the loop may chain, and that sleep and reflection
loops may use).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from typing import ClassVar

from twisted.internet import defer
from twisted.logger import Logger

from ai_tools.errors import ToolRegistrationError
from ai_tools.json_encoding import model_json
from ai_tools.json_types import JSONObject, JSONValue
from ai_tools.mcp.config import McpServerConfig
from ai_tools.tools.base import Actor, Tool, ToolCategory
from ai_tools.tools.registry import ToolRegistry

__all__ = ["MAX_DESCRIPTION_CHARS", "MAX_SCHEMA_BYTES", "McpTool", "build_tools",
           "category_of", "sanitise_name"]

log = Logger()

MAX_DESCRIPTION_CHARS = 1000
MAX_SCHEMA_BYTES = 16 * 1024
_BAD_CHARS = re.compile(r"[^A-Za-z0-9_-]")

Caller = Callable[[str, JSONObject, Actor], "defer.Deferred[JSONObject]"]
"""How a tool reaches its server: ``(remote name, arguments, actor)`` → result dict."""


class McpTool(Tool):
    """Base of the tools of MCP servers: ``execute`` calls the server."""

    server: ClassVar[str] = ""
    """The ``[mcp.servers.NAME]`` it comes from."""
    remote_name: ClassVar[str] = ""
    """Its name on the server (ours may be sanitised or prefixed)."""
    annotations: ClassVar[JSONObject] = {}
    caller: ClassVar[Caller | None] = None
    requires_character = False

    def execute(self, actor: Actor, **params: JSONValue) -> defer.Deferred[JSONObject]:
        """Call the tool on its server; a Deferred whose cancellation cancels the call."""
        caller = type(self).caller
        assert caller is not None
        return caller(self.remote_name, params, actor)


def sanitise_name(name: str, prefix: str = "") -> str:
    """``prefix`` + ``name`` with characters model APIs refuse replaced by ``_``, ≤ 64."""
    return (prefix + _BAD_CHARS.sub("_", name))[:64] or "_"


def category_of(annotations: object, configured: ToolCategory | None) -> ToolCategory:
    """The category of a tool (see the module docstring)."""
    if configured is not None:
        return configured
    hints = annotations if isinstance(annotations, dict) else {}
    if hints.get("destructiveHint") is True and hints.get("readOnlyHint") is not True:
        return ToolCategory.DANGEROUS
    if hints.get("readOnlyHint") is True:
        return ToolCategory.SAFE_CHAIN
    return ToolCategory.ASYNC_REQUIRED


def _wanted(name: str, config: McpServerConfig) -> bool:
    if config.allow_tools is not None and name not in config.allow_tools:
        return False
    return name not in config.deny_tools


def _our_name(remote: str, config: McpServerConfig, taken: Collection[str]) -> str | None:
    """The name the model sees: sanitised, prefixed; the server's name as a prefix on collision."""
    name = sanitise_name(remote, config.prefix)
    if name not in taken:
        return name
    name = sanitise_name(remote, f"{config.prefix}{config.name}_")
    return None if name in taken else name


def _description(listed: JSONObject, config: McpServerConfig) -> str:
    text = listed.get("description")
    if not isinstance(text, str) or not text.strip():
        title = listed.get("title")
        text = title if isinstance(title, str) else ""
    text = (text or f"The {listed.get('name')} tool of the MCP server {config.name}.").strip()
    if len(text) > MAX_DESCRIPTION_CHARS:
        text = text[:MAX_DESCRIPTION_CHARS] + " [...]"
    return text


def _schema(listed: JSONObject) -> JSONObject | str:
    """The tool's ``inputSchema`` as our ``parameters``, or why it is refused."""
    schema = listed.get("inputSchema")
    if not isinstance(schema, dict):
        return "it has no inputSchema object"
    try:
        size = len(model_json(schema).encode("utf-8"))
    except (TypeError, ValueError):
        return "its inputSchema is not JSON"
    if size > MAX_SCHEMA_BYTES:
        return f"its inputSchema has {size} bytes (at most {MAX_SCHEMA_BYTES})"
    schema = dict(schema)
    schema.setdefault("properties", {})
    return schema


def tool_class(listed: JSONObject, name: str, config: McpServerConfig,
               parameters: JSONObject, caller: Caller) -> type[McpTool]:
    """A Tool subclass standing for one listed tool."""
    annotations = listed.get("annotations")
    attributes = {
        "name": name, "remote_name": listed["name"], "server": config.name,
        "description": _description(listed, config), "parameters": parameters,
        "category": category_of(annotations, config.category), "timeout": config.timeout,
        "cacheable": config.cacheable, "cache_scope": config.cache_scope,
        "cache_ttl": config.cache_ttl,
        "annotations": dict(annotations) if isinstance(annotations, dict) else {},
        "caller": staticmethod(caller),
        "__doc__": f"The {listed['name']} tool of MCP server {config.name}.",
    }
    return type(f"Mcp_{config.name}_{name}", (McpTool,), attributes)


def build_tools(listed: list[JSONObject], config: McpServerConfig, caller: Caller,
                taken: Collection[str] = ()) -> list[McpTool]:
    """The registry entries of a server's listed tools (checked; refused ones logged).

    ``taken`` are names used already (our tools, earlier servers'): a listed
    name among them gets the server's name as a prefix.
    """
    scratch = ToolRegistry()
    for entry in listed:
        remote = entry.get("name")
        if not isinstance(remote, str) or not remote or not _wanted(remote, config):
            continue
        if len(scratch) >= config.max_tools:
            log.warn("MCP server {server}: more than {cap} tools; the rest are left out",
                     server=config.name, cap=config.max_tools)
            break
        name = _our_name(remote, config, {*taken, *scratch.list_tools()})
        parameters = _schema(entry)
        problem = ("its name collides with a tool of ours even with the server's prefix"
                   if name is None else parameters if isinstance(parameters, str) else None)
        if problem is None:
            assert name is not None and isinstance(parameters, dict)
            try:
                scratch.register(tool_class(entry, name, config, parameters, caller))
            except ToolRegistrationError as e:
                problem = str(e)
        if problem is not None:
            log.warn("MCP server {server}: tool {tool!r} left out: {problem}",
                     server=config.name, tool=remote[:100], problem=problem)
    return scratch.get_all_tools()  # type: ignore[return-value]
