"""Episodes: each conversation tick leaves a searchable record with its participants."""

from __future__ import annotations

import json
from typing import Any

from twisted.internet import task

from ai_tools.service.episodes import episode_record, participants_of, replies_in
from ai_tools.store.memory import MemoryStore
from ai_tools.tools.records import EPISODES

from .react_fakes import ScriptedLLM, answer, call, make_registry, text
from .service_fakes import add, make_service, settle


def _say(message: str) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function",
         "function": {"name": "say", "arguments": json.dumps({"message": message})}}]}


def test_participants_in_first_seen_order_without_duplicates() -> None:
    events = [{"from": "Bob", "text": "hi"}, {"sender_id": "char:alice", "text": "yo"},
              {"from": "Bob", "text": "again"}, {"type": "system", "text": "rain"}]
    assert participants_of(events) == ["Bob", "char:alice"]


def test_replies_are_read_from_terminal_calls_only() -> None:
    messages = [_say("Evening, Bob."),
                {"role": "assistant", "tool_calls": [{"id": "c2", "type": "function", "function": {
                    "name": "inspect_location", "arguments": "{}"}}]},
                {"role": "assistant", "tool_calls": [{"id": "c3", "type": "function", "function": {
                    "name": "say", "arguments": "{not json"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "{}"}]
    assert replies_in(messages, {"say"}) == ["say: Evening, Bob."]


def test_no_episode_when_nobody_spoke() -> None:
    assert episode_record("pip", [], [], {"say"}, "noop") is None
    assert episode_record("pip", [{"type": "system", "text": "x"}], [], {"say"}, "noop") is None


def test_episode_content_and_metadata() -> None:
    content, metadata = episode_record(  # type: ignore[misc]
        "pip", [{"from": "Bob", "type": "say", "text": "Soup?"}], [_say("Chowder.")],
        {"say"}, "terminal_tool")
    assert "Bob (say): Soup?" in content
    assert "pip (say): Chowder." in content
    assert metadata == {"participants": ["Bob"], "kind": "conversation",
                        "termination_reason": "terminal_tool"}


def test_a_conversation_tick_writes_a_searchable_episode() -> None:
    """Through the service and the real loop: Bob speaks, Pip answers, the episode is stored."""
    llm = ScriptedLLM([answer(call("say", {"text": "Fish chowder tonight."}))])
    clock, service, _ = make_service(loop=False, llm=llm, registry=make_registry())
    add(service, clock, name="pip")
    service.send("pip", {"type": "say", "from": "Bob", "text": "What soup tonight?"})
    settle(clock, 20)
    assert service.get("pip").last_tick is not None
    found = service.store.search_records("pip", EPISODES, "soup chowder", 5).result
    assert len(found) == 1
    assert found[0]["metadata"]["participants"] == ["Bob"]
    assert "Fish chowder tonight." in found[0]["content"]
    # Idle ticks (nothing pending) write nothing more.
    clock.advance(30)
    settle(clock, 20)
    assert len(service.store.list_records("pip", EPISODES, 10).result) == 1


class NoRecordsStore(MemoryStore):
    """A store whose record writes fail (a full disk)."""

    def add_record(self, *args: Any, **kwargs: Any) -> Any:
        raise OSError("disk full")


def test_a_failed_episode_write_does_not_fail_the_tick() -> None:
    """A store that refuses the episode: the tick still runs and reports the error once."""
    llm = ScriptedLLM([answer(call("say", {"text": "Hello."})), text("done")])
    clock = task.Clock()
    clock, service, _ = make_service(clock, loop=False, llm=llm, registry=make_registry(),
                                     store=NoRecordsStore(clock=clock))
    add(service, clock, name="pip")
    service.send("pip", {"type": "say", "from": "Bob", "text": "Hi"})
    settle(clock, 20)
    last = service.get("pip").last_tick
    assert last is not None and last["status"] == "ran", last
    assert any("episode not recorded" in e for e in last["errors"]), last
