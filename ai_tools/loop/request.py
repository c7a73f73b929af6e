"""What every model request of a loop carries besides the history: the tools and the prompt head.

:func:`plan_request` works out, for a loop context, its config and the
current persona, the tools offered (the registry's, minus exit tools, through
the gate, plus ``noop``), their schemas for the ``tools=`` field (native mode),
the names the answer's calls are sorted by, and the system prompt's *head*
(persona, mode, tool list — :func:`~ai_tools.loop.prompts.system_prompt_head`).
Plans are kept by everything they depend on (:attr:`RequestPlan.key`), so a
tick's loop re-uses the plan of the last one: the head is rendered once per
persona, mode and tool set, not once per loop.

:func:`measure_context` gives the context usage of the loop a context would
run (the one measure of :mod:`ai_tools.loop.usage`): what the tick asks before
running it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

from ai_tools.json_encoding import canonical_json
from ai_tools.loop.config import ExitTool, LoopConfig, use_native_tools
from ai_tools.loop.context import LoopContext
from ai_tools.loop.prompts import PromptInputs, system_prompt_head
from ai_tools.loop.usage import ContextMeter, ContextUsage, context_window

__all__ = ["RequestPlan", "measure_context", "plan_request", "request_key"]

NOOP_DESCRIPTION = "Signal that you are done and there is nothing (more) to do right now."

_PLANS: dict[tuple[Any, ...], RequestPlan] = {}
_PLANS_KEPT = 256


@attrs.frozen(eq=False)
class RequestPlan:
    """The tools offered and the prompt head of a loop's requests (see the module)."""

    key: tuple[Any, ...]
    """Everything the plan depends on (a new key means a new plan)."""
    persona: str
    native: bool
    schemas: tuple[dict[str, Any], ...]
    """The offered tools' function schemas, ``noop`` last unless a tool has its name."""
    categories: Mapping[str, str]
    """Offered tool name → category value (the prompt marks TERMINAL and DANGEROUS)."""
    request_tools: list[dict[str, Any]] | None
    """The ``tools=`` field: offered tools, noop and exit tools (None in fallback mode)."""
    normal_names: frozenset[str]
    """Every registered tool name and ``noop``, minus exit tools: how calls are sorted."""
    exit_names: frozenset[str]
    head: str
    """The system prompt's head for this persona, mode and tool set."""
    tools_json: str
    """The JSON of :attr:`request_tools` ("" in fallback mode), as it is counted."""

    def counted_text(self) -> str:
        """The prompt text the context measure counts: the head and the tool schemas."""
        return f"{self.head}\n{self.tools_json}" if self.tools_json else self.head


def request_key(ctx: LoopContext, config: LoopConfig, persona: str) -> tuple[Any, ...]:
    """Everything a :class:`RequestPlan` depends on (compared, and hashed to keep plans)."""
    registry = ctx.registry
    exits = tuple((t.name, t.description, canonical_json(dict(t.parameters)))
                  for t in config.exit_tools)
    return (ctx.assistant_name, persona, ctx.mode, ctx.reflection,
            use_native_tools(config.native_tools, ctx.llm), config.noop_tool, exits, ctx.gate,
            registry, registry.version)


def plan_request(ctx: LoopContext, config: LoopConfig, persona: str) -> RequestPlan:
    """The plan of ``ctx``'s requests for ``persona`` (kept, see the module docstring)."""
    key = request_key(ctx, config, persona)
    plan = _PLANS.get(key)
    if plan is None:
        plan = _make_plan(key, ctx, config, persona)
        if len(_PLANS) >= _PLANS_KEPT:
            _PLANS.clear()
        _PLANS[key] = plan
    return plan


def measure_context(ctx: LoopContext, config: LoopConfig, meter: ContextMeter,
                    persona: str) -> ContextUsage:
    """The context usage of the loop ``ctx`` would run now (before its first request)."""
    key = request_key(ctx, config, persona)
    return meter.measure(key, lambda: plan_request(ctx, config, persona).counted_text(),
                         ctx.history, context_window(config.context_window, ctx.llm))


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _make_plan(key: tuple[Any, ...], ctx: LoopContext, config: LoopConfig,
               persona: str) -> RequestPlan:
    native = key[4]
    exit_names = config.exit_tool_names
    offered = [t for t in ctx.registry.get_all_tools()
               if t.name not in exit_names and ctx.gate.allows(t.name, t.category)]
    categories = {t.name: t.category.value for t in offered}
    schemas = [t.schema() for t in offered]
    if config.noop_tool not in categories:
        schemas.append(ExitTool(config.noop_tool, NOOP_DESCRIPTION).schema())
    exit_schemas = [t.schema() for t in config.exit_tools]
    head = system_prompt_head(PromptInputs(
        assistant_name=ctx.assistant_name, persona=persona, mode=ctx.mode,
        reflection=ctx.reflection, tool_schemas=schemas, tool_categories=categories,
        exit_tool_schemas=exit_schemas, native_tools=native, noop_tool=config.noop_tool,
    ))
    request_tools = [*schemas, *exit_schemas] if native else None
    normal = {*ctx.registry.list_tools(), config.noop_tool} - exit_names
    return RequestPlan(
        key=key, persona=persona, native=native, schemas=tuple(schemas), categories=categories,
        request_tools=request_tools, normal_names=frozenset(normal), exit_names=exit_names,
        head=head, tools_json=_json(request_tools) if request_tools else "",
    )
