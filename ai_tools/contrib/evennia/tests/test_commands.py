"""The ``aiassistant`` builder command, with and without a running service."""

from __future__ import annotations

import json

from evennia.utils.test_resources import EvenniaCommandTestMixin
from twisted.internet import task

from ai_tools.contrib.evennia.commands import AIAssistantCmdSet, CmdAIAssistant
from ai_tools.contrib.evennia.hearing import AssistantCharacter
from ai_tools.contrib.evennia.lookup import get_assistant_script
from ai_tools.contrib.evennia.service import EvenniaAssistantHost, build_service
from ai_tools.contrib.evennia.store import ScriptStore
from ai_tools.contrib.evennia.tests.base import ContribTestBase, ScriptedLLM, say, settle
from ai_tools.store.memory import MemoryStore


class CommandTestBase(ContribTestBase, EvenniaCommandTestMixin):
    """Runs the command as char1 (a Developer) unless told otherwise."""

    def aia(self, args: str, expected: str | None = None, **kwargs: object) -> str:
        return self.call(CmdAIAssistant(), args, expected, **kwargs)


class TestCommandWithoutService(CommandTestBase):
    """Scripts are changed even when no service runs in this process."""

    def test_locked_to_builders(self) -> None:
        """Builders and Developers may use it; plain players may not."""
        cmd = CmdAIAssistant()
        self.assertTrue(cmd.access(self.char1, "cmd"))
        self.assertFalse(cmd.access(self.char2, "cmd"))
        self.account2.permissions.add("Builder")
        self.assertTrue(cmd.access(self.char2, "cmd"))
        self.assertIn("aiassistant", [c.key for c in AIAssistantCmdSet().commands])

    def test_create(self) -> None:
        """create makes an NPC here with an enabled, tagged script."""
        text = self.aia("/create Lamplighter = A soot-stained lamplighter.", "Created assistant")
        self.assertIn("not running", text)
        script = get_assistant_script("Lamplighter")
        self.assertIsNotNone(script)
        npc = script.obj
        self.assertEqual((npc.key, npc.location), ("Lamplighter", self.room1))
        self.assertIsInstance(npc, AssistantCharacter)
        self.assertEqual(npc.db.desc, "A soot-stained lamplighter.")
        self.assertTrue(script.db.enabled)

    def test_create_refusals(self) -> None:
        """Bad names, duplicates and no location are refused."""
        self.aia("/create 9lives", "Usage: aiassistant/create")
        self.aia("/create", "Usage: aiassistant/create")
        self.aia("/create Lamp")
        self.aia("/create Lamp", "An assistant called 'Lamp' already exists.")
        self.char1.location = None
        self.aia("/create Other", "You must stand in a room")

    def test_attach(self) -> None:
        """attach makes an existing character an assistant (warning if it cannot hear)."""
        text = self.aia("/attach Char2 = helper", "Char2 (#")
        self.assertIn("does not include AssistantCharacterMixin", text)
        self.assertEqual(get_assistant_script("helper").obj, self.char2)
        self.aia("/attach Char2 = other", "Char2 already has an assistant.")
        self.aia("/attach Char2", "Usage: aiassistant/attach")
        self.aia("/attach Obj = thing", "Obj is not a character.")
        self.aia("/attach Ada = helper", "An assistant called 'helper' already exists.")

    def test_attach_needs_control(self) -> None:
        """A builder may attach only characters they control."""
        self.account2.permissions.add("Builder")
        self.aia("/attach Ada = ada", "You do not control Ada.", caller=self.char2)
        self.npc.locks.add(f"control:id({self.char2.id})")
        self.aia("/attach Ada = ada", caller=self.char2)
        self.assertEqual(get_assistant_script("ada").obj, self.npc)

    def test_enable_disable(self) -> None:
        """The flag is kept on the script."""
        script = self.attach_script("ada")
        self.aia("/disable ada", "Assistant ada disabled")
        self.assertFalse(script.db.enabled)
        self.aia("/enable Ada", "Assistant ada enabled")  # by the character's name too
        self.assertTrue(script.db.enabled)
        self.aia("/enable nobody", "No assistant called 'nobody'.")
        self.aia("/enable", "Which assistant?")

    def test_status(self) -> None:
        """The table lists assistants; one assistant shows its saved state."""
        self.aia("/status", "No assistants yet.")
        script = self.attach_script("ada")
        table = self.aia("", "AI assistants (service not running in this process)")
        self.assertIn("ada", table)
        script.save_state(
            {
                "mode": "awake",
                "history": [{"role": "user", "content": "hi"}],
                "last_tick": {
                    "tick": 3,
                    "status": "ran",
                    "reason": "terminal_tool",
                    "iterations": 2,
                    "errors": [],
                },
                "counters": {"loops": 3, "tool_calls": 4},
            }
        )
        text = self.aia("/status ada", "Assistant ada (service not running)")
        self.assertIn("#3 ran (terminal_tool), 2 iteration(s)", text)
        self.assertIn("history messages: 1", text)
        self.assertIn("loops=3", text)

    def test_history(self) -> None:
        """The last messages, tool calls summarised."""
        script = self.attach_script("ada")
        self.aia("/history ada", "Assistant ada has no history yet.")
        call = {"id": "c1", "function": {"name": "say", "arguments": '{"message": "hi"}'}}
        script.save_state(
            {
                "history": [
                    {"role": "user", "content": "Char2 (say): hello"},
                    {"role": "assistant", "content": "", "tool_calls": [call]},
                    {"role": "tool", "tool_call_id": "c1", "content": '{"success": true}'},
                ]
            }
        )
        text = self.aia("/history ada = 2", "History of ada (last 2 of 3)")
        self.assertIn("[calls say(", text)
        self.assertNotIn("hello", text)
        self.aia("/history ada = many", "The count must be a number.")

    def test_config(self) -> None:
        """Show, set (JSON or text), refuse bad values (unchanged), remove."""
        script = self.attach_script("ada")
        self.assertIn("tick_rate: 5.0", self.aia("/config ada", "Config of ada"))
        self.aia("/config ada tick_rate = 2.5", "ada: tick_rate = 2.5")
        self.assertEqual(script.db.config["tick_rate"], 2.5)
        self.aia("/config ada persona = You are a lamplighter.", "ada: persona =")
        self.assertEqual(script.assistant_config()["persona"], "You are a lamplighter.")
        self.aia("/config ada tick_rate", "ada: tick_rate = 2.5")
        self.aia("/config ada tick_rate = -1", "Not changed:")
        self.assertEqual(script.db.config["tick_rate"], 2.5)
        self.aia("/config ada colour = red", "Unknown key 'colour'.")
        self.aia("/config ada tick_rate =", "ada: tick_rate removed")
        self.assertNotIn("tick_rate", script.db.config)

    def test_tools(self) -> None:
        """Tools by category, and an assistant's gates."""
        self.attach_script("ada")
        text = self.aia("/tools ada", "Tools")
        self.assertIn("dangerous: ", text)
        self.assertIn("set_attribute", text)
        self.assertIn("player: allowed_categories=", text)

    def test_stop_when_not_running(self) -> None:
        """stop says the assistant is not running."""
        self.attach_script("ada")
        self.aia("/stop ada", "Assistant ada is not running.")

    def test_unknown_switch_is_refused(self) -> None:
        """Evennia refuses switches the command does not have."""
        text = self.aia("/explode ada")
        self.assertIn("explode", text)


class TestCommandWithService(CommandTestBase):
    """Changes reach a running service at once."""

    def setUp(self) -> None:
        super().setUp()
        self.clock = task.Clock()
        self.llm = ScriptedLLM([say("Hello there.")])
        service = build_service(
            self.clock, llm=self.llm, store=ScriptStore(MemoryStore(clock=self.clock))
        )
        self.host = EvenniaAssistantHost(service, clock=self.clock)
        self.host.startService()
        settle(self.clock, self.host.when_synced())

    def tearDown(self) -> None:
        settle(self.clock, self.host.stopService())
        super().tearDown()

    def advance(self, seconds: float = 1.0) -> None:
        for _ in range(int(seconds / 0.05)):
            self.clock.advance(0.05)

    def test_create_starts_the_assistant(self) -> None:
        """A created assistant runs and answers what is said to it."""
        self.aia("/create Bob", "Created assistant")
        self.advance()
        self.assertIn("Bob", self.host.service.names())
        bob = get_assistant_script("Bob").obj
        self.world.message_location(self.id2, "hi Bob")
        self.advance(3)
        self.assertTrue(self.llm.requests)
        history = self.host.service.history("Bob")
        self.assertTrue(any(m.get("tool_calls") for m in history))
        self.assertEqual(bob.location, self.room1)

    def test_status_history_stop_disable_config(self) -> None:
        """status and history read the live service; stop, disable, config apply to it."""
        self.aia("/create Bob")
        self.advance()
        self.world.message_location(self.id2, "hi Bob")
        self.advance(3)
        self.assertIn("Assistant Bob", self.aia("/status Bob"))
        self.assertNotIn("service not running", self.aia("/status Bob"))
        self.assertIn("History of Bob", self.aia("/history Bob"))
        self.aia("/stop Bob", "Bob was not doing anything.")
        self.aia("/disable Bob")
        self.advance()
        self.assertFalse(self.host.service.status("Bob")["enabled"])
        self.aia("/config Bob tick_rate = 3")
        self.advance()
        self.assertEqual(self.host.service.status("Bob")["tick_rate"], 3.0)
        self.assertIn("set_attribute", self.aia("/tools"))
        self.assertEqual(json.loads(get_assistant_script("Bob").db.state)["enabled"], False)

    def test_approvals_listed_approved_and_refused_under_the_lock(self) -> None:
        """Calls waiting for approval are listed; only a caller passing the approval lock
        (Admin by default) answers them, never the assistant's own character."""
        from ai_tools.llm.events import ToolCall

        self.aia("/create Bob")
        self.advance()
        board = self.host.service.approvals
        decisions: list[object] = []
        for i in range(2):
            board.request("Bob", "dig", ToolCall(id=f"c{i}", name="dig", arguments={"at": i}),
                          60).addCallback(decisions.append)
        first, second = (p["id"] for p in board.pending())
        listing = self.aia("/approvals")
        self.assertIn(first, listing)
        self.assertIn("dig", listing)
        self.account2.permissions.add("Builder")
        self.aia(f"/approve {first}", "You may not answer approvals.", caller=self.char2)
        self.assertEqual(decisions, [])
        self.aia(f"/approve {first}", "Bob: dig approved.")
        self.aia(f"/refuse {second} = not in my inn", "Bob: dig refused.")
        self.assertEqual([(d.approved, d.reason) for d in decisions],  # type: ignore[attr-defined]
                         [(True, ""), (False, "not in my inn")])
        self.assertTrue(decisions[0].by.startswith("world:"))  # type: ignore[attr-defined]
        self.aia(f"/approve {first}", "no call waits for approval")
        self.aia("/approvals", "No tool call waits for approval.")
