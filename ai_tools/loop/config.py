"""How a loop runs: :class:`LoopConfig`, the exit tools it offers, the gate it applies."""

from __future__ import annotations

from typing import cast

import attrs

from ai_tools.interfaces import ILLMClient, IProfiledLLMClient
from ai_tools.json_types import JSONMapping
from ai_tools.loop.advisory import DEFAULT_THRESHOLDS, AdvisoryThresholds
from ai_tools.tools.base import ToolCategory

__all__ = ["ExitTool", "GatePolicy", "LoopConfig", "use_native_tools"]


def _check_max_iterations(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if not isinstance(value, int) or not 1 <= value <= 10:
        raise ValueError(f"max_iterations must be an integer from 1 to 10, got {value!r}")


def _check_non_negative_or_none(instance: object, attribute: attrs.Attribute[int | None],
                                value: int | None) -> None:
    if value is not None and (not isinstance(value, int) or value < 0):
        raise ValueError(f"{attribute.name} must be a non-negative integer or None, "
                         f"got {value!r}")


def _check_positive(instance: object, attribute: attrs.Attribute[int] | attrs.Attribute[int | None],
                    value: int) -> None:
    if not isinstance(value, int) or value < 1:
        raise ValueError(f"{attribute.name} must be a positive integer, got {value!r}")


def _check_optional_positive(instance: object, attribute: attrs.Attribute[int | None],
                             value: int | None) -> None:
    if value is not None:
        _check_positive(instance, attribute, value)


@attrs.frozen
class ExitTool:
    """A one-way signal tool: offered to the model, never executed.

    When the model calls it, the call is recorded as a signal
    ``{"tool_name", "arguments", "emitted_at"}`` and published to observers; it
    is not charged to the tool budget and does not enter the history.
    """

    name: str
    description: str = ""
    parameters: JSONMapping = attrs.field(
        factory=lambda: {"type": "object", "properties": {}}
    )

    def schema(self) -> dict[str, object]:
        """The OpenAI-compatible function schema."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": dict(self.parameters),
            },
        }


@attrs.frozen
class GatePolicy:
    """Which tools the current context allows (by category and by name).

    ``None`` for a field means "no restriction by that criterion".  A blocked
    call is not dispatched; the model sees a ``blocked_by_tool_mode`` result
    listing the allowed tools.
    """

    allowed_categories: frozenset[ToolCategory] | None = None
    allowed_names: frozenset[str] | None = None

    def allows(self, name: str, category: ToolCategory) -> bool:
        """Whether a tool with this name and category may run."""
        if self.allowed_categories is not None and category not in self.allowed_categories:
            return False
        return self.allowed_names is None or name in self.allowed_names


@attrs.frozen
class LoopConfig:
    """How one loop runs (every field has its documented default)."""

    max_iterations: int = attrs.field(default=5, validator=_check_max_iterations)
    """Iterations (model calls) per tick, 1 to 10."""
    tool_budget: int | None = attrs.field(default=None,
                                          validator=_check_non_negative_or_none)
    """Normal tool calls allowed in this loop (None: unlimited). Exit tools are free."""
    exit_tools: tuple[ExitTool, ...] = attrs.field(default=(), converter=tuple)
    consecutive_error_cap: int = attrs.field(default=5, validator=_check_positive)
    """Failed tool calls in a row that end the loop with ``consecutive_errors``."""
    native_tools: bool | None = None
    """Native tool calling (``tools=`` field) or False: fallback JSON-in-text mode.
    None follows the model client's profile (``tool_calling``), native if it has none."""
    stream: bool | None = None
    """Stream the model's answer; None: the client's own default."""
    thresholds: AdvisoryThresholds = DEFAULT_THRESHOLDS
    pattern_mode: str = attrs.field(
        default="react_loop",
        validator=attrs.validators.in_(("react_loop", "single_action")),
    )
    """``single_action`` runs exactly one iteration (the legacy single-action tick)."""
    context_window: int | None = attrs.field(default=None,
                                             validator=_check_optional_positive)
    """Override of the model's context window in tokens (None: the client's)."""
    noop_tool: str = "noop"
    """Name of the tool that means "nothing to do" (ends the loop with ``noop``)."""
    status_at_end: bool = False
    """Send the per-iteration status (step, tool budget, token advisory) as a system
    message after the history instead of at the end of the system prompt, so every
    request of a loop begins with the previous one (prompt caches of llama.cpp, vLLM
    and OpenAI then keep the whole history instead of re-reading it)."""

    @property
    def effective_max_iterations(self) -> int:
        """1 in single-action mode, else ``max_iterations``."""
        return 1 if self.pattern_mode == "single_action" else self.max_iterations

    @property
    def exit_tool_names(self) -> frozenset[str]:
        """Names of the exit tools."""
        return frozenset(t.name for t in self.exit_tools)


def use_native_tools(setting: bool | None, llm: ILLMClient) -> bool:
    """Native tool calling unless ``setting`` or the client's profile says fallback.

    ``setting`` is a config's ``native_tools`` (None: follow the model
    client's profile, whose ``tool_calling`` is ``native`` unless it says
    ``fallback``).
    """
    if setting is not None:
        return setting
    if not IProfiledLLMClient.providedBy(llm):
        return True
    return bool(cast(IProfiledLLMClient, llm).profile.tool_calling != "fallback")
