"""StateEncoder / EncodedState: incremental state encoding gives the same JSON as a full one."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ai_tools.service.assistant import Assistant, AssistantConfig
from ai_tools.store import state_json
from ai_tools.store.serialization import check_state
from ai_tools.store.state_json import EncodedState, StateEncoder


def _message(i: int) -> dict[str, Any]:
    return {"role": "user", "content": f"message {i} \u00e9\u2603"}


def _full(config: Any, history: Any, rest: dict[str, Any]) -> dict[str, Any]:
    return {"config": config, "history": history, **rest}


def test_encoded_text_is_the_state() -> None:
    encoder = StateEncoder()
    config = {"name": "a", "tick_rate": 5.0}
    history = [_message(0), _message(1)]
    rest = {"mode": "awake", "counters": {"ticks": 3}, "sleep_until": None}
    text = encoder.encode_parts(config, history, rest)
    assert json.loads(text) == _full(config, history, rest)
    assert text.isascii()  # lone surrogates and non-ASCII survive as \u escapes


def test_only_new_messages_are_encoded(monkeypatch: pytest.MonkeyPatch) -> None:
    encoded: list[Any] = []
    real = state_json.encode_json

    def spy(value: Any, what: str) -> str:
        encoded.append(value)
        return real(value, what)

    monkeypatch.setattr(state_json, "encode_json", spy)
    encoder = StateEncoder()
    config = {"name": "a"}
    history = [_message(0), _message(1)]
    encoder.encode_parts(config, history, {"mode": "awake"})
    encoded.clear()
    history = [*history, _message(2)]  # a new list, the same message objects and one more
    text = encoder.encode_parts(config, history, {"mode": "sleep"})
    assert encoded == [history[2], {"mode": "sleep"}]  # not the config, not the old messages
    assert json.loads(text) == _full(config, history, {"mode": "sleep"})


def test_replaced_truncated_and_changed_parts_are_encoded_again() -> None:
    encoder = StateEncoder()
    config = {"name": "a"}
    history = [_message(i) for i in range(5)]
    encoder.encode_parts(config, history, {})
    # truncation: the tail goes
    assert json.loads(encoder.encode_parts(config, history[:2], {}))["history"] == history[:2]
    # a replaced message (compaction) with equal position
    replaced = [{"role": "system", "content": "summary"}, *history[1:3]]
    assert json.loads(encoder.encode_parts(config, replaced, {}))["history"] == replaced
    # an emptied history, then a new config object
    assert json.loads(encoder.encode_parts(config, [], {}))["history"] == []
    new_config = {"name": "a", "persona": "changed"}
    assert json.loads(encoder.encode_parts(new_config, [], {}))["config"] == new_config


def test_unserialisable_state_fails_and_the_encoder_recovers() -> None:
    encoder = StateEncoder()
    history = [_message(0), {"role": "user", "content": object()}]
    with pytest.raises(TypeError, match="assistant state is not JSON-serialisable"):
        encoder.encode_parts({}, history, {})
    with pytest.raises(ValueError, match="assistant state is not JSON-serialisable"):
        encoder.encode_parts({}, [_message(0)], {"sleep_until": math.nan})
    good = [history[0], _message(1)]
    assert json.loads(encoder.encode_parts({}, good, {}))["history"] == good


def test_encoded_state_reads_as_a_mapping_and_stores_take_its_text() -> None:
    state = StateEncoder().encode({"config": {"name": "a"}, "history": [_message(0)],
                                   "mode": "awake", "persona_override": None})
    assert isinstance(state, EncodedState)
    assert check_state(state) == state.json_text
    assert dict(state) == {"config": {"name": "a"}, "history": [_message(0)],
                           "mode": "awake", "persona_override": None}
    assert state["mode"] == "awake" and len(state) == 4 and "history" in state
    assert "chars" in repr(state)
    # None config/history stay in the state as null
    plain = StateEncoder().encode({"config": None, "history": None})
    assert dict(plain) == {"config": None, "history": None}


def test_assistant_encoded_state_equals_to_state() -> None:
    assistant = Assistant(AssistantConfig(name="ada", character_id="char:ada"))
    assistant.history.add_user("hello")
    first = assistant.encoded_state()
    assert json.loads(first.json_text) == json.loads(json.dumps(assistant.to_state()))
    assistant.history.add_assistant("hi")
    assistant.pending_events.append({"type": "say", "text": "again"})
    assistant.count("ticks")
    second = assistant.encoded_state()
    assert dict(second) == json.loads(json.dumps(assistant.to_state()))
    assert Assistant.from_state(second).history.messages == assistant.history.messages


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=8,
)


@settings(max_examples=60, deadline=None)
@given(steps=st.lists(st.tuples(st.integers(0, 4), st.lists(_json, max_size=3),
                                st.dictionaries(st.text(max_size=5), _json, max_size=3)),
                      min_size=1, max_size=6))
def test_any_sequence_of_states_encodes_like_a_full_encoding(
    steps: list[tuple[int, list[Any], dict[str, Any]]],
) -> None:
    encoder = StateEncoder()
    history: list[Any] = []
    config = {"name": "a"}
    for keep, added, rest in steps:
        rest = {k: v for k, v in rest.items() if k not in ("config", "history")}
        history = history[:keep] + [{"role": "user", "content": a} for a in added]
        text = encoder.encode_parts(config, history, rest)
        assert json.loads(text) == _full(config, history, rest)


def test_replaced_values_are_encoded_once_per_object(monkeypatch: pytest.MonkeyPatch) -> None:
    encoded: list[Any] = []
    real = state_json.encode_json

    def spy(value: Any, what: str) -> str:
        encoded.append(value)
        return real(value, what)

    monkeypatch.setattr(state_json, "encode_json", spy)
    encoder = StateEncoder()
    summary = {"tick": 1, "duration_ms": 0.5}
    first = encoder.encode_parts(None, None, {"mode": "awake"}, {"last_tick": summary})
    encoded.clear()
    again = encoder.encode_parts(None, None, {"mode": "awake"}, {"last_tick": summary})
    assert again == first and summary not in encoded
    newer = {"tick": 2, "duration_ms": 1.5}
    text = encoder.encode_parts(None, None, {}, {"last_tick": newer, "other": None})
    assert json.loads(text) == {"last_tick": newer, "other": None}
    assert json.loads(encoder.encode_parts(None, None, {}, {"last_tick": None})) == {
        "last_tick": None}
