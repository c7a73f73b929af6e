"""Tests for ai_tools.loop.prompts: system prompt variants, tool listing, events."""

from __future__ import annotations

import attrs
from hypothesis import given
from hypothesis import strategies as st

from ai_tools.loop.advisory import TokenAdvisory
from ai_tools.loop.prompts import (
    EVENTS_PREFIX,
    TICK_PREFIX,
    PromptInputs,
    build_system_prompt,
    format_events,
    render_tools_section,
    tick_message,
)

LOOK = {"type": "function", "function": {"name": "look", "description": "Look around.",
                                         "parameters": {"type": "object"}}}
SAY = {"type": "function", "function": {"name": "say", "description": "Speak.",
                                        "parameters": {"type": "object",
                                                       "required": ["text"]}}}
FLAG = {"type": "function", "function": {"name": "flag", "description": "Flag it.",
                                         "parameters": {"type": "object"}}}


def inputs(**kw: object) -> PromptInputs:
    base = PromptInputs(assistant_name="Ada", tool_schemas=[LOOK, SAY],
                        tool_categories={"look": "safe_chain", "say": "terminal"})
    return attrs.evolve(base, **kw)


def test_awake_prompt_names_turn_ending_tools_and_status() -> None:
    """Persona default, the tools that end a turn by category, step and budget; with
    native tools the descriptions and schemas are in ``tools=``, not repeated here."""
    text = build_system_prompt(inputs(tool_budget_remaining=3, iteration=1, max_iterations=4))
    assert text.startswith("You are Ada")
    assert "TERMINAL tools: say." in text
    assert "DANGEROUS tools:" not in text  # none offered
    assert "Look around." not in text and "Speak." not in text and "look" not in text
    assert "Step 2 of at most 4 this turn." in text
    assert "Tool calls remaining this turn: 3." in text
    assert "call `noop`" in text
    assert "parameters:" not in text


def test_native_prompt_lists_each_category_once() -> None:
    """Several tools of a category are named on one line, in the order offered."""
    dig = {"type": "function", "function": {"name": "dig", "description": "Dig."}}
    text = render_tools_section(inputs(
        tool_schemas=[LOOK, SAY, dig, FLAG],
        tool_categories={"look": "safe_chain", "say": "terminal", "dig": "dangerous",
                         "flag": "terminal"}))
    assert text.splitlines() == ["TERMINAL tools: say, flag.", "DANGEROUS tools: dig."]


def test_fallback_prompt_lists_every_tool_with_its_mark() -> None:
    """Fallback mode has no ``tools=``: each tool's line has its mark and description."""
    text = build_system_prompt(inputs(native_tools=False))
    assert "- look: Look around." in text
    assert "- say [TERMINAL]: Speak." in text


def test_no_budget_line_without_budget() -> None:
    """An unlimited budget is not mentioned."""
    assert "remaining" not in build_system_prompt(inputs())


def test_persona_used_verbatim() -> None:
    """A persona replaces the default first line."""
    text = build_system_prompt(inputs(persona="  You are Grumpy the guard.  "))
    assert text.startswith("You are Grumpy the guard.")


def test_sleep_and_reflection_variants() -> None:
    """Sleep and reflection prompts say what the turn is for; reflection wins."""
    assert "You are asleep" in build_system_prompt(inputs(mode="sleep"))
    reflection = build_system_prompt(inputs(mode="sleep", reflection=True))
    assert "reflection turn" in reflection and "asleep" not in reflection


def test_fallback_mode_carries_schemas_and_convention() -> None:
    """Without native tools the prompt holds the schemas and the JSON convention."""
    text = build_system_prompt(inputs(native_tools=False))
    assert '"required":["text"]' in text
    assert '{"tool": "<tool name>", "arguments": {...}, "reasoning": "<why>"}' in text
    assert "[TOOL RESULT: <name>]" in text


def test_exit_tools_marked_as_signals() -> None:
    """Exit tools are named as SIGNAL tools with an explanation (fallback: with their line)."""
    text = build_system_prompt(inputs(exit_tool_schemas=[FLAG]))
    assert "SIGNAL tools (one-way notices" in text and text.count("flag") == 1
    assert "Flag it." not in text
    fallback = build_system_prompt(inputs(exit_tool_schemas=[FLAG], native_tools=False))
    assert "- flag [SIGNAL]: Flag it." in fallback
    assert "Tools marked SIGNAL are one-way notices" in fallback


def test_advisory_only_when_elevated() -> None:
    """NORMAL adds nothing; HIGH adds the advisory message."""
    assert "advisory" not in build_system_prompt(inputs(advisory=TokenAdvisory.for_usage(10)))
    high = build_system_prompt(inputs(advisory=TokenAdvisory.for_usage(75)))
    assert "Context advisory (high)" in high and "75%" in high


def test_precomputed_tools_section_is_used() -> None:
    """A loop renders the tools section once and passes it in."""
    section = render_tools_section(inputs())
    assert build_system_prompt(inputs(tools_text=section)) == build_system_prompt(inputs())
    assert "SENTINEL" in build_system_prompt(inputs(tools_text="SENTINEL"))


def test_events_formatting() -> None:
    """Events show speaker, kind and text; unknown shapes fall back to JSON."""
    text = format_events([
        {"type": "say", "from": "Bob", "text": "Hello"},
        {"message": "a bell rings"},
        {"kind": "arrival", "who": "Eve"},
    ])
    lines = text.splitlines()
    assert lines[0].startswith(EVENTS_PREFIX)
    assert lines[1] == "- Bob (say): Hello"
    assert lines[2] == "- a bell rings"
    assert lines[3] == '- (arrival): {"who": "Eve"}'


def test_tick_message() -> None:
    """The transient nudge has its own prefix and a reflection variant."""
    assert tick_message().startswith(TICK_PREFIX)
    assert "Reflect" in tick_message(reflection=True)


@given(st.text(), st.integers(0, 9), st.none() | st.integers(0, 100),
       st.sampled_from(["awake", "sleep"]), st.booleans(), st.booleans())
def test_prompt_always_builds(persona: str, iteration: int, budget: int | None, mode: str,
                              reflection: bool, native: bool) -> None:
    """Any persona and state give a prompt naming the step."""
    text = build_system_prompt(inputs(persona=persona, iteration=iteration,
                                      tool_budget_remaining=budget, mode=mode,
                                      reflection=reflection, native_tools=native))
    assert f"Step {iteration + 1} of at most" in text
