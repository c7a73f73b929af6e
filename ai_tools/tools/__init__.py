"""The tool system: categories, the base class, registries, validation, default tools."""

from ai_tools.tools.base import CACHE_SCOPES, Actor, Tool, ToolCategory
from ai_tools.tools.registry import ToolRegistry
from ai_tools.tools.validation import (
    ParameterValidator,
    ValidationResult,
    compile_validator,
    validate_tool_result,
)

TOOL_REGISTRY = ToolRegistry()
"""The default registry; services may use their own."""


def register_default_tools(registry: ToolRegistry | None = None) -> ToolRegistry:
    """Register the default tool library into ``registry`` (TOOL_REGISTRY by default).

    Tools already present are left alone, so calling it twice is harmless.
    """
    from ai_tools.tools.library import DEFAULT_TOOLS

    target = TOOL_REGISTRY if registry is None else registry
    for tool_class in DEFAULT_TOOLS:
        if tool_class.name not in target:
            target.register(tool_class)
    return target


__all__ = [
    "CACHE_SCOPES",
    "TOOL_REGISTRY",
    "Actor",
    "ParameterValidator",
    "Tool",
    "ToolCategory",
    "ToolRegistry",
    "ValidationResult",
    "compile_validator",
    "register_default_tools",
    "validate_tool_result",
]
