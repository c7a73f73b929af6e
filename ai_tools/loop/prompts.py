"""System prompts and the other texts the ReAct loop shows the model.

The system prompt is rebuilt before every model call from a
:class:`PromptInputs` value, so the model always sees the current
tool budget, iteration and token advisory.  There are three variants:

* awake (the default): act in the world, talk to people, ``noop`` when idle;
* sleep: maintenance only (memories, journal), no talking;
* reflection: look back on recent activity and record insights; the history
  is not changed by a reflection run.

With native tool calling the tools' names, descriptions and parameters go in
the request's ``tools=`` field, so the prompt only names the tools that end a
turn (TERMINAL, DANGEROUS) and the exit tools (SIGNAL): every character of the
prompt is paid for on every model call.  In fallback mode (models without
native tool calling) the prompt carries each tool's description and parameters
and the JSON convention for calling them.

Everything here is pure: strings in, strings out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

import attrs

from ai_tools.json_types import JSONMapping
from ai_tools.loop.advisory import AdvisoryLevel, TokenAdvisory

__all__ = [
    "EVENTS_PREFIX",
    "TICK_PREFIX",
    "PromptInputs",
    "build_system_prompt",
    "format_events",
    "render_tools_section",
    "system_prompt_head",
    "system_prompt_status",
    "tick_message",
]

EVENTS_PREFIX = "[EVENTS]"
"""How the user message carrying pending events starts."""

TICK_PREFIX = "[TICK]"
"""How the transient "nothing new happened" user message starts."""

_DEFAULT_PERSONA = "You are {name}, an assistant acting inside a shared world through tools."

_MODE_TEXT = {
    "awake": (
        "Each turn, decide what to do next and call one of your tools. TERMINAL tools "
        "(speaking to people) end your turn until someone answers; DANGEROUS tools change "
        "the world: use them only when asked to; they also end your turn. When there is "
        "nothing to do, call `{noop}`."
    ),
    "sleep": (
        "You are asleep. Use this time for maintenance only: consolidate memories, review "
        "and write your journal, tidy your goals. Do not speak to anyone. Call `{noop}` "
        "when the maintenance is done."
    ),
    "reflection": (
        "This is a reflection turn. Look back on your recent activity, decide what you "
        "learned and what you should do differently, and record it with your memory or "
        "journal tools. Do not speak to anyone. Call `{noop}` when you are done. Nothing "
        "said in this turn is kept in your conversation."
    ),
}

_FALLBACK_CONVENTION = (
    "To call a tool, answer with exactly one JSON object and nothing else:\n"
    '{{"tool": "<tool name>", "arguments": {{...}}, "reasoning": "<why>"}}\n'
    "Tool results come back in a user message starting with [TOOL RESULT: <name>]. "
    "To finish without a tool, answer in plain text or call `{noop}`."
)


@attrs.frozen
class PromptInputs:
    """Everything the system prompt depends on for one model call."""

    assistant_name: str
    persona: str = ""
    mode: str = "awake"
    reflection: bool = False
    tool_schemas: Sequence[JSONMapping] = ()
    """OpenAI function schemas of the normal tools offered."""
    tool_categories: Mapping[str, str] = attrs.field(factory=dict)
    """Tool name → category value, to mark TERMINAL / DANGEROUS tools."""
    exit_tool_schemas: Sequence[JSONMapping] = ()
    native_tools: bool = True
    tool_budget_remaining: int | None = None
    iteration: int = 0
    """0-based index of the iteration about to run."""
    max_iterations: int = 5
    advisory: TokenAdvisory | None = None
    noop_tool: str = "noop"
    tools_text: str | None = None
    """The tools section rendered once by :func:`render_tools_section` (None: render it);
    a loop passes it so the tool list is not rebuilt on every iteration."""


def _function(schema: JSONMapping) -> JSONMapping:
    fn = schema.get("function", schema)
    return fn if isinstance(fn, Mapping) else {}


_MARKED = ("terminal", "dangerous")
"""The categories the prompt names: a call of such a tool ends the turn."""

_SIGNAL_NOTE = ("one-way notices to your operator: recorded, not executed, "
                "they return nothing")


def _fallback_line(fn: JSONMapping, mark: str) -> str:
    """A tool as fallback mode lists it: name, mark, description, then its parameters."""
    line = f"- {fn.get('name', '')}{mark}: {fn.get('description', '')}".rstrip(": ")
    params = json.dumps(fn.get("parameters", {}), sort_keys=True, separators=(",", ":"))
    return f"{line}\n  parameters: {params}"


def _fallback_lines(inputs: PromptInputs) -> list[str]:
    lines = []
    for schema in inputs.tool_schemas:
        fn = _function(schema)
        category = inputs.tool_categories.get(str(fn.get("name", "")), "")
        lines.append(_fallback_line(fn, f" [{category.upper()}]" if category in _MARKED else ""))
    lines.extend(_fallback_line(_function(s), " [SIGNAL]") for s in inputs.exit_tool_schemas)
    return lines


def _native_lines(inputs: PromptInputs) -> list[str]:
    """Which offered tools end a turn, and the exit tools: names only (``tools=`` has the rest)."""
    names: dict[str, list[str]] = {category: [] for category in _MARKED}
    for schema in inputs.tool_schemas:
        name = str(_function(schema).get("name", ""))
        category = inputs.tool_categories.get(name, "")
        if category in names:
            names[category].append(name)
    lines = [f"{category.upper()} tools: {', '.join(found)}."
             for category, found in names.items() if found]
    signals = [str(_function(s).get("name", "")) for s in inputs.exit_tool_schemas]
    if signals:
        lines.append(f"SIGNAL tools ({_SIGNAL_NOTE}): {', '.join(signals)}.")
    return lines


def render_tools_section(inputs: PromptInputs) -> str:
    """The part of the system prompt about the tools (and the fallback convention)."""
    if inputs.native_tools:
        return "\n".join(_native_lines(inputs))
    sections = []
    tool_lines = _fallback_lines(inputs)
    if tool_lines:
        sections.append("\n".join(["Tools (call them as described below):", *tool_lines]))
        if inputs.exit_tool_schemas:
            sections.append(f"Tools marked SIGNAL are {_SIGNAL_NOTE}.")
    sections.append(_FALLBACK_CONVENTION.format(noop=inputs.noop_tool))
    return "\n\n".join(sections)


def system_prompt_head(inputs: PromptInputs) -> str:
    """The part of the system prompt that stays put during a loop: persona, mode, tools.

    A loop renders it once per persona; only :func:`system_prompt_status` changes
    from one iteration to the next.
    """
    variant = "reflection" if inputs.reflection else (
        "sleep" if inputs.mode == "sleep" else "awake")
    persona = inputs.persona.strip() or _DEFAULT_PERSONA.format(name=inputs.assistant_name)
    sections = [persona, _MODE_TEXT[variant].format(noop=inputs.noop_tool)]
    tools_text = (inputs.tools_text if inputs.tools_text is not None
                  else render_tools_section(inputs))
    if tools_text:
        sections.append(tools_text)
    return "\n\n".join(sections)


def system_prompt_status(iteration: int, max_iterations: int,
                         tool_budget_remaining: int | None,
                         advisory: TokenAdvisory | None) -> str:
    """The part of the system prompt regenerated every iteration: step, budget, advisory."""
    status = f"Step {iteration + 1} of at most {max_iterations} this turn."
    if tool_budget_remaining is not None:
        status += f" Tool calls remaining this turn: {tool_budget_remaining}."
    if advisory is not None and advisory.level is not AdvisoryLevel.NORMAL:
        status += f"\n\nContext advisory ({advisory.level.value}): {advisory.message}"
    return status


def build_system_prompt(inputs: PromptInputs) -> str:
    """The system message text for one model call: the head, then the status."""
    status = system_prompt_status(inputs.iteration, inputs.max_iterations,
                                  inputs.tool_budget_remaining, inputs.advisory)
    return f"{system_prompt_head(inputs)}\n\n{status}"


def event_line(event: JSONMapping) -> str:
    """One event as a line: ``speaker (kind): text`` with whatever fields exist."""
    text = event.get("text", event.get("message", event.get("content")))
    speaker = event.get("from", event.get("sender", event.get("speaker")))
    kind = event.get("type", event.get("kind"))
    if text is None:
        rest = {k: v for k, v in event.items() if k not in ("type", "kind")}
        text = json.dumps(rest, sort_keys=True, default=str)
    head = " ".join(str(p) for p in (speaker, f"({kind})" if kind else None) if p)
    return f"- {head}: {text}" if head else f"- {text}"


def format_events(events: Sequence[JSONMapping]) -> str:
    """The user message content carrying pending events (what happened since last turn)."""
    lines = [f"{EVENTS_PREFIX} Since your last turn:"]
    lines.extend(event_line(e) for e in events)
    return "\n".join(lines)


def tick_message(reflection: bool = False) -> str:
    """The transient user message of a turn with no new events (never stored)."""
    if reflection:
        return f"{TICK_PREFIX} Reflect on your recent activity now."
    return f"{TICK_PREFIX} No new events. Decide whether anything needs doing."
