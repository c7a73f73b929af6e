"""Message tools keyed by their call: a call made again (same call id, as after a failover)
is delivered once on the shared world; different calls, even with the same words, all are."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet import task

from ai_tools.store.memory import MemoryStore
from ai_tools.tools.base import Actor, Tool
from ai_tools.tools.channel import ChannelSendTool
from ai_tools.tools.communication import EmitTool, PageTool, PoseTool, SayTool, WhisperTool
from ai_tools.world.sandbox import SandboxWorld
from ai_tools.world.shared import SharedWorld
from tests.unit.tool_fakes import EXAMPLE_WORLD, fired, run_tool, sandbox, world_actor

# (tool, who calls it, its parameters, who hears it)
MESSAGES: list[tuple[Tool, str, dict[str, str], str]] = [
    (SayTool(), "char:pip", {"message": "Soup's on!"}, "char:bob"),
    (PoseTool(), "char:pip", {"action": "wipes a glass."}, "char:bob"),
    (EmitTool(), "char:mason", {"message": "The saw screams."}, "char:tess"),
    (WhisperTool(), "char:pip", {"target": "Bob", "message": "Extra bread."}, "char:bob"),
    (PageTool(), "char:pip", {"target": "char:alice", "message": "Room ready."}, "char:alice"),
    (ChannelSendTool(), "char:mason", {"channel": "builders", "message": "Bench fixed."},
     "char:alice"),
]
IDS = [tool.name for tool, *_ in MESSAGES]


def shared_world(store: MemoryStore | None = None) -> SharedWorld:
    """The example world shared through ``store`` (a fresh memory store by default), with
    Tess, a character in Mason's workshop who hears his emits."""
    clock = task.Clock()
    world = fired(SharedWorld.load(store or MemoryStore(clock=clock), seed=EXAMPLE_WORLD,
                                   clock=clock))
    if world.get_object("char:tess") is None:
        fired(world.create_character("Tess", location="room:workshop", char_id="char:tess"))
    return world


def texts(world: SandboxWorld, char_id: str) -> list[str]:
    return [m["text"] for m in world.heard(char_id, limit=50)]


def test_the_effect_key_names_the_assistant_the_call_and_what_it_does() -> None:
    """Same call, same key; another id, tool, effect or assistant: another key; none
    without a call id or outside an assistant."""
    world = sandbox()
    pip = world_actor(world, "char:pip", call_id="call_1")
    key = pip.effect_key("say", "hello")
    assert key is not None and key.startswith("pip:call_1:")
    assert pip.effect_key("say", "hello") == key
    assert pip.effect_key("say", "hello!") != key
    assert pip.effect_key("pose", "hello") != key
    assert world_actor(world, "char:pip", call_id="call_2").effect_key("say", "hello") != key
    assert world_actor(world, "char:bob", call_id="call_1").effect_key("say", "hello") != key
    assert world_actor(world, "char:pip").effect_key("say", "hello") is None
    assert Actor("char:pip", world=world, call_id="call_1").effect_key("say", "hello") is None


@pytest.mark.parametrize(("tool", "speaker", "params", "hearer"), MESSAGES, ids=IDS)
def test_a_call_made_again_is_delivered_once(
    tool: Tool, speaker: str, params: dict[str, str], hearer: str
) -> None:
    """The same call twice (the same id): heard once, stored once; both runs succeed."""
    world = shared_world()
    before = len(texts(world, hearer))
    actor = world_actor(world, speaker, call_id="call_7")
    first = run_tool(tool, actor, **params)
    again = run_tool(tool, actor, **params)
    assert first["success"] is True and again == first
    assert len(texts(world, hearer)) == before + 1
    stored = fired(world.store.world_since(0))["messages"]
    assert sum(1 for _, data, _ in stored if data["sender_id"] == speaker) == 1


@pytest.mark.parametrize(("tool", "speaker", "params", "hearer"), MESSAGES, ids=IDS)
def test_two_calls_with_the_same_words_are_both_delivered(
    tool: Tool, speaker: str, params: dict[str, str], hearer: str
) -> None:
    """Two calls (two ids) saying the same words: heard twice."""
    world = shared_world()
    before = len(texts(world, hearer))
    run_tool(tool, world_actor(world, speaker, call_id="call_1"), **params)
    run_tool(tool, world_actor(world, speaker, call_id="call_2"), **params)
    assert len(texts(world, hearer)) == before + 2


def test_a_reused_id_with_other_words_is_another_call() -> None:
    """A model reusing an id the history no longer holds, for other words: both heard."""
    world = shared_world()
    pip = world_actor(world, "char:pip", call_id="call_0")
    run_tool(SayTool(), pip, message="The soup is leek.")
    run_tool(SayTool(), pip, message="The bread is rye.")
    assert texts(world, "char:bob")[-2:] == ["The soup is leek.", "The bread is rye."]


def test_the_new_owner_making_the_call_again_delivers_nothing_new() -> None:
    """Worker A says it and dies before saving; worker B (the new owner, its own replica
    of the same store) makes the same call: Bob hears it once, on both replicas."""
    store = MemoryStore(clock=task.Clock())
    fired(store.open())
    a, b = shared_world(store), shared_world(store)
    heard_on_a: list[Any] = []
    a.subscribe("char:bob", heard_on_a.append)
    run_tool(SayTool(), world_actor(a, "char:pip", call_id="call_3"), message="Soup's on!")
    result = run_tool(SayTool(), world_actor(b, "char:pip", call_id="call_3"),
                      message="Soup's on!")
    assert result["success"] is True and result["delivered_to"] == ["char:bob"]
    fired(a.catch_up())
    assert [m.text for m in heard_on_a] == ["Soup's on!"]
    assert texts(b, "char:bob").count("Soup's on!") == 1


def test_the_sandbox_world_takes_the_key_and_delivers_each_call() -> None:
    """One process runs each call once: the sandbox world accepts the key, keeps nothing."""
    world = sandbox()
    pip = world_actor(world, "char:pip", call_id="call_1")
    run_tool(SayTool(), pip, message="Soup's on!")
    run_tool(SayTool(), pip, message="Soup's on!")
    assert texts(world, "char:bob").count("Soup's on!") == 2


def test_the_engine_gives_the_tool_the_call_id_as_the_history_records_it() -> None:
    """Through the execution engine: each call's actor carries its own id, so the same
    call run again by a new owner (a fresh history, the same id) is delivered once, and
    another call with the same words is delivered again."""
    from ai_tools.execution.engine import ExecutionContext, run_tool_call
    from ai_tools.execution.history import ConversationHistory
    from ai_tools.tools.registry import ToolRegistry

    store = MemoryStore(clock=task.Clock())
    fired(store.open())
    a, b = shared_world(store), shared_world(store)

    def say_on(world: SharedWorld, call_id: str) -> Any:
        actor = world_actor(world, "char:pip")
        ctx = ExecutionContext(registry=ToolRegistry([SayTool]), actor=actor,
                               history=ConversationHistory(), clock=task.Clock())
        call = {"id": call_id, "type": "function",
                "function": {"name": "say", "arguments": '{"message": "Soup\'s on!"}'}}
        outcome: Any = run_tool_call(ctx, call)
        assert outcome.success and actor.call_id == call_id
        return outcome

    say_on(a, "call_9")
    say_on(b, "call_9")  # the new owner makes the interrupted call again
    say_on(b, "call_10")
    fired(a.catch_up())
    assert texts(a, "char:bob").count("Soup's on!") == 2
