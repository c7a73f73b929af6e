"""say, pose, emit, whisper, page and channel_send in the sandbox world."""

from __future__ import annotations

import pytest

from ai_tools.tools.channel import ChannelSendTool
from ai_tools.tools.communication import EmitTool, PageTool, PoseTool, SayTool, WhisperTool
from ai_tools.world.sandbox import SandboxWorld
from tests.unit.tool_fakes import WORLD_KINDS, fired, refusals, run_tool, sandbox, world_actor


@pytest.fixture(params=WORLD_KINDS)
def world(request: pytest.FixtureRequest) -> SandboxWorld:
    return sandbox(kind=request.param)


def last_heard(world: SandboxWorld, char_id: str) -> dict:
    return world.heard(char_id, limit=1)[0]


def test_say_reaches_the_room(world: SandboxWorld) -> None:
    pip = world_actor(world, "char:pip")
    result = run_tool(SayTool(), pip, message="Soup's on!")
    assert result == {"success": True, "kind": "say", "text": "Soup's on!",
                      "delivered_to": ["char:bob"]}
    heard = last_heard(world, "char:bob")
    assert (heard["kind"], heard["text"], heard["sender_id"]) == ("say", "Soup's on!", "char:pip")
    assert world.heard("char:alice") == []


def test_say_to_an_empty_room(world: SandboxWorld) -> None:
    result = run_tool(SayTool(), world_actor(world, "char:mason"), message="Anyone?")
    assert result["success"] is True and result["delivered_to"] == []
    assert "no one else is here" in result["message"]


def test_pose(world: SandboxWorld) -> None:
    result = run_tool(PoseTool(), world_actor(world, "char:pip"), action="wipes a glass.")
    assert result["kind"] == "pose" and result["delivered_to"] == ["char:bob"]
    assert last_heard(world, "char:bob")["kind"] == "pose"


def test_emit_needs_builder_rights(world: SandboxWorld) -> None:
    refused = run_tool(EmitTool(), world_actor(world, "char:pip"), message="Thunder rolls.")
    assert refused["status"] == "permission_denied" and "Builder" in refused["error"]
    assert world.heard("char:bob") == []
    mason = world_actor(world, "char:mason")
    fired(world.create_character("Tess", location="room:workshop"))
    done = run_tool(EmitTool(), mason, message="The saw screams.")
    assert done["success"] is True and len(done["delivered_to"]) == 1


def test_whisper_same_room_only(world: SandboxWorld) -> None:
    pip = world_actor(world, "char:pip")
    result = run_tool(WhisperTool(), pip, target="Bob", message="Extra bread for you.")
    assert result["success"] is True and result["target"]["id"] == "char:bob"
    assert last_heard(world, "char:bob")["kind"] == "whisper"
    away = run_tool(WhisperTool(), pip, target="Alice", message="Psst")
    assert away["status"] == "not_found" and "not here" in away["error"]
    assert world.heard("char:alice") == []


def test_page_anywhere(world: SandboxWorld) -> None:
    pip = world_actor(world, "char:pip")
    result = run_tool(PageTool(), pip, target="char:alice", message="Your room is ready.")
    assert result["success"] is True
    assert last_heard(world, "char:alice")["text"] == "Your room is ready."


def test_direct_message_refusals(world: SandboxWorld) -> None:
    pip = world_actor(world, "char:pip")
    assert run_tool(PageTool(), pip, target="Zed", message="hi")["status"] == "not_found"
    # the slate is an object, not a character
    assert run_tool(PageTool(), pip, target="slate", message="hi")["status"] == "not_found"
    assert run_tool(PageTool(), pip, target="me", message="hi")["status"] == "invalid"
    assert run_tool(SayTool(), pip, message="   ")["status"] == "invalid"


@pytest.mark.parametrize(
    ("tool", "params", "bad"),
    [
        (SayTool(), {}, "message"),
        (SayTool(), {"message": ""}, "message"),
        (SayTool(), {"message": "x" * 2001}, "message"),
        (PoseTool(), {"message": "hi"}, "action"),
        (EmitTool(), {}, "message"),
        (WhisperTool(), {"message": "hi"}, "target"),
        (WhisperTool(), {"target": "Bob"}, "message"),
        (PageTool(), {"target": "", "message": "hi"}, "target"),
    ],
)
def test_schema_refusals(tool: object, params: dict, bad: str) -> None:
    assert any(p.startswith(bad) for p in refusals(tool, **params))  # type: ignore[arg-type]


def test_channel_send(world: SandboxWorld) -> None:
    mason = world_actor(world, "char:mason")
    result = run_tool(ChannelSendTool(), mason, channel="builders", message="Bench fixed.")
    assert result["success"] is True and result["delivered_to"] == ["char:alice"]
    heard = last_heard(world, "char:alice")
    assert (heard["kind"], heard["channel"]) == ("channel", "builders")


def test_channel_unknown_lists_channels(world: SandboxWorld) -> None:
    result = run_tool(ChannelSendTool(), world_actor(world, "char:mason"), channel="gossip",
                      message="hi")
    assert result["status"] == "not_found" and result["channels"] == ["builders", "public"]


def test_channel_permission_refused(world: SandboxWorld) -> None:
    fired(world.create_character("Guest", permissions=["Guest"], char_id="char:guest"))
    guest = world_actor(world, "char:guest")
    result = run_tool(ChannelSendTool(), guest, channel="builders", message="let me in")
    assert result["status"] == "permission_denied"
    assert world.heard("char:alice") == []


def test_channel_schema_refusals() -> None:
    assert refusals(ChannelSendTool(), message="hi") == ["channel"]
    assert refusals(ChannelSendTool(), channel="public") == ["message"]
    assert any(p.startswith("channel") for p in refusals(ChannelSendTool(), channel="c" * 65,
                                                          message="hi"))
