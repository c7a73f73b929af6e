"""The parts SandboxWorld is composed of, each through its own public surface.

The world's behaviour is tested through ``SandboxWorld`` (test_sandbox_world*.py); these
tests pin what each part promises on its own: the channel rules, message numbering and
its reserved blocks, the heard log's failure path, the speech rules, the replica's
moved places, and that the commands reach the world only through public names.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from twisted.internet import defer, task

from ai_tools.errors import AIToolsError, NotFound, PermissionDenied
from ai_tools.world.channels import Channels
from ai_tools.world.hearing import Hearing
from ai_tools.world.messages import WorldMessage
from ai_tools.world.model import Channel, WorldObject
from ai_tools.world.objects import WorldObjects
from ai_tools.world.persistence import (
    SEQ_BLOCK,
    SEQ_FLOOR_KEY,
    HeardKeeper,
    Numbering,
    first_message_seq,
)
from ai_tools.world.replica import Change, Replica
from ai_tools.world.sandbox import SandboxWorld
from ai_tools.world.speech import Speech
from tests.unit.sandbox_world_fixtures import BOB, EXAMPLE, MASON, PIP, fired


def _channels() -> Channels:
    channels = Channels()
    channels.replace([Channel(key="Public", subscribers=["char:a", "char:b"], auto_join=True),
                      Channel(key="Builders", send_permission="Builder")])
    return channels


def _character(char_id: str, permissions: list[str] | None = None) -> WorldObject:
    return WorldObject(id=char_id, key=char_id.split(":")[1], kind="character",
                       permissions=permissions or ["Player"])


def test_channels_are_named_in_any_case_and_each_lookup_is_heard() -> None:
    channels = _channels()
    read: list[str] = []
    channels.on_read = read.append
    assert channels.named(" public ").key == "Public"
    assert read == ["Public"]
    with pytest.raises(NotFound, match="no channel called 'Gossip'"):
        channels.named("Gossip")
    assert [c["key"] for c in channels.listing()] == ["Builders", "Public"]


def test_channel_rules_posting_and_subscribing() -> None:
    channels = _channels()
    public, builders = channels.named("public"), channels.named("builders")
    alive = {"char:a", "char:b", "char:c"}.__contains__
    assert channels.receivers(_character("char:a"), public, alive) == ["char:b"]
    with pytest.raises(PermissionDenied, match="needs Builder rights"):
        channels.receivers(_character("char:a"), builders, alive)
    assert channels.set_subscribed("char:c", public, True)
    assert not channels.set_subscribed("char:c", public, True)  # nothing changed
    assert channels.set_subscribed("char:c", public, False)
    assert [c.key for c in channels.join_auto("char:d")] == ["Public"]
    assert "char:d" in public.subscribers


def test_replacing_the_channels_keeps_the_table() -> None:
    """The world, its speech and the shared replica hold the same dict for its lifetime."""
    channels = _channels()
    table = channels.by_key
    channels.replace([Channel(key="Ooc")])
    assert channels.by_key is table and list(table) == ["ooc"]


def test_numbering_reserves_the_next_block_when_one_is_used_up() -> None:
    reserved: list[int] = []

    def reserve(limit: int) -> defer.Deferred[None]:
        reserved.append(limit)
        return defer.succeed(None)

    numbering = Numbering(reserve)
    meta: dict[str, object] = {SEQ_FLOOR_KEY: 7, "name": "x"}
    numbering.take_floor(meta)  # type: ignore[arg-type]
    assert numbering.floor == 7 and SEQ_FLOOR_KEY not in meta
    fired(numbering.start(now=2.0))
    start = first_message_seq(2.0)
    assert reserved == [start + SEQ_BLOCK]
    numbering.seq = start + SEQ_BLOCK - 2
    assert numbering.next() == start + SEQ_BLOCK - 1 and len(reserved) == 1
    assert numbering.next() == start + SEQ_BLOCK and reserved[-1] == start + 2 * SEQ_BLOCK


def test_numbering_goes_on_from_the_floor_when_the_clock_went_back() -> None:
    numbering = Numbering(lambda limit: defer.succeed(None))
    numbering.floor = first_message_seq(100.0)
    fired(numbering.start(now=50.0))
    assert numbering.next() == first_message_seq(100.0) + 1


class _FailingHeardLog:
    """A heard log whose writes fail (a full disk)."""

    def append_heard(self, messages: list[tuple[int, str, str]],
                     keep: int) -> defer.Deferred[None]:
        return defer.fail(OSError("disk full"))

    def load_heard(self, limit: int) -> defer.Deferred[list[tuple[int, str, str]]]:
        return defer.succeed([(3, "not json", "[]"),
                              (4, '{"kind": "say", "text": "hi", "sender_id": "char:a", '
                                  '"sender_key": "a", "location_id": null, "target_id": null, '
                                  '"channel": null, "timestamp": 1.0}', '["char:b"]')])


def test_a_heard_log_write_that_failed_is_reported_and_a_bad_row_skipped() -> None:
    keeper = HeardKeeper(_FailingHeardLog())
    message = WorldMessage(kind="say", text="hi", sender_id="char:a", sender_key="a",
                           location_id=None, target_id=None, channel=None,
                           timestamp=1.0, seq=9)
    keeper.keep(message, ["char:b"])
    with pytest.raises(AIToolsError, match="disk full"):
        fired(keeper.kept(9))
    fired(keeper.kept(8))  # nothing failed for that one
    hearing = Hearing()
    fired(keeper.restore(hearing))
    assert [m["seq"] for m in hearing.heard("char:b")] == [4]


def test_speech_refusals_and_hearers() -> None:
    world = SandboxWorld.from_file(EXAMPLE, clock=task.Clock())
    said: list[tuple[WorldMessage, list[str]]] = []
    speech = Speech(world.objects, world.channels, iter(range(1, 100)).__next__,
                    lambda: 5.0, lambda m, r: said.append((m, r)))
    with pytest.raises(ValueError, match="unknown message kind"):
        speech.to_room(BOB, "x", kind="shout")
    with pytest.raises(PermissionDenied, match="may not emit"):
        speech.to_room(BOB, "x", kind="emit")
    with pytest.raises(ValueError, match="cannot page to itself"):
        speech.to_character(BOB, BOB, "x", kind="page")
    hearers = speech.to_room(MASON, "Hello", kind="emit")
    assert said[-1][0].kind == "emit" and said[-1][0].seq == 1 and said[-1][1] == hearers
    assert speech.to_character(BOB, PIP, "psst", kind="page") == [PIP]


def test_the_replica_sees_the_places_a_change_moves_objects_between() -> None:
    world = SandboxWorld.from_file(EXAMPLE, clock=task.Clock())
    replica = Replica(world)
    replica.versions = {("objects", BOB): 3}
    replica.placed = {BOB: "room:inn"}
    change = Change()
    change.add({"objects": [{"id": BOB, "location": "room:plaza"}]}, None)
    assert replica.moved_places(change) == {("objects", "room:inn"),
                                            ("objects", "room:plaza")}
    unmoved = Change()
    unmoved.add({"objects": [{"id": BOB, "location": "room:inn"}]}, None)
    assert replica.moved_places(unmoved) == set()


def test_the_commands_use_only_public_names_of_the_world() -> None:
    """world/commands.py reaches no private attribute of the world it is given."""
    import ai_tools.world.commands as commands

    tree = ast.parse(Path(commands.__file__).read_text(encoding="utf-8"))
    private = [node.attr for node in ast.walk(tree)
               if isinstance(node, ast.Attribute) and node.attr.startswith("_")
               and not node.attr.startswith("__")
               and isinstance(node.value, ast.Attribute | ast.Name)
               and getattr(node.value, "attr", getattr(node.value, "id", "")) in (
                   "world", "objects")]
    assert private == []


def test_a_world_is_composed_of_its_parts() -> None:
    world = SandboxWorld.from_file(EXAMPLE, clock=task.Clock())
    assert world.speech.objects is world.objects is world.building.objects
    assert world.speech.channels is world.channels
    assert isinstance(world.objects, WorldObjects)
    assert world.building.prototypes is world.prototypes
