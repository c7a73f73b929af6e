"""The scripted model behind ai_tools.testing: scripts, rules, scenario files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ai_tools.llm.scripted import (
    EXHAUSTED_TEXT,
    Fault,
    Rule,
    Script,
    ScriptedModel,
    ToolCallSpec,
    Turn,
    last_user_message,
)


def user(text: str) -> list[dict]:
    return [{"role": "system", "content": "sys"}, {"role": "user", "content": text}]


def test_list_of_turns_played_in_order_then_default() -> None:
    """Turns answer requests in order; then the default turn says the script is over."""
    model = ScriptedModel.build(["one", Turn(text="two"), Fault.reset()])
    texts = [model.next_turn("default", user("x"))[0] for _ in range(4)]
    assert [t.text for t in texts[:2]] == ["one", "two"]
    assert texts[2].fault == Fault.reset()
    assert texts[3].text == EXHAUSTED_TEXT


def test_model_name_always_says_scripted() -> None:
    """Whatever the script calls itself, the reported name says it is scripted."""
    assert ScriptedModel.build([], "gpt-4o").model_name == "scripted:gpt-4o"
    assert ScriptedModel.build(Script(model="my-scripted-bot")).model_name == "my-scripted-bot"


def test_rules_match_new_user_lines_and_queue_follow_ups() -> None:
    """A matching rule answers; its next turns follow the tool result."""
    script = Script(
        rules=[
            Rule(
                match=r"\bhello\b",
                turns=[Turn(tool_calls=[("say", {"text": "Hi, {user_message}"})]), "Said hi."],
            )
        ],
        default="I did not understand.",
    )
    model = ScriptedModel.build(script)
    first, why = model.next_turn("default", user("Well HELLO there"))
    assert why.startswith("rule")
    assert first.tool_calls[0].arguments == {"text": "Hi, Well HELLO there"}
    after_tool = [*user("Well HELLO there"), {"role": "tool", "tool_call_id": "c", "content": "{}"}]
    assert model.next_turn("default", after_tool)[0].text == "Said hi."
    assert model.next_turn("default", user("what?"))[0].text == "I did not understand."


def test_once_rules_fire_once() -> None:
    """once=True rules are used a single time."""
    model = ScriptedModel.build(Script(rules=[Rule("hi", ["first"], once=True)], default="later"))
    assert model.next_turn("default", user("hi"))[0].text == "first"
    assert model.next_turn("default", user("hi"))[0].text == "later"


def test_conversations_have_their_own_scripts() -> None:
    """{conversation: script}: each plays its own turns; unknown ones fall back to default."""
    model = ScriptedModel.build({"alice": ["a1", "a2"], "default": ["d1"]})
    assert model.next_turn("alice", user("x"))[0].text == "a1"
    assert model.next_turn("bob", user("x"))[0].text == "d1"
    assert model.next_turn("alice", user("x"))[0].text == "a2"
    only = ScriptedModel.build({"alice": ["a1"]})
    turn, why = only.next_turn("carol", user("x"))
    assert turn is None and "carol" in why


def test_last_user_message_ignores_tool_results() -> None:
    """Tool results (native or fallback) are not new user lines."""
    assert last_user_message(user("hi")) == "hi"
    assert last_user_message([*user("hi"), {"role": "tool", "content": "{}"}]) is None
    assert last_user_message([{"role": "user", "content": "[TOOL RESULT: look]\n{}"}]) is None
    assert last_user_message("junk") is None


def test_turn_and_tool_call_coercion() -> None:
    """Dicts, pairs and strings become turns and calls; junk is refused."""
    turn = Turn.coerce({"text": "t", "tool_calls": [{"tool": "look", "parameters": {"a": 1}}]})
    assert turn.tool_calls == (ToolCallSpec("look", {"a": 1}),)
    with pytest.raises(ValueError):
        Turn.coerce(42)
    with pytest.raises(ValueError):
        ToolCallSpec.coerce("look")
    with pytest.raises(ValueError):
        Rule("x", [])
    with pytest.raises(Exception):  # noqa: B017 - re.error
        Rule("(", ["t"])


def test_faults_from_mapping() -> None:
    """Scenario files name faults by kind."""
    assert Fault.from_mapping({"kind": "rate_limited", "retry_after": 2}) == Fault.rate_limited(2)
    assert Fault.from_mapping({"kind": "stall", "after_chunks": 1}).kind == "stall"
    assert Fault.from_mapping({"kind": "status", "status": 418}).status == 418
    with pytest.raises(ValueError):
        Fault.from_mapping({"kind": "explode"})


def test_scenario_from_toml(tmp_path: Path) -> None:
    """A TOML scenario with turns, rules, a fault and a default."""
    path = tmp_path / "demo.toml"
    path.write_text(
        """
model = "demo-scripted"
description = "a greeter"
default = { text = "Hmm." }

[[turns]]
text = "Welcome!"

[[turns]]
fault = { kind = "rate_limited", retry_after = 1 }

[[rules]]
match = "hello|hi"
[[rules.turns]]
tool_calls = [{ name = "say", arguments = { text = "Hello!" } }]
[[rules.turns]]
text = "Done."
""",
        encoding="utf-8",
    )
    script = Script.from_file(path)
    assert script.model == "demo-scripted"
    assert script.turns[0].text == "Welcome!" and script.turns[1].fault is not None
    assert script.rules[0].turns[0].tool_calls[0] == ToolCallSpec("say", {"text": "Hello!"})
    assert script.default == Turn(text="Hmm.")


def test_scenario_from_json_list_and_errors(tmp_path: Path) -> None:
    """A JSON list is a list of turns; unknown keys are reported with the file name."""
    path = tmp_path / "s.json"
    path.write_text(json.dumps(["a", {"text": "b", "stream": False}]), encoding="utf-8")
    assert [t.text for t in Script.from_file(path).turns] == ["a", "b"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"turns": [], "colour": "red"}), encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad\.json.*colour"):
        Script.from_file(bad)
