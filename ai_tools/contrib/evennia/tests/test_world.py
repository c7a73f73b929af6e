"""EvenniaWorld against real Evennia objects: every IWorld method and its refusals."""

from __future__ import annotations

from typing import Any
from unittest import mock

from evennia.prototypes import prototypes as protlib
from evennia.utils import create
from zope.interface.verify import verifyObject

from ai_tools.contrib.evennia.delivery import PortalUnreachable
from ai_tools.contrib.evennia.hearing import LISTENERS
from ai_tools.contrib.evennia.tests.base import ContribTestBase, portal_link, result_of
from ai_tools.contrib.evennia.world import jsonable
from ai_tools.errors import NotFound, PermissionDenied
from ai_tools.interfaces import IWorld
from ai_tools.world.messages import WorldMessage


class TestWorldObjects(ContribTestBase):
    """Object dicts, locations and search."""

    def test_provides_iworld(self) -> None:
        """EvenniaWorld implements every method of IWorld."""
        self.assertTrue(verifyObject(IWorld, self.world))
        self.assertEqual(self.world.name, "evennia")

    def test_get_object_kinds(self) -> None:
        """Rooms, exits, characters and things get the right kind and location."""
        room = self.world.get_object(self.room1.dbref)
        self.assertEqual(room["kind"], "room")
        self.assertEqual(room["description"], "room_desc")
        self.assertIsNone(room["location"])
        exit_ = self.world.get_object(self.exit.dbref)
        self.assertEqual(exit_["kind"], "exit")
        self.assertEqual(exit_["destination"], self.room2.dbref)
        self.assertEqual(self.world.get_object(self.id1)["kind"], "character")
        thing = self.world.get_object(self.obj1.dbref)
        self.assertEqual((thing["kind"], thing["location"]), ("object", self.room1.dbref))
        self.assertEqual(thing["id"], self.obj1.dbref)

    def test_get_object_missing(self) -> None:
        """Unknown ids and names give None, never an error."""
        self.assertIsNone(self.world.get_object("#999999"))
        self.assertIsNone(self.world.get_object("Obj"))
        self.assertIsNone(self.world.get_object(""))
        self.assertIsNone(self.world.get_object(None))

    def test_describe_location(self) -> None:
        """The room, its exits, things and other characters (not the looker)."""
        seen = self.world.describe_location(self.id1)
        self.assertEqual(seen["room"]["id"], self.room1.dbref)
        self.assertEqual([e["key"] for e in seen["exits"]], ["out"])
        self.assertEqual(seen["exits"][0]["destination"], self.room2.dbref)
        self.assertEqual({o["key"] for o in seen["contents"]}, {"Obj", "Obj2"})
        self.assertEqual({c["key"] for c in seen["characters"]}, {"Char2", "Ada"})

    def test_describe_location_detail(self) -> None:
        """brief drops descriptions; detailed adds attributes and tags."""
        self.obj1.db.colour = "red"
        self.obj1.tags.add("shiny")
        brief = self.world.describe_location(self.id1, "brief")
        self.assertEqual(brief["room"]["description"], "")
        detailed = self.world.describe_location(self.id1, "detailed")
        obj = next(o for o in detailed["contents"] if o["key"] == "Obj")
        self.assertEqual(obj["attributes"], {"colour": "red"})
        self.assertEqual(obj["tags"], [{"tag": "shiny", "category": None}])

    def test_describe_location_hidden_and_nowhere(self) -> None:
        """Objects the looker may not view are left out; a character nowhere is refused."""
        self.obj2.locks.add("view:false()")
        seen = self.world.describe_location(self.id2)
        self.assertNotIn("Obj2", {o["key"] for o in seen["contents"]})
        self.char2.location = None
        with self.assertRaises(NotFound):
            self.world.describe_location(self.id2)
        with self.assertRaises(NotFound):
            self.world.describe_location("#999999")

    def test_search(self) -> None:
        """Exact key first, then partial matches; kind and location filters."""
        found = self.world.search("Obj")
        self.assertEqual(found[0]["key"], "Obj")
        self.assertIn("Obj2", [o["key"] for o in found])
        self.assertEqual(self.world.search("Obj", kind="character"), [])
        self.assertEqual(self.world.search("Obj", location=self.room2.dbref), [])
        self.assertEqual(self.world.search(self.obj2.dbref)[0]["key"], "Obj2")
        self.assertEqual(self.world.search("nothing-like-this"), [])
        self.assertEqual(self.world.search(""), [])
        self.assertEqual(len(self.world.search("Obj", limit=1)), 1)
        with self.assertRaises(NotFound):
            self.world.search("Obj", location="#999999")

    def test_search_alias_and_visibility(self) -> None:
        """Aliases match; what the searcher may not view is left out."""
        self.obj2.aliases.add("lamp")
        self.assertEqual(self.world.search("lamp")[0]["id"], self.obj2.dbref)
        self.obj2.locks.add("view:false()")
        self.assertEqual(self.world.search("lamp", char_id=self.id2), [])

    def test_jsonable(self) -> None:
        """Attribute values become JSON: objects as dbrefs, unknown types as repr."""
        self.assertEqual(
            jsonable({"a": (1, 2), "o": self.obj1, "n": None}),
            {"a": [1, 2], "o": self.obj1.dbref, "n": None},
        )
        self.assertTrue(jsonable(object()).startswith("<object"))


class TestWorldAttributesAndTags(ContribTestBase):
    """Attributes and tags, with Evennia's control/edit locks deciding."""

    def test_set_get_delete_attribute(self) -> None:
        """A Developer sets, reads and deletes an attribute."""
        result = self.world.set_attribute(self.id1, self.obj1.dbref, "fuel", {"level": 3})
        self.assertEqual(result["id"], self.obj1.dbref)
        self.assertEqual(self.obj1.db.fuel, {"level": 3})
        self.assertEqual(self.world.get_attributes(self.obj1.dbref), {"fuel": {"level": 3}})
        self.assertEqual(self.world.get_attributes(self.obj1.dbref, ["nope"]), {})
        self.assertTrue(self.world.delete_attribute(self.id1, self.obj1.dbref, "fuel"))
        self.assertFalse(self.world.delete_attribute(self.id1, self.obj1.dbref, "fuel"))

    def test_attribute_permission_refused(self) -> None:
        """A character without rights on the object is refused by Evennia's locks."""
        with self.assertRaises(PermissionDenied):
            self.world.set_attribute(self.id2, self.obj1.dbref, "fuel", 1)
        self.assertIsNone(self.obj1.db.fuel)
        self.obj1.db.fuel = 5
        with self.assertRaises(PermissionDenied):
            self.world.delete_attribute(self.id2, self.obj1.dbref, "fuel")
        self.assertEqual(self.obj1.db.fuel, 5)

    def test_attribute_lock_grants(self) -> None:
        """An object's own edit lock can grant the right."""
        self.obj1.locks.add(f"edit:id({self.char2.id})")
        self.world.set_attribute(self.id2, self.obj1.dbref, "fuel", 2)
        self.assertEqual(self.obj1.db.fuel, 2)

    def test_attribute_bad_input(self) -> None:
        """Internal names, huge values, missing objects are refused."""
        with self.assertRaises(PermissionDenied):
            self.world.set_attribute(self.id1, self.obj1.dbref, "_secret", 1)
        with self.assertRaises(ValueError):
            self.world.set_attribute(self.id1, self.obj1.dbref, "big", "x" * 5000)
        with self.assertRaises(ValueError):
            self.world.set_attribute(self.id1, self.obj1.dbref, " ", 1)
        with self.assertRaises(NotFound):
            self.world.set_attribute(self.id1, "#999999", "a", 1)
        with self.assertRaises(NotFound):
            self.world.get_attributes("#999999")
        with self.assertRaises(TypeError):
            self.world.set_attribute(self.id1, self.obj1.dbref, "f", object())

    def test_tags(self) -> None:
        """Add, list, search and remove tags."""
        self.world.add_tag(self.id1, self.obj1.dbref, "glowing", "light")
        self.assertEqual(
            self.world.get_tags(self.obj1.dbref), [{"tag": "glowing", "category": "light"}]
        )
        self.assertEqual(self.world.get_tags(self.obj1.dbref, "other"), [])
        found = self.world.search_by_tag("glowing", "light")
        self.assertEqual([o["id"] for o in found], [self.obj1.dbref])
        self.assertEqual(self.world.search_by_tag("glowing", "other"), [])
        self.assertTrue(self.world.remove_tag(self.id1, self.obj1.dbref, "glowing", "light"))
        self.assertFalse(self.world.remove_tag(self.id1, self.obj1.dbref, "glowing", "light"))

    def test_tag_permissions(self) -> None:
        """No rights, no tag; the system category needs Developer."""
        with self.assertRaises(PermissionDenied):
            self.world.add_tag(self.id2, self.obj1.dbref, "mine")
        self.obj1.locks.add(f"edit:id({self.char2.id})")
        self.world.add_tag(self.id2, self.obj1.dbref, "mine")
        with self.assertRaises(PermissionDenied):
            self.world.add_tag(self.id2, self.obj1.dbref, "ai_assistant:x", "system")
        self.world.add_tag(self.id1, self.obj1.dbref, "ai_assistant:x", "system")
        with self.assertRaises(ValueError):
            self.world.add_tag(self.id1, self.obj1.dbref, "  ")

    def test_has_permission(self) -> None:
        """Evennia's hierarchy: a Developer is also a Builder; others are not."""
        self.assertTrue(self.world.has_permission(self.id1, "Builder"))
        self.assertTrue(self.world.has_permission(self.id1, "Developer"))
        self.assertFalse(self.world.has_permission(self.id2, "Builder"))
        self.assertFalse(self.world.has_permission("#999999", "Builder"))
        self.account2.permissions.add("Builder")  # a puppeted character has its account's
        self.assertTrue(self.world.has_permission(self.id2, "Builder"))
        self.assertFalse(self.world.has_permission(self.id2, "Admin"))


class TestWorldPrototypes(ContribTestBase):
    """Prototypes: listing and spawning with Builder rights and prototype locks."""

    def setUp(self) -> None:
        super().setUp()
        protlib.save_prototype(
            {
                "prototype_key": "ai_lantern",
                "prototype_desc": "a brass lantern",
                "prototype_locks": "spawn:all();edit:all()",
                "typeclass": "evennia.objects.objects.DefaultObject",
                "key": "lantern",
                "desc": "A brass lantern.",
            }
        )
        protlib.save_prototype(
            {
                "prototype_key": "ai_relic",
                "typeclass": "evennia.objects.objects.DefaultObject",
                "key": "relic",
            }
        )
        # Evennia 5.0's save_prototype drops prototype_locks (homogenize_prototype reads
        # "prototype_lock"); store the lock the way a module prototype carries it.
        stored = protlib.DbPrototype.objects.get(db_key="ai_relic")
        locked = dict(stored.prototype)
        locked["prototype_locks"] = "spawn:perm(Admin);edit:perm(Admin)"
        stored.prototype = locked
        protlib.DB_PROTOTYPE_CACHE.clear()

    def test_list_prototypes(self) -> None:
        """Database prototypes are listed with their descriptions."""
        listed = {p["key"]: p["description"] for p in self.world.list_prototypes()}
        self.assertEqual(listed["ai_lantern"], "a brass lantern")
        self.assertIn("ai_relic", listed)

    def test_spawn(self) -> None:
        """A Builder spawns into its room, with overrides as attributes."""
        self.account2.permissions.add("Builder")
        made = self.world.spawn_prototype(
            self.id2,
            "ai_lantern",
            overrides={"key": "old lantern", "description": "Dented.", "attributes": {"fuel": 3}},
        )
        self.assertEqual(made["key"], "old lantern")
        self.assertEqual(made["location"], self.room1.dbref)
        self.assertEqual(made["description"], "Dented.")
        self.assertEqual(self.world.get_attributes(made["id"], ["fuel"]), {"fuel": 3})

    def test_spawn_elsewhere(self) -> None:
        """A location id puts the new object there."""
        made = self.world.spawn_prototype(self.id1, "ai_lantern", location=self.room2.dbref)
        self.assertEqual(made["location"], self.room2.dbref)

    def test_spawn_refusals(self) -> None:
        """No Builder, a locked prototype, rights-bearing overrides, unknown keys."""
        with self.assertRaises(PermissionDenied):
            self.world.spawn_prototype(self.id2, "ai_lantern")
        self.account2.permissions.add("Builder")
        with self.assertRaises(PermissionDenied):
            self.world.spawn_prototype(self.id2, "ai_relic")
        for forbidden in ("typeclass", "locks", "permissions", "exec"):
            with self.assertRaises(PermissionDenied):
                self.world.spawn_prototype(self.id2, "ai_lantern", overrides={forbidden: "x"})
        with self.assertRaises(PermissionDenied):
            self.world.spawn_prototype(self.id2, "ai_lantern", overrides={"_x": 1})
        with self.assertRaises(NotFound):
            self.world.spawn_prototype(self.id2, "ai_lant")
        with self.assertRaises(NotFound):
            self.world.spawn_prototype(self.id2, "ai_lantern", location="#999999")
        self.assertFalse(self.world.search("relic"))


class TestWorldCommands(ContribTestBase):
    """execute_command runs through the character's own cmdsets and locks."""

    def test_look(self) -> None:
        """The command's output comes back as lines; msg is restored afterwards."""
        answer = result_of(self.world.execute_command(self.id1, "look"))
        self.assertEqual(answer["command"], "look")
        self.assertTrue(any("Room" in line for line in answer["output"]))
        self.assertNotIn("msg", vars(self.char1))

    def test_unknown_command(self) -> None:
        """A line no command of the character matches is refused as not_found, not run."""
        with mock.patch.object(type(self.char1), "execute_cmd") as execute_cmd:
            answer = result_of(self.world.execute_command(self.id1, "xyzzyplugh now"))
        execute_cmd.assert_not_called()
        self.assertIs(answer["success"], False)
        self.assertEqual(answer["error"], "not_found")
        self.assertIn("xyzzyplugh", answer["output"][0])

    def test_locked_command_is_refused_before_it_runs(self) -> None:
        """A command whose cmd: lock refuses the character is permission_denied, not run.

        The refusal comes from the command set and the lock, so it does not
        depend on the words Evennia would have printed ("... is not available").
        """
        for line in ("@tel Room2", "tel Room2", "@create/drop forbidden"):
            with mock.patch.object(type(self.char2), "execute_cmd") as execute_cmd:
                answer = result_of(self.world.execute_command(self.id2, line))
            execute_cmd.assert_not_called()
            self.assertIs(answer["success"], False, (line, answer))
            self.assertEqual(answer["error"], "permission_denied", (line, answer))
            self.assertIn("Builder", answer["output"][0])  # the lock that refused
        self.assertEqual(self.char2.location, self.room1)
        self.assertFalse(self.world.search("forbidden"))
        self.assertNotIn("msg", vars(self.char2))

    def test_command_rights_are_the_characters(self) -> None:
        """The same builder command runs for a character whose rights pass its lock."""
        answer = result_of(self.world.execute_command(self.id1, "@create/drop allowed"))
        self.assertIs(answer["success"], True, answer)
        self.assertTrue(self.world.search("allowed"))

    def test_exits_and_room_commands_count(self) -> None:
        """Commands of the room's exits are the character's too (the merged command set)."""
        answer = result_of(self.world.execute_command(self.id2, "out"))
        self.assertIs(answer["success"], True, answer)
        self.assertEqual(self.char2.location, self.room2)

    def test_a_catch_all_command_answers_unknown_input(self) -> None:
        """A game with a CMD_NOMATCH command handles unknown lines itself: they run."""
        from evennia import CmdSet, Command
        from evennia.commands.cmdhandler import CMD_NOMATCH

        class CatchAll(Command):
            key = CMD_NOMATCH
            locks = "cmd:all()"

            def func(self) -> None:
                self.caller.msg(f"You mumble: {self.args}")

        class CatchAllSet(CmdSet):
            key = "catch_all"

            def at_cmdset_creation(self) -> None:
                self.add(CatchAll())

        self.char2.cmdset.add(CatchAllSet)
        answer = result_of(self.world.execute_command(self.id2, "xyzzyplugh"))
        self.assertIs(answer["success"], True, answer)
        self.assertIn("You mumble: xyzzyplugh", answer["output"])

    def test_missing_character(self) -> None:
        """A missing character is refused at once."""
        with self.assertRaises(NotFound):
            self.world.execute_command("#999999", "look")


class TestWorldMessages(ContribTestBase):
    """say/pose/emit/whisper/page and channels."""

    def setUp(self) -> None:
        super().setUp()
        self.heard: list[dict[str, Any]] = []
        self.world.subscribe(self.npc_id, self.heard.append)

    def test_say_reaches_the_room(self) -> None:
        """A say is heard (as an event) by the NPC; the hearers are returned."""
        hearers = self.world.message_location(self.id2, "hello there")
        self.assertEqual(set(hearers), {self.id1, self.npc_id})
        self.assertEqual(len(self.heard), 1)
        message = self.heard[0]
        self.assertIsInstance(message, WorldMessage)
        self.assertEqual((message.kind, message.text), ("say", "hello there"))
        self.assertEqual((message.sender_key, message.sender_id), ("Char2", self.id2))
        self.assertFalse(message.sender_is_builder)
        self.assertEqual(message.context, "player")
        self.assertEqual(message.location_id, self.room1.dbref)
        self.assertEqual(message.line, 'Char2 says, "hello there"')

    def test_say_with_exclude(self) -> None:
        """Excluded characters do not hear it."""
        hearers = self.world.message_location(self.id2, "psst", exclude=[self.npc_id])
        self.assertEqual(hearers, [self.id1])
        self.assertEqual(self.heard, [])

    def test_nothing_is_sent_while_the_portal_link_is_down(self) -> None:
        """A player would miss it: the say is not sent at all, and says why."""
        self.assertTrue(self.char1.sessions.count())  # char1 is played (a session)
        chan = create.create_channel("linktest", locks="send:all();listen:all()")
        chan.connect(self.char1)
        with portal_link(connected=False), mock.patch.object(self.char1, "msg") as seen:
            with self.assertRaises(PortalUnreachable):
                self.world.channel_send(self.npc_id, "linktest", "anyone?")
            with self.assertRaises(PortalUnreachable) as raised:
                self.world.message_location(self.npc_id, "The well is dry.")
            with self.assertRaises(PortalUnreachable):
                self.world.message_character(self.npc_id, self.id1, "psst", "whisper")
            with self.assertRaises(PortalUnreachable):
                self.world.message_character(self.npc_id, self.id1, "psst", "page")
        seen.assert_not_called()
        self.assertIn("Char", str(raised.exception))
        self.assertIsInstance(raised.exception, ConnectionError)  # transient: retried

    def test_speech_goes_out_with_the_link_up(self) -> None:
        """The same say goes out while the Server is linked to its Portal."""
        with portal_link(connected=True), mock.patch.object(self.char1, "msg") as seen:
            hearers = self.world.message_location(self.npc_id, "The well is full.")
        self.assertIn(self.id1, hearers)
        self.assertTrue(seen.called)

    def test_unplayed_characters_hear_without_the_portal(self) -> None:
        """Characters nobody plays (other assistants) hear in-process: no Portal needed."""
        self.char1.location = self.room2
        with portal_link(connected=False):
            hearers = self.world.message_location(self.id2, "only NPCs here")
        self.assertEqual(hearers, [self.npc_id])
        self.assertEqual([m.text for m in self.heard], ["only NPCs here"])

    def test_own_speech_is_not_an_event(self) -> None:
        """The NPC does not hear itself."""
        self.world.message_location(self.npc_id, "I talk to myself")
        self.world.message_location(self.npc_id, "waves.", "pose")
        self.assertEqual(self.heard, [])

    def test_pose_and_emit(self) -> None:
        """Poses are not speech; emit needs Builder."""
        self.world.message_location(self.id2, "waves.", "pose")
        self.assertEqual(self.heard, [])
        with self.assertRaises(PermissionDenied):
            self.world.message_location(self.id2, "The sky darkens.", "emit")
        hearers = self.world.message_location(self.id1, "Thunder.", "emit")
        self.assertEqual(set(hearers), {self.id2, self.npc_id})
        self.assertEqual(self.heard, [])
        with self.assertRaises(ValueError):
            self.world.message_location(self.id1, "x", "shout")

    def test_whisper_and_page(self) -> None:
        """Whispers need the same room; pages reach anywhere."""
        self.world.message_character(self.id2, self.npc_id, "a secret", "whisper")
        self.assertEqual((self.heard[-1].kind, self.heard[-1].text), ("whisper", "a secret"))
        self.assertEqual(self.heard[-1].target_id, self.npc_id)
        self.char2.location = self.room2
        with self.assertRaises(NotFound):
            self.world.message_character(self.id2, self.npc_id, "far", "whisper")
        self.world.message_character(self.id2, self.npc_id, "from afar", "page")
        self.assertEqual((self.heard[-1].kind, self.heard[-1].text), ("page", "from afar"))
        with self.assertRaises(NotFound):
            self.world.message_character(self.id2, self.obj1.dbref, "hi", "page")
        with self.assertRaises(ValueError):
            self.world.message_character(self.id2, self.npc_id, "hi", "telepathy")

    def test_page_refused_by_lock(self) -> None:
        """A target's msg lock refuses pages."""
        self.npc.locks.add("msg:false()")
        with self.assertRaises(PermissionDenied):
            self.world.message_character(self.id2, self.npc_id, "hi", "page")

    def test_unsubscribe(self) -> None:
        """After unsubscribing, nothing more is delivered; unheard events wait on the script."""
        LISTENERS.clear()
        script = self.attach_script()
        self.world.message_location(self.id2, "anyone?")
        self.assertEqual(self.heard, [])
        self.assertEqual([e["text"] for e in script.db.inbox], ["anyone?"])
        self.assertEqual(script.db.inbox[0]["from_id"], self.id2)
        self.assertEqual([e["text"] for e in script.drain_inbox()], ["anyone?"])
        self.assertEqual(script.db.inbox, [])
        unsubscribe = self.world.subscribe(self.npc_id, self.heard.append)
        unsubscribe()
        unsubscribe()
        self.world.message_location(self.id2, "still?")
        self.assertEqual(self.heard, [])

    def test_failing_listener_does_not_break_speech(self) -> None:
        """A listener that raises is logged; the others still get the event."""

        def broken(_: Any) -> None:
            raise RuntimeError("listener bug")

        LISTENERS.clear()
        self.world.subscribe(self.npc_id, broken)
        self.world.subscribe(self.npc_id, self.heard.append)
        self.world.message_location(self.id2, "still works")
        self.assertEqual([m.text for m in self.heard], ["still works"])

    def test_channels(self) -> None:
        """Channel send lock decides; subscribers are returned."""
        chan = create.create_channel(
            "aitest", desc="testing channel", locks="send:all();listen:all()"
        )
        chan.connect(self.char2)
        receivers = self.world.channel_send(self.id1, "aitest", "hello channel")
        self.assertEqual(receivers, [self.id2])
        listed = {c["key"]: c["description"] for c in self.world.list_channels()}
        self.assertEqual(listed["aitest"], "testing channel")
        chan.locks.add("send:perm(Admin)")
        with self.assertRaises(PermissionDenied):
            self.world.channel_send(self.id2, "aitest", "me too")
        with self.assertRaises(NotFound):
            self.world.channel_send(self.id1, "no-such-channel", "x")


class TestWorldHelp(ContribTestBase):
    """help_search over database entries, file entries and command help."""

    def test_database_entry(self) -> None:
        """A database help entry is found by words in its text."""
        create.create_help_entry("lantern lore", "How to trim the wick of a brass lantern.")
        found = self.world.help_search("wick")
        self.assertEqual(found[0]["key"], "lantern lore")
        self.assertIn("wick", found[0]["text"])
        self.assertGreater(found[0]["score"], 0)

    def test_command_help(self) -> None:
        """Command help is searchable by the command's name."""
        found = self.world.help_search("say", limit=3)
        self.assertIn("say", [h["key"] for h in found])
        self.assertLessEqual(len(found), 3)

    def test_empty_and_odd_queries(self) -> None:
        """Empty queries give nothing; Lunr syntax errors do not escape."""
        self.assertEqual(self.world.help_search(""), [])
        self.assertEqual(self.world.help_search("say", limit=0), [])
        self.assertIsInstance(self.world.help_search("say:~^*"), list)
        self.assertEqual(self.world.help_search("qqqzzzyyy"), [])
