"""SandboxWorld: reads, permissions, attributes, tags, prototypes, messages, hearing, help.

The world is the example world (examples/world.toml) on a MemoryStore, so
every Deferred has fired when a method returns.  Characters: Mason (Builder),
Pip (Player, owns the soup slate), Alice and Bob (Players).
"""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet import task
from zope.interface.verify import verifyObject

from ai_tools.errors import NotFound, PermissionDenied
from ai_tools.interfaces import IWorld, IWorldCommands, IWorldMessages, IWorldObjects
from ai_tools.store.memory import MemoryStore
from ai_tools.world.messages import WorldMessage
from ai_tools.world.sandbox import MAX_VALUE_CHARS, SandboxWorld
from tests.unit.sandbox_world_fixtures import (  # noqa: F401 (fixtures)
    ALICE,
    BOB,
    EXAMPLE,
    MASON,
    PIP,
    clock_fixture,
    fired,
    logged_failures_fixture,
    store_fixture,
    world_fixture,
)

# -- reads ----------------------------------------------------------------------------


def test_provides_iworld(world: SandboxWorld) -> None:
    """SandboxWorld implements IWorld; its name is 'sandbox'."""
    assert verifyObject(IWorld, world)
    assert world.name == "sandbox"


def test_iworld_is_the_union_of_its_concerns(world: SandboxWorld) -> None:
    """IWorld is the union of IWorldObjects, IWorldCommands and IWorldMessages.

    Every method of IWorld belongs to exactly one concern, and a world that
    declares IWorld provides (and verifies against) each narrow interface.
    """
    concerns = [IWorldObjects, IWorldCommands, IWorldMessages]
    names = [set(concern.names()) for concern in concerns]
    assert set().union(*names) | {"name"} == set(IWorld.names(all=True))
    assert sum(len(n) for n in names) == len(set().union(*names))
    for concern in concerns:
        assert IWorld.extends(concern)
        assert verifyObject(concern, world)


def test_get_object(world: SandboxWorld) -> None:
    """Object dicts carry id, key, kind, description, location (+ destination for exits)."""
    fountain = world.get_object("obj:fountain")
    assert fountain is not None
    assert fountain["key"] == "stone fountain"
    assert fountain["kind"] == "object"
    assert fountain["location"] == "room:plaza"
    assert world.get_object("exit:plaza-north")["destination"] == "room:library"
    assert world.get_object(MASON)["permissions"] == ["Builder"]
    assert world.get_object("nope") is None
    assert world.get_object(None) is None  # type: ignore[arg-type]
    assert world.get_object(12) is None  # type: ignore[arg-type]


def test_character_ids_lists_the_characters_only(world: SandboxWorld) -> None:
    """What the service checks its assistants' characters against at start."""
    ids = world.character_ids()
    assert ids == sorted(ids) and MASON in ids
    assert all(world.get_object(i)["kind"] == "character" for i in ids)
    everything = world.snapshot()
    assert len(ids) == sum(1 for o in everything["objects"] if o["kind"] == "character")


def test_returned_dicts_are_copies(world: SandboxWorld) -> None:
    """Changing a returned dict never changes the world."""
    world.get_object("obj:fountain")["aliases"].append("hacked")
    world.get_attributes("obj:workbench")["tools"].append("laser")
    assert world.get_object("obj:fountain")["aliases"] == ["fountain"]
    assert world.get_attributes("obj:workbench")["tools"] == ["saw", "plane", "hammer"]


def test_describe_location_levels(world: SandboxWorld) -> None:
    """The room, its exits, things and other characters; detail levels differ."""
    seen = world.describe_location(BOB)
    assert seen["room"]["id"] == "room:inn"
    assert [e["key"] for e in seen["exits"]] == ["east"]
    assert seen["exits"][0]["destination"] == "room:plaza"
    assert [c["id"] for c in seen["contents"]] == ["obj:slate"]
    assert [c["id"] for c in seen["characters"]] == [PIP]  # Bob himself excluded
    brief = world.describe_location(BOB, "brief")
    assert brief["room"]["description"] == ""
    detailed = world.describe_location(BOB, "detailed")
    assert detailed["contents"][0]["attributes"] == {"soup": "fish chowder", "price": 3}
    assert {"tag": "indoors", "category": None} in detailed["room"]["tags"]


def test_describe_location_refusals(world: SandboxWorld) -> None:
    """Unknown character, a non-character, a bad detail level."""
    with pytest.raises(NotFound):
        world.describe_location("char:nobody")
    with pytest.raises(NotFound):
        world.describe_location("obj:fountain")
    with pytest.raises(ValueError):
        world.describe_location(BOB, "everything")


def test_search_ranking(world: SandboxWorld) -> None:
    """Exact name beats prefix beats substring; an id finds its object."""
    found = world.search("ledger")
    assert found[0]["id"] == "obj:ledger"  # alias exact
    assert world.search("harb")[0]["id"] == "room:harbour"  # prefix of "harbour"
    assert [o["id"] for o in world.search("obj:slate")] == ["obj:slate"]
    assert world.search("fount")[0]["id"] == "obj:fountain"


def test_search_filters(world: SandboxWorld) -> None:
    """location limits to one room's contents, kind to one kind; limit and empty query."""
    assert [o["id"] for o in world.search("e", location="room:inn", kind="exit")] == [
        "exit:inn-east"
    ]
    assert world.search("fountain", location="room:inn") == []
    assert all(o["kind"] == "character" for o in world.search("a", kind="character"))
    assert len(world.search("e", limit=2)) == 2
    assert world.search("") == []
    assert world.search("   ") == []
    assert world.search("zzz-nothing") == []
    assert world.search("e", limit=0) == []
    with pytest.raises(NotFound):
        world.search("x", location="room:nowhere")


def test_search_prefers_what_is_near(world: SandboxWorld) -> None:
    """Equal matches: the one in the searcher's room comes first."""
    assert world.search("east", char_id=BOB)[0]["id"] == "exit:inn-east"
    assert world.search("east", char_id=ALICE)[0]["id"] == "exit:plaza-east"


# -- permissions ------------------------------------------------------------------------


def test_permission_hierarchy(world: SandboxWorld) -> None:
    """Builder implies Player and below, not Admin; custom permissions are exact."""
    assert world.has_permission(MASON, "Builder")
    assert world.has_permission(MASON, "player")
    assert world.has_permission(MASON, "Guest")
    assert not world.has_permission(MASON, "Admin")
    assert not world.has_permission(ALICE, "Builder")
    assert not world.has_permission(ALICE, "emit")
    assert not world.has_permission("char:nobody", "Player")
    assert not world.has_permission("obj:fountain", "Player")


def test_can_edit_rules(world: SandboxWorld) -> None:
    """Self, owner, Builder for things, Admin for other characters."""
    assert world.can_edit(ALICE, ALICE)
    assert world.can_edit(PIP, "obj:slate")  # Pip owns the slate
    assert not world.can_edit(ALICE, "obj:slate")
    assert world.can_edit(MASON, "obj:slate")
    assert world.can_edit(MASON, "room:plaza")
    assert not world.can_edit(MASON, ALICE)  # another character needs Admin


# -- attributes ---------------------------------------------------------------------------


def test_set_and_delete_attribute_as_builder(world: SandboxWorld) -> None:
    """A Builder sets any JSON value on a thing and deletes it again."""
    result = fired(world.set_attribute(MASON, "obj:fountain", "wishes", {"made": [1, 2]}))
    assert result["id"] == "obj:fountain"
    assert world.get_attributes("obj:fountain", ["wishes"]) == {"wishes": {"made": [1, 2]}}
    assert fired(world.delete_attribute(MASON, "obj:fountain", "wishes")) is True
    assert fired(world.delete_attribute(MASON, "obj:fountain", "wishes")) is False
    assert "wishes" not in world.get_attributes("obj:fountain")


def test_owner_and_self_may_set_attributes(world: SandboxWorld) -> None:
    """Pip may change his own slate and himself; not Bob's character."""
    fired(world.set_attribute(PIP, "obj:slate", "soup", "leek"))
    fired(world.set_attribute(PIP, PIP, "mood", "cheerful"))
    assert world.get_attributes("obj:slate")["soup"] == "leek"
    with pytest.raises(PermissionDenied):
        fired(world.set_attribute(PIP, BOB, "mood", "grumpy"))


def test_attribute_refusals(world: SandboxWorld) -> None:
    """No rights, internal names, blank names, huge or non-JSON values, unknown ids."""
    with pytest.raises(PermissionDenied, match="needs Builder"):
        fired(world.set_attribute(ALICE, "obj:fountain", "coins_in_basin", 0))
    assert world.get_attributes("obj:fountain")["coins_in_basin"] == 12
    with pytest.raises(PermissionDenied):
        fired(world.delete_attribute(ALICE, "obj:fountain", "coins_in_basin"))
    with pytest.raises(PermissionDenied, match="internal"):
        fired(world.set_attribute(MASON, "obj:fountain", "_secret", 1))
    with pytest.raises(ValueError):
        fired(world.set_attribute(MASON, "obj:fountain", "  ", 1))
    with pytest.raises(ValueError, match="too large"):
        fired(world.set_attribute(MASON, "obj:fountain", "big", "x" * MAX_VALUE_CHARS))
    with pytest.raises(TypeError):
        fired(world.set_attribute(MASON, "obj:fountain", "f", object()))
    with pytest.raises(NotFound):
        fired(world.set_attribute(MASON, "obj:nothing", "a", 1))
    with pytest.raises(NotFound):
        fired(world.set_attribute("char:nobody", "obj:fountain", "a", 1))
    with pytest.raises(NotFound):
        world.get_attributes("obj:nothing")


# -- tags ---------------------------------------------------------------------------------


def test_tags(world: SandboxWorld) -> None:
    """Tags are case-insensitive, categorised, added once, removed once."""
    fired(world.add_tag(MASON, "obj:workbench", "Sturdy", "Quality"))
    fired(world.add_tag(MASON, "obj:workbench", "sturdy", "quality"))
    assert world.get_tags("obj:workbench") == [{"tag": "sturdy", "category": "quality"}]
    assert world.get_tags("obj:workbench", "other") == []
    assert [o["id"] for o in world.search_by_tag("STURDY")] == ["obj:workbench"]
    assert world.search_by_tag("sturdy", "other") == []
    assert fired(world.remove_tag(MASON, "obj:workbench", "sturdy", "quality")) is True
    assert fired(world.remove_tag(MASON, "obj:workbench", "sturdy", "quality")) is False


def test_search_by_tag_and_limit(world: SandboxWorld) -> None:
    """Every object with the tag, oldest first, at most ``limit``."""
    town = world.search_by_tag("town", "zone")
    assert [o["id"] for o in town] == ["room:plaza", "room:library", "room:workshop", "room:inn"]
    assert len(world.search_by_tag("town", limit=2)) == 2


def test_tag_refusals(world: SandboxWorld) -> None:
    """No rights, blank tag, system category without Developer."""
    with pytest.raises(PermissionDenied):
        fired(world.add_tag(ALICE, "obj:fountain", "mine"))
    with pytest.raises(PermissionDenied):
        fired(world.remove_tag(ALICE, "obj:fountain", "landmark"))
    with pytest.raises(ValueError):
        fired(world.add_tag(MASON, "obj:fountain", " "))
    with pytest.raises(PermissionDenied, match="Developer"):
        fired(world.add_tag(MASON, "obj:fountain", "core", "system"))
    assert world.get_tags("obj:fountain") == [{"tag": "landmark", "category": None}]


# -- prototypes ----------------------------------------------------------------------------


def test_list_prototypes(world: SandboxWorld) -> None:
    """Sorted by key with their description and required permission."""
    listed = world.list_prototypes()
    assert [p["key"] for p in listed] == ["chair", "lantern", "signpost"]
    assert listed[2]["permission"] == "Admin"


def test_spawn_prototype(world: SandboxWorld, clock: task.Clock) -> None:
    """A Builder spawns into its room; the object is theirs and carries the prototype's data."""
    clock.advance(10)
    made = fired(
        world.spawn_prototype(
            MASON,
            "LANTERN",
            overrides={"key": "storm lantern", "attributes": {"fuel": 3}, "colour": "red"},
        )
    )
    assert made["id"] == "obj:storm-lantern"
    assert made["location"] == "room:workshop"
    assert made["owner"] == MASON
    attributes = world.get_attributes(made["id"])
    assert attributes == {"fuel": 3, "lit": False, "colour": "red"}
    assert world.get_tags(made["id"]) == [{"tag": "light", "category": None}]
    again = fired(world.spawn_prototype(MASON, "lantern", location="room:plaza"))
    assert again["id"] == "obj:brass-lantern"
    third = fired(world.spawn_prototype(MASON, "lantern", location="room:plaza"))
    assert third["id"] == "obj:brass-lantern-2"
    assert world.search("brass lantern", location="room:plaza")[0]["location"] == "room:plaza"


def test_spawn_refusals(world: SandboxWorld) -> None:
    """Players cannot spawn; Admin prototypes need Admin; unknown names; forbidden overrides."""
    with pytest.raises(PermissionDenied):
        fired(world.spawn_prototype(ALICE, "chair"))
    with pytest.raises(PermissionDenied, match="Admin"):
        fired(world.spawn_prototype(MASON, "signpost"))
    with pytest.raises(NotFound):
        fired(world.spawn_prototype(MASON, "dragon"))
    with pytest.raises(PermissionDenied):
        fired(world.spawn_prototype(MASON, "chair", overrides={"permissions": ["Developer"]}))
    with pytest.raises(PermissionDenied):
        fired(world.spawn_prototype(MASON, "chair", overrides={"_hidden": 1}))
    with pytest.raises(NotFound):
        fired(world.spawn_prototype(MASON, "chair", location="room:atlantis"))
    with pytest.raises(ValueError):
        fired(world.spawn_prototype(MASON, "chair", location="exit:plaza-north"))
    assert world.search("wooden chair") == []


# -- messages ------------------------------------------------------------------------------


def heard_by(world: SandboxWorld, *chars: str) -> dict[str, list[WorldMessage]]:
    """Subscribe a recording listener to each character."""
    got: dict[str, list[WorldMessage]] = {c: [] for c in chars}
    for char in chars:
        world.subscribe(char, got[char].append)
    return got


def test_say_reaches_the_room_not_the_speaker(world: SandboxWorld) -> None:
    """Everyone else in the room hears a say; the speaker and other rooms do not."""
    got = heard_by(world, PIP, BOB, ALICE)
    hearers = fired(world.message_location(BOB, "Soup, please."))
    assert hearers == [PIP]
    assert got[BOB] == [] and got[ALICE] == []
    message = got[PIP][0]
    assert (message.kind, message.text, message.sender_id, message.sender_key) == (
        "say",
        "Soup, please.",
        BOB,
        "Bob",
    )
    assert message.location_id == "room:inn"
    assert message.timestamp == 500
    assert message.render() == 'Bob says, "Soup, please."'
    assert message.to_event()["from_id"] == BOB


def test_pose_emit_and_exclude(world: SandboxWorld) -> None:
    """Poses reach the room; emit needs Builder; excluded characters hear nothing."""
    got = heard_by(world, PIP)
    assert fired(world.message_location(BOB, "waves.", "pose", exclude=[PIP])) == []
    assert got[PIP] == []
    fired(world.message_location(BOB, "waves.", "pose"))
    assert got[PIP][-1].render() == "Bob waves."
    with pytest.raises(PermissionDenied):
        fired(world.message_location(BOB, "Thunder rolls.", "emit"))
    with pytest.raises(ValueError):
        fired(world.message_location(BOB, "HEY", "shout"))


def test_whisper_and_page(world: SandboxWorld) -> None:
    """Whispers need the same room; pages reach anywhere; only characters, never oneself."""
    got = heard_by(world, PIP, MASON)
    assert fired(world.message_character(BOB, PIP, "a secret")) == [PIP]
    assert got[PIP][-1].kind == "whisper"
    assert got[PIP][-1].target_id == PIP
    with pytest.raises(NotFound):
        fired(world.message_character(BOB, MASON, "far away", "whisper"))
    fired(world.message_character(BOB, MASON, "from afar", "page"))
    assert got[MASON][-1].render() == "Bob pages: from afar"
    with pytest.raises(NotFound):
        fired(world.message_character(BOB, "obj:slate", "hi", "page"))
    with pytest.raises(ValueError):
        fired(world.message_character(BOB, PIP, "hi", "telepathy"))
    with pytest.raises(ValueError):
        fired(world.message_character(BOB, BOB, "hi", "page"))


def test_channels(world: SandboxWorld) -> None:
    """Posts reach subscribers but the sender; unknown channel; send permission."""
    got = heard_by(world, MASON, ALICE)
    receivers = fired(world.channel_send(BOB, "PUBLIC", "boat for sale"))
    assert set(receivers) == {MASON, PIP, ALICE}
    assert got[MASON][-1].channel == "public"
    assert got[MASON][-1].render() == "[public] Bob: boat for sale"
    assert fired(world.channel_send(ALICE, "builders", "mend the quay?")) == [MASON]
    with pytest.raises(NotFound):
        fired(world.channel_send(BOB, "gossip", "x"))
    assert [c["key"] for c in world.list_channels()] == ["builders", "public"]


def test_channel_send_permission(store: MemoryStore, clock: task.Clock) -> None:
    """A channel with a send permission refuses characters without it."""
    data = {
        "objects": [
            {"id": "room:a", "key": "A", "kind": "room"},
            {
                "id": "char:p",
                "key": "P",
                "kind": "character",
                "location": "room:a",
                "permissions": ["Player"],
            },
        ],
        "channels": [{"key": "staff", "subscribers": ["char:p"], "send_permission": "Admin"}],
    }
    world = fired(SandboxWorld.load(store, seed=data, clock=clock))
    with pytest.raises(PermissionDenied):
        fired(world.channel_send("char:p", "staff", "let me in"))


def test_unsubscribe_and_failing_listener(world: SandboxWorld, logged_failures: Any) -> None:
    """Unsubscribing twice is harmless; a raising listener is logged, others still hear."""
    got: list[WorldMessage] = []

    def broken(message: WorldMessage) -> None:
        raise RuntimeError("listener bug")

    world.subscribe(PIP, broken)
    unsubscribe = world.subscribe(PIP, got.append)
    fired(world.message_location(BOB, "one"))
    assert [m.text for m in got] == ["one"]
    assert len(logged_failures) == 1
    unsubscribe()
    unsubscribe()
    fired(world.message_location(BOB, "two"))
    assert [m.text for m in got] == ["one"]
    with pytest.raises(NotFound):
        world.subscribe("char:nobody", got.append)


def test_heard_log_is_bounded_and_filterable(store: MemoryStore, clock: task.Clock) -> None:
    """Each character keeps the last log_size messages; after/limit select from them."""
    world = fired(SandboxWorld.load(store, seed=EXAMPLE, clock=clock, log_size=3))
    for n in range(5):
        fired(world.message_location(BOB, f"line {n}"))
    log = world.heard(PIP)
    assert [m["text"] for m in log] == ["line 2", "line 3", "line 4"]
    assert log[0]["line"] == 'Bob says, "line 2"'
    assert [m["text"] for m in world.heard(PIP, after=log[1]["seq"])] == ["line 4"]
    assert [m["text"] for m in world.heard(PIP, limit=1)] == ["line 4"]
    assert world.heard(PIP, limit=0) == []
    assert world.heard(BOB) == []
    with pytest.raises(NotFound):
        world.heard("char:nobody")


def test_observers_see_every_message(world: SandboxWorld, logged_failures: Any) -> None:
    """Observers get each message with its receivers; a broken observer is only logged."""
    seen: list[tuple[str, tuple[str, ...]]] = []
    world.add_observer(lambda m, r: (_ for _ in ()).throw(RuntimeError("bad")))
    remove = world.add_observer(lambda m, r: seen.append((m.text, r)))
    fired(world.message_location(BOB, "hello"))
    fired(world.message_character(BOB, MASON, "psst", "page"))
    assert seen == [("hello", (PIP,)), ("psst", (MASON,))]
    assert len(logged_failures) == 2
    remove()
    fired(world.message_location(BOB, "again"))
    assert len(seen) == 2


def test_message_kind_is_validated() -> None:
    """WorldMessage refuses unknown kinds and is immutable."""
    with pytest.raises(ValueError):
        WorldMessage(kind="shout", text="x", sender_id=None, sender_key="x")
    message = WorldMessage(kind="system", text="The bell rings.", sender_id=None, sender_key="")
    assert message.render() == "The bell rings."
    with pytest.raises(AttributeError):
        message.text = "changed"  # type: ignore[misc]
    assert '"kind": "system"' in message.to_json()


# -- movement and characters -------------------------------------------------------------------


def test_move_character(world: SandboxWorld) -> None:
    """Moving through an exit changes rooms; both rooms hear about it."""
    got = heard_by(world, PIP, ALICE)
    room = fired(world.move_character(BOB, "out"))
    assert room["id"] == "room:plaza"
    assert world.get_object(BOB)["location"] == "room:plaza"
    assert got[PIP][-1].render() == "Bob leaves east."
    assert got[ALICE][-1].render() == "Bob arrives."
    assert world.describe_location(ALICE)["characters"][0]["id"] == BOB
    assert BOB not in [c["id"] for c in world.describe_location(PIP)["characters"]]
    with pytest.raises(NotFound):
        fired(world.move_character(BOB, "up"))
    assert world.find_exit(BOB, "n")["destination"] == "room:library"
    assert world.find_exit(BOB, "sideways") is None


def test_create_character_joins_open_channels(world: SandboxWorld) -> None:
    """A new player starts in the start room and joins the 'all' channels only."""
    carol = fired(world.create_character("Carol"))
    assert carol["id"] == "char:carol"
    assert carol["location"] == "room:plaza"
    assert carol["permissions"] == ["Player"]
    assert "char:carol" in fired(world.channel_send(BOB, "public", "welcome"))
    assert "char:carol" not in fired(world.channel_send(ALICE, "builders", "hi"))
    with pytest.raises(ValueError):
        fired(world.create_character("Dup", char_id="char:carol"))
    with pytest.raises(ValueError):
        fired(world.create_character(" "))
    with pytest.raises(ValueError):
        fired(world.create_character("Eve", location="obj:fountain"))


def test_dig_and_create(world: SandboxWorld) -> None:
    """dig makes a room with exits both ways; create makes an owned object here."""
    dug = fired(world.dig(MASON, "Cellar", ["cellar"], "down", ["d"], "up", ["u"]))
    assert dug["room"]["id"] == "room:cellar"
    assert [(e["key"], e["location"], e["destination"]) for e in dug["exits"]] == [
        ("down", "room:workshop", "room:cellar"),
        ("up", "room:cellar", "room:workshop"),
    ]
    made = fired(world.create_object(MASON, "rope", "A coil.", ["coil"]))
    assert made["owner"] == MASON
    assert made["location"] == "room:workshop"
    with pytest.raises(PermissionDenied):
        fired(world.dig(ALICE, "Vault"))
    with pytest.raises(PermissionDenied):
        fired(world.create_object(ALICE, "gold"))
    with pytest.raises(ValueError):
        fired(world.create_object(MASON, "  "))


# -- help ----------------------------------------------------------------------------------------


def test_help_search(world: SandboxWorld) -> None:
    """Exact key first; words in keys and aliases beat words in text; nothing for noise."""
    found = world.help_search("building")
    assert found[0]["key"] == "building"
    assert found[0]["score"] > 0
    assert set(found[0]) == {"key", "text", "score", "category"}
    assert world.help_search("whisper")[0]["key"] == "talking"
    assert world.help_search("soup of the day")[0]["key"] == "assistants"
    assert world.help_search("") == []
    assert world.help_search("?!") == []
    assert world.help_search("qwertyuiop") == []
    assert len(world.help_search("the", limit=2)) == 2
