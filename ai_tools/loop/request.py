"""What every model request of a loop carries besides the history: the tools and the prompt head.

:func:`plan_request` works out, for a loop context, its config and the
current persona, the tools offered (the registry's, minus exit tools, through
the gate, plus ``noop``), their schemas for the ``tools=`` field (native mode),
the names the answer's calls are sorted by, and the system prompt's *head*
(persona, mode, tool list — :func:`~ai_tools.loop.prompts.system_prompt_head`).
Plans are kept by everything they depend on (:attr:`RequestPlan.key`), so a
tick's loop re-uses the plan of the last one: the head is rendered once per
persona, mode and tool set, not once per loop.

:func:`fitted_plan` is the plan a loop actually sends: the plan itself, or —
when its prompt and tool schemas alone would cross the loop's stop threshold
(``critical_tokens`` before any call) — a plan offering fewer tools, so the
model is still called.  The rule that picks them: TERMINAL tools first (they
answer players), then the others from the smallest schema up (so as many as
possible stay; ties by name); the longest such list whose prompt takes at most
:data:`PROMPT_SHARE` of the stop threshold (40% of the window by default) is
offered; ``noop`` and the exit tools always are.  A registered tool left out
may still be called.  The trim is logged once per
plan, naming the tools left out.

:func:`measure_context` gives the context usage of the loop a context would
run (the one measure of :mod:`ai_tools.loop.usage`, over the fitted plan):
what the tick asks before running it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
from twisted.logger import Logger

from ai_tools.execution.history import ConversationHistory
from ai_tools.json_encoding import canonical_json
from ai_tools.json_types import JSONMapping
from ai_tools.loop.config import ExitTool, LoopConfig, use_native_tools
from ai_tools.loop.context import LoopContext
from ai_tools.loop.prompts import PromptInputs, system_prompt_head
from ai_tools.loop.usage import ContextMeter, ContextUsage, context_window
from ai_tools.tools.base import Tool, ToolCategory

__all__ = ["PROMPT_SHARE", "RequestPlan", "fitted_plan", "measure_context", "plan_request",
           "request_key"]

log = Logger()

PROMPT_SHARE = 0.5
"""A plan whose prompt crosses the stop threshold is trimmed to this share of it."""

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
    schemas: tuple[JSONMapping, ...]
    """The offered tools' function schemas, ``noop`` last unless a tool has its name."""
    categories: Mapping[str, str]
    """Offered tool name → category value (the prompt marks TERMINAL and DANGEROUS)."""
    request_tools: list[JSONMapping] | None
    """The ``tools=`` field: offered tools, noop and exit tools (None in fallback mode)."""
    normal_names: frozenset[str]
    """Every registered tool name and ``noop``, minus exit tools: how calls are sorted."""
    exit_names: frozenset[str]
    head: str
    """The system prompt's head for this persona, mode and tool set."""
    tools_json: str
    """The JSON of :attr:`request_tools` ("" in fallback mode), as it is counted."""
    left_out: tuple[str, ...] = ()
    """Offered tools this plan leaves out to fit the window (see :func:`fitted_plan`)."""

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
        plan = _make_plan(key, ctx, config, persona, _offered(ctx, config))
        _keep(key, plan)
    return plan


def fitted_plan(ctx: LoopContext, config: LoopConfig, persona: str, meter: ContextMeter,
                window: int, history: ConversationHistory) -> RequestPlan:
    """The plan a loop of ``ctx`` sends in a ``window``-token context (see the module).

    Measured with ``meter`` over ``history`` (its last measure is then of this plan).
    """
    plan = plan_request(ctx, config, persona)
    usage = meter.measure(plan.key, plan.counted_text, history, window)
    stop = window * config.thresholds.stop / 100.0
    if usage.prompt_tokens < stop:
        return plan
    plan = _trimmed(plan, ctx, config, int(stop * PROMPT_SHARE), meter.counter.count_text)
    meter.measure(plan.key, plan.counted_text, history, window)
    return plan


def measure_context(ctx: LoopContext, config: LoopConfig, meter: ContextMeter,
                    persona: str) -> ContextUsage:
    """The context usage of the loop ``ctx`` would run now (before its first request)."""
    fitted_plan(ctx, config, persona, meter, context_window(config.context_window, ctx.llm),
                ctx.history)
    assert meter.last is not None
    return meter.last


def _trimmed(plan: RequestPlan, ctx: LoopContext, config: LoopConfig, budget: int,
             count: Callable[[str], int]) -> RequestPlan:
    """``plan`` offering the longest list of tools, by the module's rule, within ``budget``."""
    key = (*plan.key, "fitted", budget)
    kept = _PLANS.get(key)
    if kept is not None:
        return kept
    ordered = sorted(_offered(ctx, config), key=_trim_order)
    low, high = 0, len(ordered)  # the longest fitting prefix: low fits (or is 0), high + 1 not
    while low < high:
        middle = (low + high + 1) // 2
        if count(_make_plan(key, ctx, config, plan.persona, ordered[:middle]).counted_text()) \
                <= budget:
            low = middle
        else:
            high = middle - 1
    left_out = tuple(t.name for t in ordered[low:])
    kept = _make_plan(key, ctx, config, plan.persona, ordered[:low], left_out)
    _keep(key, kept)
    log.warn("The system prompt and tools of {assistant} take more than {stop}% of its "
             "{window}-token context window: its requests offer {kept} of {total} tools "
             "(TERMINAL ones first, then the smallest); left out: {left_out}",
             assistant=ctx.assistant_name, stop=config.thresholds.stop,
             window=context_window(config.context_window, ctx.llm), kept=low,
             total=len(ordered), left_out=", ".join(left_out))
    return kept


def _trim_order(tool: Tool) -> tuple[bool, int, str]:
    """TERMINAL tools first, then the smallest schemas, then by name (the module's rule)."""
    return (tool.category is not ToolCategory.TERMINAL, len(_json(tool.schema())), tool.name)


def _keep(key: tuple[Any, ...], plan: RequestPlan) -> None:
    if len(_PLANS) >= _PLANS_KEPT:
        _PLANS.clear()
    _PLANS[key] = plan


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _offered(ctx: LoopContext, config: LoopConfig) -> list[Tool]:
    """The registered tools a loop of ``ctx`` offers: not exit tools, allowed by the gate."""
    exit_names = config.exit_tool_names
    return [t for t in ctx.registry.get_all_tools()
            if t.name not in exit_names and ctx.gate.allows(t.name, t.category)]


def _make_plan(key: tuple[Any, ...], ctx: LoopContext, config: LoopConfig, persona: str,
               offered: Sequence[Tool], left_out: tuple[str, ...] = ()) -> RequestPlan:
    native = key[4]
    exit_names = config.exit_tool_names
    categories = {t.name: t.category.value for t in offered}
    schemas: list[JSONMapping] = [t.schema() for t in offered]
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
        left_out=left_out,
    )
