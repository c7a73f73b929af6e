"""The tool registry: tools by name, checked when they are registered.

Create one per service or per test; a tool class is checked (name, description,
schema, category, cache scope, timeout, ``execute``) before an instance joins.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TypeVar

from ai_tools.errors import ToolRegistrationError
from ai_tools.json_types import JSONObject
from ai_tools.tools.base import Tool, ToolCategory
from ai_tools.tools.registration import check_tool_class, describe_class

ToolT = TypeVar("ToolT", bound=Tool)

__all__ = ["ToolRegistry"]


class ToolRegistry:
    """Tools by name.  Create one per service or per test; ``TOOL_REGISTRY`` is the default."""

    def __init__(self, tools: Iterable[type[Tool]] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self._version = 0
        for tool_class in tools:
            self.register(tool_class)

    @property
    def version(self) -> int:
        """A number that changes whenever a tool is registered or removed.

        What is built from the tools (a loop's offered tools and system prompt)
        is kept by it.
        """
        return self._version

    def register(self, tool_class: type[ToolT]) -> ToolT:
        """Check ``tool_class`` and add an instance of it; returns the instance.

        Refuses a non-Tool, a missing or duplicate name, an empty description,
        a ``parameters`` that is not a valid object JSON Schema, a bad
        category, cache scope or timeout, and an ``execute`` left unimplemented:
        raises :class:`~ai_tools.errors.ToolRegistrationError` naming every problem.
        """
        check_tool_class(tool_class, self._tools)
        try:
            tool = tool_class()
            tool.parameter_validator  # noqa: B018 - compile once, now, not on the first call
        except Exception as e:
            raise ToolRegistrationError(
                f"Cannot register tool {tool_class.name!r} ({describe_class(tool_class)}): "
                f"creating it failed: {type(e).__name__}: {e}"
            ) from e
        self._tools[tool.name] = tool
        self._version += 1
        return tool

    def with_tools(self, tools: Iterable[Tool]) -> ToolRegistry:
        """A new registry of this one's tools and ``tools`` (instances another registry checked).

        What a loop starts with when tools come from elsewhere too (an MCP
        server's, :mod:`ai_tools.mcp.servers`): this registry is left as it is;
        a name of ``tools`` already here, or twice in ``tools``, is refused.
        """
        view = ToolRegistry()
        view._tools = dict(self._tools)
        for tool in tools:
            if tool.name in view._tools:
                raise ToolRegistrationError(f"a tool named {tool.name!r} is already registered")
            view._tools[tool.name] = tool
        view._version = self._version
        return view

    def unregister(self, name: str) -> None:
        """Remove a tool (no error if absent)."""
        if self._tools.pop(name, None) is not None:
            self._version += 1

    def get_tool(self, name: str) -> Tool | None:
        """The tool called ``name``, or None."""
        return self._tools.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def list_tools(self) -> list[str]:
        """All tool names, sorted."""
        return sorted(self._tools)

    def get_all_tools(self) -> list[Tool]:
        """All tool instances, sorted by name."""
        return [self._tools[n] for n in sorted(self._tools)]

    def get_tool_names_by_category(self, category: ToolCategory) -> list[str]:
        """Names of the tools in one category, sorted."""
        return sorted(n for n, t in self._tools.items() if t.category is category)

    def filter_tools(
        self,
        include_categories: Iterable[ToolCategory] | None = None,
        exclude_categories: Iterable[ToolCategory] | None = None,
        tool_names: Iterable[str] | None = None,
    ) -> list[Tool]:
        """Tools matching every given criterion, sorted by name."""
        include = set(include_categories) if include_categories is not None else None
        exclude = set(exclude_categories or ())
        names = set(tool_names) if tool_names is not None else None
        selected = []
        for tool in self.get_all_tools():
            if include is not None and tool.category not in include:
                continue
            if tool.category in exclude:
                continue
            if names is not None and tool.name not in names:
                continue
            selected.append(tool)
        return selected

    def get_tool_schemas(
        self,
        categories: Iterable[ToolCategory] | None = None,
        tool_names: Iterable[str] | None = None,
    ) -> list[JSONObject]:
        """OpenAI-compatible function schemas (for the ``tools=`` request field)."""
        tools = self.filter_tools(include_categories=categories, tool_names=tool_names)
        return [tool.schema() for tool in tools]

    def as_mapping(self) -> Mapping[str, Tool]:
        """A read-only view of the tools by name."""
        return dict(self._tools)
