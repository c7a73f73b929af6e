"""Hearing (what the NPC is told becomes a message), the AssistantScript and its lookup."""

from __future__ import annotations

from unittest import mock

from evennia.utils import create

from ai_tools.contrib.evennia.hearing import AssistantCharacter, heard_message
from ai_tools.contrib.evennia.lookup import (
    all_assistant_scripts,
    get_assistant_script,
    get_assistant_script_for_character,
)
from ai_tools.contrib.evennia.scripts import AssistantScript, assistant_tag
from ai_tools.contrib.evennia.tests.base import ContribTestBase


class TestHeardMessage(ContribTestBase):
    """Which messages count as speech."""

    def test_kinds(self) -> None:
        """Says, whispers and pages count; looks, poses and plain text do not."""
        say = heard_message(self.npc, ('Char2 says, "|nhi|n"', {"type": "say"}), self.char2)
        self.assertEqual((say.kind, say.text, say.sender), ("say", "hi", "Char2"))
        self.assertIsNone(heard_message(self.npc, ("Room", {"type": "look"}), None))
        self.assertIsNone(heard_message(self.npc, "You feel cold.", None))
        self.assertIsNone(heard_message(self.npc, None, self.char2))
        self.assertIsNone(heard_message(self.npc, ("", {"type": "say"}), self.char2))
        self.assertIsNone(heard_message(self.npc, ('Ada says, "x"', {"type": "say"}), self.npc))
        page = heard_message(self.npc, "Account TestAccount pages: are you there?", self.account)
        self.assertEqual((page.kind, page.text), ("page", "are you there?"))
        self.assertEqual((page.sender_kind, page.sender_id), ("account", None))
        self.assertIsNone(
            heard_message(self.npc, ('Char2 says, "hi"', {"type": "say"}), self.char2, ("page",))
        )

    def test_builder_rights_decide_the_context(self) -> None:
        """A Builder's speech names no context; a player's names the player context."""
        player = heard_message(self.npc, ('Char2 says, "hi"', {"type": "say"}), self.char2)
        builder = heard_message(self.npc, ('Char says, "hi"', {"type": "say"}), self.char1)
        self.assertEqual((player.sender_is_builder, player.context), (False, "player"))
        self.assertEqual((builder.sender_is_builder, builder.context), (True, None))
        event = player.to_event()
        self.assertEqual(event["context"], "player")
        self.assertEqual((event["from"], event["from_id"]), ("Char2", self.id2))
        self.assertNotIn("context", builder.to_event())
        none = heard_message(
            self.npc, ('Char2 says, "hi"', {"type": "say"}), self.char2, player_context=None
        )
        self.assertIsNone(none.context)

    def test_quelled_builder_is_a_player(self) -> None:
        """Evennia's quell drops the account's rights, so the gate applies again."""
        self.account.attributes.add("_quell", True)
        self.char1.permissions.remove("Developer")
        quelled = heard_message(self.npc, ('Char says, "hi"', {"type": "say"}), self.char1)
        self.assertFalse(quelled.sender_is_builder)

    def test_hook_failure_keeps_message(self) -> None:
        """A failing hearing hook is logged and the message still reaches sessions."""
        with mock.patch.object(AssistantCharacter, "ai_hear", side_effect=RuntimeError("bug")):
            self.assertTrue(self.npc.at_msg_receive(text="hello", from_obj=self.char2) is not False)


class TestScriptsAndLookup(ContribTestBase):
    """AssistantScript state and the lookup from character to script."""

    def test_bind_and_lookup_by_tag(self) -> None:
        """The tag names the assistant; the character finds its script."""
        script = self.attach_script("ada")
        self.assertTrue(script.tags.has(assistant_tag("ada"), category="system"))
        self.assertEqual(self.npc.db.assistant_key, "ada")
        self.assertEqual(get_assistant_script_for_character(self.npc), script)
        self.assertEqual(get_assistant_script("ada"), script)
        self.assertIsNone(get_assistant_script("bob"))
        self.assertIsNone(get_assistant_script(""))
        self.assertEqual(all_assistant_scripts(), [script])

    def test_rebind_moves_the_tag(self) -> None:
        """Renaming the assistant removes the old tag."""
        script = self.attach_script("ada")
        script.bind("ada2")
        self.assertIsNone(get_assistant_script("ada"))
        self.assertEqual(get_assistant_script("ada2"), script)

    def test_fallback_without_tag(self) -> None:
        """Without the tag, the script attached to the character is found."""
        script = self.attach_script("ada")
        script.tags.clear()
        self.assertEqual(get_assistant_script_for_character(self.npc), script)
        self.npc.attributes.remove("assistant_key")
        self.assertEqual(get_assistant_script_for_character(self.npc), script)

    def test_fallback_global_script_by_dbref(self) -> None:
        """A global script recording the character's dbref is found."""
        script = create.create_script(AssistantScript, key="ai_assistant", autostart=False)
        script.db.character_dbref = self.char2.dbref
        self.assertEqual(get_assistant_script_for_character(self.char2), script)

    def test_no_script(self) -> None:
        """Characters without an assistant, and None, give None."""
        self.assertIsNone(get_assistant_script_for_character(self.char1))
        self.assertIsNone(get_assistant_script_for_character(None))
        self.char1.db.assistant_key = "ghost"
        self.assertIsNone(get_assistant_script_for_character(self.char1))

    def test_tag_of_other_character_is_not_taken(self) -> None:
        """A character claiming another's assistant key does not get its script."""
        self.attach_script("ada")
        self.char1.db.assistant_key = "ada"
        self.assertIsNone(get_assistant_script_for_character(self.char1))

    def test_state_and_inbox(self) -> None:
        """State round-trips; the inbox keeps the newest events up to the cap."""
        script = self.attach_script("ada")
        self.assertIsNone(script.load_state())
        script.save_state({"history": [{"role": "user", "content": "hi"}], "mode": "sleep"})
        self.assertEqual(script.history(), [{"role": "user", "content": "hi"}])
        self.assertEqual(script.summary()["mode"], "sleep")
        with self.settings(AI_TOOLS_MAX_PENDING_EVENTS=3):
            for n in range(5):
                script.queue_event({"type": "say", "text": str(n)})
        self.assertEqual([e["text"] for e in script.pending_events()], ["2", "3", "4"])
        summary = script.summary()
        self.assertEqual((summary["key"], summary["pending_events"]), ("ada", 3))
        self.assertEqual(summary["character_id"], self.npc_id)

    def test_config_defaults_and_overrides(self) -> None:
        """Own config overrides the defaults setting, one key at a time."""
        script = self.attach_script("ada")
        with self.settings(AI_TOOLS_ASSISTANT_DEFAULTS={"tick_rate": 3.0}):
            script.set_config("persona", "A lamplighter.")
            config = script.assistant_config()
        self.assertEqual(config["tick_rate"], 3.0)
        self.assertEqual(config["persona"], "A lamplighter.")
        self.assertIn("execution_config", config)  # the other defaults stay
        self.assertEqual((config["name"], config["character_id"]), ("ada", self.npc_id))
        script.set_config("persona", None)
        self.assertNotIn("persona", script.db.config)
