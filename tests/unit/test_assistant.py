"""Tests for ai_tools.service.assistant: configuration, state round trip, mode, events."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from zope.interface.verify import verifyObject

from ai_tools.errors import AIToolsError, ConfigError
from ai_tools.execution.history import ConversationHistory
from ai_tools.interfaces import IAssistantRuntime
from ai_tools.loop import ExitTool
from ai_tools.service.assistant import (
    AWAKE,
    SLEEP,
    Assistant,
    AssistantConfig,
    SleepRefused,
    normalise_event,
)

# -- configuration --------------------------------------------------------------


def test_config_defaults() -> None:
    config = AssistantConfig(name="ada")
    assert (config.tick_rate, config.sleep_tick_rate) == (5.0, 60.0)
    assert config.model == "default"
    assert config.reflection_interval == 0
    assert config.execution_config == {}


def test_config_from_mapping_round_trip() -> None:
    data = {
        "name": "ada", "character_id": "char:ada", "persona": "You are Ada.",
        "tick_rate": 2, "reflection_interval": 3,
        "execution_config": {"max_iterations": 7, "contexts": {"conversation": {"pattern":
                                                                                 "single_action"}}},
        "exit_tools": [{"name": "handoff", "description": "Hand over."}],
        "compaction": {"preserve_window": 10},
    }
    config = AssistantConfig.from_mapping(data)
    assert config.exit_tools == (ExitTool(name="handoff", description="Hand over."),)
    assert config.compaction.preserve_window == 10
    again = AssistantConfig.from_mapping(json.loads(json.dumps(config.to_dict())))
    assert again == config


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({}, "'name' is required"),
        ({"name": ""}, "assistant.name must be"),
        ({"name": "has space"}, "assistant.name must be"),
        ({"name": "evil\n"}, "assistant.name must be"),
        ({"name": "a", "tick_rate": float("nan")}, "tick_rate must be a positive number"),
        ({"name": "a", "tick_rate": float("inf")}, "tick_rate must be a positive number"),
        ({"name": "a", "sleep_duration": float("inf")}, "sleep_duration"),
        ({"name": "a", "colour": "red"}, "unknown key"),
        ({"name": "a", "tick_rate": 0}, "tick_rate must be a positive number"),
        ({"name": "a", "tick_rate": "5"}, "tick_rate must be a positive number"),
        ({"name": "a", "sleep_tick_rate": -1}, "sleep_tick_rate"),
        ({"name": "a", "reflection_interval": -1}, "reflection_interval must be a non-negative"),
        ({"name": "a", "max_history": 0}, "max_history must be a positive integer"),
        ({"name": "a", "autonomous": "yes"}, "autonomous must be true or false"),
        ({"name": "a", "persona": 3}, "persona must be a string"),
        ({"name": "a", "execution_config": {"max_iterations": 50}}, "max_iterations"),
        ({"name": "a", "exit_tools": "handoff"}, "exit_tools must be a list"),
        ({"name": "a", "exit_tools": [{"description": "x"}]}, "need a 'name'"),
        ({"name": "a", "exit_tools": [3]}, "must be tables"),
        ({"name": "a", "compaction": {"preserve_window": 0}}, "compaction"),
        ({"name": "a", "tool_budget": -2}, "tool_budget"),
        ({"name": "a", "context_window": 0}, "context_window"),
    ],
)
def test_config_errors_name_the_key(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        AssistantConfig.from_mapping(data)


def test_config_where_is_used_in_messages() -> None:
    with pytest.raises(ConfigError, match=r"assistants\[2\]\.tick_rate"):
        AssistantConfig.from_mapping({"name": "a", "tick_rate": 0}, "assistants[2]")
    with pytest.raises(ConfigError, match="must be a table"):
        AssistantConfig.from_mapping([], "assistants[0]")  # type: ignore[arg-type]


# -- runtime --------------------------------------------------------------------------


def test_implements_the_runtime_contract() -> None:
    assistant = Assistant(AssistantConfig(name="ada", execution_config={"max_iterations": 3}))
    assert verifyObject(IAssistantRuntime, assistant)
    assert assistant.name == "ada"
    assert assistant.llm is None
    assert assistant.execution_config == {"max_iterations": 3}
    assert repr(assistant) == "<Assistant ada awake>"


def test_sleep_safeguard_needs_activity_since_wake() -> None:
    """An assistant that has done nothing since waking may not fall asleep again."""
    assistant = Assistant(AssistantConfig(name="ada"))
    with pytest.raises(SleepRefused, match="0 of 1"):
        assistant.set_mode(SLEEP, "bored")
    assert assistant.mode == AWAKE
    assistant.execution_state.activity_since_wake = 1
    assert assistant.set_mode(SLEEP, "quiet") is True
    assert assistant.mode == SLEEP and assistant.mode_reason == "quiet"
    assert assistant.sleep_until == 3600.0
    assert assistant.set_mode(SLEEP) is False  # no change
    assert assistant.set_mode(AWAKE, "morning") is True
    assert assistant.activity_since_wake == 0
    assert assistant.sleep_until is None
    assert assistant.counters == {"sleeps": 1, "wakes": 1}


def test_sleep_can_be_forced_and_given_a_duration() -> None:
    assistant = Assistant(AssistantConfig(name="ada"))
    assert assistant.set_mode(SLEEP, force=True, duration=30)
    assert assistant.sleep_until == 30
    assistant.set_mode(AWAKE)
    with pytest.raises(ValueError, match="duration"):
        assistant.set_mode(SLEEP, force=True, duration=0)
    with pytest.raises(ValueError, match="mode must be one of"):
        assistant.set_mode("dreaming")


def test_sleep_safeguard_can_be_disabled() -> None:
    assistant = Assistant(AssistantConfig(name="ada", min_activity_before_sleep=0))
    assert assistant.set_mode(SLEEP)


def test_queue_event_normalises_and_caps() -> None:
    assistant = Assistant(AssistantConfig(name="ada", max_pending_events=3))
    assistant.queue_event("hello")
    assert assistant.pending_events[0] == {"type": "message", "text": "hello", "received_at": 0.0}
    for i in range(5):
        assistant.queue_event({"type": "say", "text": str(i)})
    assert [e["text"] for e in assistant.pending_events] == ["2", "3", "4"]
    assert assistant.counters["events_dropped"] == 3
    with pytest.raises(TypeError, match="must be a dict or a string"):
        assistant.queue_event(42)
    with pytest.raises(TypeError, match="keys must be strings"):
        assistant.queue_event({1: "x"})
    with pytest.raises(TypeError, match="JSON-serialisable"):
        assistant.queue_event({"data": {1, 2}})
    with pytest.raises(TypeError, match="JSON-serialisable"):
        assistant.queue_event({"x": float("nan")})
    assert len(assistant.pending_events) == 3


@pytest.mark.parametrize(
    ("event", "addressed"),
    [
        ({"type": "say", "text": "nice weather"}, False),
        ({"type": "say", "text": "Ada, how are you?"}, True),
        ({"type": "say", "text": "adamant refusal"}, False),
        ({"type": "whisper", "text": "psst"}, True),
        ({"type": "page", "text": "come"}, True),
        ({"type": "say", "target": "char:ada", "text": "hm"}, True),
        ({"type": "say", "to": "ada"}, True),
        ({"type": "say", "text": "Ada!", "addressed": False}, False),
        ({"type": "arrive", "addressed": True}, True),
    ],
)
def test_addressed_events(event: dict[str, Any], addressed: bool) -> None:
    assistant = Assistant(AssistantConfig(name="Ada", character_id="char:ada"))
    assistant.queue_event(event)
    assert assistant.has_addressed_event() is addressed


def test_set_system_prompt() -> None:
    assistant = Assistant(AssistantConfig(name="ada", persona="old"))
    assert assistant.persona == "old"
    assistant.set_system_prompt("You are new.")
    assert assistant.persona == "You are new."
    with pytest.raises(ValueError):
        assistant.set_system_prompt("  ")


def test_subagents_without_host_and_records() -> None:
    assistant = Assistant(AssistantConfig(name="ada"))
    with pytest.raises(AIToolsError, match="no service"):
        assistant.start_subagent("do it", ["look"], 3)
    for i in range(25):
        assistant.record_subagent(f"sub-{i}", {"status": "done" if i else "running"})
    assert len(assistant.subagents) == 20
    assert "sub-0" in assistant.subagents  # running ones are never dropped
    assert assistant.subagent_status("sub-24") == {"status": "done"}
    assert assistant.subagent_status("nope") is None


def test_status_is_json() -> None:
    assistant = Assistant(AssistantConfig(name="ada"))
    assistant.count("ticks", 3)
    status = assistant.status()
    json.dumps(status)
    assert status["counters"]["ticks"] == 3
    assert status["mode"] == "awake" and status["pending_events"] == 0
    assert status["events_dropped"] == 0 and status["context_percent"] is None


def test_the_pending_cap_counts_and_logs_what_it_drops() -> None:
    """Beyond max_pending_events the oldest go: counted, logged, shown in the status."""
    from twisted.logger import LogLevel

    from tests.unit.service_fakes import LogCapture

    assistant = Assistant(AssistantConfig(name="ada", max_pending_events=2))
    with LogCapture() as logs:
        for i in range(5):
            assistant.queue_event(f"e{i}")
    assert [e["text"] for e in assistant.pending_events] == ["e3", "e4"]
    assert assistant.status()["events_dropped"] == 3
    warnings = [e for e in logs.events if e["log_level"] is LogLevel.warn
                and "pending events" in e["log_format"]]
    assert [e["count"] for e in warnings] == [1, 1, 1]
    assistant.pending_events[:0] = [{"text": "back"}] * 3  # (a loop gave a batch back)
    assert assistant.cap_pending_events() == 3
    assert assistant.status()["events_dropped"] == 6


# -- persistence ----------------------------------------------------------------------


def _busy_assistant() -> Assistant:
    assistant = Assistant(AssistantConfig(name="ada", persona="p"))
    assistant.history.add_user("hello")
    assistant.history.add_assistant("hi")
    assistant.queue_event({"type": "say", "text": "again"})
    assistant.persona_override = "new persona"
    assistant.execution_state.activity_since_wake = 2
    assistant.execution_state.calls = 7
    assistant.count("ticks", 4)
    assistant.tick_number = 4
    assistant.ticks_since_reflection = 2
    assistant.set_mode(SLEEP, duration=100)
    assistant.emergency_stopped = True
    assistant.record_subagent("sub-1", {"status": "running", "task": "t"})
    assistant.last_tick = {"tick": 4, "status": "ran"}
    return assistant


def test_state_round_trip() -> None:
    original = _busy_assistant()
    state = json.loads(json.dumps(original.to_state()))
    restored = Assistant.from_state(state)
    assert restored.config == original.config
    assert restored.history.messages == original.history.messages
    assert restored.pending_events == original.pending_events
    assert restored.mode == SLEEP and restored.sleep_until == 100
    assert restored.persona == "new persona"
    assert restored.activity_since_wake == 2
    assert restored.execution_state.calls == 7
    assert restored.counters == original.counters
    assert (restored.tick_number, restored.ticks_since_reflection) == (4, 2)
    assert restored.emergency_stopped
    assert restored.last_tick == {"tick": 4, "status": "ran"}
    # A sub-agent that was running when the process stopped is reported interrupted.
    assert restored.subagents["sub-1"]["status"] == "interrupted"
    assert not restored.ticking


def test_from_state_given_config_wins() -> None:
    state = _busy_assistant().to_state()
    config = AssistantConfig(name="ada", tick_rate=9.0)
    restored = Assistant.from_state(state, config)
    assert restored.config.tick_rate == 9.0


def test_from_state_repairs_a_cut_off_tool_call() -> None:
    """A tool call saved without its answer (crash mid-tool) gets an interrupted answer."""
    state = Assistant(AssistantConfig(name="ada")).to_state()
    state["history"] = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "look", "arguments": "{}"}}]},
    ]
    restored = Assistant.from_state(state)
    assert restored.history.unanswered_tool_calls() == []
    assert restored.history.messages[-1]["role"] == "tool"
    assert "interrupted" in restored.history.messages[-1]["content"]


def test_from_state_without_config_is_refused() -> None:
    with pytest.raises(ConfigError, match="no config"):
        Assistant.from_state({"mode": "awake"})


def test_from_state_none_is_a_new_assistant() -> None:
    config = AssistantConfig(name="ada", enabled=False)
    assistant = Assistant.from_state(None, config)
    assert assistant.enabled is False
    assert len(assistant.history) == 0


@given(
    junk=st.dictionaries(
        st.sampled_from(["mode", "enabled", "history", "pending_events", "counters",
                         "tick_number", "sleep_until", "execution", "subagents", "last_tick",
                         "persona_override", "ticks_since_reflection", "mode_reason"]),
        st.one_of(st.none(), st.integers(), st.text(max_size=5), st.booleans(),
                  st.lists(st.one_of(st.integers(), st.dictionaries(st.text(max_size=3),
                                                                     st.integers())),
                           max_size=3),
                  st.dictionaries(st.text(max_size=3), st.one_of(st.integers(), st.text(
                      max_size=3)), max_size=3)),
    )
)
def test_from_state_survives_malformed_fields(junk: dict[str, Any]) -> None:
    """A damaged saved state still gives a usable assistant (bad fields → defaults)."""
    assistant = Assistant.from_state(junk, AssistantConfig(name="ada"))
    assert assistant.mode in (AWAKE, SLEEP)
    assert isinstance(assistant.history, ConversationHistory)
    assert all(isinstance(e, dict) for e in assistant.pending_events)
    json.dumps(assistant.to_state())


def test_normalise_event_keeps_given_time() -> None:
    assert normalise_event({"type": "x", "received_at": 5}, 9)["received_at"] == 5
    assert normalise_event({"type": "x"}, 9)["received_at"] == 9
