"""The default tool library running against EvenniaWorld (the same tools as in the sandbox).

Each world tool is called the way the execution engine calls it: parameters
validated by the tool, then ``execute(actor, **params)`` with an Actor whose
world is an EvenniaWorld.  char1 is a Developer; char2 has no rights.
"""

from __future__ import annotations

from typing import Any

from evennia.prototypes import prototypes as protlib
from evennia.utils import create
from twisted.internet import task

from ai_tools.contrib.evennia.tests.base import ContribTestBase, result_of
from ai_tools.store.memory import MemoryStore
from ai_tools.tools import register_default_tools
from ai_tools.tools.base import Actor
from ai_tools.tools.registry import ToolRegistry

REGISTRY = register_default_tools(ToolRegistry())


class TestToolsInEvennia(ContribTestBase):
    """Happy paths and Evennia's refusals, as the model would read them."""

    def setUp(self) -> None:
        super().setUp()
        self.store = MemoryStore(clock=task.Clock())
        result_of(self.store.open())
        self.obj1.aliases.add("lantern")
        create.create_help_entry("lantern care", "Trim the wick of the lantern daily.")
        protlib.save_prototype(
            {
                "prototype_key": "ai_chair",
                "typeclass": "evennia.objects.objects.DefaultObject",
                "key": "chair",
            }
        )

    def run_tool(self, tool_name: str, char: Any = None, /, **params: Any) -> dict[str, Any]:
        tool = REGISTRY.get_tool(tool_name)
        self.assertIsNotNone(tool, tool_name)
        checked = tool.validate_parameters(params)
        self.assertTrue(checked.valid, checked.format_for_llm(tool_name))
        actor = Actor((char or self.char1).dbref, world=self.world, store=self.store)
        return dict(result_of(tool.execute(actor, **checked.cleaned_params)))

    def assertSucceeds(self, tool_name: str, char: Any = None, /, **params: Any) -> dict[str, Any]:
        result = self.run_tool(tool_name, char, **params)
        self.assertTrue(result.get("success"), (tool_name, result))
        return result

    def assertRefused(self, tool_name: str, char: Any = None, /, **params: Any) -> dict[str, Any]:
        result = self.run_tool(tool_name, char, **params)
        self.assertFalse(result.get("success"), (tool_name, result))
        self.assertEqual(result.get("status"), "permission_denied", (tool_name, result))
        return result

    def test_reading_tools(self) -> None:
        """inspect_location, search_object, attributes, tags, doc_lookup."""
        seen = self.assertSucceeds("inspect_location", detail_level="detailed")
        self.assertIn("Obj", str(seen))
        found = self.assertSucceeds("search_object", query="lantern", scope="here")
        self.assertIn(self.obj1.dbref, str(found))
        self.obj1.db.fuel = 7
        got = self.assertSucceeds("get_attributes", object="lantern", names=["fuel"])
        self.assertIn("7", str(got))
        self.assertSucceeds("list_attributes", object="here")
        self.obj1.tags.add("lighting", category="kind")
        self.assertIn("lighting", str(self.assertSucceeds("get_tags", object="lantern")))
        tagged = self.assertSucceeds("search_by_tag", tag="lighting", category="kind")
        self.assertIn(self.obj1.dbref, str(tagged))
        docs = self.assertSucceeds("doc_lookup", query="wick", source="help")
        self.assertIn("lantern care", str(docs))

    def test_changing_tools(self) -> None:
        """set_attribute, tags, spawn, commands and batches as a Developer."""
        self.assertSucceeds("set_attribute", object="lantern", name="fuel", value=10)
        self.assertEqual(self.obj1.db.fuel, 10)
        self.assertSucceeds("add_tag", object="lantern", tag="lit", category="state")
        self.assertTrue(self.obj1.tags.has("lit", category="state"))
        self.assertSucceeds("remove_tag", object="lantern", tag="lit", category="state")
        made = self.assertSucceeds("spawn_prototype", prototype="ai_chair", key="oak chair")
        self.assertIn("oak chair", str(made))
        ran = self.assertSucceeds("execute_command", command="look")
        self.assertIn("Room", str(ran))
        self.assertSucceeds("execute_batchcode", commands=["look", "inventory"])

    def test_refusals_for_a_character_without_rights(self) -> None:
        """The same calls by char2 are refused by Evennia's locks and permissions."""
        self.assertRefused("set_attribute", self.char2, object="lantern", name="fuel", value=1)
        self.assertRefused("add_tag", self.char2, object="lantern", tag="mine")
        self.assertRefused("spawn_prototype", self.char2, prototype="ai_chair")
        self.assertRefused("emit", self.char2, message="The sky falls.")
        self.assertRefused("execute_batchcode", self.char2, commands=["look"])
        self.assertIsNone(self.obj1.db.fuel)

    def test_talking_tools(self) -> None:
        """say, pose, emit, whisper, page and channel_send reach Evennia characters."""
        heard: list[Any] = []
        self.world.subscribe(self.npc_id, heard.append)
        said = self.assertSucceeds("say", self.char2, message="good evening")
        self.assertIn(self.npc_id, said["delivered_to"])
        self.assertSucceeds("pose", self.char2, action="bows.")
        self.assertSucceeds("emit", message="Bells ring.")
        self.assertSucceeds("whisper", self.char2, target="Ada", message="psst")
        self.assertSucceeds("page", self.char2, target="Ada", message="ping")
        self.assertEqual([m.kind for m in heard], ["say", "whisper", "page"])
        chan = create.create_channel("town", locks="send:all();listen:all()")
        chan.connect(self.char2)
        sent = self.assertSucceeds("channel_send", channel="town", message="market opens")
        self.assertIn(self.id2, str(sent))

    def test_not_found(self) -> None:
        """Unknown objects and prototypes are model-readable not_found results."""
        result = self.run_tool("get_attributes", object="no such thing")
        self.assertEqual(result.get("status"), "not_found", result)
        spawned = self.run_tool("spawn_prototype", prototype="no_such_prototype")
        self.assertEqual(spawned.get("status"), "not_found", spawned)
        self.assertIn("ai_chair", str(spawned))
