"""ScriptStore and the AssistantService hosted in Evennia, driven by a scripted model.

The service runs on a ``task.Clock`` with a scripted model client, so every
tick here is deterministic; the real server, reactor and model server are the
end-to-end test's business.
"""

from __future__ import annotations

import json
from typing import Any
from unittest import mock

from evennia.utils import create
from twisted.internet import defer, task
from zope.interface.verify import verifyObject

from ai_tools.contrib.evennia.service import (
    STOP_DEADLINE,
    EvenniaAssistantHost,
    build_service,
    get_host,
)
from ai_tools.contrib.evennia.store import ScriptStore
from ai_tools.contrib.evennia.tests.base import (
    ContribTestBase,
    ScriptedLLM,
    SlowLLM,
    call,
    portal_link,
    result_of,
    say,
    settle,
)
from ai_tools.errors import NotFound
from ai_tools.interfaces import IStore
from ai_tools.store.memory import MemoryStore
from ai_tools.tools.base import Tool, ToolCategory


class BoomTool(Tool):
    """A tool that always raises (a bug inside the game process)."""

    name = "boom"
    description = "Always fails with an exception, for fault tests."
    category = ToolCategory.SAFE_CHAIN

    def execute(self, actor: Any, **params: Any) -> Any:
        raise RuntimeError("boom inside the game")


class TestScriptStore(ContribTestBase):
    """Assistant state on scripts; records delegated."""

    def setUp(self) -> None:
        super().setUp()
        self.script = self.attach_script("ada")
        self.store = ScriptStore(MemoryStore(clock=task.Clock()))
        result_of(self.store.open())

    def test_provides_istore(self) -> None:
        """ScriptStore implements IStore."""
        self.assertTrue(verifyObject(IStore, self.store))

    def test_state_round_trip(self) -> None:
        """A saved state comes back from the script; listing and deleting work."""
        self.assertIsNone(result_of(self.store.load_assistant("ada")))
        self.assertEqual(result_of(self.store.list_assistants()), [])
        state = {"history": [{"role": "user", "content": "hi"}], "mode": "awake"}
        result_of(self.store.save_assistant("ada", state))
        self.assertEqual(result_of(self.store.load_assistant("ada")), state)
        self.assertEqual(json.loads(self.script.db.state), state)
        self.assertEqual(result_of(self.store.list_assistants()), ["ada"])
        self.assertTrue(result_of(self.store.delete_assistant("ada")))
        self.assertFalse(result_of(self.store.delete_assistant("ada")))
        self.assertIsNone(result_of(self.store.load_assistant("ada")))

    def test_interrupted_call_repaired(self) -> None:
        """A tool call left without an answer gets a synthetic result on load."""
        history = [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "look", "arguments": "{}"},
                    }
                ],
            },
        ]
        result_of(self.store.save_assistant("ada", {"history": history}))
        loaded = result_of(self.store.load_assistant("ada"))
        self.assertEqual(loaded["history"][-1]["role"], "tool")
        self.assertEqual(loaded["history"][-1]["tool_call_id"], "c1")

    def test_refusals(self) -> None:
        """Unknown assistants, bad states and bad names fail; nothing half-written."""
        with self.assertRaises(NotFound):
            result_of(self.store.save_assistant("ghost", {}))
        with self.assertRaises(TypeError):
            result_of(self.store.save_many({"ada": {"x": object()}}))
        with self.assertRaises(NotFound):
            result_of(self.store.save_many({"ada": {"ok": 1}, "ghost": {"ok": 2}}))
        self.assertIsNone(self.script.db.state)
        with self.assertRaises(TypeError):
            result_of(self.store.load_assistant(None))

    def test_records_delegated(self) -> None:
        """Records and cache go to the records store."""
        record = result_of(self.store.add_record("ada", "memory", "the lantern is brass"))
        found = result_of(self.store.search_records("ada", "memory", "lantern"))
        self.assertEqual([r["id"] for r in found], [record["id"]])
        self.assertEqual(
            result_of(self.store.get_record(record["id"]))["content"], record["content"]
        )
        result_of(self.store.cache_put("ada", "k", {"v": 1}, None))
        self.assertEqual(result_of(self.store.cache_get("ada", "k", 0.0)), {"v": 1})
        result_of(self.store.cache_invalidate("ada"))
        self.assertIsNone(result_of(self.store.cache_get("ada", "k", 0.0)))
        self.assertTrue(callable(self.store.delete_record))
        with self.assertRaises(AttributeError):
            self.store._secret  # noqa: B018


class HostTestBase(ContribTestBase):
    """A host over a real AssistantService, a scripted model and a task.Clock."""

    answers: tuple[Any, ...] = ()

    def setUp(self) -> None:
        super().setUp()
        self.clock = task.Clock()
        self.llm = self.make_llm()
        self.script = self.attach_script("ada")
        self.host = self.start_host()

    def make_llm(self) -> ScriptedLLM:
        return ScriptedLLM(self.answers)

    def start_host(self, records: Any = None) -> EvenniaAssistantHost:
        records = records if records is not None else MemoryStore(clock=self.clock)
        service = build_service(self.clock, llm=self.llm, store=ScriptStore(records))
        host = EvenniaAssistantHost(service, clock=self.clock)
        host.startService()
        self.clock.advance(0)
        settle(self.clock, host.when_synced())
        return host

    def stop_host(self, host: EvenniaAssistantHost) -> None:
        settle(self.clock, host.stopService())

    def tearDown(self) -> None:
        if self.host.running:
            self.stop_host(self.host)
        super().tearDown()

    def tick(self, name: str = "ada") -> dict[str, Any]:
        return settle(self.clock, self.host.service.run_tick(name)).as_dict()

    def tool_results(self, name: str = "ada") -> list[str]:
        """The tool results in the assistant's history (what the model was shown)."""
        return [
            str(m.get("content"))
            for m in self.host.service.history(name)
            if m.get("role") == "tool"
        ]


class TestHost(HostTestBase):
    """Scripts become running assistants; speech becomes ticks; the NPC answers in-world."""

    answers = (say("Welcome to the room, traveller."),)

    def test_sync_adds_script_assistants(self) -> None:
        """The enabled script's assistant runs, bound to the NPC."""
        self.assertIs(get_host(), self.host)
        self.assertEqual(self.host.service.names(), ["ada"])
        status = self.host.service.status("ada")
        self.assertEqual(status["character_id"], self.npc_id)
        self.assertTrue(status["enabled"])

    def test_player_speech_gets_an_in_world_answer(self) -> None:
        """A say in the room reaches the model; the NPC's say reaches the player."""
        with mock.patch.object(self.char2, "msg") as heard_by_player:
            self.world.message_location(self.id2, "Hello Ada, who are you?")
            self.assertEqual(self.host.service.status("ada")["pending_events"], 1)
            result = self.tick()
        self.assertEqual(result["loop"]["termination_reason"], "terminal_tool")
        prompt = json.dumps(self.llm.requests[0]["messages"])
        self.assertIn("Hello Ada, who are you?", prompt)
        self.assertIn("Char2", prompt)  # the model is told who spoke
        lines = [str(c.kwargs.get("text") or c.args) for c in heard_by_player.call_args_list]
        self.assertTrue(any("Welcome to the room, traveller." in line for line in lines), lines)
        self.assertEqual(self.host.service.status("ada")["pending_events"], 0)

    def test_disabled_assistant_keeps_events(self) -> None:
        """A disabled assistant does not act; what it heard waits."""
        self.script.db.enabled = False
        settle(self.clock, self.host.set_enabled("ada", False))
        self.world.message_location(self.id2, "anyone?")
        result = self.tick()
        self.assertEqual(result["status"], "skipped")
        self.assertEqual(self.llm.requests, [])
        self.assertEqual(self.host.service.status("ada")["pending_events"], 1)

    def test_state_survives_a_restart(self) -> None:
        """Stopping writes the state onto the script; a new host restores the history."""
        self.world.message_location(self.id2, "remember me")
        self.tick()
        history = self.host.service.history("ada")
        self.assertTrue(history)
        self.stop_host(self.host)
        self.assertIsNone(get_host())
        self.assertEqual(self.script.history(), history)
        self.host = self.start_host()
        self.assertEqual(self.host.service.history("ada"), history)

    def test_inbox_drained_on_start(self) -> None:
        """Events heard while no service listened are handed over when it starts."""
        self.stop_host(self.host)
        self.world.message_location(self.id2, "are you awake?")
        self.assertEqual(len(self.script.db.inbox), 1)
        self.host = self.start_host()
        self.assertEqual(self.script.db.inbox, [])
        prompts = json.dumps([r["messages"] for r in self.llm.requests])
        self.assertIn("are you awake?", prompts)

    def test_reload_assistant_applies_config(self) -> None:
        """A changed config is applied in place: the same assistant, its history kept."""
        self.world.message_location(self.id2, "hi")
        self.tick()
        history = self.host.service.history("ada")
        running = self.host.service.get("ada")
        self.script.set_config("tick_rate", 2.0)
        settle(self.clock, self.host.reload_assistant("ada"))
        self.assertEqual(self.host.service.status("ada")["tick_rate"], 2.0)
        self.assertEqual(self.host.service.history("ada"), history)
        self.assertIs(self.host.service.get("ada"), running)

    def test_reload_assistant_applies_the_enabled_flag_and_a_removed_script(self) -> None:
        """Disabling through the script's config is applied; a script gone is detached."""
        self.script.db.enabled = False
        settle(self.clock, self.host.reload_assistant("ada"))
        self.assertFalse(self.host.service.get("ada").enabled)
        settle(self.clock, self.host.reload_assistant("nobody"))
        self.assertEqual(self.host.service.names(), ["ada"])

    def test_detach(self) -> None:
        """Detaching stops running the assistant; its state stays on the script."""
        settle(self.clock, self.host.detach("ada"))
        self.assertEqual(self.host.service.names(), [])
        self.assertIsNotNone(self.script.load_state())
        settle(self.clock, self.host.detach("ada"))


class TestPermissions(HostTestBase):
    """Players cannot make the NPC run DANGEROUS tools; the NPC's own rights still apply."""

    def setUp(self) -> None:
        self.answers = (
            call("set_attribute", {"object": "Obj", "name": "colour", "value": "red"}),
            say("Done, or not."),
        )
        super().setUp()

    def test_player_request_is_gated(self) -> None:
        """A non-builder's request: the DANGEROUS call is blocked before it runs."""
        self.world.message_location(self.id2, "paint the Obj red")
        self.tick()
        self.assertIsNone(self.obj1.db.colour)
        shown = self.tool_results()
        self.assertTrue(any("blocked_by_tool_mode" in r for r in shown), shown)

    def test_builder_request_meets_the_npcs_own_locks(self) -> None:
        """A builder's request passes the gate, but the NPC itself has no rights on Obj."""
        self.world.message_location(self.id1, "paint the Obj red")
        self.tick()
        self.assertIsNone(self.obj1.db.colour)
        shown = self.tool_results()
        self.assertTrue(any("permission_denied" in r for r in shown), shown)

    def test_builder_request_with_rights_runs(self) -> None:
        """Give the NPC rights on Obj (Evennia's edit lock) and the builder's request runs."""
        self.obj1.locks.add(f"edit:id({self.npc.id})")
        self.world.message_location(self.id1, "paint the Obj red")
        self.tick()
        self.assertEqual(self.obj1.db.colour, "red")


class TestFaults(HostTestBase):
    """A tool that raises inside the game does not stop the other assistants."""

    def setUp(self) -> None:
        self.answers = (call("boom", {}), say("That went wrong."), say("Bob here."))
        super().setUp()
        self.host.service.registry.register(BoomTool)
        self.bob_char = create.create_object(
            type(self.npc), key="Bob", location=self.room2, home=self.room2
        )
        self.attach_script("bob", self.bob_char)
        settle(self.clock, self.host.sync())

    def test_raising_tool(self) -> None:
        """The raising tool's failure reaches the model; both assistants go on ticking."""
        self.world.message_location(self.id1, "press the red button")
        first = self.tick("ada")
        self.assertIn(first["status"], ("ran", "error", "completed", "ok"), first)
        shown = self.tool_results()
        self.assertTrue(any("boom inside the game" in r for r in shown), shown)
        self.world.message_location(self.npc_id, "unused")  # Ada talking to herself: no event
        self.char1.location = self.room2
        self.world.message_location(self.id1, "hello Bob")
        second = self.tick("bob")
        self.assertEqual(second["loop"]["termination_reason"], "terminal_tool")
        self.assertEqual(sorted(self.host.service.names()), ["ada", "bob"])
        self.assertTrue(self.host.running)


class TestCommandRefusals(HostTestBase):
    """A command the NPC's character may not run reaches the model as a refusal."""

    answers = (call("execute_command", {"command": "@tel Room2"}), say("I may not."))

    def test_locked_command_is_a_refusal(self) -> None:
        """A builder asks; the NPC lacks the command's lock: permission_denied, not run."""
        self.world.message_location(self.id1, "Ada, go to Room2")
        result = self.tick()
        shown = [json.loads(r) for r in self.tool_results() if "@tel" in r]
        self.assertTrue(shown, self.tool_results())
        self.assertIs(shown[0]["success"], False)
        self.assertEqual(shown[0]["status"], "permission_denied")
        self.assertEqual(self.npc.location, self.room1)
        self.assertNotEqual(result["status"], "error", result)


class TestPortalLinkLost(HostTestBase):
    """A say the players cannot see (no link to the Portal) is not recorded as delivered."""

    answers = (say("The well is dry."),)

    def test_say_without_the_portal_is_not_delivered(self) -> None:
        """The tool fails (after its retries) and the model is told it was not delivered."""
        with portal_link(connected=False), mock.patch.object(self.char1, "msg") as seen:
            self.world.message_location(self.id1, "Ada, is the well dry?")
            self.tick()
        said = [m for m in seen.call_args_list if "The well is dry" in str(m)]
        self.assertEqual(said, [])
        results = [r for r in self.tool_results() if "not delivered" in r]
        self.assertTrue(results, self.tool_results())
        self.assertNotIn("delivered_to", results[0])
        self.assertIn('"success": false', results[0])

    def test_say_is_delivered_once_the_link_is_back(self) -> None:
        """The link comes back before the tool's retry: the players see it then."""
        with portal_link(connected=False) as link, mock.patch.object(self.char1, "msg") as seen:
            self.world.message_location(self.id1, "Ada, is the well dry?")
            ticking = self.host.service.run_tick("ada")
            self.clock.advance(0)
            self.assertFalse(ticking.called)  # the say failed once and waits to retry
            link.connected = True
            settle(self.clock, ticking)
        said = [m for m in seen.call_args_list if "The well is dry" in str(m)]
        self.assertEqual(len(said), 1)
        self.assertTrue(any('"delivered_to"' in r for r in self.tool_results()))


class NeverClosing(MemoryStore):
    """A records store whose close never finishes (a stuck thread, say)."""

    def close(self) -> defer.Deferred[None]:
        return defer.Deferred()


class TestStopWithACallInFlight(HostTestBase):
    """evennia reload/stop: the host never keeps the Server alive for work in flight."""

    def make_llm(self) -> ScriptedLLM:
        return SlowLLM((), slow_word="lantern")

    def call_in_flight(self) -> defer.Deferred[Any]:
        self.world.message_location(self.id2, "Ada, light the lantern please")
        ticking = self.host.service.run_tick("ada")
        self.clock.advance(0)
        self.assertEqual(len(self.llm.requests), 1)
        self.assertFalse(ticking.called)
        return ticking

    def test_stop_ends_the_call_at_once_and_saves(self) -> None:
        """The model call is cancelled, the state written, the stop done within a turn or two."""
        self.call_in_flight()
        stopped = self.host.stopService()
        self.clock.advance(0)
        self.clock.advance(0)
        self.assertTrue(stopped.called)
        self.assertEqual(self.llm.cancelled, 1)
        self.assertEqual(self.host.service.stats()["ticks_in_flight"], 0)
        state = self.script.load_state()
        self.assertIsNotNone(state)
        self.assertFalse(
            [m for m in state["history"] if m.get("role") == "assistant"],
            "the cut-off call left an answer in the history",
        )

    def test_the_cut_off_question_is_answered_after_the_restart(self) -> None:
        """The events of the cut-off call are saved as pending; the next host answers them."""
        self.call_in_flight()
        settle(self.clock, self.host.stopService())
        pending = json.dumps(self.script.pending_events())
        self.assertIn("light the lantern", pending)
        self.llm = ScriptedLLM([say("The lantern is lit.")])
        with mock.patch.object(self.char2, "msg") as heard:
            self.host = self.start_host()  # its ticks answer the pending question
            for _ in range(100):
                if self.host.service.status("ada")["pending_events"] == 0:
                    break
                self.clock.advance(0.1)
            settle(self.clock, self.host.service.writer.flush())
        self.assertIn("light the lantern", json.dumps(self.llm.requests[0]["messages"]))
        self.assertTrue(any("The lantern is lit." in str(c) for c in heard.call_args_list))
        self.assertEqual(self.host.service.status("ada")["pending_events"], 0)

    def test_the_cut_off_loop_ends_with_the_shutdown_reason(self) -> None:
        """The loop a stop cuts off ends with ``shutdown``, not ``stopped_by_user``."""
        ticking = self.call_in_flight()
        settle(self.clock, self.host.stopService())
        outcome = result_of(ticking)
        self.assertEqual(outcome.loop.termination_reason, "shutdown", outcome.as_dict())

    def test_a_stuck_close_does_not_hold_the_server(self) -> None:
        """Closing that never finishes: the host lets go after STOP_DEADLINE seconds."""
        self.stop_host(self.host)
        self.host = self.start_host(records=NeverClosing(clock=self.clock))
        self.call_in_flight()
        stopped = self.host.stopService()
        self.clock.advance(0)
        self.clock.advance(0)
        self.assertFalse(stopped.called)
        self.assertIsNotNone(self.script.load_state())  # saved before the close began
        self.clock.advance(STOP_DEADLINE)
        self.assertTrue(stopped.called)
