"""``python -m ai_tools.standalone.demo`` (``make demo``) as a user runs it: a real process, exit 0.

Runs with the scripted stand-in model (no model server), against a model
server named by AI_TOOLS_LLM_URL/AI_TOOLS_LLM_MODEL (the scripted server of
ai_tools.testing, standing in for Ollama or vLLM), and against a server that is
not there.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import utils

from ai_tools.testing import Script, start_test_server

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "examples" / "demo-scenario.toml"


def reactor() -> Any:
    from twisted.internet import reactor as global_reactor

    return global_reactor


async def run_demo(state_dir: Path, **env: str) -> tuple[str, str, int]:
    """Run the demo in a child process; its stdout, stderr and exit status."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("LLM_", "AI_TOOLS_"))}
    environ.update(env)
    out, err, code = await utils.getProcessOutputAndValue(
        sys.executable, ["-m", "ai_tools.standalone.demo", "--state-dir", str(state_dir),
                         "--timeout", "120"],
        env=environ, path=str(ROOT), reactor=reactor())
    return out.decode(), err.decode(), code


def assert_the_whole_story(out: str) -> None:
    """Both exchanges, every kind of step, the replies Bob heard, a clean stop."""
    lines = out.splitlines()
    tools = [line.split("tool:", 1)[1].split("(", 1)[0].strip()
             for line in lines if line.strip().startswith("tool:")]
    assert tools == ["inspect_location", "recall_memories", "search_object", "get_attributes",
                     "get_attributes", "say", "store_memory", "say"], out
    assert "reasoning: Bob is asking about the soup." in out
    assert "1 memory(ies), best: 'Bob takes his fish chowder without onions.'" in out
    assert 'soup = "fish chowder", price = 3' in out
    assert "cache hit" in out  # the repeated get_attributes
    assert out.count("loop ended: terminal_tool") == 2
    assert ('Bob hears: Pip says, "Fish chowder tonight, Bob, three coins a bowl. And no onions '
            'in yours, as always."') in out
    assert 'Bob hears: Pip says, "Two bowls of chowder coming up, Bob. Sit by the fire."' in out
    assert "Pip's memories now: 2" in out
    assert "The service stopped cleanly" in out
    assert "Traceback" not in out


def assert_state_on_disk(state_dir: Path) -> None:
    conn = sqlite3.connect(str(state_dir / "demo.sqlite"))
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        (state,) = conn.execute("SELECT state FROM assistants WHERE name = 'pip'").fetchone()
        history = json.loads(state)["history"]
        assert sum(1 for m in history if m.get("role") == "tool") == 8
    finally:
        conn.close()
    assert "ai_tools service ready" in (state_dir / "demo.log").read_text()


@pytest_twisted.ensureDeferred
async def test_demo_with_the_scripted_model(tmp_path: Path) -> None:
    out, err, code = await run_demo(tmp_path / "var")
    assert code == 0, out + err
    assert "the scripted stand-in model (ai_tools.llm.scripted)" in out
    assert_the_whole_story(out)
    assert_state_on_disk(tmp_path / "var")


@pytest_twisted.ensureDeferred
async def test_demo_runs_again_from_a_fresh_state(tmp_path: Path) -> None:
    """A second run starts over (same replies, two memories), not on top of the first."""
    for _ in range(2):
        out, err, code = await run_demo(tmp_path / "var")
        assert code == 0, out + err
        assert_the_whole_story(out)


@pytest_twisted.ensureDeferred
async def test_demo_against_a_model_server_named_by_the_variables(tmp_path: Path) -> None:
    server = await start_test_server(Script.from_file(SCENARIO), reactor=reactor())
    url, model = server.url, server.model_name
    try:
        out, err, code = await run_demo(tmp_path / "var", AI_TOOLS_LLM_URL=url,
                                        AI_TOOLS_LLM_MODEL=model,
                                        AI_TOOLS_LLM_API_KEY="sk-test")
    finally:
        await server.stop()
    assert code == 0, out + err
    assert f"Model: {model} at {url} (from AI_TOOLS_LLM_URL / AI_TOOLS_LLM_MODEL)" in out
    assert_the_whole_story(out)
    assert len(server.requests) == 7  # five steps, then two
    assert server.requests[0].headers["authorization"] == "Bearer sk-test"
    assert "sk-test" not in out + (tmp_path / "var" / "demo.log").read_text()


@pytest_twisted.ensureDeferred
async def test_demo_with_an_unreachable_model_server(tmp_path: Path) -> None:
    out, err, code = await run_demo(tmp_path / "var", AI_TOOLS_LLM_URL="http://127.0.0.1:9/v1",
                                    AI_TOOLS_LLM_MODEL="nothing")
    assert code == 1, out + err
    assert "loop ended: llm_error (could not reach http://127.0.0.1:9/v1" in out
    assert "check AI_TOOLS_LLM_URL, AI_TOOLS_LLM_MODEL" in out
    assert "The service stopped." in out
    assert "Traceback" not in out + err


@pytest_twisted.ensureDeferred
async def test_demo_needs_both_llm_variables(tmp_path: Path) -> None:
    out, err, code = await run_demo(tmp_path / "var", AI_TOOLS_LLM_URL="http://127.0.0.1:9/v1")
    assert code == 2
    assert ("'model' is required (with AI_TOOLS_LLM_URL, set --llm-model or AI_TOOLS_LLM_MODEL "
            "too)") in out + err


@pytest_twisted.ensureDeferred
async def test_the_former_variable_names_are_named_not_silently_dropped(tmp_path: Path) -> None:
    """LLM_URL (read by earlier versions) gets a warning naming its replacement; the demo
    then runs with the scripted model it announces."""
    out, err, code = await run_demo(tmp_path / "var", LLM_URL="http://127.0.0.1:9/v1",
                                    LLM_MODEL="x", AI_TOOLS_DB="elsewhere.sqlite")
    assert code == 0, out + err
    assert ("demo: warning: LLM_URL is not read any more: set AI_TOOLS_LLM_URL instead"
            in out)
    assert "demo: warning: LLM_MODEL is not read any more" in out
    assert "demo: AI_TOOLS_DB is not used by the demo" in out
    assert "the scripted stand-in model" in out


# -- what the demo reports when the loop does not go as planned (in-process, real reactor) --


async def demo_with_scenario(tmp_path: Path, scenario: str,
                             **environ: str) -> tuple[list[str], int]:
    """The demo's story with Pip's answers taken from ``scenario``; its lines and status."""
    from ai_tools.standalone import demo

    (tmp_path / "scenario.toml").write_text(scenario)
    example = (ROOT / "examples" / "assistant.toml").read_text()
    config = tmp_path / "assistant.toml"
    config.write_text(example.replace('"demo-scenario.toml"', json.dumps(
        str(tmp_path / "scenario.toml"))).replace('"world.toml"', json.dumps(
            str(ROOT / "examples" / "world.toml"))))
    lines: list[str] = []
    status = await demo.run_demo(reactor(), lines.append, state_dir=tmp_path / "var",
                                 environ=environ, timeout=60, config_path=config)
    return lines, status


def rule(match: str, *turns: str) -> str:
    return f'[[rules]]\nmatch = "{match}"\n' + "".join(f"[[rules.turns]]\n{t}\n" for t in turns)


NOTHING = 'tool_calls = [{ name = "get_attributes", arguments = { object = "no such thing" } }]'
REPEATING = 'text = """' + "The chowder is hot.\n" * 12 + '"""'


@pytest.mark.parametrize(("turns", "reason"), [
    ((NOTHING,) * 6, "consecutive_errors"),
    ((REPEATING,), "repeated_line_loop"),
])
@pytest_twisted.ensureDeferred
async def test_a_failed_loop_is_a_failed_demo(tmp_path: Path, turns: tuple[str, ...],
                                              reason: str) -> None:
    """A loop that ends in failure (not only a model that does not answer) exits 1 and
    says why; it is never quoted as Pip's answer."""
    lines, status = await demo_with_scenario(tmp_path, rule("soup", *turns))
    out = "\n".join(lines)
    assert status == 1, out
    assert f"  loop ended: {reason}" in out
    assert f"  Pip's loop failed: {reason}" in out
    assert "Pip said nothing" not in out
    assert out.endswith("The service stopped.")


@pytest_twisted.ensureDeferred
async def test_after_a_failed_loop_the_previous_answer_is_not_quoted_again(
        tmp_path: Path) -> None:
    scenario = (rule("soup", 'text = "Fish chowder, Bob. No onions."')
                + rule("bowls", REPEATING))
    lines, status = await demo_with_scenario(tmp_path, scenario)
    out = "\n".join(lines)
    assert status == 1, out
    assert out.count("Pip said nothing in the room: 'Fish chowder, Bob. No onions.'") == 1
    assert "  Pip's loop failed: repeated_line_loop" in out


@pytest_twisted.ensureDeferred
async def test_fallback_tool_calls_show_their_reasoning_and_results(tmp_path: Path) -> None:
    """Tool calls written in the text (fallback tool calling): the step shows the model's
    reasoning, not the call's JSON, and what the tool returned, not "null"."""
    look = ('text = """Let me look first.\n{"tool": "inspect_location", "parameters": '
            '{"detail_level": "normal"}, "reasoning": "Who is here?"}"""')
    say = 'text = """{"tool": "say", "parameters": {"message": "Chowder tonight, Bob!"}}"""'
    scenario = rule("soup", look, say) + rule("bowls", say)
    lines, status = await demo_with_scenario(tmp_path, scenario,
                                             AI_TOOLS_LLM_TOOL_CALLING="fallback")
    out = "\n".join(lines)
    assert status == 0, out
    assert "    reasoning: Let me look first. Who is here?" in lines, out
    assert "inspect_location({\"detail_level\": \"normal\"})" in out
    assert ("    result:    " in out and ": The Drowned Lantern; exits: east" in out), out
    assert ": null" not in out and '{"tool"' not in out
    assert 'Bob hears: Pip says, "Chowder tonight, Bob!"' in out
