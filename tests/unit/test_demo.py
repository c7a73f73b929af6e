"""The pieces of ``make demo``: step lines, result summaries, model selection, fresh state."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ai_tools.standalone import demo


def printed(events: list[dict[str, Any]], results: dict[str, Any] | None = None) -> list[str]:
    lines: list[str] = []
    printer = demo.StepPrinter(lines.append,
                               lambda call_id, tool: (results or {}).get(call_id),
                               ["inspect_location", "say"])
    for event in events:
        printer(event)
    return lines


def test_a_step_says_reasoning_tool_duration_cache_and_result() -> None:
    lines = printed([
        {"type": "iteration", "iteration": 1, "usage_percent": 5.7},
        {"type": "text_delta", "text": "Let me look "},
        {"type": "text_delta", "text": "around."},
        {"type": "tool_call", "tool": "inspect_location", "tool_call_id": "c1",
         "arguments": {"detail_level": "normal"}, "category": "safe_chain"},
        {"type": "tool_result", "tool": "inspect_location", "tool_call_id": "c1",
         "success": True, "status": "success", "duration_ms": 1.25, "from_cache": True},
        {"type": "termination", "reason": "terminal_tool", "iterations": 1,
         "duration_ms": 1500.0},
    ], {"c1": {"success": True, "location": {"key": "Inn"}, "exits": [{"key": "east"}],
               "contents": [], "characters": [{"key": "Bob"}]}})
    assert lines == [
        "  step 1: asking the model (5.7% of the context used)",
        "    reasoning: Let me look around.",
        '    tool:      inspect_location({"detail_level": "normal"})  [safe_chain]',
        "    result:    ok in 1.2 ms, cache hit: Inn; exits: east; people: Bob",
        "  loop ended: terminal_tool after 1 step(s), 1.50 s",
    ]


def test_failures_are_shown() -> None:
    lines: list[str] = []
    printer = demo.StepPrinter(lines.append, lambda call_id, tool: None)
    printer({"type": "tool_result", "tool_call_id": "x", "success": False,
             "status": "permission_denied", "duration_ms": 0.5})
    printer({"type": "text_delta", "text": "I cannot."})
    printer({"type": "termination", "reason": "llm_error", "error": "could not reach it",
             "iterations": 1, "duration_ms": 10})
    printer({"type": "signal", "tool_name": "hand_over", "arguments": {"reason": "too big"}})
    assert lines[0] == "    result:    permission_denied in 0.5 ms: null"
    assert lines[1] == "    answer:    I cannot."
    assert lines[2].startswith("  loop ended: llm_error (could not reach it) after 1 step(s)")
    assert lines[3] == '    signal:    hand_over({"reason": "too big"})'


def test_a_call_written_in_the_text_is_not_shown_as_reasoning() -> None:
    """Fallback tool calling: the answer's text holds the call as JSON; the step shows the
    words around it and the call's own reasoning, one call after the other."""
    calls = [{"tool": "inspect_location", "parameters": {}, "reasoning": "Who is here?"},
             {"tool": "say", "parameters": {"message": "hi"}}]
    text = 'Let me look.\n' + "\n".join(__import__("json").dumps(c) for c in calls)
    lines = printed([
        {"type": "iteration", "iteration": 1, "usage_percent": 1.0},
        {"type": "text_delta", "text": text[:20]},
        {"type": "text_delta", "text": text[20:]},
        {"type": "tool_call", "tool": "inspect_location", "tool_call_id": "a",
         "arguments": {}, "category": "safe_chain"},
        {"type": "tool_call", "tool": "say", "tool_call_id": "b",
         "arguments": {"message": "hi"}, "category": "terminal"},
    ])
    assert lines[1:] == [
        "    reasoning: Let me look. Who is here?",
        "    tool:      inspect_location({})  [safe_chain]",
        '    tool:      say({"message": "hi"})  [terminal]',
    ]


def test_results_are_found_in_either_history_format() -> None:
    """A ``tool`` message answering the call's id, or (fallback) a user message holding the
    tool's result: the step says what it returned instead of "null"."""
    from types import SimpleNamespace

    assistant = SimpleNamespace(history=SimpleNamespace(messages=[
        {"role": "tool", "tool_call_id": "c1", "content": '{"success": true, "n": 1}'},
        {"role": "user", "content": '[TOOL RESULT: look]\n{"success": true, "n": 2}'},
        {"role": "user", "content": '[TOOL RESULT: look]\n{"success": true, "n": 3}'},
    ]))
    service = SimpleNamespace(get=lambda name: assistant)
    result_of = demo._result_lookup(service, "pip")
    assert result_of("c1", "say") == {"success": True, "n": 1}
    assert result_of("other", "look") == {"success": True, "n": 3}  # the latest
    assert result_of("other", "say") is None


@pytest.mark.parametrize(("result", "summary"), [
    ({"success": False, "error": "no such object"}, "error: no such object"),
    ({"success": True, "memories": [], "message": "no memory matches"}, "no memory matches"),
    ({"success": True, "memories": [{"content": "Bob likes stew"}]},
     "1 memory(ies), best: 'Bob likes stew'"),
    ({"success": True, "memory": {"id": 4, "content": "two bowls"}},
     "stored memory 4: 'two bowls'"),
    ({"success": True, "results": [{"key": "soup slate"}, {"id": "obj:x"}]},
     "found 2: soup slate, obj:x"),
    ({"success": True, "attributes": {"soup": "chowder", "price": 3}},
     'soup = "chowder", price = 3'),
    ({"success": True, "kind": "say", "delivered_to": ["char:bob"]}, "say, heard by char:bob"),
    ({"success": True, "kind": "say", "delivered_to": []}, "say, heard by nobody"),
    ({"success": True}, "ok"),
    ({"success": True, "waited": 2, "_token_advisory": "wrap up"}, '{"waited": 2}'),
    ("plain text", "plain text"),
    ({"success": True, "note": "x" * 200}, '{"note": "' + "x" * 77 + "..."),
])
def test_summarise_result(result: Any, summary: str) -> None:
    assert demo.summarise_result(result) == summary


def test_the_model_line_and_the_variables_the_demo_does_not_follow() -> None:
    from ai_tools.standalone.config import Overrides, load_config

    example = demo.EXAMPLES / "assistant.toml"
    config = load_config(example, Overrides(flags={"db": "memory"}))
    assert "scripted stand-in model" in demo.model_line(config)
    assert "Set AI_TOOLS_LLM_URL and AI_TOOLS_LLM_MODEL" in demo.model_line(config)
    environ = {"AI_TOOLS_LLM_URL": "http://127.0.0.1:11434/v1", "AI_TOOLS_LLM_MODEL": "qwen"}
    config = load_config(example, Overrides(flags={"db": "memory"}, environ=environ))
    assert demo.model_line(config) == ("qwen at http://127.0.0.1:11434/v1 (from "
                                       "AI_TOOLS_LLM_URL / AI_TOOLS_LLM_MODEL)")
    assert demo.ignored_variables({"AI_TOOLS_DB": "x.sqlite", "AI_TOOLS_HTTP": "",
                                   "AI_TOOLS_MANHOLE": "2222", **environ}) == [
        "AI_TOOLS_DB", "AI_TOOLS_MANHOLE"]


def test_fresh_state_removes_an_earlier_run(tmp_path: Path) -> None:
    state = tmp_path / "var"
    state.mkdir()
    for name in ("demo.sqlite", "demo.sqlite-wal", "demo.sqlite-shm", "other.sqlite"):
        (state / name).write_text("old")
    db = demo.fresh_state(state)
    assert db == state / "demo.sqlite"
    assert sorted(p.name for p in state.iterdir()) == ["other.sqlite"]
    assert demo.fresh_state(tmp_path / "new" / "dir").parent.is_dir()


def test_the_scenario_answers_both_player_lines() -> None:
    from ai_tools.testing import Script, ScriptedModel

    model = ScriptedModel.build(Script.from_file(demo.EXAMPLES / "demo-scenario.toml"))
    for line in demo.PLAYER_LINES:
        turn, why = model.next_turn("default", [{"role": "user", "content": f"- (say): {line}"}])
        assert why.startswith("rule"), line
        assert turn is not None and turn.tool_calls


def test_paths_are_shown_relative_to_the_working_directory(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert demo.shown(tmp_path / "var" / "demo.sqlite") == "var/demo.sqlite"
    assert demo.shown(Path("/elsewhere/demo.sqlite")) == "/elsewhere/demo.sqlite"
